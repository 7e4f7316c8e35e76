"""A virtual-clock worker: a process that computes devices' policy work (a gradient, τ local steps) ahead.

Started by the clock's pool (``emulator/runtimes/sim_pool.py``) as ``python -m
edgebed.device_agent.worker FD PARENT`` — a fresh interpreter, so nothing of the user's ``__main__`` is
imported again. It talks over the SOCK_SEQPACKET socket ``FD``; every message is one JSON object, and
the arrays live in shared memory (a memfd per slot, passed along with the job that first uses it):

    pool → worker   {"op": "init", "config": {...}, "threads": t}     once, before the first job
                    {"op": "job", "slot": s, "size": bytes, "version": v, "theta": [offset, count],
                     "batches": [[x, y], ...], "out": offset}
                     x, y: {"offset", "count", "shape", "stride", "dtype"}; "size" with a new memfd
    worker → pool   {"slot": s, "loss": float, "count": n, "offset": o, "busy_s": seconds}
                    n float32 values written at o; the job took busy_s of wall time
                    {"slot": s, "error": "text"}              the job failed; the worker goes on

The work is the device's own policy (``policies.py``) on a ``Trainer`` whose batches are the ones
shipped: the very code a device runs in the clock's process, under the same numerics profile and torch
thread count, so the result is the same bits. A job that moves torch's global random stream (dropout,
say) is refused: its result would depend on which process computed it. The worker ends when its socket
closes (the clock is done or died) and with its parent (``procs.die_with_parent``); Ctrl-C is the
engine's to handle (it has a session of its own).
"""
from __future__ import annotations

import json
import mmap
import os
import socket
import sys
import time
import traceback

MAX_MESSAGE = 1 << 20
class _Shipped:
    """Stands in for ``SharedData``: the batches come with each job (``_FedTrainer.batch``)."""

    def __init__(self, torch):
        self.dev = torch.device("cpu")
        self.x = self.y = torch.zeros(1)


def _work(config: dict):
    """The device policy of ``config`` on a trainer fed the shipped batches (built once)."""
    import numpy as np
    from ..workload import use_path
    from .policies import make_policy
    from .trainer import Trainer
    import torch

    class _FedTrainer(Trainer):
        fed: list = []

        def batch(self):
            self.steps += 1
            return self.fed.pop(0)

    use_path(config.get("model_path"))
    trainer = _FedTrainer(config["workload"], None, None, config["batch_size"], config["seed"], 0,
                          data=_Shipped(torch), index=np.zeros(1, np.int32))
    trainer.carry_buffers = bool(config.get("carry_buffers"))
    return trainer, make_policy(config.get("policy"), trainer)


def _tensor(torch, buf, desc: dict):
    """A fresh tensor with ``desc``'s shape, strides and dtype, copied from the slot (a fresh
    allocation, as the clock's own batches are)."""
    dtype = getattr(torch, desc["dtype"])
    view = torch.frombuffer(buf, dtype=dtype, count=desc["count"], offset=desc["offset"])
    out = torch.empty_strided(desc["shape"], desc["stride"], dtype=dtype)
    out.as_strided((desc["count"],), (1,)).copy_(view)
    return out


def serve(sock: socket.socket) -> None:
    import numpy as np
    from .. import wire
    trainer = policy = torch = None
    slots: dict[int, mmap.mmap] = {}
    while True:
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 1)
        if not data:
            return   # the pool closed its end
        msg = json.loads(data)
        if fds:
            old = slots.pop(msg["slot"], None)
            if old is not None:
                old.close()
            slots[msg["slot"]] = mmap.mmap(fds[0], msg["size"])
            os.close(fds[0])
        if msg["op"] == "init":
            import torch
            torch.set_num_threads(msg["threads"])
            trainer, policy = _work(msg["config"])
            continue
        slot = msg["slot"]
        t0 = time.perf_counter()
        try:
            buf = slots[slot]
            off, count = msg["theta"]
            theta = np.frombuffer(buf, np.float32, count, off)
            trainer.fed = [(_tensor(torch, buf, x), _tensor(torch, buf, y)) for x, y in msg["batches"]]
            before = torch.random.get_rng_state()
            up = policy.next(wire.Model(msg["version"], theta))
            if not torch.equal(before, torch.random.get_rng_state()):
                raise RuntimeError("the model drew from torch's global random stream (dropout, random "
                                   "augmentation): its results depend on which process computes them, so "
                                   "workers can't reproduce the clock's own; use runtime.sim.workers: 1")
            values = np.asarray(up.values, np.float32)
            start = msg["out"]
            np.frombuffer(buf, np.float32, values.size, start)[:] = values
            reply = {"slot": slot, "loss": up.loss, "count": int(values.size), "offset": start,
                     "busy_s": time.perf_counter() - t0}
        except Exception:
            reply = {"slot": slot, "error": traceback.format_exc(limit=6)}
        sock.send(json.dumps(reply).encode())


def main(argv: list[str]) -> int:
    fd, parent = int(argv[0]), int(argv[1])
    from ..procs import die_with_parent, leave_group
    die_with_parent(parent=parent)
    leave_group()   # own session, Ctrl-C ignored: the engine ends its workers itself
    from .. import numerics
    numerics.apply_from_env()   # the engine's profile, before any torch operation
    serve(socket.socket(fileno=fd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
