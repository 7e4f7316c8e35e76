"""Timing: the clock a scenario configures — expected cycle, update share, rate and staleness per class.

Neutral ground between the emulator (which paces, dilates and watches real runs against it) and the
analysis (which reports realized against expected); it imports neither. A device's cycle for the
one-gradient-per-pull protocol is

    pull up  →  model down  →  compute (step_time × slowdown)  →  think  →  wait  →  push up  →  ack down

with each transfer = loss RTOs + bytes·8/rate + delay (± jitter, truncated at 0). Where the PS sees a
message depends on the runtime's link semantics (``LINK_MODELS``), which moves time between the
"interval" (pull served → push applied: what staleness accumulates over) and the rest of the cycle.
Expected staleness is mean-field: the update rate of every other device times the interval.
"""
from __future__ import annotations

import bisect
import math
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np



def default_step_time(model, dataset=None) -> float:
    """Seconds per SGD step (batch 10, one thread, gradient + compression) at slowdown 1 on the
    project's 2-core reference machine; the virtual clock's default. The workload's measured
    ``step_time`` (the paper CNN and MLP), else an estimate: its per-step FLOPs at the paper CNN's
    measured rate (``timing.step_time: calibrate`` measures it on this host instead), on inputs of the
    ``dataset`` section's sample shape where given (else the workload's own)."""
    from .workload import resolve, step_flops
    w = resolve(model)
    if w.step_time is not None:
        return w.step_time
    shape = None
    if dataset is not None:
        from .data import input_of
        shape = (input_of(dataset) or (None,))[0]
    ref = resolve("cnn")
    return ref.step_time * step_flops(w, 10, shape) / step_flops(ref)

RTO = 0.2   # s, the application link's retransmission timeout per lost message (device_agent/link.py)

# Where each link property takes effect: "app" — the message reaches the PS when sent and the sender
# sleeps the time afterwards (the agent's link); "network" — the message reaches the PS after it.
# "kernel-rate" is the docker runtime on a kernel without netem: tbf shapes the rate on the wire,
# the agent sleeps delay and jitter (and the wire carries TCP/IP framing, see ``wire_bytes``).
LINK_MODELS = {
    "app": {"rate": "app", "delay": "app", "tcp": False},
    "network": {"rate": "network", "delay": "network", "tcp": False},
    "kernel-rate": {"rate": "network", "delay": "app", "tcp": True},
}
MSS, FRAME_OVERHEAD = 1448, 66   # TCP payload per full segment; Ethernet + IP + TCP (timestamps) bytes
# Segments per ACK of a bulk transfer into a container: its veth aggregates (GRO), so ACKs are rare.
# Measured on the docker runtime here: ~375 B of ACKs per 797 kB model pull (kernel veth counters).
ACK_EVERY = 88


def tbf_burst(rate_bps: float) -> int:
    """Token-bucket depth in bytes of a kernel-shaped link (``emulator/links.py`` installs this):
    10 ms worth of data, at least two full-size segments."""
    return max(int(rate_bps / 8 * 0.010), 2 * 1514 + 200, 3200)


def kernel_rate_time(nbytes: int, rate: Optional[float], dilation: float = 1.0) -> float:
    """Emulated seconds a message of ``nbytes`` payload spends on a tbf-shaped link of ``rate`` bits/s
    (emulated; the kernel holds ``rate / dilation``): its TCP/IP framing at the rate, less the bucket's
    burst, which refills between a device's messages (think and compute time)."""
    if not rate:
        return 0.0
    data, _ = wire_bytes(nbytes)
    burst = tbf_burst(rate / dilation)
    return max(0, data - burst) * 8.0 / (rate / dilation) / dilation


def draw_delay(cfg: dict, rng: np.random.Generator) -> float:
    """One draw of a think or waiting time (``scenario.ThinkTime`` as a dict), in seconds. Draws
    nothing from ``rng`` when the time is constant or zero, so a disabled option leaves streams as
    they were."""
    mean, dist = cfg.get("mean", 0.0), cfg.get("dist", "constant")
    if mean <= 0 and dist != "uniform":
        return 0.0
    if dist == "exponential":
        return float(rng.exponential(mean))
    if dist == "uniform":
        s = cfg.get("spread", 0.0)
        return max(0.0, float(rng.uniform(mean - s, mean + s)))
    return float(mean)


def wait_enabled(cfg: Optional[dict]) -> bool:
    """Whether the scenario's random waiting time (``timing.wait``) is on."""
    return bool(cfg) and (cfg.get("mean", 0.0) > 0 or cfg.get("spread", 0.0) > 0)


def mean_delay(cfg: dict) -> float:
    """Expected value of ``draw_delay(cfg, ·)``."""
    mean, dist = cfg.get("mean", 0.0), cfg.get("dist", "constant")
    if dist == "uniform":
        return _mean_truncated(mean, cfg.get("spread", 0.0))
    return max(0.0, mean)


def _mean_truncated(m: float, s: float) -> float:
    """E[max(0, U(m − s, m + s))]."""
    if s <= 0 or m >= s:
        return max(0.0, m)
    if m + s <= 0:
        return 0.0
    return (m + s) ** 2 / (4 * s)


def wire_bytes(payload: int) -> tuple[int, int]:
    """(bytes on the wire in the data direction, TCP ACK bytes in the reverse direction) of a message
    of ``payload`` bytes sent over TCP in full-size segments."""
    segments = max(1, math.ceil(payload / MSS))
    return payload + segments * FRAME_OVERHEAD, math.ceil(segments / ACK_EVERY) * FRAME_OVERHEAD


@dataclass(frozen=True)
class Transfer:
    """Expected time of one message on one link direction, split by where it takes effect."""
    rate_s: float      # bytes·8/rate (with TCP framing and the reverse ACK stream where modelled)
    delay_s: float     # delay ± jitter (truncated at 0) + expected loss RTOs

    @property
    def total(self) -> float:
        return self.rate_s + self.delay_s


def transfer(nbytes: int, link: dict, reverse: Optional[dict] = None, tcp: bool = False,
             dilation: float = 1.0) -> Transfer:
    """Expected transfer of ``nbytes`` over ``link`` (a ``LinkProfile`` dict: rate bits/s or None,
    delay, jitter, loss). With ``tcp`` (a kernel-shaped rate, ``kernel_rate_time``), the data carries
    TCP/IP framing and its ACKs queue on the ``reverse`` link: the transfer lasts as long as the slower
    of the two streams."""
    loss = link.get("loss", 0.0) or 0.0
    delay = _mean_truncated(link.get("delay", 0.0), link.get("jitter", 0.0)) + RTO * loss / max(1e-9, 1 - loss)
    rate = link.get("rate")
    if not tcp:
        return Transfer(nbytes * 8.0 / rate if rate else 0.0, delay)
    t = kernel_rate_time(nbytes, rate, dilation)
    if reverse and reverse.get("rate"):
        t = max(t, wire_bytes(nbytes)[1] * 8.0 / reverse["rate"])
    return Transfer(t, delay)


@dataclass(frozen=True)
class MessageSizes:
    """Payload bytes (header + arrays, as the PS counts them) of the four messages of a cycle."""
    pull: int
    model: int
    push: int
    ack: int


def expected_timing(classes: list[dict], counts: list[int], sizes: MessageSizes, step_time: float,
                    link_model: str = "network", wait: Optional[dict] = None, dilation: float = 1.0) -> list[dict]:
    """Per speed class (``SpeedClass`` dicts with their device ``counts``): expected seconds of each
    phase, the cycle, the interval from pull served to push applied, updates per device per second,
    update share, rate ratio against the slowest class and mean staleness. Times are emulated seconds."""
    sem = LINK_MODELS[link_model]
    wait_s = mean_delay(wait or {})
    rows = []
    for c in classes:
        up, down, tcp = c["uplink"], c["downlink"], sem["tcp"]
        pull_up, model_down = transfer(sizes.pull, up, down, tcp, dilation), transfer(sizes.model, down, up, tcp, dilation)
        push_up, ack_down = transfer(sizes.push, up, down, tcp, dilation), transfer(sizes.ack, down, up, tcp, dilation)
        compute, think = step_time * c["slowdown"], mean_delay(c["think_time"])
        work = compute + think + wait_s

        def exchange(req: Transfer, rep: Transfer) -> float:
            """Request sent → reply handled by the device (the agent waits its delays in sequence)."""
            if sem["delay"] == "app" and sem["rate"] == "network":
                return max(req.delay_s, req.rate_s + rep.rate_s) + rep.delay_s
            return req.total + rep.total
        cycle = exchange(pull_up, model_down) + work + exchange(push_up, ack_down)
        if sem["rate"] == "app":       # the PS sees the pull and push the moment they are sent
            interval = exchange(pull_up, model_down) + work
        elif sem["delay"] == "app":    # rate on the wire, delays slept by the agent
            interval = exchange(pull_up, model_down) - pull_up.rate_s + work + push_up.rate_s
        else:
            interval = model_down.total + work + push_up.total
        rows.append({"class": c["name"], "devices": counts[len(rows)], "compute_s": compute,
                     "think_s": think, "wait_s": wait_s,
                     "uplink_s": pull_up.total + push_up.total, "downlink_s": model_down.total + ack_down.total,
                     "cycle_s": cycle, "interval_s": interval, "rate_per_device": 1.0 / cycle})
    total = sum(r["devices"] * r["rate_per_device"] for r in rows)
    slowest = min((r["rate_per_device"] for r in rows if r["devices"]), default=1.0)
    for r in rows:
        r["share"] = r["devices"] * r["rate_per_device"] / total if total else 0.0
        r["rate_ratio"] = r["rate_per_device"] / slowest
        r["staleness_mean"] = (total - r["rate_per_device"]) * r["interval_s"]
    return [{k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


def scenario_expected(sc, step_time: float, link_model: str, sizes: MessageSizes,
                      dilation: float = 1.0) -> list[dict]:
    """``expected_timing`` for a ``Scenario`` (``sizes``: ``emulator.calibration.message_sizes``)."""
    from .scenario import class_assignment
    assign = class_assignment(sc)
    counts = [assign.count(i) for i in range(len(sc.workers.classes))]
    return expected_timing([c.model_dump(mode="json") for c in sc.workers.classes], counts, sizes,
                           step_time, link_model, sc.timing.wait.model_dump(mode="json"), dilation)


# -- time dilation ----------------------------------------------------------------------------------
def dilate(sc, factor: float):
    """The scenario a real-time runtime executes under dilation ``factor``: every configured time × factor
    (think and waiting times, link delay and jitter, the silence and wall-time limits), every link rate
    ÷ factor. Compute budgets are scaled where they are applied (``pacing_config``)."""
    if factor == 1.0:
        return sc
    d = sc.model_dump(mode="json")

    def times(cfg: dict) -> None:
        cfg["mean"] *= factor
        cfg["spread"] *= factor
    for c in d["workers"]["classes"]:
        times(c["think_time"])
        for direction in ("uplink", "downlink"):
            link = c[direction]
            link["delay"] *= factor
            link["jitter"] *= factor
            if link["rate"] is not None:
                link["rate"] /= factor
    times(d["timing"]["wait"])
    d["failures"]["lost_after"] *= factor
    if d["stop"]["wall_time"] is not None:
        d["stop"]["wall_time"] *= factor
    return type(sc).model_validate(d)


def suggest_dilation(expected: list[dict], real_step_s: float, step_time: float, cores: Optional[float] = None,
                     overhead_s: float = 2e-3, busy: float = 0.5) -> float:
    """The smallest dilation (≥ 1, one decimal) at which a host with ``cores`` free CPUs holds the
    scenario: each paced compute fits its budget with a 1.5× margin, and the CPU the devices need
    (``real_step_s`` + ``overhead_s`` of agent and PS work per cycle) stays within ``busy`` of the free
    cores. ``overhead_s`` is an estimate; a run's verdict corrects the factor from what it measured."""
    cores = cores if cores is not None else free_cores()
    k_budget = 1.5 * real_step_s / step_time if step_time > 0 else 1.0
    demand = sum(r["devices"] * (real_step_s + overhead_s) / r["cycle_s"] for r in expected)
    k_cpu = demand / max(0.25, cores * busy)
    return max(1.0, math.ceil(10 * max(k_budget, k_cpu)) / 10)


def free_cores() -> float:
    """CPUs not busy with other work right now: cores − 1-min load average, at least a quarter core."""
    n = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return max(0.25, n - load)


# -- realized against expected -------------------------------------------------------------------
def steady_rates(times: dict[int, list[float]], class_of: dict[int, str], now: Optional[float] = None,
                 ended: Optional[dict[int, float]] = None) -> dict:
    """Realized update rate per class from each device's sorted push times (emulated seconds).

    A class is measured from the moment its last device first pushed (start-up staggered over seconds
    would otherwise count as slowness) to ``now`` (default: the last push): ``{class: {"updates",
    "devices", "seconds", "device_seconds", "rate_per_device"}}``; a class whose devices have not all
    pushed is absent. ``ended``: device → the time it stopped for good (a fail-stop crash, drawn right
    after its last push): it counts as a device only until then, so crashes don't read as a slow host
    (rate per device = updates ÷ the devices' alive seconds in the window)."""
    ended = ended or {}
    by_class: dict[str, list[int]] = {}
    for d, k in class_of.items():
        by_class.setdefault(k, []).append(d)
    last = max((t[-1] for t in times.values() if t), default=None)
    now = last if now is None else now
    out = {}
    for k, devs in by_class.items():
        if not all(times.get(d) for d in devs):
            continue
        t0 = max(times[d][0] for d in devs)
        seconds = (now or 0.0) - t0
        n = sum(len(times[d]) - _index_after(times[d], t0) for d in devs)
        alive = sum(max(0.0, min(now or 0.0, ended.get(d, math.inf)) - t0) for d in devs)
        if seconds > 0 and alive > 0:
            out[k] = {"updates": n, "devices": len(devs), "seconds": seconds, "device_seconds": alive,
                      "rate_per_device": n / alive}
    return out


def _index_after(ts: list[float], t0: float) -> int:
    return bisect.bisect_right(ts, t0)


def distortion(expected_rate: float, realized: dict, tolerance: float) -> Optional[float]:
    """Relative error of a class's realized rate (``steady_rates`` entry) against the expected one,
    when it exceeds ``tolerance`` plus two standard errors of a count of that many updates; else None."""
    if expected_rate <= 0 or realized["updates"] < 2:
        return None
    off = realized["rate_per_device"] / expected_rate - 1.0
    return off if abs(off) > tolerance + 2.0 / math.sqrt(realized["updates"]) else None
