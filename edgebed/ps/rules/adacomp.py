"""AdaComp (Hardy et al. 2017): per-layer top-c from devices; per-parameter staleness σ_k, α_k = α/σ_k.

σ_k counts the updates applied to Θ_k between the device's pull and its push. We keep a global
per-parameter update counter and a snapshot of it per outstanding pull, so σ for a push costs
O(c·|Θ|) whatever the number of workers — the original history scan was O(d·c·|Θ|·log d) and
counted σ = 0 as 1 in some cases (here σ = 0 gives α exactly).
"""
from __future__ import annotations

import numpy as np

from ..aggregate import adacomp_apply, lr_table
from ...algorithms.params import AdaCompParams
from .base import Applied, UpdateRule


class AdaComp(UpdateRule):
    Params = AdaCompParams

    def __init__(self, theta, lr):
        super().__init__(theta, lr)
        self.counts = np.zeros(theta.size, dtype=np.uint32)   # updates applied to each Θ_k
        self.snapshots: dict[int, np.ndarray] = {}            # device → counts at its last pull
        self._lr_table = lr_table(lr)                           # α/max(σ, 1) for the small σ

    def on_pull(self, device, version):
        self.snapshots[device] = self.counts.copy()

    def apply(self, device, staleness, values, indices):
        # Without a snapshot (no pull on record, e.g. after a restart): the global τ for every entry.
        total, top = adacomp_apply(self.theta, self.counts, self.snapshots.get(device), indices, values,
                                   self.lr, staleness, self._lr_table)
        n = values.size
        return Applied(staleness, total / n if n else 0.0, float(top))

    def forget(self, device):
        self.snapshots.pop(device, None)

    def state_dict(self):
        return {"counts": self.counts.copy()}

    def load_state_dict(self, state):
        self.counts[:] = state["counts"]
