"""Fidelity watchdog: warns during a real-time run when a speed class leaves its configured clock.

The PS thread feeds it every applied update (``observe``, under a lock); the engine's run loop asks it
every few seconds (``check``) and shows what it returns. A class is distorted when its realized update
rate per device, measured since its last device first pushed, is off the rate the scenario implies
(``timing.expected_timing``) by more than the tolerance plus two standard errors of the count.
Crashed devices count only while alive (``crashed``), as in the verdict.
"""
from __future__ import annotations

import math
import threading
from typing import Optional

from ..timing import distortion, steady_rates

CHECK_EVERY = 5.0   # wall seconds between checks
# A class is judged once its window holds this many updates and expected cycles of its devices:
# right after start-up the window is short and one late push weighs like a slow host.
MIN_UPDATES, MIN_CYCLES = 50, 20


class FidelityWatchdog:
    def __init__(self, expected: list[dict], class_of: dict[int, str], tolerance: float, dilation: float = 1.0):
        self.expected = {r["class"]: r for r in expected}
        self.class_of = class_of
        self.tolerance = tolerance
        self.dilation = dilation
        self._times: dict[int, list[float]] = {}
        self._ended: dict[int, float] = {}      # crashed device → time of its last push
        self._lock = threading.Lock()
        self._flagged: dict[str, float] = {}    # class → relative error last warned about
        self.warnings: list[str] = []

    def observe(self, row: dict) -> None:
        """An applied update (a row of the updates table). Called on the PS thread."""
        t = row["virtual_time"]
        t = row["wall_time"] if t != t or math.isinf(t) else t   # emulated time where the clock has it
        with self._lock:
            self._times.setdefault(row["device"], []).append(t)

    def crashed(self, device: int) -> None:
        """``device`` crashed (fail-stop) right after its last observed push: from then on it no longer
        counts as a device of its class. Called on the PS thread."""
        with self._lock:
            ts = self._times.get(device)
            if ts:
                self._ended[device] = ts[-1]

    def check(self) -> list[str]:
        """New warnings since the last check (a class that recovers and relapses is warned again)."""
        with self._lock:
            times = {d: list(ts) for d, ts in self._times.items()}
            ended = dict(self._ended)
        rates = steady_rates(times, self.class_of, ended=ended)
        out = []
        for k, r in rates.items():
            exp = self.expected.get(k)
            if exp is None or r["updates"] < MIN_UPDATES or r["seconds"] < MIN_CYCLES * exp["cycle_s"]:
                continue
            off = distortion(exp["rate_per_device"], r, self.tolerance)
            if off is None:
                self._flagged.pop(k, None)
                continue
            if k in self._flagged:
                continue
            self._flagged[k] = off
            out.append(f"fidelity: class {k!r} runs at {1 + off:.2f}× its configured update rate "
                       f"({r['rate_per_device']:.3g} vs {exp['rate_per_device']:.3g} updates/s per device, "
                       f"{r['updates']} updates so far); the host can't hold the scenario's clock"
                       + (f" — try timing.dilation: {self.suggested():g}" if off < 0 else ""))
        self.warnings.extend(out)
        return out

    def suggested(self) -> Optional[float]:
        """A dilation factor that would slow the scenario enough for the classes flagged so far."""
        slow = [off for off in self._flagged.values() if off < 0]
        if not slow:
            return None
        return math.ceil(10 * self.dilation * 1.2 / (1 + min(slow))) / 10
