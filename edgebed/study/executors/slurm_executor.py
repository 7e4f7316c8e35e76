"""The SLURM executor: cell × seed tasks as one job array through submitit (``--executor slurm``).

Each batch of submissions (``batch()``: all the study's runs at once) becomes one ``sbatch --array``
with ``--cpus-per-task``, ``--time`` and ``--partition`` (and ``--gpus-per-node`` for GPU cells);
``array_parallelism`` caps how many run at once. The job runs submitit's runner with *this* Python
(the driver's ``sys.executable``, e.g. the venv's), so edgebed must be installed at the same path on
the compute nodes — true on clusters with a shared home or software tree.

Shared storage: submitit passes each task and its return value as pickles in ``folder`` (default
``<study dir>/slurm``), which must be visible to the login node and the compute nodes — on a SLURM
cluster your home or scratch directory is. The returned value is the compact result; the driver
writes it into the study directory, so the run directories themselves stay in the job's temporary
directory and need no shared space.

A job that ends without a result (node failure, ``scancel``, preemption, time limit) is
:class:`~.base.WorkerLost`: the runner submits it again, up to its retry bound. Job states come from
``squeue`` (which every SLURM has; ``sacct`` needs the accounting daemon).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Iterator, Optional

import contextlib

from .base import ExecutorError, Resources, StudyExecutor, WorkerLost

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"}
POLL_S = 1.0
RESULT_GRACE_S = 10.0    # a job gone from squeue may still be writing its result (slow shared fs)


def slurm_problem() -> Optional[str]:
    """Why no SLURM cluster answers here, or None when one does."""
    if shutil.which("sbatch") is None or shutil.which("squeue") is None:
        return "the SLURM client commands (sbatch, squeue) are not on PATH"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"sinfo did not answer: {err}"
    if out.returncode != 0:
        return f"sinfo failed: {out.stderr.strip() or out.stdout.strip()}"
    states = out.stdout.split()
    if not any(s.rstrip("*~#$@").lower() in ("idle", "mixed", "allocated", "completing") for s in states):
        return f"no SLURM node is up (sinfo states: {' '.join(states) or 'none'})"
    return None


class SlurmExecutor(StudyExecutor):
    name = "slurm"

    def __init__(self, folder: Path, partition: Optional[str] = None, time_min: int = 120,
                 resources: Resources = Resources(), array_parallelism: int = 256,
                 python: Optional[str] = None, job_name: str = "edgebed-study"):
        try:
            import submitit
        except ImportError:
            raise ExecutorError("--executor slurm needs submitit: pip install 'edgebed[slurm]'") from None
        problem = slurm_problem()
        if problem:
            raise ExecutorError(f"--executor slurm: {problem}. Run the study on a SLURM login node "
                                "(or a machine that is a SLURM submit host)")
        self.folder = Path(folder)
        self.partition = partition
        self.resources = resources
        self._ex = submitit.SlurmExecutor(folder=self.folder / "%j", python=python or sys.executable)
        params = dict(time=time_min, cpus_per_task=resources.cpus, ntasks_per_node=1, nodes=1,
                      array_parallelism=array_parallelism, job_name=job_name)
        if partition:
            params["partition"] = partition
        if resources.gpus:
            params["gpus_per_node"] = int(max(1, round(resources.gpus)))
        self._ex.update_parameters(**params)
        self._batch: Optional[list] = None
        self._jobs: dict[Future, tuple] = {}     # future → (submitit job, first seen gone at)
        self._where: dict[str, str] = {}         # job id → node, while RUNNING
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="edgebed-slurm-poll", daemon=True)
        self._poller.start()

    def describe(self) -> str:
        return f"slurm ({self.partition or 'default partition'})"

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        self._batch = []
        try:
            with self._ex.batch(allow_implicit_submissions=True):
                yield
        finally:
            made, self._batch = self._batch, None
            with self._lock:
                for fut, job in made:
                    self._jobs[fut] = (job, None)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        job = self._ex.submit(fn, *args, **kwargs)
        fut: Future = Future()
        fut.set_running_or_notify_cancel()    # a SLURM job can't be un-queued through a future
        if self._batch is not None:
            self._batch.append((fut, job))
        else:
            with self._lock:
                self._jobs[fut] = (job, None)
        return fut

    def where(self, future: Future) -> Optional[str]:
        with self._lock:
            entry = self._jobs.get(future)
            return None if entry is None else self._where.get(entry[0].job_id)

    def interrupt(self, futures: list[Future]) -> None:
        """``scancel`` the jobs behind ``futures``; each then ends as :class:`WorkerLost` (cancelled)."""
        with self._lock:
            jobs = {f: self._jobs.pop(f)[0] for f in futures if f in self._jobs}
        if jobs:
            subprocess.run(["scancel", *(j.job_id for j in jobs.values())], capture_output=True, timeout=30)
        for fut, job in jobs.items():
            fut.set_exception(WorkerLost(f"SLURM job {job.job_id} cancelled (scancel)"))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            with self._lock:
                pending = [f for f in self._jobs if not f.done()]
            self.interrupt(pending)
        self._stop.set()
        if wait:
            self._poller.join(timeout=10)

    # -- the poller thread: results, squeue states, jobs gone without a result ---------------------
    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            with self._lock:
                jobs = dict(self._jobs)
            if not jobs:
                continue
            states = self._squeue([job.job_id for job, _ in jobs.values()])
            for fut, (job, gone_at) in jobs.items():
                state, node = states.get(job.job_id, (None, None))
                with self._lock:
                    if state == "RUNNING" and node:
                        self._where[job.job_id] = f"{node} job {job.job_id}"
                    else:
                        self._where.pop(job.job_id, None)
                if job.paths.result_pickle.exists():
                    self._resolve(fut, job)
                elif states is not None and (state is None or state in ENDED):
                    now = time.monotonic()
                    if gone_at is None:
                        with self._lock:
                            self._jobs[fut] = (job, now)
                    elif now - gone_at > RESULT_GRACE_S:
                        self._resolve(fut, job, lost=state or "gone from the queue")

    def _squeue(self, ids: list[str]) -> Optional[dict]:
        """job id → (state, node list) for the jobs squeue still lists; None if squeue failed."""
        try:
            out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%N", "-j", ",".join(ids)],
                                 capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0 and "Invalid job id" not in out.stderr:
            return None
        states = {}
        for line in out.stdout.splitlines():
            jid, state, node = (line.split("|") + ["", ""])[:3]
            states[jid.strip()] = (state.strip(), node.strip())
        return states

    def _resolve(self, fut: Future, job, lost: Optional[str] = None) -> None:
        import submitit
        with self._lock:
            self._where.pop(job.job_id, None)
            if self._jobs.pop(fut, None) is None:   # already resolved (interrupt)
                return
        if lost is not None:
            fut.set_exception(WorkerLost(f"SLURM job {job.job_id} ended without a result ({lost}); "
                                         f"its log: {job.paths.stderr}"))
            return
        try:
            fut.set_result(job.result())
        except submitit.core.utils.UncompletedJobError as err:
            fut.set_exception(WorkerLost(f"SLURM job {job.job_id}: {str(err).splitlines()[0]}"))
        except submitit.core.utils.FailedJobError as err:
            fut.set_exception(RuntimeError(f"SLURM job {job.job_id} failed: {str(err).splitlines()[-1]}"))
        except Exception as err:  # noqa: BLE001 — an exception the task raised, unpickled
            fut.set_exception(err)
