"""Dynamics: what changes while a run goes — availability churn, a device trace, timed network events
and the PS's shared link (the scenario's ``dynamics:`` section; pure data, validated here).

Units as everywhere in a scenario: durations in seconds, rates in bits/s, fractions in [0, 1] after
validation. Which runtime honours which part is the runtime's ``Capabilities.dynamics``
(``emulator/runtimes/base.py``): a scenario asking for a part its runtime can't apply is refused at
``validate``. docs/churn.md says what each part does, per runtime.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .units import Duration, Fraction, Rate


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DurationDist(_Strict):
    """A random duration: ``constant``, ``exponential`` (mean), ``lognormal`` (mean, sigma of the
    log), ``uniform`` (mean ± spread). A plain duration (``30s``) is short for a constant."""
    dist: Literal["constant", "exponential", "lognormal", "uniform"] = Field(
        "exponential", description="distribution of the duration")
    mean: Duration = Field(..., gt=0, description="mean duration")
    sigma: float = Field(0.5, gt=0, description="lognormal: standard deviation of log(duration)")
    spread: Duration = Field(0.0, ge=0, description="uniform: half-width around the mean")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any):
        if isinstance(v, (str, int, float)) and not isinstance(v, bool):
            return {"dist": "constant", "mean": v}
        return v

    @model_validator(mode="after")
    def _spread_le_mean(self):
        if self.dist == "uniform" and self.spread > self.mean:
            raise ValueError(f"uniform spread ({self.spread:g} s) exceeds the mean ({self.mean:g} s): "
                             "durations would be negative; make spread ≤ mean")
        return self


class Diurnal(_Strict):
    """A day/night pattern: the offline durations drawn at time t are scaled by
    ``1 − amplitude·cos(2π (t − peak) / period)``, so devices are away least around ``peak``."""
    period: Duration = Field(86400.0, gt=0, description="length of one cycle (a day: 24h)")
    amplitude: Fraction = Field(0.5, lt=1, description="relative swing of the offline durations, in [0, 1)")
    peak: Duration = Field(0.0, ge=0, description="time in the cycle when devices are most available")


class ClassAvailability(_Strict):
    """One speed class's churn: alternating online and offline periods, starting online."""
    online: DurationDist = Field(..., description="how long a device stays online")
    offline: DurationDist = Field(..., description="how long it stays away")
    diurnal: Optional[Diurnal] = Field(None, description="a day/night modulation of the offline durations")


class AvailabilitySpec(_Strict):
    classes: dict[str, ClassAvailability] = Field(
        default_factory=dict, description="speed-class name → its churn (classes not named stay online)")
    recover_after: Optional[DurationDist] = Field(
        None, description="a fail-stop crash (failures.crash_probability) is followed by a recovery after "
        "this long: the device rejoins and pulls afresh (unset: crashes are final)")


class TraceSpec(_Strict):
    path: str = Field(..., description="device trace file (CSV or JSON, docs/churn.md#trace-format): per "
                      "device and time, online, slowdown or ms_per_sample, uplink/downlink kbit/s")


class LinkChange(_Strict):
    """The link properties a timed event sets (those not given stay as they are)."""
    rate: Optional[Rate] = Field(None, description="new rate")
    delay: Optional[Duration] = Field(None, description="new one-way delay")
    jitter: Optional[Duration] = Field(None, description="new ± jitter")
    loss: Optional[Fraction] = Field(None, description="new loss fraction")


class NetworkEvent(_Strict):
    """At ``at``, for ``duration`` (unset: for the rest of the run): ``link`` — the devices' links change;
    ``partition`` — the devices are cut off from the PS (messages wait until it heals); ``ps-link`` —
    the PS's shared link (``dynamics.ps_link``) changes rate."""
    at: Duration = Field(..., description="virtual/emulated time the event takes effect")
    duration: Optional[Duration] = Field(None, gt=0, description="how long it lasts (unset: to the end)")
    kind: Literal["link", "partition", "ps-link"] = Field(..., description="what changes")
    classes: list[str] = Field(default_factory=list, description="speed classes concerned (link, partition)")
    devices: list[int] = Field(default_factory=list, description="device ids concerned (link, partition)")
    direction: Literal["uplink", "downlink", "both"] = Field("both", description="which direction changes")
    set: LinkChange = Field(LinkChange(), description="the new link properties (link; ps-link: rate only)")

    @model_validator(mode="after")
    def _targets(self):
        if self.kind in ("link", "partition") and not (self.classes or self.devices):
            raise ValueError(f"a {self.kind} event needs classes: or devices: (whose links it changes)")
        if self.kind == "partition" and self.duration is None:
            raise ValueError("a partition event needs duration: (messages wait until it heals)")
        if self.kind == "ps-link" and (self.classes or self.devices):
            raise ValueError("a ps-link event changes the PS's own link: remove classes:/devices:")
        if self.kind != "partition" and self.set == LinkChange():
            raise ValueError(f"a {self.kind} event needs set: (e.g. set: {{rate: 1mbit}})")
        if self.kind == "ps-link" and any(v is not None for v in (self.set.delay, self.set.jitter, self.set.loss)):
            raise ValueError("a ps-link event sets only rate: (the shared link is a FIFO of this capacity)")
        return self


class PSLinkSpec(_Strict):
    """The PS's access link, shared by every device, each direction one FIFO queue of this capacity."""
    ingress: Optional[Rate] = Field(None, description="capacity of the devices → PS direction (unset: unshared)")
    egress: Optional[Rate] = Field(None, description="capacity of the PS → devices direction (unset: unshared)")
    sample: Duration = Field(1.0, gt=0, description="utilisation and queueing delay are recorded per window "
                             "of this length (events table, event ps-link)")


class DynamicsSpec(_Strict):
    availability: AvailabilitySpec = Field(AvailabilitySpec(), description="devices that go offline and come back")
    trace: Optional[TraceSpec] = Field(None, description="per-device availability, compute speed and bandwidth "
                                       "over time from a file")
    events: list[NetworkEvent] = Field(default_factory=list, description="timed network events")
    ps_link: Optional[PSLinkSpec] = Field(None, description="the PS's link as one queue all devices share")

    def parts(self) -> list[str]:
        """The parts in use, as ``Capabilities.dynamics`` names them."""
        a = self.availability
        out = []
        if a.classes:
            out.append("availability")
        if a.recover_after is not None:
            out.append("recovery")
        if self.trace is not None:
            out.append("trace")
        kinds = {e.kind for e in self.events}
        out += [f"event:{k}" for k in ("link", "partition", "ps-link") if k in kinds]
        if self.ps_link is not None:
            out.append("ps-link")
        return out

    def problems(self, class_names: list[str], n: int) -> list[str]:
        """Names that point nowhere: classes not in workers.classes, devices out of 0..n-1."""
        out = [f"dynamics.availability.classes.{k}: no speed class named {k!r} "
               f"(classes: {', '.join(class_names)})" for k in self.availability.classes if k not in class_names]
        for i, e in enumerate(self.events):
            out += [f"dynamics.events.{i}.classes: no speed class named {k!r} (classes: {', '.join(class_names)})"
                    for k in e.classes if k not in class_names]
            out += [f"dynamics.events.{i}.devices: device {d} is not in 0..{n - 1}" for d in e.devices
                    if not 0 <= d < n]
            if e.kind == "ps-link" and self.ps_link is None:
                out.append(f"dynamics.events.{i}: a ps-link event needs dynamics.ps_link (the link it changes)")
        return out
