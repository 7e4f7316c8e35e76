"""SparkNet periodic model averaging (Moritz et al. 2016) on an asynchronous PS, as a round barrier.

Each device pulls Θ_r, runs τ local SGD steps and pushes Δᵢ = xᵢ − Θ_r. The round closes when every
live member has pushed once: Θ_{r+1} = Θ_r + mean(Δ) = average of the local models. A device that
already contributed to round r has its next pull held until the round closes (the broadcast). A member
that crashes, says bye or goes silent (the PS's tick) is dropped, so a lost worker can't block the
barrier; its delta, if it sent one, still counts. Devices join at their first pull.
"""
from __future__ import annotations

import numpy as np

from ...algorithms.averaging import add_delta, apply_mean
from ...algorithms.params import ModelAveragingParams
from .base import Applied, UpdateRule


class ModelAveraging(UpdateRule):
    Params = ModelAveragingParams

    def __init__(self, theta, lr):
        super().__init__(theta, lr)
        self.members: set[int] = set()       # live devices taking part in rounds
        self.contributed: set[int] = set()   # devices whose delta is in this round's sum
        self.total = np.zeros(theta.size, dtype=np.float64)
        self.count = 0                       # deltas in this round's sum
        self.rounds = 0

    def on_pull(self, device, version):
        self.members.add(device)

    def apply(self, device, staleness, values, indices):
        add_delta(self.total, values, indices)
        self.count += 1
        self.contributed.add(device)
        self.members.add(device)
        self._maybe_close()
        return Applied(staleness)

    def _maybe_close(self) -> None:
        if self.count and self.members <= self.contributed:
            apply_mean(self.theta, self.total, self.count)
            self.total[:] = 0.0
            self.count = 0
            self.contributed.clear()
            self.rounds += 1

    def ready(self, device, request):
        # The next pull of a device that already contributed waits for the round's average.
        return request != "pull" or device not in self.contributed

    def waiting_for(self):
        return self.members - self.contributed

    def forget(self, device):
        self.members.discard(device)
        self._maybe_close()

    def stats(self):
        return {"rounds": self.rounds, "syncs": self.rounds}

    def state_dict(self):
        # A restarted PS resumes at the last closed round: devices rejoin with new sessions and the
        # partial sum of the open round is dropped with them.
        return {"rounds": np.array([self.rounds], dtype=np.int64)}

    def load_state_dict(self, state):
        self.rounds = int(state["rounds"][0])
