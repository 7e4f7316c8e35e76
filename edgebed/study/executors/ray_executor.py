"""The Ray executor: each cell × seed is one Ray task on an existing cluster (``--executor ray --address``).

``address``: ``auto`` (this machine is a node of a running cluster), ``host:6379`` (a node of it),
``ray://host:10001`` (Ray Client, the driver outside the cluster), or None to start a private Ray on
this machine. A task asks for ``Resources`` (``num_cpus``, ``num_gpus``) and gets a fresh worker
process (``max_calls=1``: the numerics profile is applied before torch runs, as in ``edgebed run``).
Ray's own retries are off (``max_retries=0``): a task whose worker or node dies reaches the study
runner as :class:`~.base.WorkerLost`, and the runner's bounded retry policy is the same for every
executor. The compact result comes back through Ray's object store: nothing needs shared storage but
the inputs a scenario names by path (a ``dataset.path``), which must exist on every node.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future
from itertools import count
from typing import Optional

from .base import ExecutorError, Resources, StudyExecutor, WorkerLost


def _call(placement, tid: int, fn, args, kwargs):
    """On a Ray worker: say where the task runs (for the progress view), then run it."""
    import ray
    ctx = ray.get_runtime_context()
    placement.started.remote(tid, f"{ray.util.get_node_ip_address()}:{os.getpid()} node {ctx.get_node_id()[:8]}")
    return fn(*args, **kwargs)


class _Placement:
    """A tiny actor on the driver's node: task id → the worker that started it."""

    def __init__(self):
        self.at: dict[int, str] = {}

    def started(self, tid: int, where: str) -> None:
        self.at[tid] = where

    def snapshot(self) -> dict:
        return dict(self.at)


class RayExecutor(StudyExecutor):
    name = "ray"

    def __init__(self, address: Optional[str] = None, resources: Resources = Resources(),
                 namespace: str = "edgebed-study"):
        if address is None:
            # a private Ray on this machine: its nodes talk over loopback, not the host's address
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise ExecutorError("--executor ray needs Ray: pip install 'edgebed[ray]'") from None
        self.address = address
        self.resources = resources
        self._owns = not ray.is_initialized()
        if self._owns:
            try:
                ray.init(address=address, namespace=namespace, log_to_driver=False,
                         include_dashboard=False, configure_logging=False)
            except Exception as err:  # noqa: BLE001 — Ray raises bare Exception for a start-up timeout
                raise ExecutorError(f"--executor ray: could not connect to the Ray cluster at "
                                    f"{address or '(a new local one)'}: {err}. Start one with `ray start "
                                    "--head` on the head node (and `ray start --address HEAD:6379` on "
                                    "each worker), then pass --address HEAD:6379 or --address auto") from None
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        here = ray.get_runtime_context().get_node_id()
        self._placement = ray.remote(num_cpus=0)(_Placement).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote()
        self._remote = ray.remote(num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=0,
                                  max_calls=1)(_call)
        self._ids = count()
        self._refs: dict[int, tuple] = {}            # id(future) → (task id, object ref)
        self._seen: dict[int, str] = {}
        self._seen_at = 0.0
        self._lock = threading.Lock()

    @property
    def workers(self) -> Optional[int]:
        import ray
        cpus = ray.cluster_resources().get("CPU", 0)
        return max(1, int(cpus // self.resources.cpus)) if cpus else None

    def describe(self) -> str:
        return f"ray ({self.address or 'local'})"

    def submit(self, fn, /, *args, **kwargs) -> Future:
        tid = next(self._ids)
        ref = self._remote.remote(self._placement, tid, fn, args, kwargs)
        outer: Future = Future()
        self._refs[id(outer)] = (tid, ref)
        _follow(ref, outer)
        return outer

    def where(self, future: Future) -> Optional[str]:
        import ray
        entry = self._refs.get(id(future))
        if entry is None or future.done():
            return None
        with self._lock:
            if time.monotonic() - self._seen_at > 1.0:
                try:
                    self._seen = ray.get(self._placement.snapshot.remote(), timeout=5)
                except Exception:  # noqa: BLE001 — the view goes without placements for a moment
                    pass
                self._seen_at = time.monotonic()
        return self._seen.get(entry[0])

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        import ray
        if not ray.is_initialized():
            return
        if cancel_futures:
            for _, ref in list(self._refs.values()):
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 — already finished or its node gone
                    pass
        self._refs.clear()
        try:
            ray.kill(self._placement)
        except Exception:  # noqa: BLE001
            pass
        if self._owns:
            ray.shutdown()


def _follow(ref, outer: Future) -> None:
    """``outer`` follows the Ray object ``ref``: the task's value; its exception if the task raised;
    :class:`WorkerLost` when Ray lost the worker, the node or the object."""
    import ray
    from ray.exceptions import RayTaskError, TaskCancelledError
    inner = ref.future()
    orig_cancel = outer.cancel

    def cancel() -> bool:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001
            pass
        # wake wait() now: a cancelled future counts as done only once "notified"
        if orig_cancel() and outer._state == "CANCELLED":
            outer.set_running_or_notify_cancel()
        return outer.cancelled()
    outer.cancel = cancel   # type: ignore[method-assign]

    def done(f: Future) -> None:
        if outer.done() or not outer.set_running_or_notify_cancel():
            return
        err = f.exception() if not f.cancelled() else TaskCancelledError()
        if err is None:
            outer.set_result(f.result())
        elif isinstance(err, TaskCancelledError):
            outer.set_exception(WorkerLost("the Ray task was cancelled"))
        elif isinstance(err, RayTaskError):
            cause = err.as_instanceof_cause()
            outer.set_exception(cause if isinstance(cause, BaseException) else RuntimeError(str(err)))
        else:   # WorkerCrashedError, NodeDiedError, ObjectLostError, ...
            outer.set_exception(WorkerLost(f"Ray lost the task: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"))
    inner.add_done_callback(done)
