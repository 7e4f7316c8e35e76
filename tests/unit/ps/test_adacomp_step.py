"""AdaComp's compiled step (``_fastpush.adacomp_step``, the rule's ``compiled_step``) against its
specification, ``AdaComp._apply_py``: one random run of pulls, pushes, departures and a restart played to
a rule on each (every other push to the compiled one as the short path passes it: the frames' bytes,
raw) — pushes that fill the touch log's pool midway (repacks), pulls that pin the log until they get
dense snapshots, pushes of devices whose pull is not in the log beside others' that are, dense pushes,
pushes it must hand back (float64, non-contiguous) — gives the same Θ bits, counters, (σ mean, σ max),
touch log and pull records after every step."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from edgebed.ps import aggregate, staleness
from edgebed.ps.rules import AdaComp

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def compiled():
    if not aggregate.FAST:
        pytest.skip("the compiled push path is not built (tests/unit/ps/test_fastpush.py requires it)")


def _state(rule: AdaComp) -> dict:
    """Everything the step reads or writes, as plain values."""
    log, pulls = rule.pulls.log, rule.pulls
    heads = log.heads
    lists = [log.pool[a:a + n].tolist() for a, n, _c, _ in heads.tolist()]   # the live content, not the layout
    return {"theta": rule.theta.tobytes(), "counts": rule.counts.tobytes(), "stamp": log.stamp, "floor": log.floor,
            "used": log.used, "entries": log._entries[log._skip:], "lists": lists,
            "heads": heads.tobytes(), "pool_size": log.pool.size,   # (room not yet used holds garbage)
            "since": dict(pulls.since), "dense": {d: a.tobytes() for d, a in pulls.dense.items()},
            "order": list(pulls._order), "pinned": {s: set(v) for s, v in pulls._pinned.items()}}


def _push(rng, size):
    kind = rng.random()
    if kind < 0.05:
        return rng.standard_normal(size).astype(np.float32), None
    k = int(rng.integers(0, size // 4)) if kind < 0.9 else int(rng.integers(size // 2, size))
    idx = np.sort(rng.choice(size, k, replace=False)).astype(np.uint32)
    vals = rng.standard_normal(k).astype(np.float32)
    if rng.random() < 0.05:   # not what the compiled pass takes: handed back, the Python code runs
        vals = vals.astype(np.float64) if rng.random() < 0.5 else np.repeat(vals, 2)[::2]
    return vals, idx


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_compiled_step_gives_what_the_python_step_gives(seed, monkeypatch):
    monkeypatch.setattr(staleness, "MIN_POOL", 64)   # a small pool: pushes fill it midway, often
    size, devices = 300, 10
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(size).astype(np.float32)
    fast, spec = AdaComp(theta.copy(), 0.05), AdaComp(theta.copy(), 0.05)
    spec.compiled_step = None   # the instance's: apply runs _apply_py
    calls, handed_back, without_log, with_snapshot, beside_log = [0], [0], [0], [0], [0]
    step = AdaComp.compiled_step

    def counted(rule, device, staleness, values, indices, raw):
        calls[0] += 1
        if (calls[0] % 2 and values.dtype == np.float32 and values.flags.c_contiguous
                and (indices is None or indices.dtype == np.uint32)):   # the short path's way: the frames' bytes
            values, indices, raw = values.tobytes(), None if indices is None else indices.tobytes(), True
        empty_log, beside = not rule.pulls.since, rule.pulls.since and device not in rule.pulls.since
        out = step(rule, device, staleness, values, indices, raw)
        if out is not None and empty_log:
            without_log[0] += 1
            with_snapshot[0] += device in rule.pulls.dense
        beside_log[0] += out is not None and bool(beside)
        handed_back[0] += out is None
        return out

    fast.compiled_step = counted
    repacks = []
    monkeypatch.setattr(staleness.TouchLog, "_repack",
                        lambda self, need, _r=staleness.TouchLog._repack: (repacks.append(need), _r(self, need)))
    dense_seen = 0
    for i in range(2500):
        d = int(rng.integers(devices))
        op = rng.random()
        quiet = (i // 250) % 4 == 3   # now and then only pushes: the pulls on record all become dense snapshots
        if op < 0.3 and not quiet:
            fast.on_pull(d, i)
            spec.on_pull(d, i)
        elif op < 0.33:
            fast.forget(d)
            spec.forget(d)
        elif op < 0.334:   # a restart: the counters kept, the log and the pull records fresh
            state = fast.state_dict()
            fast.load_state_dict(state)
            spec.load_state_dict(state)
        else:
            vals, idx = _push(rng, size)
            tau = int(rng.integers(0, 40))
            got, want = fast.apply(d, tau, vals, idx), spec.apply(d, tau, vals, idx)
            assert got == want, f"step {i}"
        assert _state(fast) == _state(spec), f"the rules part at step {i}"
        dense_seen = max(dense_seen, len(fast.pulls.dense))
    assert calls[0] > 1000 and calls[0] - handed_back[0] > 800   # the compiled step did most pushes
    assert handed_back[0] > 50        # and handed some back: arrays it does not take
    assert without_log[0] > 20 and with_snapshot[0] > 5   # no pull in the log: the global τ, dense snapshots
    assert beside_log[0] > 50         # its own pull not in the log, others' in it: appended there
    assert len(repacks) > 20          # pools filled up, some in the middle of a compiled pass
    assert dense_seen > 0             # pulls that pinned the log got dense snapshots (bound's loop)


def test_a_push_it_hands_back_or_refuses_changes_nothing():
    size = 64
    rule = AdaComp(np.ones(size, np.float32), 0.1)
    rule.on_pull(1, 0)
    idx = np.arange(0, size, 2, dtype=np.uint32)
    before = _state(rule)
    step = AdaComp.compiled_step
    assert step(rule, 1, 0, np.ones(idx.size, np.float64), idx) is None                  # float64 values
    assert step(rule, 1, 0, np.ones(idx.size, np.float32), idx.astype(np.int64)) is None   # int64 indices
    assert step(rule, 1, 0, np.ones(2 * idx.size, np.float32)[::2], idx) is None         # not contiguous
    with pytest.raises(ValueError, match="out of range"):
        step(rule, 1, 0, np.ones(2, np.float32), np.array([3, size], np.uint32))
    with pytest.raises(ValueError, match="indices for"):
        step(rule, 1, 0, np.ones(3, np.float32), idx[:2])
    with pytest.raises(ValueError, match="dense push"):
        step(rule, 1, 0, np.ones(size - 1, np.float32), None)
    assert _state(rule) == before
    assert step(rule, 1, 0, np.ones(idx.size, np.float32), idx) == (0.0, 0.0)   # and then it applies
    assert rule.pulls.log.stamp == 1 and rule.counts[0] == 1 and rule.counts[1] == 0


def test_it_keeps_no_reference():
    size = 256
    rule = AdaComp(np.zeros(size, np.float32), 0.1)
    vals, idx = np.ones(32, np.float32), np.arange(0, 64, 2, dtype=np.uint32)
    watched = [rule, rule.pulls, rule.pulls.log, rule.theta, rule.counts, rule.pulls.log.heads, vals, idx,
               rule.pulls.since, rule.pulls.log._entries]
    step = AdaComp.compiled_step
    for d in range(4):
        rule.on_pull(d, 0)
    step(rule, 0, 0, vals, idx)   # the first call makes what lasts (pool, ints)
    before = [sys.getrefcount(x) for x in watched]
    for i in range(3000):
        rule.on_pull(i % 4, i)
        step(rule, (i + 1) % 4, 0, vals, idx)
        step(rule, 99, 0, vals, idx)   # handed back
    assert [sys.getrefcount(x) for x in watched] == before


def test_raw_takes_the_frames_the_serve_loop_receives():
    """On the short path the values and indices are ZeroMQ frames as received (zmq.Frame): the same
    step as on arrays."""
    zmq = pytest.importorskip("zmq")
    size = 64
    a, b = AdaComp(np.ones(size, np.float32), 0.1), AdaComp(np.ones(size, np.float32), 0.1)
    idx, vals = np.arange(1, size, 3, dtype=np.uint32), np.linspace(-1, 1, 21, dtype=np.float32)
    for rule in (a, b):
        rule.on_pull(0, 0)
    step = AdaComp.compiled_step
    got = step(a, 0, 0, zmq.Frame(vals.tobytes()), zmq.Frame(idx.tobytes()), True)
    assert got == step(b, 0, 0, vals, idx, False) and got is not None
    assert _state(a) == _state(b)
