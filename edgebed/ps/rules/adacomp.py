"""AdaComp (Hardy et al. 2017): per-layer top-c from devices; per-parameter staleness σ_k, α_k = α/σ_k.

σ_k counts the updates applied to Θ_k between the device's pull and its push. We keep a global
per-parameter update counter, and for each outstanding pull the stamp it was made at: σ_k is the
number of later updates that touched Θ_k, found in a log of the entries touched since the oldest
outstanding pull (``ps/staleness.py``) in O(c·|Θ|·log) per push and O(c·|Θ|) memory per device —
where a snapshot of the counter per pull cost |Θ| each. The original history scan was
O(d·c·|Θ|·log d) and counted σ = 0 as 1 in some cases (here σ = 0 gives α exactly).
"""
from __future__ import annotations

import numpy as np

from .. import aggregate
from ..aggregate import adacomp_apply, lr_table
from ...algorithms.params import AdaCompParams
from ..staleness import PullRecords
from .base import Applied, UpdateRule


class AdaComp(UpdateRule):
    Params = AdaCompParams

    def __init__(self, theta, lr):
        super().__init__(theta, lr)
        # updates applied to each Θ_k; written now, as the log's heads (staleness.TouchLog), so the
        # first push does not fault in its pages
        self.counts = np.full(theta.size, 0, dtype=np.uint32)
        self.pulls = PullRecords(theta.size)                    # when each outstanding pull was made
        self._lr_table = lr_table(lr)                           # α/max(σ, 1) for the small σ

    def on_pull(self, device, version):
        self.pulls.pull(device)

    # Compiled: _fastpush.adacomp_step, which follows _apply_py step for step (it hands back only
    # arrays its passes don't take); tests/unit/ps/test_adacomp_step.py holds them together.
    compiled_step = getattr(aggregate._fast, "adacomp_step", None)

    def apply(self, device, staleness, values, indices):
        step = self.compiled_step   # a C function: not bound to the rule, which it takes first
        if step is not None and aggregate._fast is not None:
            done = step(self, device, staleness, values, indices, False)
            if done is not None:
                return Applied(staleness, *done)
        return self._apply_py(device, staleness, values, indices)

    def _apply_py(self, device, staleness, values, indices):
        """``apply`` in Python: the specification of ``compiled_step``, and what runs where it can't."""
        pulls = self.pulls
        since = pulls.since.get(device)
        if since is not None:   # σ from the touch log, which records this update in the same pass
            total, top = pulls.log.adacomp(self.theta, self.counts, indices, values, self.lr, self._lr_table, since)
            pulls.bound(self.counts)
        else:   # a dense snapshot; without one (no pull on record, e.g. after a restart): the global τ
            total, top = adacomp_apply(self.theta, self.counts, pulls.dense.get(device), indices, values,
                                       self.lr, staleness, self._lr_table)
            pulls.applied(indices, self.counts)
        n = values.size
        return Applied(staleness, total / n if n else 0.0, float(top))

    def forget(self, device):
        self.pulls.forget(device)

    def state_dict(self):
        return {"counts": self.counts.copy()}

    def load_state_dict(self, state):
        # A restored PS has no pull on record (devices rejoin and pull again): a fresh log.
        self.counts[:] = state["counts"]
        self.pulls = PullRecords(self.theta.size)
