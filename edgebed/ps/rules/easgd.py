"""Asynchronous elastic averaging SGD with DeepSpark's adaptive period (Zhang et al. 2015; Kim et al. 2016).

Θ is the center variable. A device trains its own model x and, whenever the loss it accumulated since
its last exchange passes a threshold, pulls the center c, moves x ← x − e and pushes the elastic
difference e = α(x − c); the PS moves the center the other way, c ← c + e (``averaging.easgd_exchange``
split across the wire). No staleness damping: the elastic force itself bounds a stale worker's pull.
"""
from __future__ import annotations

from ...algorithms.averaging import add_delta
from ...algorithms.params import EASGDParams
from .base import Applied, UpdateRule


class EASGD(UpdateRule):
    Params = EASGDParams

    def __init__(self, theta, lr):
        super().__init__(theta, lr)
        self.exchanges = 0

    def apply(self, device, staleness, values, indices):
        add_delta(self.theta, values, indices)
        self.exchanges += 1
        return Applied(staleness)

    def stats(self):
        return {"exchanges": self.exchanges}
