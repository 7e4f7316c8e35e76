"""ParameterServer state machine: protocol, staleness, traffic counting, crashes, stop."""
import numpy as np
import pytest

from edgebed import wire
from edgebed.ps.rules import AdaComp, ASGD
from edgebed.ps.server import Hooks, ParameterServer, PSConfig

N = 20


def make_ps(rule_cls=ASGD, **cfg):
    rows = {"updates": [], "events": [], "snap": [], "frozen": []}
    theta = np.zeros(N, np.float32)
    hooks = Hooks(record=lambda t, r: rows[t].append(r), freeze=rows["frozen"].append,
                  snapshot=lambda v, th, info: rows["snap"].append((v, th, info)))
    config = PSConfig(n_devices=4, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c%d" % (d % 2), **cfg)
    return ParameterServer(config, theta, rule_cls(theta, 0.1), hooks), rows


def call(ps, msg):
    frames = [bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes() for f in wire.encode(msg)]
    reply = ps.process(b"peer", frames)
    return wire.decode(reply) if reply else None, wire.frames_nbytes(frames)


def hello(ps, d):
    w, _ = call(ps, wire.Hello(d, "", 0))
    assert isinstance(w, wire.Welcome) and wire.WelcomeConfig.from_dict(w.config).device == d
    return w.session


def push(ps, s, seq, version, idx=(0, 1)):
    return call(ps, wire.Push(s, seq, version, np.ones(len(idx), np.float32), np.array(idx, np.uint32)))


def test_pull_push_versions_and_global_staleness():
    ps, rows = make_ps()
    s0, s1 = hello(ps, 0), hello(ps, 1)
    m0, _ = call(ps, wire.Pull(s0))
    m1, _ = call(ps, wire.Pull(s1))
    assert m0.version == m1.version == 0 and m0.params.shape == (N,)
    a, _ = push(ps, s0, 0, 0)
    b, _ = push(ps, s1, 0, 0)
    assert (a.version, b.version) == (1, 2)
    assert [r["staleness"] for r in rows["updates"]] == [0, 1]
    assert [r["speed_class"] for r in rows["updates"]] == ["c0", "c1"]


def test_ingress_equals_sum_of_received_message_bytes():
    ps, rows = make_ps()
    total, push_total = 0, 0
    s, n = hello(ps, 0), None
    total += ps.meter.ingress_bytes
    for i in range(5):
        _, n = call(ps, wire.Pull(s))
        total += n
        _, n = push(ps, s, i, i, idx=range(i + 1))
        total += n
        push_total += n
    assert ps.meter.ingress_bytes == total
    assert ps.meter.push_bytes == push_total == sum(r["bytes_in"] for r in rows["updates"])
    t = ps.meter.to_dict()
    assert t["by_kind"]["push"]["in_msgs"] == 5 and t["by_class"]["c0"]["push_bytes"] == push_total


def test_duplicate_push_is_acked_not_applied():
    ps, rows = make_ps()
    s = hello(ps, 0)
    call(ps, wire.Pull(s))
    push(ps, s, 0, 0)
    theta = ps.theta.copy()
    ack, _ = push(ps, s, 0, 0)
    assert isinstance(ack, wire.Ack) and not ack.applied and ps.version == 1
    np.testing.assert_array_equal(ps.theta, theta)


@pytest.mark.parametrize("values,idx,problem", [
    (np.ones(2, np.float32), np.array([0, 99], np.uint32), "out of range"),
    (np.ones(2, np.float32), np.array([3, 1], np.uint32), "strictly increasing"),
    (np.array([1, np.nan], np.float32), np.array([0, 1], np.uint32), "NaN"),
    (np.ones(5, np.float32), None, "dense push has 5"),
])
def test_bad_payload_rejected_and_theta_untouched(values, idx, problem):
    ps, _ = make_ps()
    s = hello(ps, 0)
    call(ps, wire.Pull(s))
    err, _ = call(ps, wire.Push(s, 0, 0, values, idx))
    assert isinstance(err, wire.Error) and problem in err.message
    assert ps.version == 0 and not ps.theta.any()


def test_unknown_session_and_bad_device_refused():
    ps, _ = make_ps()
    err, _ = call(ps, wire.Pull("nope"))
    assert err.code == "unknown-session"
    err, _ = call(ps, wire.Hello(9, "", 0))
    assert err.code == "bad-device"
    s = hello(ps, 2)
    s2 = hello(ps, 2)   # re-hello: the old session is dead
    assert call(ps, wire.Pull(s))[0].code == "unknown-session"
    assert isinstance(call(ps, wire.Pull(s2))[0], wire.Model)


def test_malformed_frames_counted_and_answered():
    ps, _ = make_ps()
    reply = ps.process(b"p", [b"garbage"])
    assert wire.decode(reply).code == "bad-magic" and ps.meter.rejected == 1
    assert ps.meter.ingress_bytes == len(b"garbage")


def test_crash_freezes_device_for_good():
    ps, rows = make_ps(crash_probability=1.0)
    s = hello(ps, 1)
    call(ps, wire.Pull(s))
    ack, _ = push(ps, s, 0, 0)
    assert ack.freeze and rows["frozen"] == [1]
    assert [e["event"] for e in rows["events"]][-1] == "crash"
    assert call(ps, wire.Pull(s))[0].code == "frozen"
    assert call(ps, wire.Hello(1, "", 1))[0].code == "frozen"   # a crashed device may not rejoin
    assert ps.version == 1


def test_crash_draws_are_reproducible():
    def crashes(seed):
        ps, rows = make_ps(crash_probability=0.3, seed=seed)
        s = hello(ps, 0)
        out = []
        for i in range(30):
            call(ps, wire.Pull(s))
            out.append(push(ps, s, i, ps.version)[0].freeze)
            if out[-1]:
                break
        return out
    assert crashes(1) == crashes(1)


def test_state_restored_into_a_new_ps_continues_where_it_was():
    """``state()`` / ``restore()`` (what a checkpoint keeps): Θ, version, frozen devices, crash streams
    and counters come back; sessions don't, so a device says hello again."""
    def run(ps, pushes):
        s = hello(ps, 0)
        out = []
        for _ in range(pushes):
            call(ps, wire.Pull(s))
            out.append(push(ps, s, ps.version, ps.version)[0].freeze)
            if out[-1]:
                break
        return out
    ps, rows = make_ps(crash_probability=0.2, seed=0)
    run(ps, 4)
    state, theta, rule_state = ps.state(), ps.theta.copy(), ps.rule.state_dict()
    expected = run(ps, 6)
    again, _ = make_ps(crash_probability=0.2, seed=0)
    again.restore(state, theta, rule_state)
    assert again.version == 4 and np.array_equal(again.theta, theta)
    assert again.meter.ingress_bytes == state["meter"]["ingress_bytes"] > 0
    assert call(again, wire.Pull("no-such-session"))[0].code == "unknown-session"
    assert run(again, 6) == expected == [False, True]     # the same crash draw as without the restart
    with pytest.raises(ValueError, match="parameters"):
        again.restore(state, np.zeros(N + 1, np.float32), rule_state)


def test_stop_after_I_updates_and_snapshots_every_k():
    ps, rows = make_ps(stop_updates=4, eval_every=2)
    s = hello(ps, 0)
    for i in range(4):
        call(ps, wire.Pull(s))
        push(ps, s, i, i)
    assert ps.stopped and [v for v, _, _ in rows["snap"]] == [2, 4]
    assert rows["snap"][0][2]["ingress_bytes"] > 0
    assert isinstance(call(ps, wire.Pull(s))[0], wire.Stop)


def test_adacomp_snapshot_taken_at_pull():
    ps, rows = make_ps(AdaComp)
    s0, s1 = hello(ps, 0), hello(ps, 1)
    call(ps, wire.Pull(s0))
    call(ps, wire.Pull(s1))
    push(ps, s0, 0, 0, idx=(0, 1))
    push(ps, s1, 0, 0, idx=(1, 2))
    assert rows["updates"][1]["sigma_max"] == 1 and rows["updates"][1]["sigma_mean"] == 0.5


def test_a_device_that_leaves_is_not_silent_and_comes_back_with_a_new_session():
    """Availability churn on a real runtime (docker/churn.py): ``leave`` ends the session — the device
    is not reported silent while away, its old session is refused, and its hello afresh is welcome."""
    ps, rows = make_ps()
    s = hello(ps, 2)
    ps.leave(2)
    assert ps.silent_devices(-1.0) == []
    reply, _ = call(ps, wire.Pull(s))
    assert isinstance(reply, wire.Error) and reply.code == "unknown-session"
    s2 = hello(ps, 2)
    assert s2 != s and isinstance(push(ps, s2, 0, 0)[0], wire.Ack)
    assert [r["event"] for r in rows["events"] if r["device"] == 2] == ["hello", "hello"]
