"""The device trace format: one row per (device, time) at which something about the device changes.

CSV (a header row, comma-separated; an empty cell means "unchanged")::

    device,time_s,online,slowdown,ms_per_sample,uplink_kbit_s,downlink_kbit_s
    0,0,1,1.5,,2000,10000
    0,30,0,,,,
    0,45,1,,,,

JSON, the same rows grouped by device::

    {"format": "edgebed-trace/1",
     "devices": {"0": [{"time_s": 0, "online": true, "slowdown": 1.5, "uplink_kbit_s": 2000}, ...]}}

Columns (units in their names): ``device`` 0..n-1; ``time_s`` seconds since the run started (virtual
time on ``sim``); ``online`` 1/0 (true/false); ``slowdown`` compute-time multiplier ≥ 1 (replaces the
class's); ``ms_per_sample`` compute milliseconds per training sample (FedScale's measure: a step then
takes ms_per_sample × batch_size / 1000 s, instead of step_time × slowdown); ``uplink_kbit_s``,
``downlink_kbit_s`` link rates in kbit/s (1 kbit = 1000 bit). A device not in the trace keeps its
speed class's values throughout; a device in it starts online unless its first row says otherwise.

A trace is an untrusted file, read through ``data.bounded``: its bytes, rows and nesting are bounded,
times lie in 0 or [resolution, ``time_s`` limit] and rates in [resolution, ``value`` limit]; a file
over a limit raises ``TraceLimitError`` (both a ``TraceError`` and a ``bounded.LimitError``).
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from ..data import bounded

COLUMNS = ("device", "time_s", "online", "slowdown", "ms_per_sample", "uplink_kbit_s", "downlink_kbit_s")
FORMAT = "edgebed-trace/1"


class TraceError(ValueError):
    """A trace file that can't be read: says which file, which row and what to do."""


class TraceLimitError(bounded.LimitError, TraceError):
    """A trace file over one of the bounded reader's limits (caught as either)."""


@dataclass(frozen=True)
class TracePoint:
    """From ``time_s`` on (seconds), the values given (None: unchanged)."""
    time_s: float
    online: Optional[bool] = None
    slowdown: Optional[float] = None
    ms_per_sample: Optional[float] = None
    uplink_kbit_s: Optional[float] = None
    downlink_kbit_s: Optional[float] = None


Trace = dict[int, list[TracePoint]]   # device → its points, in time order


def _number(raw, where: str, col: str, positive: bool = True) -> Optional[float]:
    if raw is None or raw == "":
        return None
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {col}={raw!r} is not a number") from None
    if not math.isfinite(x) or (positive and x <= 0) or x < 0:
        raise TraceError(f"{where}: {col}={raw!r} must be a finite number{' > 0' if positive else ' ≥ 0'}")
    return bounded.trace_value(x, where, col, "time_s" if col == "time_s" else "value", TraceLimitError)


def _point(row: dict, where: str) -> TracePoint:
    unknown = set(row) - set(COLUMNS)
    if unknown:
        raise TraceError(f"{where}: unknown column(s) {', '.join(sorted(map(str, unknown)))}; the columns are "
                         f"{', '.join(COLUMNS)}")
    online = row.get("online")
    if online not in (None, ""):
        if str(online).lower() in ("1", "true"):
            online = True
        elif str(online).lower() in ("0", "false"):
            online = False
        else:
            raise TraceError(f"{where}: online={online!r} must be 1/0 (true/false)")
    else:
        online = None
    t = _number(row.get("time_s"), where, "time_s", positive=False)
    if t is None:
        raise TraceError(f"{where}: time_s is required (seconds since the run started)")
    slowdown = _number(row.get("slowdown"), where, "slowdown")
    if slowdown is not None and slowdown < 1:
        raise TraceError(f"{where}: slowdown={slowdown:g} must be ≥ 1 (a compute-time multiplier)")
    p = TracePoint(t, online, slowdown, _number(row.get("ms_per_sample"), where, "ms_per_sample"),
                   _number(row.get("uplink_kbit_s"), where, "uplink_kbit_s"),
                   _number(row.get("downlink_kbit_s"), where, "downlink_kbit_s"))
    if p.slowdown is not None and p.ms_per_sample is not None:
        raise TraceError(f"{where}: give slowdown or ms_per_sample, not both")
    return p


def _device(raw, where: str) -> int:
    try:
        d = int(raw)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: device={raw!r} is not a device id (0, 1, ...)") from None
    if d < 0 or str(d) != str(raw).strip():
        raise TraceError(f"{where}: device={raw!r} is not a device id (0, 1, ...)")
    return d


def read_trace(path: str | Path, n_devices: Optional[int] = None) -> Trace:
    """The trace in ``path`` (``.json``: JSON, else CSV), points sorted by time per device.
    ``n_devices``: refuse devices outside 0..n-1."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    trace: Trace = {}
    if path.suffix.lower() == ".json":
        doc = bounded.loads_json(path, TraceError, TraceLimitError)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("devices"), dict):
            raise TraceError(f"{path}: expected {{\"format\": \"{FORMAT}\", \"devices\": {{id: [rows]}}}}")
        rows_in = sum(len(r) if isinstance(r, list) else 1 for r in doc["devices"].values())
        bounded.check(rows_in, "rows", path, "rows", TraceLimitError)
        for key, rows in doc["devices"].items():
            d = _device(key, f"{path}: devices")
            if not isinstance(rows, list):
                raise TraceError(f"{path}: devices.{key} must be a list of rows")
            trace[d] = [_point(r if isinstance(r, dict) else {"?": r}, f"{path}: devices.{key}.{i}")
                        for i, r in enumerate(rows)]
    else:
        raw = bounded.read_bytes(path, TraceLimitError)
        bounded.check(raw.count(b"\n") + (not raw.endswith(b"\n")) - 1, "rows", path, "rows", TraceLimitError)
        try:
            text = raw.decode()
        except UnicodeDecodeError as err:
            raise TraceError(f"{path}: not a UTF-8 text file ({err})") from None
        with io.StringIO(text, newline="") as f:
            reader = csv.DictReader(f)
            try:
                if not reader.fieldnames or "device" not in reader.fieldnames or "time_s" not in reader.fieldnames:
                    raise TraceError(f"{path}: the header must name device and time_s (columns: {', '.join(COLUMNS)})")
                for i, row in enumerate(reader, start=2):
                    where = f"{path}: line {i}"
                    d = _device(row.pop("device"), where)
                    trace.setdefault(d, []).append(_point(row, where))
            except csv.Error as err:
                raise TraceError(f"{path}: line {reader.line_num}: not CSV ({err})") from None
    for d, points in trace.items():
        points.sort(key=lambda p: p.time_s)
        if n_devices is not None and d >= n_devices:
            raise TraceError(f"{path}: device {d} is not in 0..{n_devices - 1} (workers.n = {n_devices})")
    return trace


def write_trace(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` to ``path`` (``.json``: JSON, else CSV); → the path."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        devices = {str(d): [{k: v for k, v in asdict(p).items() if v is not None} for p in pts]
                   for d, pts in sorted(trace.items())}
        path.write_text(json.dumps({"format": FORMAT, "devices": devices}, indent=1))
        return path
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for d, pts in sorted(trace.items()):
            for p in pts:
                row = asdict(p)
                row["online"] = None if p.online is None else int(p.online)
                w.writerow([d] + ["" if row[c] is None else (f"{row[c]:g}" if isinstance(row[c], float) else row[c])
                                  for c in COLUMNS[1:]])
    return path


def online_windows(points: list[TracePoint], horizon: float = math.inf) -> list[tuple[float, float]]:
    """The (start, end) seconds a device with these points is online, up to ``horizon``."""
    out, since, online = [], 0.0, True
    for p in points:
        if p.online is None or p.online == online:
            continue
        if online:
            out.append((since, p.time_s))
        since, online = p.time_s, p.online
    if online:
        out.append((since, horizon))
    return [(a, min(b, horizon)) for a, b in out if a < horizon and b > a]
