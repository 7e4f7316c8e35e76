"""The local executor: this machine's cores, one cell × seed per process (``--executor local --jobs J``).

``workers == 1`` runs each task in the study process itself, when it is submitted (``window`` 1):
the engine's live progress bar and its own Ctrl-C handling work as for ``edgebed run``.
``workers > 1`` starts one spawned process per task, at most ``workers`` at once (the rest wait in a
queue; the driver's ``window`` keeps it short), each
ending with the study process (``procs.die_with_parent``). The processes share nothing, so one that
dies (killed, out of memory) loses only its own task — as :class:`~.base.WorkerLost` — and the cell
running beside it goes on. (A ``ProcessPoolExecutor`` breaks as a whole when one process dies and
takes every outstanding task with it; a cell lasts minutes, so a process per cell costs nothing.)
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections import deque
from concurrent.futures import Future
from itertools import count
from typing import Optional

from .base import ExecutorError, StudyExecutor, WorkerLost


def _child(conn, study_pid: int, fn, args, kwargs) -> None:
    """One task in its own process: ends with the study process (SIGTERM: the run in progress ends
    as an interrupted run, recorded); a Ctrl-C ends the cell as an interrupted run. The outcome, or
    the exception, goes back through ``conn``."""
    from ...procs import die_with_parent
    die_with_parent(signal.SIGTERM, parent=study_pid)
    try:
        result = ("ok", fn(*args, **kwargs))
    except BaseException as err:  # noqa: BLE001 — handed to the study process through the future
        result = ("error", err)
    try:
        conn.send(result)
    except (BrokenPipeError, ConnectionResetError):
        pass   # the study process is gone (stopped, killed): nobody to tell; the run directory says it all
    except Exception as err:  # noqa: BLE001 — e.g. an outcome that does not pickle
        conn.send(("error", RuntimeError(f"the task's result could not be sent back: {type(err).__name__}: {err}")))
    finally:
        conn.close()


class LocalExecutor(StudyExecutor):
    name = "local"
    shares_filesystem = True

    def __init__(self, workers: int = 1):
        if workers < 1:
            raise ExecutorError(f"jobs = {workers}: give at least 1 (cells run at once)")
        self._workers = workers
        self.in_process = workers == 1
        self.window = workers            # the driver submits no more than run at once
        self._ids = count()
        self._lock = threading.Lock()           # guards the two below (submit and the watchers)
        self._procs: dict[int, object] = {}     # id(future) → the process running its task
        self._queue: deque = deque()            # (future, fn, args, kwargs) waiting for a free slot

    @property
    def workers(self) -> int:
        return self._workers

    def describe(self) -> str:
        return "local, in this process" if self.in_process else f"local, {self._workers} processes"

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        if self.in_process:
            fut.set_running_or_notify_cancel()
            try:
                fut.set_result(fn(*args, **kwargs))
            except Exception as err:  # noqa: BLE001 — handed to the caller through the future
                fut.set_exception(err)
            return fut
        with self._lock:
            self._queue.append((fut, fn, args, kwargs))
        self._start_queued()
        return fut

    def _start_queued(self) -> None:
        """Starts queued tasks while fewer than ``workers`` run; a cancelled one is dropped."""
        while True:
            with self._lock:
                if not self._queue or len(self._procs) >= self._workers:
                    return
                fut, fn, args, kwargs = self._queue.popleft()
                if not fut.set_running_or_notify_cancel():
                    continue
                proc, recv = self._spawn(fn, args, kwargs)
                self._procs[id(fut)] = proc
            threading.Thread(target=self._watch, args=(fut, proc, recv), daemon=True,
                             name=f"watch-{proc.name}").start()

    def _spawn(self, fn, args, kwargs):
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, os.getpid(), fn, args, kwargs),
                           name=f"edgebed-cell-{next(self._ids)}", daemon=True)
        from ...nomain import needs_main, without_main
        # a study's cells (edgebed's run_cell) need nothing from the user's script: it is not run again
        with contextlib.nullcontext() if needs_main(fn, args, kwargs) else without_main():
            proc.start()
        send.close()                     # the child holds the only write end: EOF when it dies
        return proc, recv

    def _watch(self, fut: Future, proc, recv) -> None:
        """Reads the task's one message (before joining: a large outcome fills the pipe), then the
        process's end; no message means the process died — the task's worker was lost."""
        try:
            kind, value = recv.recv()
        except (EOFError, OSError):
            kind, value = None, None
        finally:
            recv.close()
        proc.join()
        with self._lock:
            self._procs.pop(id(fut), None)
        self._start_queued()
        if kind == "ok":
            fut.set_result(value)
        elif kind == "error":
            fut.set_exception(value)
        else:
            code = proc.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            fut.set_exception(WorkerLost(f"a local worker process died (pid {proc.pid}, {how})"))

    def where(self, future: Future) -> Optional[str]:
        if self.in_process:
            return f"this process ({os.getpid()})" if future.running() else None
        with self._lock:
            proc = self._procs.get(id(future))
        return f"pid {proc.pid}" if proc is not None and not future.done() else None

    def interrupt(self, futures: list[Future]) -> None:
        """Queued tasks are cancelled; the running tasks' processes get SIGINT (a Ctrl-C in a terminal reaches them anyway, ``kill -INT``
        of the study process does not), so the cells they run end as interrupted runs, recorded."""
        for fut in futures:
            fut.cancel()                 # only a queued one: a running future can't be cancelled
        with self._lock:
            procs = [self._procs[id(f)] for f in futures if id(f) in self._procs]
        for proc in procs:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except (ProcessLookupError, TypeError):
                pass

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            procs = list(self._procs.values())
            queued, self._queue = (list(self._queue), deque()) if cancel_futures else ([], self._queue)
        for fut, *_ in queued:
            fut.cancel()
        if cancel_futures:
            for proc in procs:
                proc.terminate()
        if wait:
            for proc in procs:
                proc.join()
