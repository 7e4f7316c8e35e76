"""Dynamic averaging (Kamp et al. 2018; Alkhoury et al. on Spark): average only when a model drifts.

Every round each device runs τ local steps from its local model and checks its local condition
‖x − r‖² ≤ δ against the reference r (the last common model, = Θ here). It reports either a quiet,
empty push (inside the safe zone; a header only) or its delta Δ = x − r (violation). When every live
member has reported the round is decided:
- no violation: each device's held reply is an Ack and it keeps training its own model;
- a violation: each gets ``wire.Sync``; those that were quiet upload Δ now, and once every member's
  delta is in, Θ ← r + mean(Δ) = the average, which every device pulls as its new model and reference.
This is the full synchronisation of ``averaging.dynamic_sync``, spread over messages.
"""
from __future__ import annotations

import numpy as np

from ...algorithms.averaging import add_delta, apply_mean
from ...algorithms.params import DynamicAveragingParams
from .base import Applied, UpdateRule


class DynamicAveraging(UpdateRule):
    Params = DynamicAveragingParams
    empty_push_is_report = True   # a quiet-round report: "my model is still inside the safe zone"

    def __init__(self, theta, lr):
        super().__init__(theta, lr)
        self.members: set[int] = set()
        self.reported: set[int] = set()        # report phase: devices that reported this round
        self.undecided: set[int] = set()       # their replies wait for the round's decision
        self.decision: dict[int, bool] = {}    # device → its round ended in a sync
        self.expected: set[int] = set()        # collect phase: devices whose delta the sync needs
        self.contributed: set[int] = set()
        self.total = np.zeros(theta.size, dtype=np.float64)
        self.count = 0
        self.collecting = False
        self.rounds = 0
        self.syncs = 0

    def on_pull(self, device, version):
        self.members.add(device)
        self.decision.pop(device, None)

    def apply(self, device, staleness, values, indices):
        self.decision.pop(device, None)
        if values.size:                        # a violation report, or a delta for the sync
            add_delta(self.total, values, indices)
            self.count += 1
            self.contributed.add(device)
        if not self.collecting:
            self.members.add(device)
            self.reported.add(device)
            self.undecided.add(device)
        self._advance()
        return Applied(staleness)

    def _advance(self) -> None:
        if not self.collecting and self.reported and self.members <= self.reported:
            sync = self.count > 0
            for d in self.undecided:
                self.decision[d] = sync
            self.undecided.clear()
            self.reported.clear()
            if not sync:
                self.rounds += 1
                return
            self.collecting, self.expected = True, set(self.members)
        if self.collecting and self.count and self.expected <= self.contributed:
            apply_mean(self.theta, self.total, self.count)
            self.total[:] = 0.0
            self.count = 0
            self.contributed.clear()
            self.collecting = False
            self.rounds += 1
            self.syncs += 1

    def ready(self, device, request):
        if request == "pull":
            return not self.collecting         # the average isn't there yet
        return device not in self.undecided

    def sync_due(self, device):
        return self.decision.get(device, False)

    def waiting_for(self):
        return self.expected - self.contributed if self.collecting else self.members - self.reported

    def forget(self, device):
        self.members.discard(device)
        self.expected.discard(device)
        self.undecided.discard(device)
        self.decision.pop(device, None)
        self._advance()

    def stats(self):
        return {"rounds": self.rounds, "syncs": self.syncs}

    def state_dict(self):
        return {"rounds": np.array([self.rounds, self.syncs], dtype=np.int64)}

    def load_state_dict(self, state):
        self.rounds, self.syncs = (int(x) for x in state["rounds"][:2])
