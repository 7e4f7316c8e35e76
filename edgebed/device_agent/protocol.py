"""DeviceProtocol: one device's side of the protocol as a sans-IO state machine — replies in, actions out.

    hello → Welcome → (Compute → [Wait] → Send Pull | Push)* … Stop → Bye, exit

The machine owns everything a device decides: its session, its push sequence numbers, its device
policy (``policies.py``: what it computes between two messages), its compressor (called in ``_push``,
or right after the gradient in ``receive_early``) and its think-time draws. It never sleeps, opens a
socket or reads a clock. A driver feeds it the PS's replies and carries out the actions it returns, in order:

- ``Send(msg)``: put ``msg`` on the uplink; hand the reply (if any) to ``receive``.
- ``Compute()``: call ``compute()`` (the policy's SGD steps), then ``computed()`` for what follows. A
  driver times this phase: the socket agent measures it and stretches it by the speed class's
  slowdown; the virtual clock charges ``steps × step_time × slowdown``.
- ``Wait(parts)``: think time (and the scenario's waiting time) between computing and pushing; then
  call ``waited()``.
- ``Freeze()``: fail-stop (the PS drew a crash): never send again. ``Rejoin()``: the PS forgot the
  session — say hello again (``hello(attempt + 1)``). ``Exit(code)``: the device is done.

A push the PS refuses (``bad-payload``: e.g. a gradient out of bounds at a Θ another device poisoned)
is not the device's end: it pulls Θ afresh and goes on, up to ``MAX_REFUSED`` refusals in a row; then it
exits with an error that says so.

Two drivers run it: ``agent.py`` (ZeroMQ socket, app-level link sleeps, heartbeats, rejoin) and the
virtual clock (``emulator/runtimes/sim.py``, an event heap). Both seed every random stream from
(seed, device), so the same seed makes both emit the same messages.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..compression import make_compressor
from .. import wire
from ..timing import draw_delay, wait_enabled
from .policies import PULL, Upload, make_policy


@dataclass
class Send:
    msg: wire.Message


@dataclass
class Compute:
    """Run ``DeviceProtocol.compute`` now, then ``computed``."""


@dataclass
class Wait:
    """Idle before the push: think time, then the scenario's waiting time (``timing.wait``) if on."""
    parts: tuple[float, ...]

    @property
    def seconds(self) -> float:
        return sum(self.parts)


@dataclass
class Freeze:
    pass


@dataclass
class Rejoin:
    reason: str


@dataclass
class Exit:
    code: int
    reason: str = ""


Action = Send | Compute | Wait | Freeze | Rejoin | Exit
MAX_REFUSED = 100   # pushes in a row the PS may refuse before the device gives up (each: a pull, a gradient)
AHEAD = np.empty(0, np.float32)   # an Upload's theta while ``receive_ahead``'s work is computed elsewhere


class DeviceProtocol:
    """One device. ``make_trainer(welcome_config)`` builds its ``Trainer`` at the first Welcome (the
    driver knows where the data comes from: the scenario's dataset, a Spark partition, a shared load)."""

    def __init__(self, device: int, speed_class: str, make_trainer: Callable[[wire.WelcomeConfig], object]):
        self.device = device
        self.speed_class = speed_class   # said in Hello (its bytes cross the link like any other)
        self.make_trainer = make_trainer
        self.config: Optional[wire.WelcomeConfig] = None
        self.trainer = self.policy = self.compressor = None
        self.session = ""
        self.seq = 0                       # push sequence number; kept across rejoins (the PS dedups by it)
        self.attempt = 0
        self._rng: Optional[np.random.Generator] = None   # think-time stream
        self._wait: Optional[tuple[dict, np.random.Generator]] = None   # timing.wait and its own stream
        self._reply: Optional[wire.Message] = None        # the reply the next compute() answers
        self._request = None                              # PULL or the Upload the compute produced
        self.deferred_gradients = False    # the virtual clock may compute gradients later, in batches
        self._early: Optional[int] = None  # steps of the compute done at receive_early, until arrived
        self.codec = self.pulled = None
        self.refused = 0                   # pushes refused in a row (reset by an applied one)
        self._pushed = False               # the message in flight is a push

    # -- driver entry points -------------------------------------------------------------------
    def hello(self, attempt: int) -> list[Action]:
        """(Re)join: a first hello, or a new one after the session was lost (the push in flight is dropped)."""
        self.attempt, self.session = attempt, ""
        if self.pulled is not None:
            self.pulled.reset()   # a new session starts from a full model
        return [Send(wire.Hello(self.device, self.speed_class, attempt))]

    def receive(self, reply: wire.Message) -> list[Action]:
        """The PS's reply to the last message sent."""
        if isinstance(reply, wire.Welcome):
            return self._welcome(reply)
        if isinstance(reply, wire.Stop):
            if not self.session:
                return [Exit(0, f"run over before joining: {reply.reason}")]
            return [Send(wire.Bye(self.session, "stop")), Exit(0, reply.reason)]
        if isinstance(reply, wire.Error):
            if reply.code == "unknown-session":
                return [Rejoin(reply.message)]
            if self.session == "" and self.config is not None:
                return [Exit(0, f"refused on rejoin: {reply.message}")]   # e.g. frozen: nothing left to do
            if reply.code == "bad-payload" and self._pushed:
                self.refused += 1
                if self.refused < MAX_REFUSED:   # pull Θ afresh and go on
                    return self._after(self.policy.start())
                return [Exit(1, f"PS refused {self.refused} pushes in a row (the last: {reply.message}); "
                                "the device stops")]
            return [Exit(1, f"PS refused: {reply.code}: {reply.message}")]
        if isinstance(reply, wire.Ack) and reply.applied:
            self.refused = 0
        if isinstance(reply, wire.Ack) and reply.freeze:
            return [Freeze()]
        if isinstance(reply, (wire.Model, wire.Ack, wire.Sync)):
            self._reply = self.pulled.receive(reply) if isinstance(reply, wire.Model) else reply
            return [Compute()]
        return [Exit(1, f"unexpected reply {reply.kind}")]

    def receive_early(self, reply: wire.Model) -> None:
        """Virtual clock: a Model reply, taken the moment the PS sends it (while that Θ is still the
        PS's current one), and at once what ``receive`` and ``compute`` would do at its arrival — the
        policy's work on it — and the push's compression. Until then the device keeps only what it
        will send (O(c·|Θ|) for a compressed gradient), not Θ and a dense gradient, through its
        downlink transfer, compute and think time. Its own streams (batches, compressor) are drawn in
        the same order as without, so its messages are the same bits. ``arrived`` at the arrival."""
        self._reply = self.pulled.receive(reply)
        self._early = self.compute()
        up = self._request
        if isinstance(up, Upload) and self.policy.compressed:
            s = self.compressor.compress(up.values)
            self._request = Upload(up.version, s.values, s.indices, up.loss, compressed=True, q8=s.q8)

    def receive_ahead(self, reply: wire.Model) -> tuple[wire.Model, list]:
        """Virtual clock with workers (``emulator/runtimes/sim_pool.py``): a Model reply taken when the
        PS sends it, as ``receive_early``, but the policy's work on it — a pure function of Θ and the
        batches drawn now (``DevicePolicy.separable``) — is left to the driver, which computes it in
        another process and hands the result to ``fill_ahead`` before the push. Returns the full model
        and the batches, drawn from this device's stream exactly where the work itself would draw them;
        the compressor runs at the push, in this device's own order: its messages are the same bits."""
        model = self.pulled.receive(reply)
        batches = [self.trainer.batch() for _ in range(self.policy.draws())]
        self._early = len(batches)
        self._request = Upload(model.version, None, theta=AHEAD)
        return model, batches

    def fill_ahead(self, values: np.ndarray, loss: float) -> None:
        """The result of the work ``receive_ahead`` left to the driver: the upload's values and loss."""
        up = self._request
        up.values, up.loss, up.theta = values, loss, None

    def arrived(self) -> list[Action]:
        """The reply taken by ``receive_early`` reached the device: its compute phase (``compute``
        returns the steps already taken)."""
        return [Compute()]

    def compute(self) -> int:
        """The policy's work on the last reply; returns the number of SGD steps it took."""
        if self._early is not None:
            steps, self._early = self._early, None
            return steps
        before = self.trainer.steps
        self._request = self.policy.next(self._reply)
        self._reply = None
        deferred = isinstance(self._request, Upload) and self._request.theta is not None
        return self.trainer.steps - before + int(deferred)

    def computed(self) -> list[Action]:
        """After the compute phase: pull now, or think (``Wait``) and then push."""
        return self._after(self._request)

    def waited(self) -> list[Action]:
        return [Send(self._push(self._request))]

    @property
    def entries(self) -> int:
        """Entries of the flat vector this device exchanges with the PS (0 before its Welcome)."""
        return sum(layer.size for layer in self.trainer.layers) if self.trainer is not None else 0

    @property
    def deferred_upload(self) -> Optional[Upload]:
        """The push payload whose gradient the driver still has to compute (deferred mode), else None."""
        up = self._request
        return up if isinstance(up, Upload) and up.theta is not None else None

    # -- internals -----------------------------------------------------------------------------
    def _welcome(self, msg: wire.Welcome) -> list[Action]:
        if self.config is None:
            cfg = self.config = wire.WelcomeConfig.from_dict(msg.config)
            self.trainer = self.make_trainer(cfg)
            self.trainer.carry_buffers = cfg.buffers == "average"   # statistics in Θ (models.py)
            algo = cfg.algorithm
            from ..compression.downlink import PulledModel
            from ..scenario import CompressionSpec
            comp = CompressionSpec.model_validate(cfg.compression or {})
            # The one compressor object of this device: selection, q8, error feedback (its residual
            # stays here between pushes and across rejoins).
            self.compressor = make_compressor(cfg.compressor, algo.get("c", 1.0), self.trainer.layers,
                                              comp.error_feedback, comp.momentum, comp.quantize,
                                              np.random.default_rng([cfg.seed, self.device, 0x9A8]))
            self.codec = comp.push_codec()                 # None: wire version 1
            self.pulled = PulledModel(keep=comp.pull_delta)   # compressed pulls → the full Θ
            self.policy = make_policy(cfg.policy, self.trainer)
            self.policy.deferred = self.deferred_gradients
            self._rng = np.random.default_rng([cfg.seed, self.device, 3])
            wait = (cfg.timing or {}).get("wait")
            if wait_enabled(wait):   # its own stream: think times stay as they were
                self._wait = (wait, np.random.default_rng([cfg.seed, self.device, 5]))
        self.session = msg.session
        return self._after(self.policy.start())

    def _after(self, request) -> list[Action]:
        self._request, self._pushed = request, False
        if request == PULL:
            return [Send(wire.Pull(self.session))]
        parts = (draw_delay(self.config.speed_class["think_time"], self._rng),)
        if self._wait is not None:
            parts += (draw_delay(*self._wait),)
        return [Wait(parts)]

    def _push(self, up: Upload) -> wire.Push:
        if up.theta is not None:
            raise RuntimeError(f"device {self.device}: the deferred gradient at version {up.version} was "
                               "never computed (the driver must fill it before the push)")
        values, indices, q8 = up.values, up.indices, up.q8
        if self.policy.compressed and not up.compressed:   # (receive_early compressed it already)
            sparse = self.compressor.compress(values)
            values, indices, q8 = sparse.values, sparse.indices, sparse.q8
        msg = wire.Push(self.session, self.seq, up.version, values, indices,
                        up.loss if up.loss is not None else math.nan, codec=self.codec, q8=q8)
        self.seq += 1
        self._pushed = True
        return msg
