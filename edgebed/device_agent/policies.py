"""Device policies: what a device computes between two messages of the one agent loop.

The device state machine (``protocol.py``) sends what the policy asks for — ``PULL`` or an ``Upload``
(a push payload, compressed by the machine) — and hands every reply (Model, Ack, Sync) back to ``next``. The PS's update rule chooses the policy and
sends it in Welcome (``UpdateRule.device_policy``):

- ``gradient`` (ASGD, Comp-ASGD, AdaComp): pull Θ → one compressed gradient → push.
- ``local-steps`` (SparkNet averaging): pull Θ → τ local SGD steps → push Δ = x − Θ.
- ``dynamic`` (dynamic averaging): τ local steps per round, then report: Δ when ‖x − r‖² > δ, else an
  empty push; on Sync upload Δ (if not sent) and pull the average as the new model and reference r.
- ``elastic`` (DeepSpark's async EASGD): local steps until the accumulated loss passes the threshold
  (or a fixed ``period`` of them), then pull the center c, x ← x − e and push e = α(x − c).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from .. import wire
from ..algorithms.averaging import adaptive_exchange_due, divergence, easgd_exchange

PULL = "pull"
# elastic: exchange after this many local steps even if the accumulated loss stays below the threshold.
# Training loss on a small shard falls towards 0, so the pure rule would stop exchanging altogether; a
# device silent for long is also recorded lost (16 agents on 2 cores: 1000 steps took ~60 s, measured).
MAX_PERIOD = 100


@dataclass
class Upload:
    """A push's payload; the state machine compresses it and adds session and sequence number."""
    version: int                          # the Θ version this was computed from
    values: Optional[np.ndarray]          # None while a deferred gradient is not computed yet
    indices: Optional[np.ndarray] = None  # None: dense (the machine's compressor picks the entries)
    loss: float = math.nan
    theta: Optional[np.ndarray] = None    # set: the gradient at this Θ is still to compute (virtual clock)
    compressed: bool = False              # values/indices are already the compressor's output
    q8: Optional[tuple] = None            # with compressed: the q8 codes the compressor made


Request = Union[str, Upload]


class DevicePolicy:
    """Hooks of the device state machine. ``start`` after (re)joining the PS; ``next`` for each reply."""

    def __init__(self, trainer):
        self.trainer = trainer
        # The virtual clock sets this to compute gradients later, several devices' at once
        # (``device_agent/batched.py``); only the gradient policy has such separable work.
        self.deferred = False

    # Whether the device's compressor applies to this policy's uploads (gradients); model deltas and
    # reports go as they are.
    compressed = False
    # Whether its work on a Model is a pure function of Θ and the ``draws()`` batches it takes then (no
    # state of its own carried from one model to the next): the virtual clock's workers may compute it
    # in another process (``emulator/runtimes/sim_pool.py``).
    separable = False

    def draws(self) -> int:
        """Batches its work on one Model takes (a separable policy)."""
        raise NotImplementedError

    def start(self) -> Request:
        return PULL

    def next(self, reply: wire.Message) -> Request:
        raise NotImplementedError


class GradientPush(DevicePolicy):
    compressed = True
    separable = True

    def draws(self) -> int:
        return 1

    def next(self, reply):
        if isinstance(reply, wire.Model):
            if self.deferred:
                return Upload(reply.version, None, theta=reply.params)
            grad, loss = self.trainer.gradient(reply.params)
            return Upload(reply.version, grad, None, loss)
        return PULL


class LocalSteps(DevicePolicy):
    separable = True   # x is set to Θ first: nothing of the last round is left

    def __init__(self, trainer, local_steps: int, lr: float):
        super().__init__(trainer)
        self.steps, self.lr = local_steps, lr

    def draws(self) -> int:
        return self.steps

    def train(self) -> float:
        """τ local steps on the trainer's model; the mean batch loss."""
        return float(np.mean([self.trainer.local_step(self.lr) for _ in range(self.steps)]))

    def next(self, reply):
        if isinstance(reply, wire.Model):
            self.trainer.set_params(reply.params)
            loss = self.train()
            return Upload(reply.version, self.trainer.params() - reply.params, None, loss)
        return PULL


class DynamicLocal(LocalSteps):
    separable = False   # quiet rounds train on from the device's own model

    def __init__(self, trainer, local_steps: int, lr: float, delta: float):
        super().__init__(trainer, local_steps, lr)
        self.delta = delta
        self.reference: Optional[np.ndarray] = None
        self.version = 0
        self.violated = False
        self.uploading = False    # sent the delta a sync asked for; next Ack → pull the average

    def start(self):
        self.uploading = False
        return PULL

    def next(self, reply):
        if isinstance(reply, wire.Model):   # (new) reference: the average everyone shares
            self.reference, self.version = np.array(reply.params), reply.version
            self.trainer.set_params(self.reference)
            return self.report()
        if isinstance(reply, wire.Sync):
            if self.violated:               # our delta is in already
                return PULL
            self.uploading = True
            return Upload(self.version, self.trainer.params() - self.reference)
        if self.uploading:                  # Ack of the upload
            self.uploading = False
            return PULL
        return self.report()                # Ack: quiet round, keep training our own model

    def report(self) -> Upload:
        loss = self.train()
        x = self.trainer.params()
        self.violated = divergence(x, self.reference) > self.delta
        if self.violated:
            return Upload(self.version, x - self.reference, None, loss)
        return Upload(self.version, np.empty(0, np.float32), np.empty(0, np.uint32), loss)


class Elastic(DevicePolicy):
    def __init__(self, trainer, lr: float, moving_rate: float, loss_threshold: float, period: Optional[int] = None):
        super().__init__(trainer)
        self.lr, self.alpha, self.threshold = lr, moving_rate, loss_threshold
        self.period = period       # set: a fixed period of this many local steps (the loss is ignored)
        self.joined = False
        self.loss = math.nan

    def start(self):
        self.joined = False        # (re)start from the center
        return PULL

    def next(self, reply):
        if isinstance(reply, wire.Model):
            if not self.joined:
                self.joined = True
                self.trainer.set_params(reply.params)
                return self.train_until_due()
            center = reply.params
            x, moved = easgd_exchange(self.trainer.params(), center, self.alpha)
            self.trainer.set_params(x)
            return Upload(reply.version, (moved - center).astype(np.float32, copy=False), None, self.loss)
        return self.train_until_due()

    def train_until_due(self) -> str:
        acc, losses = 0.0, []
        for _ in range(self.period or MAX_PERIOD):
            losses.append(self.trainer.local_step(self.lr))
            if self.period is None:
                acc, due = adaptive_exchange_due(acc, losses[-1], self.threshold)
                if due:
                    break
        self.loss = float(np.mean(losses))
        return PULL


POLICIES: dict[str, type[DevicePolicy]] = {
    "gradient": GradientPush, "local-steps": LocalSteps, "dynamic": DynamicLocal, "elastic": Elastic}


def make_policy(config: Optional[dict], trainer) -> DevicePolicy:
    """The policy named in Welcome's ``policy`` section (absent: gradient), built with its parameters."""
    config = dict(config or {"name": "gradient"})
    name = config.pop("name")
    if name not in POLICIES:
        raise ValueError(f"unknown device policy {name!r}; this agent knows {sorted(POLICIES)}")
    return POLICIES[name](trainer, **config)
