"""Crashes as researchers state them: ``failures.crash`` — an exact number of devices (a fraction of
``workers.n`` or a count), chosen and timed by a seed within a window — and ``crash_schedule``, the
one function that turns it into the schedule {device: crash point} the PS of every runtime consumes.

The window ``between: [t0, t1]`` is in applied updates (bare whole numbers, as ``stop.updates``) or in
time (durations with a unit, as ``stop.wall_time``: ``30s``, ``2min``) on the run's clock, the tables'
``virtual_time`` where they have one (sim, dilated runs), else ``wall_time``. A scheduled device
crashes (fail-stop) with its first push applied at or after its point — the same crash as one drawn by
``failures.crash_probability`` — and at most once, even when ``dynamics.availability.recover_after``
brings it back. The devices are spread over the speed classes in proportion to their sizes (largest
remainder, ties broken by the seed), so "10 % crash" means 10 % of each class as nearly as it divides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from .units import Duration, Fraction

CrashPoint = Union[StrictInt, Duration]   # a whole number: applied updates; a duration: seconds


class CrashSpec(BaseModel):
    """``failures.crash``: exactly ``fraction`` × workers.n devices (rounded to the nearest) or
    ``devices`` devices crash, each once, at a point drawn uniformly in ``between``."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    fraction: Optional[Fraction] = Field(None, description="share of the devices that crash (0.1 or 10%; "
                                         "rounded to the nearest whole device); or give devices")
    devices: Optional[int] = Field(None, ge=0, description="how many devices crash; or give fraction")
    between: Optional[list[CrashPoint]] = Field(
        None, min_length=2, max_length=2, description="[t0, t1]: the window the crash points are drawn "
        "from, in applied updates ([100, 400]) or in time with a unit ([30s, 2min]); unset: the whole run "
        "by stop.updates ([1, stop.updates])")
    seed: Optional[int] = Field(None, description="draws which devices crash and when (unset: the scenario's "
                                "seed); the same seed gives the same schedule on every runtime")

    @model_validator(mode="after")
    def _one_count(self):
        if (self.fraction is None) == (self.devices is None):
            raise ValueError("failures.crash: give exactly one of fraction (e.g. 0.1 or 10%) or devices "
                             "(e.g. 2)")
        if self.between is not None:
            t0, t1 = self.between
            if isinstance(t0, int) != isinstance(t1, int) and 0 in (t0, t1):   # 0 is 0 in any unit
                t0, t1 = float(t0), float(t1)
                object.__setattr__(self, "between", [t0, t1])
            if isinstance(t0, int) != isinstance(t1, int):
                raise ValueError(f"failures.crash.between: {self.between} mixes updates (a whole number) "
                                 "and time (a duration); write both as updates ([100, 400]) or both with "
                                 "a unit ([30s, 2min])")
            if not 0 <= t0 <= t1:
                raise ValueError(f"failures.crash.between: [{t0}, {t1}] must satisfy 0 ≤ t0 ≤ t1")
        return self

    def unit(self) -> str:
        """``updates`` or ``s`` (seconds), as ``between`` is written (updates when it is unset)."""
        return "updates" if self.between is None or isinstance(self.between[0], int) else "s"


@dataclass(frozen=True)
class CrashSchedule:
    """Device → crash point (applied updates or seconds, per ``unit``); ``intended``: speed class →
    devices scheduled to crash (every class, zeros included). Pure data; the PS keeps what fired."""
    at: dict[int, float]
    unit: str
    intended: dict[str, int] = field(default_factory=dict)

    def due(self, device: int, version: int, clock: tuple[float, float]) -> bool:
        """Whether ``device``'s crash point is reached with Θ at ``version`` at ``clock`` (wall s,
        virtual s: the virtual one where it is a number)."""
        point = self.at.get(device)
        if point is None:
            return False
        if self.unit == "updates":
            return version >= point
        wall, virtual = clock
        return (virtual if virtual == virtual else wall) >= point

    def rows(self) -> list[dict]:
        """One row per scheduled crash: ``device``, ``point`` and its ``unit``, by point."""
        return [{"device": d, "point": p, "unit": self.unit} for d, p in sorted(self.at.items(), key=lambda x: x[::-1])]


def _spread(k: int, sizes: list[int], rng: np.random.Generator) -> list[int]:
    """``k`` split over classes of ``sizes`` in proportion, by largest remainder (ties: by ``rng``)."""
    n = sum(sizes)
    raw = [k * s / n for s in sizes]
    out = [int(r) for r in raw]
    tie = rng.random(len(sizes))
    for i in sorted(range(len(sizes)), key=lambda i: (raw[i] - out[i], tie[i]), reverse=True)[: k - sum(out)]:
        out[i] += 1
    return out


def crash_count(spec: CrashSpec, n: int) -> int:
    """Devices that crash: ``devices``, or ``fraction`` × n rounded to the nearest (halves up)."""
    return spec.devices if spec.devices is not None else int(math.floor(spec.fraction * n + 0.5))


def crash_schedule(spec: CrashSpec, classes: list[tuple[str, int]], stop_updates: Optional[int],
                   seed: int) -> CrashSchedule:
    """The schedule of ``spec`` for devices 0..n-1 in contiguous class blocks ``classes`` ((name,
    devices) in class order, as ``scenario.class_counts``); ``seed``: the scenario's, used when the spec
    has none. Raises ValueError when the count exceeds the devices or the window is unknown."""
    n = sum(k for _, k in classes)
    k = crash_count(spec, n)
    if k > n:
        raise ValueError(f"failures.crash.devices: {k} devices crash but workers.n is {n}; give at most {n}")
    if spec.between is not None:
        t0, t1 = spec.between
    elif stop_updates is not None:
        t0, t1 = 1, stop_updates
    else:
        raise ValueError("failures.crash.between is needed when stop.updates is unset: give the window of "
                         "the crashes, e.g. between: [30s, 2min] or [100, 400] (updates)")
    rng = np.random.default_rng([spec.seed if spec.seed is not None else seed, 0xC7A5])
    sizes = [size for _, size in classes]
    per_class = _spread(k, sizes, rng) if k else [0] * len(classes)
    at: dict[int, float] = {}
    first = 0
    for size, m in zip(sizes, per_class):
        for d in sorted(rng.choice(size, m, replace=False).tolist()):
            at[first + d] = int(rng.integers(t0, t1 + 1)) if isinstance(t0, int) else float(rng.uniform(t0, t1))
        first += size
    return CrashSchedule(at=at, unit=spec.unit(), intended={name: m for (name, _), m in zip(classes, per_class)})
