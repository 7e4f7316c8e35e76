"""The socket driver of the device state machine (``protocol.py``): ZeroMQ, link sleeps, heartbeats, rejoin.

Every socket runtime runs it (a process, a container, a Spark task); the virtual clock drives the same
machine from its event heap. The machine decides what to send and compute; this driver carries it out
in real time: each message crosses the emulated app-level link (``link.py``), the compute phase is
measured and stretched by the speed class's slowdown, waits send heartbeats, and a lost PS is
re-joined with a new hello. Everything about the run comes from the PS's Welcome.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from typing import Callable, Optional

import numpy as np
import zmq

from .. import wire
from .link import AppLink
from .pacing import Pacer
from .protocol import Compute, DeviceProtocol, Exit, Freeze, Rejoin, Send, Wait


class PSUnreachable(RuntimeError):
    pass


class _Rejoin(Exception):
    """The PS went away or forgot our session (restart): say hello again with attempt+1.
    ``answered``: the PS replied on this connection (so it can carry the hello)."""

    def __init__(self, reason: str, answered: bool = False):
        super().__init__(reason)
        self.answered = answered


CLASS_ENV = "EDGEBED_CLASS"   # the device's speed-class name, set by the runtime (AgentSpec.environment)
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
        # Bytes a reply may have: before the Welcome names the model, no message carries Θ; then
        # the model's cap (``SocketDriver.bound``), so a model of any size is read and no larger one.
        self.max_bytes = wire.message_cap(0)

    def send(self, msg: wire.Message) -> int:
        frames = wire.encode(msg)
        self.sock.send_multipart(frames, copy=False)
        return wire.frames_nbytes(frames)

    def recv(self) -> tuple[wire.Message, int]:
        if not self.sock.poll(int(self.timeout * 1000)):
            raise PSUnreachable(f"no reply from the PS at {self.address} within {self.timeout:.0f} s")
        frames = self.sock.recv_multipart(copy=False)
        body = [f.buffer for f in frames]
        nbytes = wire.frames_nbytes(body)
        return wire.decode(body, self.max_bytes, nbytes), nbytes

    def close(self) -> None:
        self.sock.close()


def _block_forever() -> None:
    """Fail-stop without an external freezer: never send again (the runtime ends us later)."""
    threading.Event().wait()


def _join(ps_address: str, machine, attempt: int, timeout: float, configure_socket,
          give_up_after: float, channel: Optional[Channel] = None) -> tuple[Channel, wire.Message, int]:
    """Hello until the PS answers (a fresh socket per try, so a late reply can't be mistaken for a
    new one); each retry counts as a new attempt. Raises PSUnreachable after ``give_up_after`` s.
    ``channel``: a connection the PS just answered on (nothing outstanding), tried first — a new one
    may be refused while the PS has its maximum of connections (ps/gate.py)."""
    deadline = time.monotonic() + give_up_after
    while True:
        ch, channel = channel or Channel(ps_address, timeout, configure_socket=configure_socket), None
        try:
            (hello,) = machine.hello(attempt)
            ch.send(hello.msg)
            reply, _ = ch.recv()
            return ch, reply, attempt
        except PSUnreachable:
            ch.sock.setsockopt(zmq.LINGER, 0)   # drop the unanswered hello
            ch.close()
            if time.monotonic() >= deadline:
                raise
            attempt += 1


def _exchange(ch: Channel, msg: wire.Message, up, down, pacer=None) -> wire.Message:
    """One request/reply through the emulated link; PS gone → _Rejoin."""
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

    ``data=(x, y)`` (samples as the data set stores them, labels [N]) trains on that shard instead of loading the scenario's
    dataset (Spark tasks pass their partition). ``freezer`` is called on a fail-stop crash the runtime
    did not enforce itself (default: block forever). If the PS stops answering for ``timeout`` s
    (env EDGEBED_PS_TIMEOUT, default 60) or forgets the session (restarted from a checkpoint), the
    device says hello again with attempt+1 for up to EDGEBED_RECONNECT_FOR s (default 300) before
    giving up; the push in flight is dropped. ``configure_socket`` defaults to CURVE client keys
    when EDGEBED_CURVE_KEY names a key file (secure mode, ``wire/auth.py``)."""
    if attempt is None:
        attempt = int(os.environ.get("EDGEBED_ATTEMPT", "0"))
    timeout = timeout or float(os.environ.get("EDGEBED_PS_TIMEOUT", "60"))
    give_up_after = float(os.environ.get("EDGEBED_RECONNECT_FOR", "300"))
    if configure_socket is None:
        from ..wire.auth import client_from_env
        configure_socket = client_from_env()
    from .. import numerics
    numerics.apply_from_env()   # the engine's profile (EDGEBED_NUMERICS), before torch runs here
    import torch
    torch.set_num_threads(1)

    def make_trainer(cfg: wire.WelcomeConfig):
        # a runtime's own choice (a Spark task's GPU), else the scenario's device (Welcome), else the CPU
        return trainer_for(cfg, device, data, torch_device or os.environ.get("EDGEBED_TORCH_DEVICE")
                           or cfg.torch_device or "cpu")

    machine = DeviceProtocol(device, os.environ.get(CLASS_ENV, ""), make_trainer)
    join = functools.partial(_join, ps_address, machine, timeout=timeout, configure_socket=configure_socket,
                             give_up_after=give_up_after)
    return SocketDriver(machine, join, attempt, freezer).run()


class SocketDriver:
    """Carries out a device's protocol actions in real time over its ZeroMQ socket: the sans-IO
    ``DeviceProtocol`` decides, this sends, receives, sleeps and computes. Owns the socket, the
    app-level links and the pacer (made at the first send, from the Welcome); one thread."""

    def __init__(self, machine, join: Callable, attempt: int, freezer: Optional[Callable[[], None]] = None):
        self.machine, self.join, self.freezer = machine, join, freezer
        self.ch, self.reply, self.attempt = join(attempt)
        self.up = self.down = self.pacer = None     # made at the first send (``_link_up``)

    def bound(self) -> None:
        """Let the channel read models of the machine's size (once its Welcome built the trainer)."""
        if self.machine.trainer is not None:
            self.ch.max_bytes = wire.message_cap(self.machine.entries)

    def run(self) -> int:
        """Until the PS says stop (0) or the machine exits with an error (raises)."""
        try:
            actions = self.machine.receive(self.reply)
            self.bound()
            while actions:
                action = actions.pop(0)
                if isinstance(action, Freeze):
                    (self.freezer or _block_forever)()
                    return 0
                if isinstance(action, Exit):
                    if action.code:
                        raise RuntimeError(f"device {self.machine.device}: {action.reason}")
                    return 0
                try:
                    actions += self.carry_out(action)
                except _Rejoin as why:
                    actions = self.rejoin(why)
            return 0
        finally:
            self.ch.close()

    def rejoin(self, why: "_Rejoin") -> list:
        """Hello again with attempt + 1; the connection is kept when the PS answered (unknown session)."""
        if not why.answered:
            self.ch.close()
        self.ch, self.reply, self.attempt = self.join(self.attempt + 1, channel=self.ch if why.answered else None)
        actions = self.machine.receive(self.reply)
        self.bound()
        return actions

    def _link_up(self) -> None:
        """The app-level links this runtime left to the agent and the pacing, from the Welcome."""
        cfg, device = self.machine.config, self.machine.device
        self.up, self.down = (AppLink.from_config(cfg.app_link[d], seed=[cfg.seed, device, i])
                              for i, d in ((1, "uplink"), (2, "downlink")))
        self.pacer = Pacer.from_config(cfg.timing or {}, cfg.speed_class)
        if self.pacer is not None:      # link transfers are phases of the paced schedule too
            self.up.sleep = self.down.sleep = self.pacer.sleep

    def carry_out(self, action) -> list:
        """One action of the machine, in real time; returns the machine's next actions."""
        machine, pacer = self.machine, self.pacer
        if isinstance(action, Send):
            if self.up is None:
                self._link_up()
                pacer = self.pacer
            if isinstance(action.msg, wire.Bye):   # no reply; the socket's linger delivers it
                reason = action.msg.reason if pacer is None else pacer.bye_reason(action.msg.reason)
                self.ch.send(wire.Bye(action.msg.session, reason))
                return []
            return machine.receive(_exchange(self.ch, action.msg, self.up, self.down, pacer))
        if isinstance(action, Compute):
            t0 = time.perf_counter()
            steps = machine.compute()
            compute = time.perf_counter() - t0
            slowdown = machine.config.speed_class["slowdown"]
            if pacer is not None:   # the compute phase lasts its budget, never less
                if steps:
                    _idle(pacer.computed(compute, steps), self.ch, machine.session)
            elif slowdown > 1.0:   # a slow class computes longer
                _idle((slowdown - 1.0) * compute, self.ch, machine.session)
            return machine.computed()
        if isinstance(action, Wait):   # think time (+ the scenario's waiting time) before a push
            _idle(pacer.until(action.seconds) if pacer is not None else action.seconds, self.ch, machine.session)
            return machine.waited()
        if isinstance(action, Rejoin):
            raise _Rejoin(action.reason, answered=True)
        raise AssertionError(f"unhandled {action}")


def trainer_for(cfg: wire.WelcomeConfig, device: int, data=None, torch_device: str = "cpu"):
    """The device's Trainer from its Welcome config; ``data=(x, y)`` instead of the scenario's shard."""
    from ..data import Partition, load_dataset
    from ..scenario import DatasetSpec
    from ..workload import use_path
    from .trainer import Trainer
    use_path(cfg.model_path)
    seed, dataset = cfg.seed, cfg.dataset
    if data is None:
        spec = DatasetSpec.model_validate(dataset)
        if spec.format != "idx":   # labels first, then only this device's rows (data/scenario_set.py)
            from ..data import labels_and_users
            from ..data.scenario_set import formatted_shard
            y, users = labels_and_users(spec)
            data = formatted_shard(spec, Partition.for_spec(y, cfg.n_devices, dataset, seed, users)[device])
        else:
            ds = load_dataset(spec, seed)
            shard = Partition.for_spec(ds.train_y, cfg.n_devices, dataset, seed, ds.users)[device]
            data = (ds.train_x[shard], ds.train_y[shard])
    return Trainer(cfg.workload, data[0], data[1], cfg.algorithm["batch_size"], seed, device, torch_device)
