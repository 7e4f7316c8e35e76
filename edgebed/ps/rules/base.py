"""UpdateRule: how the PS applies one push to Θ. One small class per algorithm behind this interface."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

import numpy as np

from ...algorithms import ALGORITHMS, AlgorithmParams


@dataclass
class Applied:
    """What applying one push did, for the per-update record."""
    staleness: int                  # global τ = version at receipt − version pulled
    sigma_mean: float = math.nan    # per-parameter staleness over the sent entries (AdaComp)
    sigma_max: float = math.nan


class UpdateRule(ABC):
    """Owns nothing but its bookkeeping; Θ belongs to the PS and is updated in place.

    Called by ``ParameterServer`` only: ``on_pull`` when a device fetches Θ at ``version``,
    ``apply`` for each push, ``forget`` when a device is gone for good.

    Round-based rules (model averaging) also answer ``ready``: False holds the PS's reply to a device
    until the round closes; the PS asks again after every push, departure and tick, and sends the held
    reply then. ``waiting_for`` names the devices a round still waits for, so the PS can close it
    without one that went silent."""

    Params: ClassVar[type[AlgorithmParams]]   # the scenario's algorithm section for this rule
    # Set below from the algorithm registry (``edgebed.algorithms``), keyed by its Params' name:
    name: ClassVar[str]                       # the registry key
    compressor: ClassVar[str] = "dense"       # what devices send: dense | top-c | top-c-per-layer
    policy: ClassVar[str] = "gradient"        # what devices do between messages (device_agent/policies.py)
    empty_push_is_report: ClassVar[bool] = False   # True: a 0-entry push means something (PS applies it)
    # A compiled ``apply`` for the PS's short path, where the rule has one: ``compiled_step(rule, device,
    # staleness, values, indices, raw)`` → (σ mean, σ max) having applied the push, or None having changed nothing
    # (then the PS calls ``apply``). raw False: values and indices are ``apply``'s arrays; True: the push's
    # frames as received, checked (the wire's little-endian float32 and uint32). A C function (it does
    # not bind as a method). Only used while the compiled kernels are on (``aggregate._fast``).
    compiled_step: ClassVar[Optional[Callable]] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "Params" in vars(cls):
            cls.name = cls.Params.model_fields["name"].default
            algorithm = ALGORITHMS[cls.name]
            cls.compressor, cls.policy = algorithm.compressor, algorithm.policy

    @classmethod
    def uses_c(cls) -> bool:
        """Whether the compression ratio c means anything: only for a compressing rule (whose
        ``Params`` are ``CompressingParams``; tests/contract/test_update_rules.py checks both agree)."""
        return cls.compressor != "dense"

    @classmethod
    def device_policy(cls, algorithm: AlgorithmParams) -> dict:
        """The device policy and its arguments (α and the rule's own parameters, from the scenario's
        ``algorithm`` section); sent in Welcome."""
        if cls.policy == "gradient":
            return {"name": "gradient"}
        return {"name": cls.policy, "lr": algorithm.lr, **algorithm.own()}

    def __init__(self, theta: np.ndarray, lr: float):
        self.theta = theta
        self.lr = lr

    def on_pull(self, device: int, version: int) -> None:
        pass

    def step_scale(self) -> float:
        """How far Θ moves per unit of a pushed value, at most: α for gradient rules (α/τ ≤ α), 1 for
        rules whose pushes are deltas or models. The PS bounds pushed values with it."""
        return self.lr if self.policy == "gradient" else 1.0

    def push_sign(self) -> float:
        """How a unit of a pushed value moves Θ: −α for gradient rules (Θ ← Θ − α·v), +1 for rules whose
        pushes are deltas or models. The PS bounds running statistics with it (ps/statistics.py)."""
        return -self.step_scale() if self.policy == "gradient" else 1.0

    @abstractmethod
    def apply(self, device: int, staleness: int, values: np.ndarray,
              indices: Optional[np.ndarray]) -> Applied:
        """Apply one (possibly sparse) gradient computed from a Θ that is ``staleness`` updates old."""

    def forget(self, device: int) -> None:
        pass

    def ready(self, device: int, request: str) -> bool:
        """May the PS answer ``device``'s ``request`` ("pull" or "push") now? False: hold the reply."""
        return True

    def sync_due(self, device: int) -> bool:
        """For a push reply: True when the device's round ends in a synchronisation (wire.Sync)."""
        return False

    def waiting_for(self) -> set[int]:
        """Devices the current round still needs a message from (empty: the rule has no rounds)."""
        return set()

    def stats(self) -> dict:
        """Counters for the run summary (e.g. rounds and synchronisations)."""
        return {}

    def state_dict(self) -> dict[str, np.ndarray]:
        """Arrays to checkpoint besides Θ (empty for stateless rules)."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        pass
