"""Import FLASH's device-availability ("state") traces into the project's trace format (``format.py``).

FLASH (Yang et al., "Characterizing Impacts of Heterogeneity in Federated Learning upon Large-Scale
Smartphone Data", WWW 2021; github.com/PKU-Chengxu/FLASH) ships its state trace as JSON, in one of two
forms, both read here (which one: by the keys of each entry):

* ``state_traces.json`` (``data/`` in FLASH): ``{uid: {"guid": str, "model": str, "messages": str}}``,
  ``messages`` one ``"YYYY-mm-dd HH:MM:SS\\t<state>"`` line per change, the state one of
  ``battery_charged_on``/``_off``, ``wifi``, ``unknown``/``2g``/``3g``/``4g``/``5g`` (not on wifi),
  ``screen_on``/``_off``, ``screen_lock``/``_unlock`` or a battery level ``"87%"``. As FLASH's ``Timer``
  does (after Google's FL protocol), a device is *ready* — online here — while it is locked, on wifi
  and charging; overlapping ready spans are merged; ``trace_start``/``trace_end`` are its first and
  last message.
* ``cached_timers.json`` (what FLASH's ``Timer`` caches from the above):
  ``{guid: {"isSuccess": bool, "trace_start": s, "trace_end": s, "ready_time": [[start_s, end_s], ...]}}``.

Times are seconds since FLASH's reference instant, 2020-01-02 00:00:00, and a device's pattern repeats
every ``trace_end − trace_start`` seconds: at simulated time t FLASH looks at trace time
``(t − trace_start) mod L + trace_start``. Emulated time t here is the same t (``offset_s`` shifts the
run's start, in seconds after the reference instant). A device whose trace FLASH can't use
(``isSuccess`` false: an unparseable line, no ready span, a zero-length trace) is skipped, as FLASH's
sampler skips it; the first ``n`` usable devices in sorted id order become devices 0..n-1. The device
``model`` (FLASH's hardware heterogeneity) is not imported: give speeds in the scenario or a trace.
"""
from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Optional

from ..data import bounded
from .format import Trace, TraceError, TraceLimitError, TracePoint

REFERENCE = datetime(2020, 1, 2)          # FLASH's refer_time, 2020-01-02 00:00:00
_FMT = "%Y-%m-%d %H:%M:%S"
_CELLULAR = {"unknown", "2g", "3g", "4g", "5g"}


def read_flash(path: str | Path) -> dict[str, dict]:
    """FLASH's JSON at ``path`` → {device id: {"trace_start", "trace_end", "ready_time"}} for the devices
    FLASH could use (in either form)."""
    try:
        data = bounded.loads_json(path, TraceError, TraceLimitError)
    except OSError as err:
        raise TraceError(f"{path}: not a readable JSON file ({err})") from None
    if not isinstance(data, dict):
        raise TraceError(f"{path}: a FLASH state trace is a JSON object keyed by device id, got "
                         f"{type(data).__name__}")
    out = {}
    for uid, entry in data.items():
        where = f"{path}: device {uid!r}"
        if not isinstance(entry, dict):
            raise TraceError(f"{where}: expected an object, got {type(entry).__name__}")
        if "messages" in entry:
            timer = _from_messages(entry["messages"], where)
        elif "ready_time" in entry:
            timer = _from_cache(entry, where)
        else:
            raise TraceError(f"{where}: neither 'messages' (state_traces.json) nor 'ready_time' "
                             "(cached_timers.json)")
        if timer is not None:
            out[str(uid)] = timer
    return out


def _seconds(stamp: str) -> float:
    return (datetime.strptime(stamp, _FMT) - REFERENCE).total_seconds()


def _from_messages(messages, where: str) -> Optional[dict]:
    """FLASH's ``Timer`` on one device's messages: ready while locked, on wifi and charging."""
    if not isinstance(messages, str):
        raise TraceError(f"{where}: 'messages' is not a string")
    locked = wifi = charged = False
    start, spans, times = None, [], []
    for lineno, line in enumerate(messages.split("\n"), 1):
        if not line.strip():
            continue
        try:
            stamp, state = (x.strip() for x in line.strip().split("\t"))
            t = _seconds(stamp)
        except ValueError:
            return None          # FLASH marks such a trace unusable (isSuccess false)
        state = state.lower()
        if state in ("battery_charged_on", "battery_charged_off"):
            charged = state.endswith("_on")
        elif state == "wifi" or state in _CELLULAR:
            wifi = state == "wifi"
        elif state in ("screen_lock", "screen_unlock"):
            locked = state == "screen_lock"
        elif state in ("screen_on", "screen_off") or (state.endswith("%") and _is_number(state[:-1])):
            pass                 # tracked by FLASH, not part of its ready condition
        else:
            raise TraceError(f"{where}: message line {lineno}: unknown state {state!r}")
        times.append(t)
        ready = locked and wifi and charged
        if ready and start is None:
            start = t
        elif not ready and start is not None:
            spans.append([start, t])
            start = None
    if not spans or not times or int(times[-1] - times[0]) == 0:
        return None
    return {"trace_start": times[0], "trace_end": times[-1], "ready_time": _merge(spans)}


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _merge(spans: list) -> list:
    spans = sorted(spans)
    out = [list(spans[0])]
    for a, b in spans[1:]:
        if out[-1][1] >= a:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _from_cache(entry: dict, where: str) -> Optional[dict]:
    if not entry.get("isSuccess", True):
        return None
    try:
        start, end = float(entry["trace_start"]), float(entry["trace_end"])
        spans = [[float(a), float(b)] for a, b in entry["ready_time"]]
    except (KeyError, TypeError, ValueError):
        raise TraceError(f"{where}: expected trace_start, trace_end (seconds) and ready_time "
                         "[[start, end], ...]") from None
    if not all(math.isfinite(x) for x in (start, end, *(v for s in spans for v in s))):
        raise TraceError(f"{where}: a time is not a finite number")
    if any(b < a for a, b in spans):
        raise TraceError(f"{where}: a ready span ends before it starts")
    if not spans or int(end - start) <= 0:
        return None
    return {"trace_start": start, "trace_end": end, "ready_time": _merge(spans)}


def online_spans(timer: dict, horizon_s: float, offset_s: float = 0.0,
                 where: str = "a FLASH device") -> list[tuple[float, float]]:
    """The device's ready spans in emulated seconds [0, horizon_s): trace time at emulated t is
    ``(t + offset_s − trace_start) mod L + trace_start``, L = int(trace_end − trace_start) (FLASH's)."""
    s0, period = timer["trace_start"], float(int(timer["trace_end"] - timer["trace_start"]))
    base = (offset_s - s0) % period           # phase of emulated t = 0 within the repeating pattern
    unrolled = len(timer["ready_time"]) * (math.ceil(horizon_s / period) + 2)
    bounded.check(unrolled, "rows", where, f"a period of {period:g} s unrolled "
                  f"over {horizon_s:g} s", TraceLimitError, what=f"gives {unrolled:,} ready spans")
    out = []
    cycle = -1
    while cycle * period - base < horizon_s:
        for a, b in timer["ready_time"]:
            lo, hi = a - s0 - base + cycle * period, b - s0 - base + cycle * period
            lo, hi = max(lo, 0.0), min(hi, horizon_s)
            if hi > lo:
                out.append((lo, hi))
        cycle += 1
    return [tuple(s) for s in _merge(out)] if out else []


def import_flash(path: str | Path, n: Optional[int] = None, horizon_s: float = 86400.0,
                 offset_s: float = 0.0) -> Trace:
    """A trace (online column only) from FLASH's state trace or cached timers at ``path``: the first
    ``n`` usable device ids in sorted order as devices 0..n-1, up to ``horizon_s`` emulated seconds."""
    timers = read_flash(path)
    ids = sorted(timers)[:n]
    if not ids:
        raise TraceError(f"{path}: no device FLASH could use (every trace unparseable or never ready)")
    trace: Trace = {}
    for d, uid in enumerate(ids):
        spans = online_spans(timers[uid], horizon_s, offset_s, f"{path}: device {uid!r}")
        online_at_0 = bool(spans) and spans[0][0] <= 0.0
        points = [TracePoint(0.0, online_at_0)]
        for a, b in spans:
            if a > 0:
                points.append(TracePoint(a, True))
            if b < horizon_s:
                points.append(TracePoint(b, False))
        trace[d] = points
    return trace
