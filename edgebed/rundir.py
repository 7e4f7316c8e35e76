"""Run directory: the one on-disk record of a run, written crash-safely and read back for analysis.

Layout of ``runs/<name>-<YYYYmmdd-HHMMSS>/``::

    scenario.yaml      the resolved scenario (defaults + file + --set overrides)
    manifest.json      seed, versions, host, runtime, which link property was applied at which level
    summary.json       {"status": "running" | "complete" | "incomplete" | "failed", ...final numbers};
                       while running it names the engine process ({"pid", "start"}): if that is
                       gone, the run was killed (``run_status``)
    traffic.json       PS bytes in/out per message type, per device, per speed class
    updates/part-NNNNN.parquet   one row per applied update          (+ updates.csv at the end)
    evals/part-NNNNN.parquet     one row per evaluation of Θ          (+ evals.csv)
    events/part-NNNNN.parquet    worker start/crash/lost/exit, run stop (+ events.csv)

Every file is written to a temporary name and ``os.replace``d, so a crash or a kill at any moment
leaves only whole files: a table is the concatenation of its complete parts.
"""
from __future__ import annotations

import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .atomic import replacing
from .datadict import annotate

# Columns of each table and their arrow types; writers must give exactly these keys.
SCHEMAS: dict[str, pa.Schema] = {
    "updates": pa.schema([
        ("update", pa.int64()),          # index i of the update (Θ version after applying it), 1-based
        ("wall_time", pa.float64()),     # seconds since the run started
        ("virtual_time", pa.float64()),  # seconds of emulated time (sim runtime), NaN otherwise
        ("device", pa.int32()),
        ("speed_class", pa.string()),
        ("staleness", pa.int32()),       # global staleness τ = i_at_receipt − j_pulled
        ("sigma_mean", pa.float64()),    # AdaComp: mean per-parameter staleness σ_k over sent k; NaN otherwise
        ("sigma_max", pa.float64()),
        ("entries", pa.int64()),         # gradient entries in the push
        ("bytes_in", pa.int64()),        # bytes of this push message as received by the PS
        ("loss", pa.float64()),          # training loss the device reported for its batch
    ]),
    "evals": pa.schema([
        ("update", pa.int64()),          # Θ evaluated exactly as it was after this update
        ("wall_time", pa.float64()),
        ("virtual_time", pa.float64()),
        ("ingress_bytes", pa.int64()),   # cumulative bytes received by the PS up to this update (all types)
        ("push_bytes", pa.int64()),      # cumulative bytes of push messages only
        ("accuracy", pa.float64()),      # test accuracy in [0, 1]
        ("loss", pa.float64()),          # mean test cross-entropy
    ]),
    "events": pa.schema([
        ("wall_time", pa.float64()),
        ("virtual_time", pa.float64()),
        ("update", pa.int64()),          # Θ version when the event happened
        ("device", pa.int32()),          # -1 for run-level events
        ("event", pa.string()),          # start | hello | crash | lost | exit | bye | stop | warning | ...
        ("detail", pa.string()),
    ]),
}
SCHEMAS = annotate(SCHEMAS)   # each field's unit and meaning as Parquet metadata (datadict.py)
TABLES = tuple(SCHEMAS)


def write_json_atomic(path: Path, data: Any) -> None:
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class RecordError(RuntimeError):
    """Rows that do not fit their table's schema. They are kept on disk (``<table>/unwritable.jsonl``)
    next to the parts already written, and the run must fail: its record is incomplete."""


class RunWriter:
    """Buffers rows in memory and flushes them as new, atomically renamed Parquet parts.

    Safe from any thread: rows are appended under ``_lock``; a whole flush (choosing the part number,
    writing, renaming) holds ``_flush_lock``, so two threads flushing at once (the engine on its timer,
    the PS thread before a checkpoint) never pick the same part name. No row is ever dropped: if a part
    can't be written (disk full, I/O error) its rows go back to the front of the pending list and the
    error is raised; rows that can't be converted to the schema are written to
    ``<table>/unwritable.jsonl`` and RecordError is raised after every good row is on disk.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._rows: dict[str, list[dict]] = {t: [] for t in TABLES}
        self._parts: dict[str, int] = {}
        self._lock = threading.Lock()         # guards _rows (held for microseconds)
        self._flush_lock = threading.Lock()   # guards _parts and the files (held for a whole flush)
        # called with each batch of rows once it is on disk ({table: rows}), on the flushing thread,
        # under the flush lock (so in table order); e.g. the TensorBoard writer. An error in one is
        # reported once on stderr and the listener dropped: live curves never end a run.
        self.listeners: list = []
        for t in TABLES:
            (self.path / t).mkdir(parents=True, exist_ok=True)
            parts = [int(p.stem.split("-")[1]) for p in (self.path / t).glob("part-*.parquet")]
            self._parts[t] = max(parts) + 1 if parts else 0

    def append(self, table: str, row: dict) -> None:
        with self._lock:
            self._rows[table].append(row)

    def pending(self) -> int:
        """Rows appended but not yet on disk."""
        with self._lock:
            return sum(len(r) for r in self._rows.values())

    def flush(self) -> None:
        with self._flush_lock:
            with self._lock:
                pending = {t: rows for t, rows in self._rows.items() if rows}
                self._rows = {t: [] for t in TABLES}
            bad: list[str] = []
            for i, (table, rows) in enumerate(pending.items()):
                try:
                    arrow, unwritable = _to_arrow(table, rows)
                    if arrow is not None:
                        self._write_part(table, arrow)
                except BaseException:
                    with self._lock:   # keep this table's and the remaining tables' rows, in order
                        for t, r in list(pending.items())[i:]:
                            self._rows[t][:0] = r
                    raise
                if unwritable:
                    self._quarantine(table, unwritable)
                    bad.append(f"{table}: {len(unwritable)} row(s), first {unwritable[0][1]}")
            self._notify(pending)
            if bad:
                raise RecordError("rows that do not fit the run's tables were kept in "
                                  f"{self.path}/<table>/unwritable.jsonl: " + "; ".join(bad))

    def _notify(self, batch: dict[str, list[dict]]) -> None:
        for listener in list(self.listeners):
            try:
                listener(batch)
            except Exception as err:   # noqa: BLE001 — a listener's failure must not lose or stop a run
                self.listeners.remove(listener)
                import sys
                print(f"edgebed: {self.path}: a live writer failed and was stopped ({type(err).__name__}: "
                      f"{err}); the run and its tables go on", file=sys.stderr)

    def _write_part(self, table: str, arrow: pa.Table) -> None:
        with replacing(self.path / table / f"part-{self._parts[table]:05d}.parquet") as tmp:
            pq.write_table(arrow, tmp)
        self._parts[table] += 1

    def _quarantine(self, table: str, unwritable: list[tuple[dict, str]]) -> None:
        with open(self.path / table / "unwritable.jsonl", "a", encoding="utf-8", errors="backslashreplace") as f:
            for row, why in unwritable:
                f.write(json.dumps({"row": {k: repr(v) for k, v in row.items()}, "error": why}) + "\n")

    def export_csv(self) -> None:
        for t in TABLES:
            df = read_table(self.path, t)
            with replacing(self.path / f"{t}.csv") as tmp:
                df.to_csv(tmp, index=False)


def _to_arrow(table: str, rows: list[dict]) -> tuple[Optional[pa.Table], list[tuple[dict, str]]]:
    """Rows → one Arrow table; on a conversion error, row by row: (table of the good rows or None,
    [(bad row, error)])."""
    schema = SCHEMAS[table]
    try:
        return pa.Table.from_pylist(rows, schema=schema), []
    except (pa.ArrowException, ValueError, TypeError, OverflowError, UnicodeError):
        pass
    good, bad = [], []
    for row in rows:
        try:
            good.append(pa.Table.from_pylist([row], schema=schema))
        except (pa.ArrowException, ValueError, TypeError, OverflowError, UnicodeError) as err:
            bad.append((row, f"{type(err).__name__}: {err}"))
    return (pa.concat_tables(good) if good else None), bad


def read_table(run: str | Path, table: str) -> pd.DataFrame:
    """The whole table of a run (complete parts only), sorted in record order."""
    if table not in SCHEMAS:
        raise ValueError(f"unknown table {table!r}; tables are {TABLES}")
    parts = sorted((Path(run) / table).glob("part-*.parquet"))
    if not parts:
        return SCHEMAS[table].empty_table().to_pandas()
    return pa.concat_tables([pq.read_table(p, schema=SCHEMAS[table]) for p in parts]).to_pandas()


def read_json(run: str | Path, name: str) -> dict:
    p = Path(run) / name
    return json.loads(p.read_text()) if p.exists() else {}


def run_status(run: str | Path) -> str:
    """The run's status as recorded, except that a run still marked ``running`` whose engine process
    (recorded in summary.json) is gone is ``killed``: nothing will ever close it."""
    from . import procs
    summary = read_json(run, "summary.json")
    status = str(summary.get("status", "unknown"))
    engine = summary.get("engine")
    if status == "running" and isinstance(engine, dict) and not procs.is_alive(engine):
        return "killed"
    return status


def is_run_dir(path: str | Path) -> bool:
    p = Path(path)
    return (p / "scenario.yaml").exists() and (p / "summary.json").exists()


def new_run_dir(out: str | Path, name: str, now: Optional[float] = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    base = Path(out) / f"{name}-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    path.mkdir(parents=True)
    return path


def host_facts(ps_push_path: str) -> dict:
    import importlib.metadata as md

    def ver(pkg: str) -> Optional[str]:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except OSError:
        pass
    return {
        "hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
        "cores": os.cpu_count(), "memory_bytes": mem,
        # which code applied the pushes (the same bits either way; see edgebed/ps/_fastpush.c)
        "ps_push_path": ps_push_path,
        "packages": {p: ver(p) for p in ("edgebed", "torch", "numpy", "pyzmq", "pyarrow", "pandas",
                                          "pydantic", "pyroute2", "docker", "pyspark")},
    }
