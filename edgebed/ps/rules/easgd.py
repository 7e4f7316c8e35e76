"""Asynchronous elastic averaging SGD with DeepSpark's adaptive period (Zhang et al. 2015; Kim et al. 2016).

Θ is the center variable. A device trains its own model x and, whenever the loss it accumulated since
its last exchange passes a threshold, pulls the center c, moves x ← x − e and pushes the elastic
difference e = α(x − c); the PS moves the center the other way, c ← c + e (``averaging.easgd_exchange``
split across the wire). No staleness damping: the elastic force itself bounds a stale worker's pull.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..averaging import add_delta
from .base import AlgorithmParams, Applied, UpdateRule


class EASGDParams(AlgorithmParams):
    name: Literal["easgd"] = "easgd"
    moving_rate: float = Field(0.1, gt=0, lt=1, title="moving rate", description="the moving rate α "
                               "of the elastic exchange, in (0, 1)")
    loss_threshold: float = Field(5.0, gt=0, title="loss threshold", description="training loss a "
                                  "device accumulates before it exchanges with the center: DeepSpark's "
                                  "adaptive period")


class EASGD(UpdateRule):
    Params = EASGDParams
    policy = "elastic"

    def __init__(self, theta, lr):
        super().__init__(theta, lr)
        self.exchanges = 0

    def apply(self, device, staleness, values, indices):
        add_delta(self.theta, values, indices)
        self.exchanges += 1
        return Applied(staleness)

    def stats(self):
        return {"exchanges": self.exchanges}
