"""A virtual-clock worker: a process that computes devices' policy work (a gradient, τ local steps) ahead.

Started by the clock's pool (``emulator/runtimes/sim_pool.py``) as ``python -m
edgebed.device_agent.worker FD PARENT`` — a fresh interpreter, so nothing of the user's ``__main__`` is
imported again. It talks over the SOCK_SEQPACKET socket ``FD``; every message is one JSON object, and
the arrays live in shared memory (a memfd per slot, passed along with the job that first uses it):

    pool → worker   {"op": "init", "config": {...}, "threads": t}     once, before the first job
                    {"op": "job", "slot": s, "size": bytes, "version": v, "theta": [offset, count],
                     "batches": [offset, length], "out": offset}
                     batches: the JSON [[x, y], ...] in the slot, x, y: {"offset", "count", "shape",
                     "stride", "dtype"}; "size" with a new memfd
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


class DeviceWork:
    """A device policy on a trainer fed shipped batches, built once from the run's configuration; what
    a worker process (below) and a Ray actor (``emulator/runtimes/sim_ray.py``) both compute with."""

    def __init__(self, config: dict, threads: int):
        import numpy as np
        import torch
        from ..workload import use_path
        from .policies import make_policy
        from .trainer import Trainer

        class _FedTrainer(Trainer):
            fed: list = []

            def batch(self):
                self.steps += 1
                return self.fed.pop(0)

        torch.set_num_threads(threads)
        use_path(config.get("model_path"))
        self.trainer = _FedTrainer(config["workload"], None, None, config["batch_size"], config["seed"], 0,
                                   data=_Shipped(torch), index=np.zeros(1, np.int32))
        self.trainer.carry_buffers = bool(config.get("carry_buffers"))
        self.policy = make_policy(config.get("policy"), self.trainer)

    def compute(self, theta, version: int, batches: list) -> tuple:
        """The policy's upload for Θ (``version``) on ``batches`` [(x, y), ...]: (float32 values, loss)."""
        import numpy as np
        import torch
        from .. import wire
        self.trainer.fed = list(batches)
        before = torch.random.get_rng_state()
        up = self.policy.next(wire.Model(version, theta))
        if not torch.equal(before, torch.random.get_rng_state()):
            raise RuntimeError("the model drew from torch's global random stream (dropout, random "
                               "augmentation): its results depend on which process computes them, so "
                               "workers can't reproduce the clock's own; use runtime.sim.workers: 1")
        return np.asarray(up.values, np.float32), up.loss


def fresh_tensor(torch, source, desc: dict):
    """A fresh tensor with ``desc``'s shape, strides and dtype (a new allocation, as the clock's own
    batches are), its storage copied from ``source``: a buffer at ``desc["offset"]`` or a flat array."""
    dtype = getattr(torch, desc["dtype"])
    if isinstance(source, (mmap.mmap, bytes, bytearray, memoryview)):
        source = torch.frombuffer(source, dtype=dtype, count=desc["count"], offset=desc["offset"])
    else:
        source = torch.from_numpy(source)
    out = torch.empty_strided(desc["shape"], desc["stride"], dtype=dtype)
    out.as_strided((desc["count"],), (1,)).copy_(source)
    return out


def serve(sock: socket.socket) -> None:
    import numpy as np
    import torch
    work = None
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
            work = DeviceWork(msg["config"], msg["threads"])
            continue
        slot = msg["slot"]
        t0 = time.perf_counter()
        try:
            buf = slots[slot]
            off, count = msg["theta"]
            at, length = msg["batches"]
            batches = [(fresh_tensor(torch, buf, x), fresh_tensor(torch, buf, y))
                       for x, y in json.loads(buf[at:at + length])]
            values, loss = work.compute(np.frombuffer(buf, np.float32, count, off), msg["version"], batches)
            start = msg["out"]
            np.frombuffer(buf, np.float32, values.size, start)[:] = values
            reply = {"slot": slot, "loss": loss, "count": int(values.size), "offset": start,
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
