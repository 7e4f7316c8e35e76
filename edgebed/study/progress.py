"""The live view of a running study: done / running / failed / queued, median cell time, ETA, who runs what.

The study driver owns one :class:`Board` (only its thread touches it) and writes its snapshot to
``<study dir>/progress.json`` whenever a task starts, ends or moves, so ``edgebed study status`` shows
the same view from another terminal. :func:`render` draws a snapshot in at most 80 columns::

    study compression-smoke · ray (auto) · 0:42 · driver pid 4242 on vm
    done 3 · running 2 · failed 0 · queued 1 (of 6) · median cell 12.1 s · ETA 0:12
      running  adacomp c=0.01 · seed 1     0:07  10.0.0.3:5012 node 3fa2c1d0
      retry 1  asgd · seed 2               0:01  10.0.0.2:5031 node 9be01f2a
"""
from __future__ import annotations

import os
import socket
import statistics
import time
from pathlib import Path
from typing import Optional

from ..rundir import read_json, write_json_atomic

NAME = "progress.json"
DONE = ("complete", "skipped")


class Board:
    def __init__(self, study: str, executor: str, workers: Optional[int], sdir: Path):
        self.path = Path(sdir) / NAME
        self.head = {"study": study, "executor": executor, "workers": workers, "pid": os.getpid(),
                     "host": socket.gethostname(), "started": time.time(), "finished": None}
        self.tasks: dict[tuple[str, int], dict] = {}
        self._last = 0.0

    def add(self, key: tuple[str, int], label: str, state: str = "queued", **fields) -> None:
        self.tasks[key] = {"cell": key[0], "seed": key[1], "label": label, "state": state, "worker": None,
                           "started": None, "wall_time_s": None, "attempts": 0, **fields}

    def update(self, key: tuple[str, int], **fields) -> None:
        self.tasks[key].update(fields)

    def snapshot(self) -> dict:
        return {**self.head, "updated": time.time(), "tasks": list(self.tasks.values())}

    def save(self, force: bool = True) -> None:
        """Write progress.json (atomically); without ``force`` at most every 2 s."""
        now = time.monotonic()
        if force or now - self._last >= 2.0:
            write_json_atomic(self.path, self.snapshot())
            self._last = now

    def finish(self) -> None:
        self.head["finished"] = time.time()
        self.save()


def read(sdir: Path) -> Optional[dict]:
    data = read_json(sdir, NAME)
    return data or None


def counts(snap: dict) -> dict:
    tasks = snap.get("tasks", [])
    c = {k: 0 for k in ("done", "running", "failed", "queued")}
    for t in tasks:
        s = t["state"]
        c["done" if s in DONE else "running" if s == "running" else "queued" if s in ("queued", "retry")
          else "failed"] += 1
    return c


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def eta(snap: dict, now: Optional[float] = None) -> tuple[Optional[float], Optional[float]]:
    """(median wall time of the cells run by this driver, seconds until the rest are done — the
    queued ones at the median, spread over the workers, plus what the running ones have left)."""
    now = time.time() if now is None else now
    tasks = snap.get("tasks", [])
    walls = [t["wall_time_s"] for t in tasks if t["state"] == "complete" and t.get("wall_time_s")]
    if not walls:
        return None, None
    median = statistics.median(walls)
    running = [t for t in tasks if t["state"] == "running"]
    queued = sum(t["state"] in ("queued", "retry") for t in tasks)
    slots = snap.get("workers") or max(1, len(running))
    left = [max(0.0, median - (now - t["started"])) for t in running if t.get("started")]
    return median, (queued * median + sum(left)) / max(1, slots) if (queued or running) else 0.0


def render(snap: dict, width: int = 80, now: Optional[float] = None, rows: int = 12) -> list[str]:
    """The view as lines of at most ``width`` characters (running tasks first, then retries)."""
    now = time.time() if now is None else now
    c = counts(snap)
    total = len(snap.get("tasks", []))
    end = snap.get("finished") or now
    state = "finished" if snap.get("finished") else f"driver pid {snap.get('pid')} on {snap.get('host')}"
    lines = [f"study {snap.get('study')} · {snap.get('executor')} · {_clock(end - snap.get('started', end))} · {state}"]
    median, left = eta(snap, now)
    line = (f"done {c['done']} · running {c['running']} · failed {c['failed']} · queued {c['queued']} "
            f"(of {total})")
    if median is not None:
        line += f" · median cell {median:.1f} s" if median < 100 else f" · median cell {_clock(median)}"
        if left and not snap.get("finished"):
            line += f" · ETA {_clock(left)}"
    lines.append(line)
    active = [t for t in snap.get("tasks", []) if t["state"] in ("running", "retry")]
    label_w = min(34, max((len(f"{t['label']} · seed {t['seed']}") for t in active), default=0))
    for t in active[:rows]:
        what = f"{t['label']} · seed {t['seed']}"
        what = what if len(what) <= label_w else what[:label_w - 1] + "…"
        tag = "running" if t["state"] == "running" else f"retry {t['attempts']}"
        took = _clock(now - t["started"]) if t.get("started") else "-"
        lines.append(f"  {tag:<8} {what:<{label_w}}  {took:>5}  {t.get('worker') or 'queued'}")
    if len(active) > rows:
        lines.append(f"  … and {len(active) - rows} more")
    failed = [t for t in snap.get("tasks", []) if t["state"] not in DONE + ("running", "retry", "queued")]
    for t in failed[:3]:
        lines.append(f"  {t['state']:<8} {t['label']} · seed {t['seed']}: {t.get('error') or ''}")
    return [x if len(x) <= width else x[:width - 1] + "…" for x in lines]
