"""The virtual clock's worker pool: devices' policy work computed ahead, in other processes, same bits.

Between a device's pull and its push, its gradient (or its τ local steps) depends only on the Θ it
pulled and the batches it drew then (``DevicePolicy.separable``). The clock hands that work to
``submit`` the moment the PS sends the model and asks for the result (``result``) only when the push
is due, so many devices' work runs at once while the event loop goes on in virtual-time order; every
push is still applied at its own time, in the same order, and the tables are those of one process.

Workers are ``python -m edgebed.device_agent.worker`` processes (no re-import of the user's
``__main__``), each with ``window`` slots: a memfd holding one job's Θ and batches and its result. A
job's message is about a hundred bytes of JSON over a SOCK_SEQPACKET socket (the batches' layouts are
in the slot too), so no send ever blocks. The
pool keeps at most ``window`` jobs per worker: a submit with none free first takes in the oldest result
(its values copied out, its slot free again). Results of one worker come back in its order.

A worker that dies or fails a job raises ``WorkerError`` naming it, its exit status and the tail of its
log, at once (its socket reads end-of-file: nothing hangs). ``shutdown`` ends every worker (closing its
socket ends it; SIGKILL after a grace period) and waits for it; the workers also die with the engine.
Single-threaded: only the event loop calls it.
"""
from __future__ import annotations

import json
import mmap
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ...device_agent.worker import MAX_MESSAGE
from ...procs import children_shielded

WINDOW = 4     # jobs in flight per worker: enough to keep it busy while the clock takes in results
_ALIGN = 64    # every array in a slot starts at a multiple of this (torch's allocator's alignment)
GRACE_S = 2.0  # a worker's time to exit after its socket closed, before SIGKILL


class WorkerError(RuntimeError):
    """A worker died or failed a job: the message names the worker, how it ended and its log."""


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass
class Ticket:
    """One submitted job: where it runs, and once taken in, its result."""
    worker: int
    slot: int
    what: str
    values: Optional[np.ndarray] = None
    loss: float = float("nan")
    done: bool = False


@dataclass
class _Slot:
    fd: int = -1
    mm: Optional[mmap.mmap] = None
    size: int = 0
    ticket: Optional[Ticket] = None
    told: bool = False   # the worker has this memfd


@dataclass
class _Worker:
    proc: subprocess.Popen
    sock: socket.socket
    log: Path
    slots: list = field(default_factory=list)
    busy: deque = field(default_factory=deque)   # tickets in submission order (its results' order)


class WorkerPool:
    """``n`` worker processes computing devices' separable policy work; ``take(size)`` gives the float32
    arrays results are copied into (the runtime's gradient buffers)."""

    def __init__(self, n: int, log_dir: Path, take: Callable[[int], np.ndarray] = lambda n: np.empty(n, np.float32),
                 window: int = WINDOW):
        self.take = take
        self.window = window
        self.workers: list[_Worker] = []
        self.configured = False
        self.closed = False
        self.waited_s = 0.0   # wall seconds the clock blocked for results (at a push, or for a free slot)
        self.jobs = 0
        self.busy_s = 0.0     # wall seconds the workers spent on jobs, all together
        log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for i in range(n):
                self.workers.append(self._start(i, log_dir / f"sim-worker-{i}.log"))
        except BaseException:
            self.shutdown()
            raise

    def _start(self, i: int, log: Path) -> _Worker:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log, "wb") as out, children_shielded():
            proc = subprocess.Popen([sys.executable, "-m", "edgebed.device_agent.worker", str(theirs.fileno()),
                                     str(os.getpid())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT)
        theirs.close()
        return _Worker(proc, ours, log, [_Slot() for _ in range(self.window)])

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers]

    def configure(self, config: dict, threads: int) -> None:
        """What every job computes with (sent once, before the first job): the workload, its seed,
        batch size, the device policy and whether Θ carries statistics (``device_agent/worker.py``)."""
        for i, w in enumerate(self.workers):
            self._send(i, {"op": "init", "config": config, "threads": threads})
        self.configured = True

    # -- jobs ------------------------------------------------------------------------------------
    def submit(self, theta: np.ndarray, version: int, batches: list, what: str) -> Ticket:
        """Start the policy's work on Θ (``version``) and ``batches`` [(x, y), ...] (torch tensors);
        ``what`` names it in errors (e.g. "device 3's work at version 12")."""
        i = min(range(len(self.workers)), key=lambda k: len(self.workers[k].busy))
        w = self.workers[i]
        if len(w.busy) >= self.window:
            self._take_in(w.busy[0])
        slot_i = next(k for k, s in enumerate(w.slots) if s.ticket is None)
        slot = w.slots[slot_i]
        theta = np.asarray(theta, np.float32)
        layout, off = [], _aligned(theta.nbytes)
        for x, y in batches:
            pair = []
            for t in (x, y):
                pair.append({"offset": off, "count": t.numel(), "shape": list(t.shape), "stride": list(t.stride()),
                             "dtype": str(t.dtype).removeprefix("torch.")})
                off = _aligned(off + t.numel() * t.element_size())
            layout.append(pair)
        out = off
        described = json.dumps(layout).encode()   # in the slot: τ batches' layouts may exceed a message
        at = _aligned(out + theta.nbytes)
        size = at + len(described)
        if slot.size < size:
            self._grow(slot, size)
        slot.mm[at:at + len(described)] = described
        np.frombuffer(slot.mm, np.float32, theta.size, 0)[:] = theta
        for (x, y), pair in zip(batches, layout):
            for t, desc in zip((x, y), pair):
                flat = t.as_strided((t.numel(),), (1,))   # storage order: the strides are shipped apart
                np.frombuffer(slot.mm, flat.numpy().dtype, t.numel(), desc["offset"])[:] = flat.numpy()
        ticket = Ticket(i, slot_i, what)
        msg = {"op": "job", "slot": slot_i, "size": slot.size, "version": int(version),
               "theta": [0, int(theta.size)], "batches": [at, len(described)], "out": out}
        self._send(i, msg, None if slot.told else slot.fd)
        slot.told, slot.ticket = True, ticket
        w.busy.append(ticket)
        self.jobs += 1
        return ticket

    def result(self, ticket: Ticket) -> tuple[np.ndarray, float]:
        """The job's values (float32) and loss; blocks until its worker has sent them."""
        if not ticket.done:
            self._take_in(ticket)
        values, ticket.values = ticket.values, None
        return values, ticket.loss

    def _take_in(self, ticket: Ticket) -> None:
        """Read ``ticket``'s worker's results, in order, up to and including ``ticket``'s."""
        w = self.workers[ticket.worker]
        t0 = time.perf_counter()
        try:
            self._read_until(w, ticket)
        finally:
            self.waited_s += time.perf_counter() - t0

    def _read_until(self, w: _Worker, ticket: Ticket) -> None:
        while not ticket.done:
            try:
                data = w.sock.recv(MAX_MESSAGE)
            except OSError as err:
                raise self._died(ticket.worker, w.busy[0], err) from None
            if not data:
                raise self._died(ticket.worker, w.busy[0])
            msg = json.loads(data)
            done = w.busy.popleft()
            slot = w.slots[msg["slot"]]
            assert slot.ticket is done, "worker results out of order"
            if "error" in msg:
                raise WorkerError(f"sim worker {ticket.worker} (pid {w.proc.pid}) failed on {done.what}:\n"
                                  f"{msg['error'].rstrip()}")
            values = self.take(msg["count"])
            values[:] = np.frombuffer(slot.mm, np.float32, msg["count"], msg["offset"])
            done.values, done.loss, done.done = values, float(msg["loss"]), True
            self.busy_s += msg["busy_s"]
            slot.ticket = None

    def _grow(self, slot: _Slot, size: int) -> None:
        if slot.mm is not None:
            slot.mm.close()
            os.close(slot.fd)
        slot.fd = os.memfd_create("edgebed-sim-slot", os.MFD_CLOEXEC)
        os.ftruncate(slot.fd, size)
        slot.mm, slot.size, slot.told = mmap.mmap(slot.fd, size), size, False

    def _send(self, i: int, msg: dict, fd: Optional[int] = None) -> None:
        w = self.workers[i]
        try:
            socket.send_fds(w.sock, [json.dumps(msg).encode()], [] if fd is None else [fd])
        except OSError as err:
            raise self._died(i, w.busy[0] if w.busy else None, err) from None

    def _died(self, i: int, ticket: Optional[Ticket], err: Optional[OSError] = None) -> WorkerError:
        w = self.workers[i]
        try:
            code = w.proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        how = ("still running, but its socket failed" if code is None else
               f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}")
        try:
            tail = w.log.read_text(errors="replace")[-2000:].rstrip()
        except OSError:
            tail = ""
        doing = f" while computing {ticket.what}" if ticket is not None else ""
        return WorkerError(f"sim worker {i} (pid {w.proc.pid}) {how}{doing}{f' ({err})' if err else ''}; the run "
                           f"can't go on without its results. Its log ({w.log}):\n{tail or '(empty)'}\n"
                           "Rerun with runtime.sim.workers: 1 to compute in the clock's own process.")

    # -- the end -----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """End every worker and wait for it (idempotent): its socket closes, then SIGKILL after GRACE_S."""
        if self.closed:
            return
        self.closed = True
        for w in self.workers:
            w.sock.close()
        for w in self.workers:
            try:
                w.proc.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            for s in w.slots:
                if s.mm is not None:
                    s.mm.close()
                    os.close(s.fd)
                    s.mm = None

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
