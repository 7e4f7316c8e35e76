"""Live curves in TensorBoard while a run (or each run of a study) goes: ``output.tensorboard: true``.

The run directory's writer hands every flushed batch of rows (``RunWriter.listeners``, every
``FLUSH_EVERY`` s) to :class:`TensorBoardSink`, which writes scalars to ``<run dir>/tensorboard/``:

================================  ==========================================  ===========================
tag                               value                                       step
================================  ==========================================  ===========================
``eval/accuracy``, ``eval/loss``  each evaluation's test accuracy (fraction)  its applied update
``ps/ingress_MB``                 cumulative PS ingress at that evaluation    its applied update
``staleness/<class>``             mean τ of the class's updates in the batch  the batch's last update
``update_rate/<class>``, ``/all`` the class's applied updates per second of   the batch's last update
                                  emulated time over the batch
``live_devices/<class>``, ``/all``  devices live (hello, not yet crashed,    the batch's last update
                                  lost or exited before the run's stop)
================================  ==========================================  ===========================

``tensorboard --logdir runs/`` shows every run, one per directory. Uses the ``tensorboard`` package's
own event writer (no torch, no TensorFlow): ``pip install 'edgebed[tensorboard]'``.
"""
from __future__ import annotations

import math
import threading
from pathlib import Path

INSTALL = "pip install 'edgebed[tensorboard]' (or: pip install tensorboard)"


def missing() -> str:
    """Why the writer can't run here ('' when it can): the scenario check reports it before the run."""
    try:
        import tensorboard.summary.writer.event_file_writer  # noqa: F401
    except ImportError:
        return f"output.tensorboard: true needs the tensorboard package; {INSTALL}, or set it to false"
    return ""


class TensorBoardSink:
    """Turns flushed table rows into TensorBoard scalars (see the module docstring). One instance per
    run; ``__call__`` may come from any thread that flushes (the engine, the PS before a checkpoint),
    so it holds a lock."""

    def __init__(self, logdir: Path, class_of: dict[int, str], classes: list[str]):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        self._writer = EventFileWriter(str(logdir), flush_secs=2)
        self._class_of = dict(class_of)
        self._classes = list(classes)
        self._live = {k: 0 for k in classes}
        self._state: dict[int, bool] = {}
        self._stopped = False
        self._last_t: float | None = None
        self._update = 0
        self._lock = threading.Lock()

    def _scalar(self, tag: str, value: float, step: int, wall: float) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        self._writer.add_event(Event(wall_time=wall, step=int(step), summary=Summary(
            value=[Summary.Value(tag=tag, simple_value=float(value))])))

    def __call__(self, batch: dict[str, list[dict]]) -> None:
        import time
        wall = time.time()
        with self._lock:
            for e in sorted(batch.get("evals", []), key=lambda r: r["update"]):
                self._scalar("eval/accuracy", e["accuracy"], e["update"], wall)
                self._scalar("eval/loss", e["loss"], e["update"], wall)
                self._scalar("ps/ingress_MB", e["ingress_bytes"] / 1e6, e["update"], wall)
            ups = batch.get("updates", [])
            if ups:
                self._updates(ups, wall)
            if batch.get("events"):
                self._events(batch["events"], wall)

    def _updates(self, ups: list[dict], wall: float) -> None:
        step = max(int(u["update"]) for u in ups)
        self._update = max(self._update, step)
        times = [_emulated(u) for u in ups]
        t_end = max(times)
        t_start = self._last_t if self._last_t is not None else min(times)
        span = t_end - t_start
        self._last_t = t_end
        for k in self._classes + sorted({u["speed_class"] for u in ups} - set(self._classes)):
            mine = [u for u in ups if u["speed_class"] == k]
            if not mine:
                continue
            self._scalar(f"staleness/{k}", sum(u["staleness"] for u in mine) / len(mine), step, wall)
            if span > 0:
                self._scalar(f"update_rate/{k}", len(mine) / span, step, wall)
        if span > 0:
            self._scalar("update_rate/all", len(ups) / span, step, wall)

    def _events(self, events: list[dict], wall: float) -> None:
        changed = False
        for e in sorted(events, key=lambda r: (r["update"], r["wall_time"])):
            if e["event"] == "stop":
                self._stopped = True
            d, k = int(e["device"]), self._class_of.get(int(e["device"]))
            if self._stopped or k is None:
                continue
            if e["event"] == "hello" and not self._state.get(d):
                self._state[d], self._live[k] = True, self._live[k] + 1
            elif e["event"] in ("crash", "lost", "exit") and self._state.get(d):
                self._state[d], self._live[k] = False, self._live[k] - 1
            else:
                continue
            changed = True
            self._update = max(self._update, int(e["update"]))
        if changed:
            for k, v in self._live.items():
                self._scalar(f"live_devices/{k}", v, self._update, wall)
            self._scalar("live_devices/all", sum(self._live.values()), self._update, wall)

    def close(self) -> None:
        with self._lock:
            self._writer.close()


def _emulated(row: dict) -> float:
    v = row.get("virtual_time")
    return float(v) if v is not None and math.isfinite(v) else float(row["wall_time"])
