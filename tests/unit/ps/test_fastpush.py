"""The PS's compiled push path (edgebed/ps/_fastpush.c) against the numpy path it replaces: the same
bits in Θ and AdaComp's counters, the same (Σσ, max σ), the same verdict on bad payloads; and its
own argument checks, so a caller's mistake raises instead of writing out of bounds."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed import wire
from edgebed.ps import aggregate
from edgebed.ps.rules import RULES

from tests.capabilities import require

N = 5_000


def _require_compiled():
    require(aggregate.FAST, "the compiled push path (edgebed/ps/_fastpush.c)",
            "a C compiler at install time: `make setup` (pip install -e .) builds it; "
            "without one the PS runs its numpy path, same results, slower")


@pytest.fixture
def numpy_path(monkeypatch):
    """Call ``numpy_path(fn)`` to run fn with the compiled path switched off."""
    def run(fn, *args):
        with monkeypatch.context() as m:
            m.setattr(aggregate, "_fast", None)
            return fn(*args)
    return run


def _push(rng, n, k, scale=1e-2):
    idx = np.sort(rng.choice(n, size=k, replace=False)).astype(np.uint32)
    vals = (rng.standard_normal(k) * scale).astype(np.float32)
    return idx, vals


def test_the_compiled_path_is_built():
    _require_compiled()
    assert aggregate._fast.check_sparse(np.zeros(0, np.uint32), np.zeros(0, np.float32), 1, 1.0) == 0


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.3, 1 / 3])
@pytest.mark.parametrize("with_snapshot", [True, False])
@pytest.mark.parametrize("dense", [False, True])
def test_adacomp_step_same_bits_as_numpy(alpha, with_snapshot, dense, numpy_path):
    _require_compiled()
    rng = np.random.default_rng(7)
    theta = rng.standard_normal(N).astype(np.float32)
    # counts spanning the lookup table's edge (4,096) and beyond it, σ = 0 and 1 included
    counts = rng.integers(0, 9_000, N).astype(np.uint32)
    snap = (counts - np.minimum(counts, rng.integers(0, 6_000, N).astype(np.uint32))).astype(np.uint32)
    snap[:50] = counts[:50]          # σ = 0 → α exactly
    snap[50:100] = counts[50:100] - 1
    table = aggregate.lr_table(alpha)
    a_theta, a_counts = theta.copy(), counts.copy()
    b_theta, b_counts = theta.copy(), counts.copy()
    for step in range(6):
        if dense:
            idx, vals = None, (rng.standard_normal(N) * 1e-2).astype(np.float32)
        else:
            idx, vals = _push(rng, N, 300 if step else 0)   # an empty push first
        s = snap if with_snapshot else None
        got = aggregate.adacomp_apply(a_theta, a_counts, s, idx, vals, alpha, 37 + step, table)
        want = numpy_path(aggregate.adacomp_apply, b_theta, b_counts, s, idx, vals, alpha, 37 + step, table)
        assert tuple(got) == tuple(want)
        assert a_theta.tobytes() == b_theta.tobytes()
        assert np.array_equal(a_counts, b_counts)
    assert not np.array_equal(a_theta, theta)   # something was applied


def test_sparse_sgd_same_bits_as_numpy(numpy_path):
    _require_compiled()
    rng = np.random.default_rng(3)
    theta = rng.standard_normal(N).astype(np.float32)
    a, b = theta.copy(), theta.copy()
    for lr in (0.1, 0.01 / 7, 1e-3 / 3, 0.05):
        idx, vals = _push(rng, N, 500)
        aggregate.apply_sparse(a, idx, vals, lr)
        numpy_path(aggregate.apply_sparse, b, idx, vals, lr)
        assert a.tobytes() == b.tobytes()


def test_dense_sgd_same_bits_as_numpy(numpy_path):
    """A dense ASGD push: the compiled one-pass step against numpy's, with and without its scratch."""
    _require_compiled()
    rng = np.random.default_rng(4)
    theta = rng.standard_normal(N).astype(np.float32)
    a, b, c = theta.copy(), theta.copy(), theta.copy()
    scratch = np.empty_like(theta)
    for lr in (0.1, 0.01 / 7, 1e-3 / 3, 0.05):
        g = (rng.standard_normal(N) * 1e-2).astype(np.float32)
        aggregate.apply_dense(a, g, lr)
        numpy_path(aggregate.apply_dense, b, g, lr, scratch)
        numpy_path(aggregate.apply_dense, c, g, lr)
        assert a.tobytes() == b.tobytes() == c.tobytes()
    assert a.tobytes() != theta.tobytes()


def test_asgd_keeps_a_scratch_copy_of_theta_only_on_numpy_path(numpy_path):
    """The compiled dense step needs no |Θ| scratch array; numpy's path allocates one, once."""
    _require_compiled()
    theta = np.zeros(N, np.float32)
    g = np.ones(N, np.float32)
    fast, slow = RULES["asgd"](theta.copy(), 0.1), RULES["asgd"](theta.copy(), 0.1)
    fast.apply(0, 0, g, None)
    numpy_path(slow.apply, 0, 0, g, None)
    assert fast._scratch is None and slow._scratch is not None and slow._scratch.size == N
    assert fast.theta.tobytes() == slow.theta.tobytes()


DENSE = {   # a dense push's values against a limit of 1e6
    "fine": (np.array([1, -2, 3], np.float32), aggregate.ENTRIES_OK),
    "at the limit": (np.array([1e6, -1e6, 0], np.float32), aggregate.ENTRIES_OK),
    "too large": (np.array([1, -2e6, 1], np.float32), aggregate.TOO_LARGE),
    "nan": (np.array([1, np.nan, 1], np.float32), aggregate.NOT_FINITE),
    "inf": (np.array([1, 1, -np.inf], np.float32), aggregate.NOT_FINITE),
    "nan beats too large": (np.array([5e6, 1, np.nan], np.float32), aggregate.NOT_FINITE),
    "empty": (np.zeros(0, np.float32), aggregate.ENTRIES_OK),
}


@pytest.mark.parametrize("case", sorted(DENSE))
def test_dense_check_same_verdict_and_max_either_path(case, numpy_path):
    """A dense push's check (no indices): the compiled values' pass and numpy's Σv² and min/max give
    the same verdict, and the same max |v| when it is ENTRIES_OK."""
    _require_compiled()
    vals, want = DENSE[case]
    assert aggregate.check_entries(None, vals, vals.size, 1e6) == want
    assert numpy_path(aggregate.check_entries, None, vals, vals.size, 1e6) == want
    fast, slow = aggregate.check_entries_top(None, vals, vals.size, 1e6), numpy_path(
        aggregate.check_entries_top, None, vals, vals.size, 1e6)
    assert fast[0] == slow[0] == want
    if want == aggregate.ENTRIES_OK:
        assert fast[1] == slow[1] and type(fast[1]) is float


@pytest.mark.parametrize("rule", ["adacomp", "comp-asgd"])
def test_ps_process_same_theta_and_records_either_path(rule, numpy_path):
    """Whole pushes through ParameterServer.process, with pulls between them: same Θ, same rows."""
    _require_compiled()
    from edgebed.ps.server import Hooks, ParameterServer, PSConfig

    def run():
        rows = []
        theta = np.random.default_rng(0).standard_normal(N).astype(np.float32)
        ps = ParameterServer(PSConfig(n_devices=3, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "x"), theta,
                             RULES[rule](theta, 0.05), Hooks(record=lambda t, r: rows.append(dict(r))))
        rng = np.random.default_rng(1)
        sessions = [wire.decode(ps.process(b"p", wire.encode(wire.Hello(d)))).session for d in range(3)]
        versions = [0, 0, 0]
        for i in range(60):
            d = i % 3
            if i % 2 == 0:
                versions[d] = wire.decode(ps.process(b"p", wire.encode(wire.Pull(sessions[d])))).version
            idx, vals = _push(rng, N, 50)
            reply = wire.decode(ps.process(b"p", wire.encode(wire.Push(sessions[d], i, versions[d], vals, idx))))
            assert isinstance(reply, wire.Ack) and reply.applied
        for r in rows:
            r.pop("wall_time")
        return ps.theta.copy(), rows

    theta_c, rows_c = run()
    theta_n, rows_n = numpy_path(run)
    assert theta_c.tobytes() == theta_n.tobytes()
    assert repr(rows_c) == repr(rows_n)   # repr: NaN (virtual time, loss) equals NaN there
    updates = [r for r in rows_c if "sigma_max" in r]
    assert len(updates) == 60
    if rule == "adacomp":
        assert max(r["sigma_max"] for r in updates) > 1   # per-parameter σ was exercised


BAD = {
    "unsorted": (np.array([1, 3, 2], np.uint32), np.ones(3, np.float32), aggregate.NOT_INCREASING),
    "duplicate": (np.array([1, 3, 3], np.uint32), np.ones(3, np.float32), aggregate.NOT_INCREASING),
    "index too large": (np.array([1, 2, 10], np.uint32), np.ones(3, np.float32), aggregate.INDEX_TOO_LARGE),
    "nan": (np.array([1, 2, 3], np.uint32), np.array([1, np.nan, 1], np.float32), aggregate.NOT_FINITE),
    "inf": (np.array([1, 2, 3], np.uint32), np.array([1, 1, -np.inf], np.float32), aggregate.NOT_FINITE),
    "nan beats too large": (np.array([1, 2, 3], np.uint32), np.array([5e6, 1, np.nan], np.float32),
                            aggregate.NOT_FINITE),
    "too large": (np.array([1, 2, 3], np.uint32), np.array([1, -2e6, 1], np.float32), aggregate.TOO_LARGE),
    "at the limit": (np.array([1, 2, 3], np.uint32), np.array([1e6, -1e6, 0], np.float32), aggregate.ENTRIES_OK),
    "fine": (np.array([0, 2, 9], np.uint32), np.array([1, 2, 3], np.float32), aggregate.ENTRIES_OK),
    "empty": (np.zeros(0, np.uint32), np.zeros(0, np.float32), aggregate.ENTRIES_OK),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_check_entries_same_verdict_either_path(case, numpy_path):
    _require_compiled()
    idx, vals, want = BAD[case]
    assert aggregate.check_entries(idx, vals, 10, 1e6) == want
    assert numpy_path(aggregate.check_entries, idx, vals, 10, 1e6) == want


@pytest.mark.parametrize("case", sorted(BAD))
def test_check_entries_top_is_the_verdict_and_max_abs_either_path(case, numpy_path):
    """The short path's check: the same verdict, and when it is ENTRIES_OK the same max |v| as
    ``max_abs``, from the compiled pass and from numpy."""
    _require_compiled()
    idx, vals, want = BAD[case]
    for top in (aggregate.check_entries_top(idx, vals, 10, 1e6), numpy_path(aggregate.check_entries_top, idx, vals, 10, 1e6)):
        assert top[0] == want
        if want == aggregate.ENTRIES_OK:
            assert top[1] == numpy_path(aggregate.max_abs, vals) and type(top[1]) is float
        else:
            assert np.isnan(top[1])


def test_check_entries_same_verdict_at_the_limits_edge(numpy_path):
    """The compiled check tests |v| against the largest float32 not above the limit, as integers; the
    numpy path's exact test compares in double. Values on either side of limits that are float32
    numbers, lie between two of them, or sit at float32's end (FLT_MAX, beyond it, ∞, 0): the verdict
    of that comparison. (The numpy path's Σv² shortcut is checked beside it for limits of 1e-3 to 1e30:
    at a limit of 0 or 1e-45 a subnormal value's square underflows, and past 1e154 the bound's square
    overflows. The PS's limits are far inside.)"""
    _require_compiled()
    f32 = np.float32
    big = float(np.finfo(f32).max)
    limits = [0.0, 1e-45, 1.0, 1e6, 0.1, 1e6 + 0.03, 3.0e38, big, big * 1.0000001, 1e300, float("inf")]
    limits += [float(np.nextafter(f32(x), f32(np.inf))) for x in (1.0, 1e6)]
    limits += [(float(f32(x)) + float(np.nextafter(f32(x), f32(np.inf)))) / 2 for x in (1.0, 1e6, 0.1)]
    idx = np.arange(1, dtype=np.uint32)
    for limit in limits:
        near = f32(min(limit, big))
        with np.errstate(over="ignore"):   # past FLT_MAX: ∞
            values = {f32(0), -f32(0), near, np.nextafter(near, f32(0)), np.nextafter(near, f32(np.inf)),
                      f32(np.inf), f32(1e-45)}
        for v in values:
            for sign in (1, -1):
                vals = np.array([sign * v], f32)
                x = float(vals[0])
                bad = x != x or x < -limit or x > limit   # an infinite limit passes ∞
                want = (aggregate.ENTRIES_OK if not bad else
                        aggregate.NOT_FINITE if not np.isfinite(x) else aggregate.TOO_LARGE)
                if 1e-3 <= limit <= 1e30:
                    assert numpy_path(aggregate.check_entries, idx, vals, 10, limit) == want, (limit, vals)
                assert aggregate.check_entries(idx, vals, 10, limit) == want, (limit, vals)
                assert aggregate.check_entries_top(idx, vals, 10, limit)[0] == want, (limit, vals)


@pytest.mark.parametrize("size", [1, 7, 16, 17, 2_122])
def test_check_entries_top_max_matches_max_abs_at_any_length(size, numpy_path):
    _require_compiled()
    rng = np.random.default_rng(size)
    idx = np.sort(rng.choice(10 * size, size, replace=False)).astype(np.uint32)
    for scale in (1e-3, 1.0, 1e37):
        v = (rng.standard_normal(size) * scale).astype(np.float32)
        v[rng.integers(size)] = -np.float32(scale) * 4
        for values in (v, -v):
            code, top = aggregate.check_entries_top(idx, values, 10 * size, 1e38)
            assert code == aggregate.ENTRIES_OK and top == numpy_path(aggregate.max_abs, values)


def test_compiled_functions_refuse_bad_arguments():
    _require_compiled()
    f = aggregate._fast
    theta, counts = np.zeros(10, np.float32), np.zeros(10, np.uint32)
    table = aggregate.lr_table(0.1, 16)
    with pytest.raises(ValueError, match="out of range"):
        f.adacomp(theta, counts, None, np.array([3, 10], np.uint32), np.ones(2, np.float32), 0.1, 0, table)
    with pytest.raises(ValueError, match="indices for"):
        f.adacomp(theta, counts, None, np.array([3], np.uint32), np.ones(2, np.float32), 0.1, 0, table)
    with pytest.raises(ValueError, match="same length"):
        f.adacomp(theta, counts[:5], None, None, np.ones(10, np.float32), 0.1, 0, table)
    with pytest.raises(ValueError, match="dense push"):
        f.adacomp(theta, counts, None, None, np.ones(9, np.float32), 0.1, 0, table)
    with pytest.raises(ValueError, match="out of range"):
        f.sgd_sparse(theta, np.array([11], np.uint32), np.ones(1, np.float32), 0.1)
    with pytest.raises(TypeError):   # Θ must be writable
        f.sgd_sparse(bytes(40), np.array([1], np.uint32), np.ones(1, np.float32), 0.1)
    with pytest.raises(ValueError, match="dense push"):
        f.sgd_dense(theta, np.ones(9, np.float32), 0.1)
    with pytest.raises(TypeError):
        f.sgd_dense(bytes(40), np.ones(10, np.float32), 0.1)
    assert not theta.any() and not counts.any()   # nothing was written


def test_non_contiguous_arrays_take_the_numpy_path():
    """A strided view has no simple buffer: the dispatch sends it to numpy instead of failing."""
    theta = np.zeros(20, np.float32)
    vals = np.ones(10, np.float32)[::2]
    idx = np.arange(0, 10, dtype=np.uint32)[::2]
    aggregate.apply_sparse(theta, idx, vals, 0.5)
    assert theta[[0, 2, 4, 6, 8]].tolist() == [-0.5] * 5
    assert aggregate.check_entries(idx, vals, 20, 1e6) == aggregate.ENTRIES_OK


def test_the_run_manifest_says_which_push_path_ran():
    from edgebed.rundir import host_facts
    assert aggregate.PUSH_PATH == ("compiled" if aggregate.FAST else "numpy")
    assert host_facts(aggregate.PUSH_PATH)["ps_push_path"] == aggregate.PUSH_PATH   # what the engine records


def test_other_index_dtypes_take_the_numpy_path():
    """The C check reads uint32: int64 indices (a caller's, never the wire's) must not reach it."""
    idx = np.array([1, 2, 2**32 + 3], dtype=np.int64)   # as uint32 the last would read 3: sorted, in range
    vals = np.ones(3, np.float32)
    assert aggregate.check_entries(idx, vals, 10, 1e6) == aggregate.INDEX_TOO_LARGE


def test_touch_log_same_sigma_and_bits_either_path(numpy_path):
    """AdaComp's touch log (edgebed/ps/staleness.py): appends, compactions, σ and the fused step
    (σ, apply, append in one pass), compiled against numpy: the same σ, Θ bits, counters."""
    _require_compiled()
    from edgebed.ps import staleness
    rng = np.random.default_rng(5)
    table = aggregate.lr_table(0.05)
    theta = rng.standard_normal(N).astype(np.float32)
    counts = np.zeros(N, np.uint32)

    def build():
        log, t, c = staleness.TouchLog(N), theta.copy(), counts.copy()
        pushes, out = np.random.default_rng(9), []
        for stamp in range(300):
            idx, vals = _push(pushes, N, 400)
            if stamp % 97 == 0:
                idx, vals = None, pushes.standard_normal(N).astype(np.float32)
            if stamp % 3:
                out.append(log.adacomp(t, c, idx, vals, 0.05, table, max(log.floor, stamp - 40)))
            else:
                log.append(idx)
            if stamp % 50 == 49:
                log.advance(stamp - 120)
        return log, t, c, out

    (a, ta, ca, oa), (b, tb, cb, ob) = build(), numpy_path(build)
    assert oa == ob and max(x[1] for x in oa) > 1
    assert ta.tobytes() == tb.tobytes() and np.array_equal(ca, cb)
    assert a.floor == b.floor and a.live_entries == b.live_entries
    for since in (b.floor, b.floor + 1, 200, 299, 300):
        idx = _push(rng, N, 700)[0]
        assert np.array_equal(a.sigma(idx, since), numpy_path(b.sigma, idx, since))
        assert np.array_equal(a.sigma(None, since), numpy_path(b.sigma, None, since))


def test_touch_log_functions_refuse_bad_arguments():
    _require_compiled()
    f = aggregate._fast
    pool, heads, out = np.zeros(16, np.uint32), np.zeros((10, 4), np.uint32), np.zeros(1, np.uint32)
    with pytest.raises(ValueError, match="out of range"):
        f.touch_sigma(pool, heads, np.array([10], np.uint32), 0, out)
    with pytest.raises(ValueError, match="uint32"):
        f.touch_sigma(pool, heads[:, :3].copy(), np.array([1], np.uint32), 0, out)
    heads[3] = (10, 0, 20, 0)            # a list reaching past the pool
    for call in (lambda: f.touch_sigma(pool, heads, np.array([3], np.uint32), 0, out),
                 lambda: f.touch_append(pool, heads, 0, np.array([3], np.uint32), 1, 0),
                 lambda: f.adacomp_touch_from(np.zeros(10, np.float32), np.zeros(10, np.uint32), pool, heads, 0,
                                              np.array([3], np.uint32), np.ones(1, np.float32), 0.1,
                                              aggregate.lr_table(0.1, 16), 0, 1, 0, 0)):
        with pytest.raises(ValueError, match="outside the pool"):
            call()
    heads[3] = 0
    assert f.touch_append(pool, heads, 14, np.array([3], np.uint32), 1, 0) == -4   # no room: asks, changes nothing
    assert heads[3].tolist() == [0, 0, 0, 0]
    assert f.touch_append(pool, heads, 0, np.array([3], np.uint32), 1, 0) == 4
    assert f.touch_compact(pool, heads, 0, np.zeros(0, np.uint32)) == -5   # 1 live stamp + room 4


def test_the_completeness_check_names_every_compiled_function():
    """aggregate.FUNCTIONS is what decides whether a built module is current: it must list every
    function _fastpush.c exports, or a stale build could be taken for a current one."""
    import re
    from pathlib import Path
    from edgebed.ps import aggregate
    source = (Path(aggregate.__file__).parent / "_fastpush.c").read_text()
    exported = set(re.findall(r'^\s*\{"(\w+)",[^"]*?METH_', source, re.M))
    assert exported and exported == set(aggregate.FUNCTIONS)


def test_large_adacomp_steps_same_bits_when_the_pool_fills_midway(numpy_path, monkeypatch):
    """Pushes far longer than the compiled step's prefetch distance, to lists that grow (a device whose
    pull stays old) and to recent ones: the one-pass step stops where the pool's free tail runs out,
    the log repacks and the step resumes there. Θ bits, counters, (Σσ, max σ) and σ afterwards are
    those of the numpy path, which never stops midway."""
    _require_compiled()
    from edgebed.ps import staleness
    size, table = 200_000, aggregate.lr_table(0.05)
    theta = np.random.default_rng(1).standard_normal(size).astype(np.float32)
    stops = []
    step = aggregate._fast.adacomp_touch_from

    def watched(*args):
        out = step(*args)
        if out[4]:
            stops.append((out[3], len(args[6]) // 4 if args[5] is None else len(args[5])))
        return out
    monkeypatch.setattr(aggregate._fast, "adacomp_touch_from", watched)

    def build():
        log, t, c, rng, out = staleness.TouchLog(size), theta.copy(), np.zeros(size, np.uint32), \
            np.random.default_rng(2), []
        same = _push(rng, size, 20_000)   # the same entries every time: their lists double and move
        for stamp in range(60):
            idx, vals = same if stamp % 2 else _push(rng, size, int(rng.integers(5_000, 40_000)))
            if stamp % 23 == 22:
                idx, vals = None, rng.standard_normal(size).astype(np.float32)
            since = 0 if stamp % 3 else max(log.floor, stamp - 4)
            out.append(log.adacomp(t, c, idx, vals, 0.05, table, since))
        return log, t, c, out

    (a, ta, ca, oa), (b, tb, cb, ob) = build(), numpy_path(build)
    assert any(0 < done < m for done, m in stops), stops   # resumed midway, not only from the start
    assert oa == ob and max(x[1] for x in oa) > 20
    assert ta.tobytes() == tb.tobytes() and np.array_equal(ca, cb)
    for since in (0, 30, 59):
        assert np.array_equal(a.sigma(None, since), numpy_path(b.sigma, None, since))


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 2_122, 211_690])
def test_max_abs_same_number_as_numpy(size, numpy_path):
    """The largest |value| of a push (the PS's divergence blame) in one compiled pass: the same float as
    numpy's two reductions, for lengths around its 8-lane blocks, the largest value's sign either way."""
    _require_compiled()
    rng = np.random.default_rng(size)
    for scale in (1e-3, 1.0, 1e37):
        v = (rng.standard_normal(size) * scale).astype(np.float32)
        if size:
            v[rng.integers(size)] = -np.float32(scale) * 4   # the largest is negative, then positive
        for values in (v, -v):
            assert aggregate.max_abs(values) == numpy_path(aggregate.max_abs, values)
            assert type(aggregate.max_abs(values)) is float


def test_max_abs_says_nan_and_refuses_bad_buffers():
    _require_compiled()
    v = np.ones(20, np.float32)
    v[13] = np.nan
    assert np.isnan(aggregate._fast.max_abs(v))
    with pytest.raises(ValueError):
        aggregate._fast.max_abs(b"abc")   # not a whole number of float32
