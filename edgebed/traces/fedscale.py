"""Import FedScale's device traces into the project's trace format (``format.py``).

FedScale ("Device Trace File Formats" in its docs) ships two pickles keyed by client id:
``client_device_capacity`` — ``{id: {"computation": ms per sample, "communication": kbit/s}}`` — and
``client_behave_trace`` — ``{id: {"active": [s, ...], "inactive": [s, ...], "finish_time": s, ...}}``:
the client is online from ``active[i]`` to ``inactive[i]``, the pattern repeating every ``finish_time``
seconds. The pickles are read by ``safe_load`` (the data sets' restricted unpickler, ``data/safe_pickle.py``, with no
global allowed): it builds only plain containers, strings and numbers and resolves no class or function, so a crafted file
can't run code. Client i in id order becomes device i; ``communication`` sets both uplink and downlink
(FedScale has one bandwidth per client).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from ..data import bounded, safe_pickle
from .format import Trace, TraceError, TraceLimitError, TracePoint

_PLAIN = (dict, list, tuple, set, frozenset, str, bytes, int, float, bool, type(None))


def _check_plain(obj, where) -> None:
    def visit(o) -> None:
        if not isinstance(o, _PLAIN):
            raise TraceError(f"{where}: the pickle holds a {type(o).__name__}: only plain containers and "
                             "numbers are read")
    bounded.walk(obj, where, visit, TraceLimitError, TraceError)


def safe_load(path: str | Path):
    """The plain data in the pickle at ``path`` (dicts, lists, tuples, sets, str, bytes, numbers): the
    data sets' restricted unpickler (``data/safe_pickle.py``) with no global allowed at all, under the
    bounded reader's byte, node and depth limits."""
    obj = safe_pickle.load(Path(path), hint="", allowed=frozenset(), error=TraceError, encoding="ASCII",
                           limit_error=TraceLimitError,
                           why=": only plain containers and numbers are read (a trace pickle needs no class; "
                               "convert numpy values with float() before pickling)")
    _check_plain(obj, path)
    return obj


def _positive(x, where: str, limit: str = "value") -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
        raise TraceError(f"{where}: {x!r} is not a positive number")
    file, _, field = where.rpartition(".")
    return bounded.trace_value(float(x), file, field, limit, TraceLimitError)


def import_fedscale(capacity: Optional[str | Path] = None, behaviour: Optional[str | Path] = None,
                    n: Optional[int] = None, horizon_s: float = 86400.0) -> Trace:
    """A trace from FedScale's capacity pickle and/or behaviour pickle (at least one): the first ``n``
    client ids (in sorted order; of those in both when both are given) as devices 0..n-1, availability
    windows unrolled up to ``horizon_s`` seconds."""
    if capacity is None and behaviour is None:
        raise TraceError("give a capacity pickle, a behaviour pickle or both")
    cap = safe_load(capacity) if capacity is not None else None
    beh = safe_load(behaviour) if behaviour is not None else None
    for name, obj, path in (("capacity", cap, capacity), ("behaviour", beh, behaviour)):
        if obj is not None and not isinstance(obj, dict):
            raise TraceError(f"{path}: a FedScale {name} trace is a dict keyed by client id, got {type(obj).__name__}")
    ids = set(cap) if cap is not None else set(beh)
    if cap is not None and beh is not None:
        ids &= set(beh)
    ids = sorted(ids, key=lambda k: (str(type(k)), k))[:n]
    if not ids:
        raise TraceError("no client id is in both pickles" if cap is not None and beh is not None else "no client")
    trace: Trace = {}
    spent = [0]                       # availability changes unrolled so far, under the rows limit
    for d, cid in enumerate(ids):
        first = {}
        if cap is not None:
            entry = cap[cid]
            where = f"{capacity}: client {cid!r}"
            if not isinstance(entry, dict) or not {"computation", "communication"} <= entry.keys():
                raise TraceError(f"{where}: expected {{'computation': ms/sample, 'communication': kbit/s}}")
            bw = _positive(entry["communication"], f"{where}.communication")
            first = {"ms_per_sample": _positive(entry["computation"], f"{where}.computation"),
                     "uplink_kbit_s": bw, "downlink_kbit_s": bw}
        points = [TracePoint(0.0, **first)] if first else []
        if beh is not None:
            points = _windows(beh[cid], f"{behaviour}: client {cid!r}", horizon_s, points, spent)
        trace[d] = points
    return trace


def _windows(entry, where: str, horizon_s: float, points: list[TracePoint], spent: list[int]) -> list[TracePoint]:
    if not isinstance(entry, dict) or not {"active", "inactive", "finish_time"} <= entry.keys():
        raise TraceError(f"{where}: expected {{'active': [s], 'inactive': [s], 'finish_time': s}}")
    act, inact = list(entry["active"]), list(entry["inactive"])
    period = _positive(entry["finish_time"], f"{where}.finish_time", "time_s")
    if len(act) != len(inact):
        raise TraceError(f"{where}: {len(act)} active times but {len(inact)} inactive ones")
    spans = sorted((_num(a, where), _num(b, where)) for a, b in zip(act, inact))
    spent[0] += 2 * len(spans) * math.ceil(horizon_s / period)     # what unrolling would build
    bounded.check(spent[0], "rows", where, f"finish_time={period:g} s unrolled over {horizon_s:g} s",
                  TraceLimitError, what=f"gives {spent[0]:,} availability changes (all clients so far)")
    if any(b < a for a, b in spans):
        raise TraceError(f"{where}: an inactive time precedes its active time")
    changes: list[tuple[float, bool]] = []
    cycle = 0
    while cycle * period < horizon_s:
        for a, b in spans:
            changes += [(cycle * period + a, True), (cycle * period + b, False)]
        cycle += 1
    online_at_0 = any(a <= 0 < b for a, b in spans)
    first = points[0] if points else TracePoint(0.0)
    out = [TracePoint(0.0, online_at_0, first.slowdown, first.ms_per_sample, first.uplink_kbit_s,
                      first.downlink_kbit_s)]
    state = online_at_0
    for t, on in sorted(changes):
        if 0 < t < horizon_s and on != state:
            out.append(TracePoint(t, on))
            state = on
    return out


def _num(x, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise TraceError(f"{where}: {x!r} is not a time in seconds")
    return bounded.trace_value(float(x), where, "active/inactive time", "time_s", TraceLimitError)
