"""The local executor: this machine's cores, one cell × seed per process (``--executor local --jobs J``).

``workers == 1`` runs each task in the study process itself, when it is submitted (``window`` 1):
the engine's live progress bar and its own Ctrl-C handling work as for ``edgebed run``.
``workers > 1`` runs tasks in a pool of spawned processes that end with the study process
(``procs.die_with_parent``); a pool process that dies breaks the pool, its tasks come back as
:class:`~.base.WorkerLost` and the next submit starts a fresh pool.
"""
from __future__ import annotations

import os
import queue
import signal
import threading
from concurrent.futures import CancelledError, Future
from concurrent.futures.process import BrokenProcessPool
from itertools import count
from typing import Optional

from .base import ExecutorError, StudyExecutor, WorkerLost

_STUDY_PID: Optional[int] = None   # in a pool process: the study process that started it
_STARTED = None                    # in a pool process: where it says which task it started
_STOP = None                       # in a pool process: set after Ctrl-C, so no queued task starts


def _pool_init(study_pid: int, started, stop) -> None:
    """A pool process ends with the study process: SIGTERM when it dies (the run in progress ends as
    an interrupted run, recorded), and no queued task starts after it or after Ctrl-C (``_pool_call``)."""
    global _STUDY_PID, _STARTED, _STOP
    _STUDY_PID, _STARTED, _STOP = study_pid, started, stop
    # idle, a Ctrl-C must not land inside the pool's queue code (a KeyboardInterrupt there can leave
    # a queue lock held and hang the pool); ``_pool_call`` takes it while a task runs
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ...procs import die_with_parent
    die_with_parent(signal.SIGTERM, parent=study_pid)


def _pool_call(tid: int, fn, args, kwargs):
    if _STUDY_PID is not None and os.getppid() != _STUDY_PID:
        raise RuntimeError("the study process is gone; not starting another cell")
    if _STOP is not None and _STOP.is_set():
        raise CancelledError("interrupted before it started")
    if _STARTED is not None:
        _STARTED.put((tid, os.getpid()))
    signal.signal(signal.SIGINT, signal.default_int_handler)   # the cell ends as an interrupted run
    try:
        return fn(*args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalExecutor(StudyExecutor):
    name = "local"
    shares_filesystem = True

    def __init__(self, workers: int = 1):
        if workers < 1:
            raise ExecutorError(f"jobs = {workers}: give at least 1 (cells run at once)")
        self._workers = workers
        self.in_process = workers == 1
        self.window = 1 if workers == 1 else None
        self._pool = None
        self._started = self._stop = None
        self._ids = count()
        self._tid: dict[int, int] = {}          # id(future) → task id
        self._pid: dict[int, int] = {}          # task id → pool process
        self._lock = threading.Lock()

    @property
    def workers(self) -> int:
        return self._workers

    def describe(self) -> str:
        return "local, in this process" if self.in_process else f"local, {self._workers} processes"

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self.in_process:
            fut: Future = Future()
            fut.set_running_or_notify_cancel()
            try:
                fut.set_result(fn(*args, **kwargs))
            except Exception as err:  # noqa: BLE001 — handed to the caller through the future
                fut.set_exception(err)
            return fut
        pool = self._ensure_pool()
        tid = next(self._ids)
        inner = pool.submit(_pool_call, tid, fn, args, kwargs)
        outer: Future = Future()
        self._tid[id(outer)] = tid
        _link(inner, outer)
        return outer

    def _ensure_pool(self):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        if self._pool is not None and getattr(self._pool, "_broken", False):
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._pool is None:
            ctx = mp.get_context("spawn")
            self._started, self._stop = ctx.Queue(), ctx.Event()
            self._pool = ProcessPoolExecutor(max_workers=self._workers, mp_context=ctx, initializer=_pool_init,
                                             initargs=(os.getpid(), self._started, self._stop))
        return self._pool

    def where(self, future: Future) -> Optional[str]:
        if self.in_process:
            return f"this process ({os.getpid()})" if future.running() else None
        with self._lock:
            while self._started is not None:
                try:
                    tid, pid = self._started.get_nowait()
                except (queue.Empty, OSError, ValueError):
                    break
                self._pid[tid] = pid
        pid = self._pid.get(self._tid.get(id(future), -1))
        return f"pid {pid}" if pid is not None and not future.done() else None

    def interrupt(self, futures: list[Future]) -> None:
        """Queued tasks are cancelled; the pool's processes get SIGINT (a Ctrl-C in a terminal reaches
        them anyway, ``kill -INT`` of the study process does not), so the cells they run end as
        interrupted runs, recorded."""
        if self._stop is not None:
            self._stop.set()
        for fut in futures:
            fut.cancel()
        for proc in list(getattr(self._pool, "_processes", {}).values()):
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        if self._started is not None:
            self._started.close()
            self._started = None


def _link(inner: Future, outer: Future) -> None:
    """``outer`` follows ``inner``; a broken pool (a process killed) becomes ``WorkerLost``."""
    orig_cancel = outer.cancel

    def cancel() -> bool:
        return inner.cancel() and orig_cancel()
    outer.cancel = cancel   # type: ignore[method-assign]

    def done(f: Future) -> None:
        if f.cancelled():
            orig_cancel()
            outer.set_running_or_notify_cancel()
            return
        if not outer.set_running_or_notify_cancel():
            return
        err = f.exception()
        if isinstance(err, BrokenProcessPool):
            outer.set_exception(WorkerLost(f"a local worker process died: {err}"))
        elif err is not None:
            outer.set_exception(err)
        else:
            outer.set_result(f.result())
    inner.add_done_callback(done)
