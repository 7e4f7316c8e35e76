"""Paced time on real devices: each phase of the cycle ends on a schedule the scenario sets, not the host.

A ``Pacer`` keeps one deadline per device. Every phase — a link transfer, the compute phase, think and
waiting time — moves the deadline by its configured length and the device sleeps until it, so time the
host spends on real work (PS round trips, sleeps that overshoot, the gradient itself) is absorbed by the
next sleep instead of lengthening the cycle. The compute phase lasts its budget (``step_time × slowdown
× steps``), never less; a compute that takes longer is an *overrun*, counted with its excess. A device
that falls further behind its schedule than ``max_lag`` restarts the schedule from now (a *lag*): that
time is lost for good, which is the distortion the run's fidelity verdict and watchdog report.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Optional

from ..timing import kernel_rate_time


@dataclass(frozen=True)
class PacingStats:
    """What a paced device's schedule came to, carried in its Bye's reason to the PS's event log
    (``emulator/verdict.py`` reads it): steps, compute overruns (count, total and longest excess, s),
    schedule lags (count, lost s) and the compute budget of one step (s)."""
    steps: int
    overruns: int
    overrun_s: float
    max_overrun_s: float
    lags: int
    lag_s: float
    budget_s: float

    def bye_reason(self, reason: str) -> str:
        return f"{reason} pacing={json.dumps(asdict(self), separators=(',', ':'))}"

    @classmethod
    def of_bye(cls, detail: str) -> Optional["PacingStats"]:
        """The stats in a Bye event's detail; None when it has none or they are malformed (the text
        comes from a peer: anything but these seven finite non-negative numbers is ignored)."""
        _, sep, tail = detail.partition(" pacing=")
        if not sep:
            return None
        try:
            data = json.loads(tail)
        except ValueError:
            return None
        names = [f.name for f in fields(cls)]
        if not isinstance(data, dict) or set(data) != set(names):
            return None
        values = [data[n] for n in names]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                   for v in values):
            return None
        return cls(*values)


class Pacer:
    def __init__(self, step_time: float, slowdown: float, max_lag: float,
                 kernel_rates: Optional[tuple] = None, clock=time.monotonic, sleep=time.sleep):
        self.budget = step_time * slowdown     # real seconds per SGD step (dilation included)
        self.max_lag = max_lag
        self.kernel_rates = kernel_rates       # (uplink, downlink) bits/s the kernel shapes, or None
        self.clock, self._sleep = clock, sleep
        self.deadline = clock()
        self.steps = self.overruns = self.lags = 0
        self.overrun_s = self.max_overrun_s = self.lag_s = 0.0

    @classmethod
    def from_config(cls, timing: Optional[dict], speed_class: dict) -> Optional["Pacer"]:
        """The Pacer a Welcome's ``timing`` asks for, or None when pacing is off."""
        if not timing or not timing.get("pacing"):
            return None
        rates = (speed_class["uplink"].get("rate"), speed_class["downlink"].get("rate")) \
            if timing.get("kernel_links") else None
        return cls(timing["step_time"], speed_class["slowdown"], timing["max_lag"], rates)

    def until(self, seconds: float) -> float:
        """Advance the schedule by a phase of ``seconds``; returns how long to sleep from now to its end."""
        self.deadline += seconds
        now = self.clock()
        behind = now - self.deadline
        if behind > self.max_lag:
            self.lags += 1
            self.lag_s += behind
            self.deadline = now
        return max(0.0, self.deadline - now)

    def sleep(self, seconds: float) -> None:
        """A phase the device spends waiting (drop-in for ``time.sleep`` in the app link)."""
        left = self.until(seconds)
        if left > 0:
            self._sleep(left)

    def replied(self, sent_at: float, sent: int, received: int) -> None:
        """The reply to a request scheduled at ``sent_at`` arrived. Over kernel-shaped links its bytes
        spent the rate part of their transfer on the wire while the agent slept the delay, so the
        exchange lasts at least the expected wire time of both messages (``timing.kernel_rate_time``);
        host overhead beyond that is absorbed by the next phase, as on application links."""
        if self.kernel_rates is not None:
            up, down = self.kernel_rates
            self.deadline = max(self.deadline, sent_at + kernel_rate_time(sent, up) + kernel_rate_time(received, down))

    def computed(self, real_s: float, steps: int = 1) -> float:
        """The compute phase of ``steps`` SGD steps took ``real_s``: count an overrun, return the rest
        of its budget to wait out."""
        budget = self.budget * steps
        self.steps += steps
        if real_s > budget:
            self.overruns += 1
            self.overrun_s += real_s - budget
            self.max_overrun_s = max(self.max_overrun_s, real_s - budget)
        return self.until(budget)

    def stats(self) -> PacingStats:
        return PacingStats(self.steps, self.overruns, round(self.overrun_s, 6), round(self.max_overrun_s, 6),
                           self.lags, round(self.lag_s, 6), self.budget)

    def bye_reason(self, reason: str) -> str:
        """The Bye reason carrying these stats to the PS's event log (``emulator/verdict.py`` reads it)."""
        return self.stats().bye_reason(reason)
