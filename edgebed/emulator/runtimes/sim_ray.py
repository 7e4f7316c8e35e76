"""The virtual clock's work computed ahead by Ray actors (``runtime.sim.executor: ray``), same bits.

The same interface as ``sim_pool.WorkerPool`` (``configure``, ``submit``, ``result``, ``shutdown``), on
an existing engine: each of ``workers`` actors hosts one ``device_agent.worker.DeviceWork`` (the
device policy and its model, built once) and computes the jobs it is sent, in order. Θ and the batches
go through Ray's object store as numpy arrays (each batch as its storage with its strides, so the actor
rebuilds the very layout the clock drew), the result comes back the same way. Each actor's process
gets the run's numerics profile in its environment before it starts (``runtime_env``) and applies it
before its first torch operation, so its kernels are the clock's. Actors may sit on any node of the
cluster (``runtime.sim.ray_address``; none: a private Ray on this machine, ended with the run).

At most ``window`` jobs per actor are in flight: a submit beyond takes in the actor's oldest result
first. A dead actor or a failed job raises ``WorkerError`` naming the actor and the cause.
"""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .sim_pool import WINDOW, WorkerError


class _Actor:
    """A Ray actor hosting one ``DeviceWork`` (imported by path in the actor's process)."""

    def __init__(self):
        from ... import numerics
        numerics.apply_from_env()   # before any torch operation in this process
        self.work = None

    def configure(self, config: dict, threads: int) -> str:
        """Builds the work; returns where the actor runs: "node-id:pid"."""
        import ray
        from ...device_agent.worker import DeviceWork
        self.work = DeviceWork(config, threads)
        return f"{ray.get_runtime_context().get_node_id()[:12]}:{os.getpid()}"

    def compute(self, theta: np.ndarray, version: int, batches: list) -> tuple:
        import torch
        from ...device_agent.worker import fresh_tensor
        t0 = time.perf_counter()
        shipped = [(fresh_tensor(torch, x, dx), fresh_tensor(torch, y, dy)) for (x, dx), (y, dy) in batches]
        values, loss = self.work.compute(theta, version, shipped)
        return values, loss, time.perf_counter() - t0


@dataclass
class RayTicket:
    actor: int
    ref: object
    what: str
    values: Optional[np.ndarray] = None
    loss: float = float("nan")
    done: bool = False


def _pack(t) -> tuple:
    """A batch tensor as (its storage in order as a numpy array, its layout)."""
    flat = t.as_strided((t.numel(),), (1,)).numpy().copy()
    return flat, {"count": t.numel(), "shape": list(t.shape), "stride": list(t.stride()),
                  "dtype": str(t.dtype).removeprefix("torch."), "offset": 0}


class RayPool:
    """``n`` Ray actors computing devices' separable policy work (``sim_pool.WorkerPool``'s interface)."""

    def __init__(self, n: int, address: Optional[str], env: dict,
                 take: Callable[[int], np.ndarray] = lambda n: np.empty(n, np.float32), window: int = WINDOW):
        try:
            import ray
        except ImportError:
            raise WorkerError("runtime.sim.executor: ray needs Ray: pip install 'edgebed[ray]'") from None
        self.ray, self.take, self.window = ray, take, window
        self.closed = self.configured = False
        self.waited_s = self.busy_s = 0.0
        self.jobs = 0
        self._owns = not ray.is_initialized()
        if self._owns:
            try:
                ray.init(address=address, namespace="edgebed-sim", log_to_driver=False, include_dashboard=False,
                         configure_logging=False)
            except Exception as err:  # noqa: BLE001 — Ray raises bare Exception for a start-up timeout
                raise WorkerError(f"runtime.sim.executor: ray could not reach the Ray cluster at "
                                  f"{address or '(a new local one)'}: {err}. Start one with `ray start --head` "
                                  "and set runtime.sim.ray_address (HEAD:6379 or auto)") from None
        remote = ray.remote(num_cpus=1, max_restarts=0)(_Actor)
        self.actors = [remote.options(runtime_env={"env_vars": env}).remote() for _ in range(n)]
        self.busy: list[deque] = [deque() for _ in range(n)]
        self.where: list[str] = []   # each actor's "node-id:pid", once configured

    def configure(self, config: dict, threads: int) -> None:
        refs = [a.configure.remote(config, threads) for a in self.actors]
        self.where = [self._get(r, i, "its set-up") for i, r in enumerate(refs)]
        self.configured = True

    def submit(self, theta: np.ndarray, version: int, batches: list, what: str) -> RayTicket:
        i = min(range(len(self.actors)), key=lambda k: len(self.busy[k]))
        if len(self.busy[i]) >= self.window:
            self._take_in(self.busy[i][0])
        packed = [(_pack(x), _pack(y)) for x, y in batches]
        ref = self.actors[i].compute.remote(np.asarray(theta, np.float32), int(version), packed)
        ticket = RayTicket(i, ref, what)
        self.busy[i].append(ticket)
        self.jobs += 1
        return ticket

    def result(self, ticket: RayTicket) -> tuple[np.ndarray, float]:
        if not ticket.done:
            self._take_in(ticket)
        values, ticket.values = ticket.values, None
        return values, ticket.loss

    def _take_in(self, ticket: RayTicket) -> None:
        queue = self.busy[ticket.actor]
        while not ticket.done:
            done = queue.popleft()
            t0 = time.perf_counter()
            values, loss, busy = self._get(done.ref, done.actor, done.what)
            self.waited_s += time.perf_counter() - t0
            out = self.take(values.size)
            out[:] = values
            done.values, done.loss, done.done, done.ref = out, float(loss), True, None
            self.busy_s += busy

    def _get(self, ref, actor: int, what: str):
        from ray.exceptions import RayActorError, RayTaskError
        try:
            return self.ray.get(ref)
        except RayTaskError as err:
            raise WorkerError(f"sim Ray actor {actor} failed on {what}:\n{err}") from None
        except RayActorError as err:
            raise WorkerError(f"sim Ray actor {actor} died while computing {what} ({err}); the run can't go on "
                              "without its results. Rerun with runtime.sim.executor: local") from None

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 — already gone with its node
                pass
        if self._owns:
            self.ray.shutdown()
