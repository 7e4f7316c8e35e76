"""AdaComp's per-parameter staleness from the touch log (edgebed/ps/staleness.py) against the oracle it
replaced — a snapshot of the update counters per outstanding pull — on random pull/push/forget
sequences: the same Θ bits, counters and σ at every step, on the compiled and the numpy path; and the
log's memory stays O(c·|Θ|) per device, never more than a snapshot per pull."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed.ps import aggregate
from edgebed.ps.rules import AdaComp
from edgebed.ps.staleness import PullRecords

pytestmark = pytest.mark.timeout(60)


class SnapshotAdaComp:
    """The oracle: the snapshot scheme as it was (commit bcd2fe4's rules/adacomp.py)."""

    def __init__(self, theta, lr):
        self.theta, self.lr = theta, lr
        self.counts = np.zeros(theta.size, np.uint32)
        self.snapshots: dict[int, np.ndarray] = {}
        self.table = aggregate.lr_table(lr)

    def on_pull(self, device, version):
        self.snapshots[device] = self.counts.copy()

    def apply(self, device, staleness, values, indices):
        total, top = aggregate.adacomp_apply(self.theta, self.counts, self.snapshots.get(device), indices, values,
                                             self.lr, staleness, self.table)
        return (total / values.size if values.size else 0.0), float(top)

    def forget(self, device):
        self.snapshots.pop(device, None)


def _sequence(seed: int, size: int, devices: int, steps: int, rule, oracle, check) -> dict:
    rng = np.random.default_rng(seed)
    seen = {"dense_snapshots": 0, "sigma_max": 0}
    for step in range(steps):
        d = int(rng.integers(devices))
        op = rng.random()
        if op < 0.35:
            rule.on_pull(d, step)
            oracle.on_pull(d, step)
        elif op < 0.38:
            rule.forget(d)
            oracle.forget(d)
        else:
            if rng.random() < 0.05:
                idx, vals = None, rng.standard_normal(size).astype(np.float32)
            else:
                k = int(rng.integers(1, size // 8))
                idx = np.sort(rng.choice(size, k, replace=False)).astype(np.uint32)
                vals = rng.standard_normal(k).astype(np.float32)
            # a few parameters are hot (every top-c selection holds them), as biases are
            if idx is not None and rng.random() < 0.5:
                idx = np.union1d(idx, np.arange(3, dtype=np.uint32)).astype(np.uint32)
                vals = rng.standard_normal(idx.size).astype(np.float32)
            tau = int(rng.integers(0, 50))
            got = rule.apply(d, tau, vals, idx)
            want = oracle.apply(d, tau, vals, idx)
            assert (got.sigma_mean, got.sigma_max) == want, f"step {step}"
            seen["sigma_max"] = max(seen["sigma_max"], want[1])
        check(step)
        seen["dense_snapshots"] = max(seen["dense_snapshots"], len(rule.pulls.dense))
    return seen


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_touch_log_gives_the_snapshot_schemes_bits(seed, path, monkeypatch):
    if path == "numpy":
        monkeypatch.setattr(aggregate, "_fast", None)
    elif not aggregate.FAST:
        pytest.skip("the compiled push path is not built (tests/unit/ps/test_fastpush.py requires it)")
    size = 400
    theta = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    rule, oracle = AdaComp(theta.copy(), 0.05), SnapshotAdaComp(theta.copy(), 0.05)

    def check(step):
        assert rule.theta.tobytes() == oracle.theta.tobytes(), f"Θ differs after step {step}"
        assert np.array_equal(rule.counts, oracle.counts)
        assert set(rule.pulls.since) | set(rule.pulls.dense) == set(oracle.snapshots)

    seen = _sequence(seed, size, 12, 1500, rule, oracle, check)
    assert seen["sigma_max"] > 20                 # stale pulls were exercised
    assert seen["dense_snapshots"] > 0            # and pulls that pinned the log got snapshots


def test_round_robin_devices_cost_what_they_send_not_a_model_each():
    """n devices pulling and pushing in turn (a run's steady state): the log holds about the entries
    of the last n updates, O(c·|Θ|) per device — the snapshot scheme held |Θ| counters per device."""
    size, n, k = 200_000, 50, 2_000          # c = 1 %
    theta = np.zeros(size, np.float32)
    rule = AdaComp(theta, 0.01)
    rng = np.random.default_rng(0)
    for d in range(n):
        rule.on_pull(d, 0)
    for i in range(6 * n):
        d = i % n
        idx = np.sort(rng.choice(size, k, replace=False)).astype(np.uint32)
        rule.apply(d, n, np.ones(k, np.float32), idx)
        rule.on_pull(d, i + 1)
    assert rule.pulls.log.live_entries <= (n + 1) * k
    per_device = rule.pulls.nbytes() / n
    assert per_device < 0.25 * size * 4, f"{per_device:.0f} B per device"
    assert not rule.pulls.dense


def test_a_silent_device_gets_a_snapshot_instead_of_pinning_the_log():
    size, k = 1_000, 100
    rule = AdaComp(np.zeros(size, np.float32), 0.01)
    rule.on_pull(99, 0)                            # pulls, then never pushes again
    rng = np.random.default_rng(1)
    for i in range(200):
        rule.on_pull(0, i)
        idx = np.sort(rng.choice(size, k, replace=False)).astype(np.uint32)
        rule.apply(0, 0, np.ones(k, np.float32), idx)
    assert 99 in rule.pulls.dense and 99 not in rule.pulls.since
    assert rule.pulls.log.live_entries <= 2 * k   # only device 0's pull keeps entries now
    # its σ still counts every update since its pull: all 200 touched parameter ... of them
    touched = int(rule.counts[5])
    assert rule.apply(99, 200, np.zeros(1, np.float32), np.array([5], np.uint32)).sigma_max == touched


def test_records_follow_pulls_and_forgets():
    r = PullRecords(10)
    r.pull(1)
    r.pull(2)
    r.log.append(np.array([1, 2], np.uint32))
    r.pull(1)                                      # a new pull replaces the old record
    assert r.since == {1: 1, 2: 0} and len(r) == 2
    r.forget(2)
    assert 2 not in r and r.log.floor == 1         # nothing older is on record: stamp 1 is the floor
    assert r.log.sigma(np.array([1, 2], np.uint32), 0).tolist() == [1, 1]
