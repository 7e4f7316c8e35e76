"""UpdateRule: how the PS applies one push to Θ. One small class per algorithm behind this interface."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Optional, Sequence

import numpy as np


@dataclass
class Applied:
    """What applying one push did, for the per-update record."""
    staleness: int                  # global τ = version at receipt − version pulled
    sigma_mean: float = math.nan    # per-parameter staleness over the sent entries (AdaComp)
    sigma_max: float = math.nan


class UpdateRule(ABC):
    """Owns nothing but its bookkeeping; Θ belongs to the PS and is updated in place.

    Called by ``ParameterServer`` only: ``on_pull`` when a device fetches Θ at ``version``,
    ``apply`` for each push, ``forget`` when a device is gone for good."""

    name: ClassVar[str]
    compressor: ClassVar[str] = "dense"   # what devices send: dense | top-c | top-c-per-layer

    def __init__(self, theta: np.ndarray, layers: Sequence, lr: float, c: float = 1.0):
        self.theta = theta
        self.layers = layers
        self.lr = lr
        self.c = c

    def on_pull(self, device: int, version: int) -> None:
        pass

    @abstractmethod
    def apply(self, device: int, staleness: int, values: np.ndarray,
              indices: Optional[np.ndarray]) -> Applied:
        """Apply one (possibly sparse) gradient computed from a Θ that is ``staleness`` updates old."""

    def forget(self, device: int) -> None:
        pass

    def state_dict(self) -> dict[str, np.ndarray]:
        """Arrays to checkpoint besides Θ (empty for stateless rules)."""
        return {}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        pass
