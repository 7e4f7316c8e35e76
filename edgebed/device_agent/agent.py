"""The device agent loop: hello → (pull Θ → SGD step on its shard → compress → push)* → bye.

This is the only agent loop; every runtime runs it (a process, a container, a Spark task). It learns
everything about the run from the PS's Welcome: dataset and partition, model, algorithm, its speed
class (compute slowdown, think time) and which link properties it must emulate itself. What it computes
between messages is its device policy (``policies.py``): one gradient per pull by default, local SGD
steps for the model-averaging and EASGD rules.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Optional

import numpy as np
import zmq

from ..ps import wire
from ..timing import draw_delay as _think


class PSUnreachable(RuntimeError):
    pass


class _Rejoin(Exception):
    """The PS went away or forgot our session (restart): say hello again with attempt+1."""


HEARTBEAT_EVERY = 10.0   # seconds: an idle device says it is alive this often (the PS's lost_after is larger)


class Channel:
    """Request/reply over a DEALER socket; ``request`` returns the decoded reply or raises."""

    def __init__(self, address: str, timeout: float = 60.0, context: Optional[zmq.Context] = None,
                 configure_socket=None):
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 1000)
        if configure_socket:
            configure_socket(self.sock)   # e.g. CURVE client keys
        self.sock.connect(address)
        self.timeout = timeout
        self.address = address

    def send(self, msg: wire.Message) -> int:
        frames = wire.encode(msg)
        self.sock.send_multipart(frames, copy=False)
        return wire.frames_nbytes(frames)

    def recv(self) -> tuple[wire.Message, int]:
        if not self.sock.poll(int(self.timeout * 1000)):
            raise PSUnreachable(f"no reply from the PS at {self.address} within {self.timeout:.0f} s")
        frames = self.sock.recv_multipart(copy=False)
        body = [f.buffer for f in frames]
        return wire.decode(body), wire.frames_nbytes(body)

    def close(self) -> None:
        self.sock.close()


def _block_forever() -> None:
    """Fail-stop without an external freezer: never send again (the runtime ends us later)."""
    threading.Event().wait()


def _join(ps_address: str, device: int, attempt: int, timeout: float, configure_socket,
          give_up_after: float) -> tuple[Channel, wire.Message, int]:
    """Hello until the PS answers (a fresh socket per try, so a late reply can't be mistaken for a
    new one); each retry counts as a new attempt. Raises PSUnreachable after ``give_up_after`` s."""
    deadline = time.monotonic() + give_up_after
    while True:
        ch = Channel(ps_address, timeout, configure_socket=configure_socket)
        try:
            ch.send(wire.Hello(device, os.environ.get("EDGEBED_CLASS", ""), attempt))
            reply, _ = ch.recv()
            return ch, reply, attempt
        except PSUnreachable:
            ch.sock.setsockopt(zmq.LINGER, 0)   # drop the unanswered hello
            ch.close()
            if time.monotonic() >= deadline:
                raise
            attempt += 1


def _exchange(ch: Channel, msg: wire.Message, up, down, pacer=None) -> wire.Message:
    """One request/reply through the emulated link; PS gone or session forgotten → _Rejoin."""
    sent_at = pacer.deadline if pacer is not None else 0.0
    sent = ch.send(msg)
    up.traverse(sent)
    try:
        reply, nbytes = ch.recv()
    except PSUnreachable as err:
        raise _Rejoin(str(err)) from None
    if pacer is not None:
        pacer.replied(sent_at, sent, nbytes)
    down.traverse(nbytes)
    if isinstance(reply, wire.Error) and reply.code == "unknown-session":
        raise _Rejoin(reply.message)
    return reply


def _idle(seconds: float, ch: Channel, session: str) -> None:
    """Sleep ``seconds``, sending a Heartbeat every HEARTBEAT_EVERY s so the PS doesn't record us lost."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, HEARTBEAT_EVERY))
        if end - time.monotonic() > 0.5:
            ch.send(wire.Heartbeat(session))
            try:
                ch.recv()
            except PSUnreachable as err:
                raise _Rejoin(str(err)) from None


def run_agent(ps_address: str, device: int, attempt: Optional[int] = None,
              data: Optional[tuple[np.ndarray, np.ndarray]] = None,
              freezer: Optional[Callable[[], None]] = None, torch_device: Optional[str] = None,
              timeout: Optional[float] = None, configure_socket=None) -> int:
    """Run one device until the PS says stop. Returns 0 on a normal end.

    ``data=(x uint8 [N,28,28], y uint8 [N])`` trains on that shard instead of loading the scenario's
    dataset (Spark tasks pass their partition). ``freezer`` is called on a fail-stop crash the runtime
    did not enforce itself (default: block forever). If the PS stops answering for ``timeout`` s
    (env EDGEBED_PS_TIMEOUT, default 60) or forgets the session (restarted from a checkpoint), the
    device says hello again with attempt+1 for up to EDGEBED_RECONNECT_FOR s (default 300) before
    giving up; the push in flight is dropped. ``configure_socket`` defaults to CURVE client keys
    when EDGEBED_CURVE_KEY names a key file (secure mode, ``ps/auth.py``)."""
    if attempt is None:
        attempt = int(os.environ.get("EDGEBED_ATTEMPT", "0"))
    timeout = timeout or float(os.environ.get("EDGEBED_PS_TIMEOUT", "60"))
    give_up_after = float(os.environ.get("EDGEBED_RECONNECT_FOR", "300"))
    if configure_socket is None:
        from ..ps.auth import client_from_env
        configure_socket = client_from_env()
    import torch
    torch.set_num_threads(1)
    from ..compression.downlink import PulledModel
    from ..data import load_dataset, partition
    from ..scenario import CompressionSpec, DatasetSpec
    from .link import AppLink
    from .pacing import Pacer
    from .policies import PULL, make_policy
    from .trainer import Trainer

    ch, welcome, attempt = _join(ps_address, device, attempt, timeout, configure_socket, give_up_after)
    try:
        if isinstance(welcome, wire.Stop):
            return 0
        if not isinstance(welcome, wire.Welcome):
            raise RuntimeError(f"PS refused hello: {welcome}")
        cfg, session = welcome.config, welcome.session
        seed = cfg["seed"]
        if data is None:
            ds = load_dataset(DatasetSpec.model_validate(cfg["dataset"]), seed)
            shard = partition(ds.train_y, cfg["n_devices"], cfg["dataset"]["partition"], seed,
                              cfg["dataset"]["labels_per_worker"])[device]
            data = (ds.train_x[shard], ds.train_y[shard])
        algo = cfg["algorithm"]
        compression = CompressionSpec.model_validate(cfg.get("compression", {}))
        trainer = Trainer(cfg["model"], data[0], data[1], algo["batch_size"], cfg["compressor"], algo["c"],
                          seed, device, torch_device or os.environ.get("EDGEBED_TORCH_DEVICE", "cpu"),
                          compression.model_dump())
        codec, pulled = compression.push_codec(), PulledModel(keep=compression.pull_delta)
        klass = cfg["speed_class"]
        up = AppLink.from_config(cfg["app_link"]["uplink"], seed=[seed, device, 1])
        down = AppLink.from_config(cfg["app_link"]["downlink"], seed=[seed, device, 2])
        rng = np.random.default_rng([seed, device, 3])
        timing = cfg.get("timing") or {}
        wait_rng = np.random.default_rng([seed, device, 5])   # its own stream: think times stay as they were
        pacer = Pacer.from_config(timing, klass)
        if pacer is not None:      # link transfers are phases of the paced schedule too
            up.sleep = down.sleep = pacer.sleep
        policy = make_policy(cfg.get("policy"), trainer)
        seq, request, compute = 0, policy.start(), 0.0
        while True:
            try:
                if request == PULL:
                    msg = wire.Pull(session)
                else:   # a slow class computes longer, then thinks (and waits), before each push
                    idle = _think(klass["think_time"], rng) + _think(timing.get("wait", {}), wait_rng)
                    if pacer is None:
                        _idle((klass["slowdown"] - 1.0) * compute + idle, ch, session)
                    else:
                        _idle(pacer.until(idle), ch, session)
                    msg = wire.Push(session, seq, request.version, request.values, request.indices, request.loss,
                                    codec=codec, q8=request.q8)
                    seq += 1
                reply = _exchange(ch, msg, up, down, pacer)
            except _Rejoin:
                ch.close()
                ch, welcome, attempt = _join(ps_address, device, attempt + 1, timeout, configure_socket,
                                             give_up_after)
                if not isinstance(welcome, wire.Welcome):
                    return 0   # Stop (run over) or refused (e.g. frozen): nothing left to do
                session, request, compute = welcome.session, policy.start(), 0.0
                pulled.reset()   # the new session starts from a full model
                continue
            if isinstance(reply, wire.Stop):
                break
            if isinstance(reply, wire.Ack) and reply.freeze:
                (freezer or _block_forever)()
                return 0
            if not isinstance(reply, (wire.Model, wire.Ack, wire.Sync)):
                raise RuntimeError(f"{msg.kind} refused: {reply}")
            if isinstance(reply, wire.Model):
                reply = pulled.receive(reply)   # compressed pulls: f16/bf16 or a delta → the full Θ
            t0, steps0 = time.perf_counter(), trainer.steps
            request = policy.next(reply)
            compute = time.perf_counter() - t0
            if pacer is not None:   # the compute phase lasts its budget, never less
                if trainer.steps > steps0:
                    _idle(pacer.computed(compute, trainer.steps - steps0), ch, session)
            elif request == PULL and klass["slowdown"] > 1.0:
                _idle((klass["slowdown"] - 1.0) * compute, ch, session)   # local steps before a pull (EASGD)
        ch.send(wire.Bye(session, "stop" if pacer is None else pacer.bye_reason("stop")))
        return 0
    finally:
        ch.close()
