"""The executor interface: where a study's cell × seed tasks run, shaped like ``concurrent.futures``.

An executor is a :class:`concurrent.futures.Executor` (``submit``, ``map``, ``shutdown``) — as
submitit's ``AutoExecutor`` and Dask's ``Client`` are — plus three things a study needs that the
standard interface lacks, each with a harmless default:

- ``batch()``: a context in which submits are sent together (SLURM makes them one job array);
- ``where(future)``: the worker running a task, or None while it is queued (the progress view);
- ``window``: how many tasks may be outstanding at once (None: all of them; 1: run one by one),
  and ``in_process`` / ``shares_filesystem``: what the driver may expect of where tasks run.

The study runner (``study/runner.py``) only ever talks to this interface. An engine's own failure —
a worker process, raylet or SLURM job that died — reaches the runner as :class:`WorkerLost` from
``future.result()``, and the runner decides on a retry; a cell that fails on its own (an exception in
the emulation) is not an engine failure: the task returns a failed outcome instead of raising.
"""
from __future__ import annotations

import contextlib
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Iterator, Optional


class ExecutorError(RuntimeError):
    """An executor that can't start (engine missing, cluster unreachable): says what to do."""


class WorkerLost(RuntimeError):
    """The engine lost the task's worker (process killed, node died, job cancelled or preempted)."""


@dataclass(frozen=True)
class Resources:
    """What one cell × seed task asks of its worker. A virtual-clock cell trains on one thread, so
    one CPU is right; ``gpus`` only for scenarios that train on a GPU."""
    cpus: int = 1
    gpus: float = 0

    def __post_init__(self):
        if self.cpus < 1:
            raise ExecutorError(f"--cpus-per-task {self.cpus}: give at least 1")
        if self.gpus < 0:
            raise ExecutorError(f"--gpus-per-task {self.gpus}: give 0 or more")


class StudyExecutor(Executor):
    """A ``concurrent.futures.Executor`` for study tasks; see the module docstring for the extras."""

    name: str = ""                    # registry key
    shares_filesystem: bool = False   # tasks see the driver's files (then full run dirs are kept)
    in_process: bool = False          # tasks run in the driver's own process (live progress, Ctrl-C)
    window: Optional[int] = None

    @property
    def workers(self) -> Optional[int]:
        """Tasks that run at once, for the ETA (None: not known, e.g. a cluster's free share)."""
        return None

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        yield

    def where(self, future: Future) -> Optional[str]:
        """The worker (host, process, node or job) running the task behind ``future``; None if it is
        still queued or the engine can't say."""
        return None

    def interrupt(self, futures: list[Future]) -> None:
        """Ctrl-C: stop the tasks behind ``futures`` (queued ones never start, running ones end).
        Default: cancel them, as ``shutdown(cancel_futures=True)`` does."""
        for fut in futures:
            fut.cancel()

    def describe(self) -> str:
        """One line for the console: the engine and where it runs."""
        return self.name
