"""PS under bad luck and bad peers: bad payloads, duplicates, stale sessions, silence, checkpoint/restore."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed import wire
from edgebed.ps import checkpoint
from edgebed.ps.rules import RULES
from edgebed.ps.server import Hooks, ParameterServer, PSConfig

N = 32


def make_ps(rule: str = "adacomp", **cfg) -> ParameterServer:
    theta = np.linspace(-1, 1, N, dtype=np.float32)
    clock = [0.0]
    ps = ParameterServer(PSConfig(n_devices=3, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c", **cfg),
                         theta, RULES[rule](theta, 0.1), Hooks(clock=lambda: (clock[0], float("nan"))))
    ps.test_clock = clock
    return ps


def call(ps, msg) -> wire.Message | None:
    out = ps.process(b"peer", wire.encode(msg))
    return None if out is None else wire.decode(out)


def join(ps, device: int = 0, attempt: int = 0) -> str:
    welcome = call(ps, wire.Hello(device, "c", attempt))
    assert isinstance(welcome, wire.Welcome)
    assert isinstance(call(ps, wire.Pull(welcome.session)), wire.Model)
    return welcome.session


def sparse_push(session, seq, version=0, idx=(1, 5, 9), vals=(0.5, -0.5, 1.0), **kw):
    return wire.Push(session, seq, version, np.array(vals, dtype=kw.get("vdtype", np.float32)),
                     np.array(idx, dtype=kw.get("idtype", np.uint32)), 0.1)


@pytest.mark.parametrize("bad, why", [
    (dict(idx=(1, 5, N)), "out of range"),
    (dict(idx=(5, 1, 9)), "strictly increasing"),
    (dict(idx=(1, 1, 9)), "strictly increasing"),
    (dict(vals=(0.5, float("nan"), 1.0)), "NaN or Inf"),
    (dict(vals=(0.5, float("inf"), 1.0)), "NaN or Inf"),
    (dict(vals=(0.5, 3e30, 1.0)), "max_step"),
    (dict(idtype=np.int32, idx=(-1, 5, 9)), "uint32"),
    (dict(vdtype=np.uint32, vals=(1, 2, 3)), "float32"),
    (dict(idx=(1, 5)), "indices for"),
    (dict(version=7), "version 7"),
])
def test_bad_payload_is_refused_counted_and_harmless(bad, why):
    ps = make_ps()
    s = join(ps)
    theta, counts = ps.theta.copy(), ps.rule.counts.copy()
    reply = call(ps, sparse_push(s, 0, **bad))
    assert isinstance(reply, wire.Error) and reply.code == "bad-payload" and why in reply.message
    assert ps.version == 0 and ps.meter.rejected == 1 and ps.errors == {"bad-payload": 1}
    np.testing.assert_array_equal(ps.theta, theta)
    np.testing.assert_array_equal(ps.rule.counts, counts)
    # The device is not punished for one bad message: a good push still goes through.
    assert call(ps, sparse_push(s, 0)).applied


@pytest.mark.parametrize("values, ok", [
    ([0.9e6] * N, True),                      # Σv² far over (max/2)²: the exact test accepts
    ([1e6] * N, True),                        # exactly at the limit
    ([0.1] * (N - 1) + [1.0000001e6], False),  # one value just over it
    ([-1.0000001e6] + [0.0] * (N - 1), False),
    ([3e38] * N, False),                      # Σv² overflows float32: refused, no warning
    ([1e-30] * N, True),                      # Σv² underflows to 0
])
def test_value_range_check_is_exact_at_the_limit(values, ok):
    """The range check's one-pass Σv² shortcut never changes the answer of the exact min/max test."""
    ps = make_ps("asgd", max_abs_value=1e6)
    s = join(ps)
    theta = ps.theta.copy()
    reply = call(ps, wire.Push(s, 0, 0, np.array(values, dtype=np.float32)))
    if ok:
        assert isinstance(reply, wire.Ack) and reply.applied and ps.version == 1
    else:
        assert isinstance(reply, wire.Error) and "max_abs_value" in reply.message and ps.version == 0
        np.testing.assert_array_equal(ps.theta, theta)


def test_dense_push_of_wrong_length_and_oversized_message_are_refused():
    ps = make_ps("asgd", max_message_bytes=4096)
    s = join(ps)
    reply = call(ps, wire.Push(s, 0, 0, np.ones(N - 1, np.float32)))
    assert isinstance(reply, wire.Error) and "dense push has 31 values" in reply.message
    big = wire.Push(s, 1, 0, np.ones(2000, np.float32), np.arange(2000, dtype=np.uint32))
    reply = wire.decode(ps.process(b"p", wire.encode(big)))
    assert isinstance(reply, wire.Error) and reply.code == "too-large"
    assert ps.meter.rejected == 2 and ps.version == 0
    assert ps.meter.by_kind["malformed"]["in_msgs"] == 1     # counted as ingress, as a malformed message


def test_the_message_cap_follows_the_model_and_still_refuses_what_no_model_of_its_size_sends():
    """Issue #38: a constant 64 MiB cap refused any dense push of more than 16.7 M entries (ResNet-50 is
    25.6 M) and let a 32-entry model receive 64 MiB messages; the cap is now ``wire.message_cap(|Θ|)``."""
    ps = make_ps("asgd")
    assert ps.config.max_message_bytes == wire.message_cap(N) == 8 * N + wire.MAX_HEADER_BYTES + wire.MESSAGE_MARGIN_BYTES
    assert wire.message_cap(25_557_032) > 4 * 25_557_032 + wire.MAX_HEADER_BYTES > 64 * 2 ** 20
    s = join(ps)
    # every entry, sparse (the largest message a model of N entries needs) is applied
    reply = call(ps, wire.Push(s, 0, 0, np.full(N, 0.01, np.float32), np.arange(N, dtype=np.uint32)))
    assert isinstance(reply, wire.Ack) and reply.applied and ps.version == 1
    over = np.zeros(ps.config.max_message_bytes // 4, np.float32)   # more bytes than the cap, with the header
    reply = call(ps, wire.Push(s, 1, 1, over))
    assert isinstance(reply, wire.Error) and reply.code == "too-large" and ps.version == 1


def test_duplicate_push_is_acked_not_applied_twice():
    ps = make_ps()
    s = join(ps)
    push = sparse_push(s, 0)
    first = call(ps, push)
    theta = ps.theta.copy()
    again = call(ps, push)                    # the network delivered it twice / a replay
    negative = call(ps, sparse_push(s, -1))   # not a sequence number: refused at the edge
    assert first.applied and first.version == 1
    assert isinstance(again, wire.Ack) and not again.applied and again.version == 1
    assert isinstance(negative, wire.Error) and negative.code == "bad-field"
    assert ps.version == 1 and ps.devices[0].last_seq == 0
    np.testing.assert_array_equal(ps.theta, theta)
    assert int(ps.rule.counts.sum()) == 3     # per-parameter counters saw one update only


def test_unknown_and_stale_sessions_are_refused():
    ps = make_ps()
    reply = call(ps, sparse_push("deadbeefdeadbeef", 0))
    assert isinstance(reply, wire.Error) and reply.code == "unknown-session"
    old = join(ps, 0)
    assert call(ps, sparse_push(old, 0)).applied
    new = join(ps, 0, attempt=1)              # the device re-joins: the old session is dead
    assert new != old
    for msg in (sparse_push(old, 1, version=1), wire.Pull(old), wire.Heartbeat(old)):
        reply = call(ps, msg)
        assert isinstance(reply, wire.Error) and reply.code == "unknown-session"
    assert ps.version == 1
    # Sequence numbers belong to the session (an agent drops its push in flight when it re-joins, and
    # another peer's session must not be able to block this one): seq 0 is new here, its replay is not.
    assert call(ps, sparse_push(new, 0, version=1)).applied
    assert not call(ps, sparse_push(new, 0, version=1)).applied
    assert call(ps, sparse_push(new, 1, version=2)).applied and ps.version == 3


def test_frozen_device_cannot_rejoin_or_push():
    ps = make_ps(crash_probability=1.0)
    s = join(ps)
    assert call(ps, sparse_push(s, 0)).freeze
    for msg in (sparse_push(s, 1, version=1), wire.Hello(0, "c", 1)):
        reply = call(ps, msg)
        assert isinstance(reply, wire.Error) and reply.code == "frozen"
    assert ps.version == 1


def test_heartbeats_keep_an_idle_device_from_being_silent():
    ps = make_ps()
    a, b = join(ps, 0), join(ps, 1)
    ps.test_clock[0] = 50.0
    assert isinstance(call(ps, wire.Heartbeat(a)), wire.Ack)
    ps.test_clock[0] = 70.0
    assert ps.silent_devices(60.0) == [1]     # device 1 said nothing for 70 s; device 0 sent a heartbeat
    assert b


@pytest.mark.parametrize("rule", sorted(RULES))
def test_checkpoint_restore_round_trip(tmp_path, rule):
    ps = make_ps(rule, crash_probability=0.3, seed=4, checkpoint_every=2)
    ps.hooks.checkpoint = lambda p: checkpoint.save(p, tmp_path, extra={"endpoint": "tcp://127.0.0.1:1"})
    sessions = [join(ps, d) for d in range(3)]
    seq = [0, 0, 0]
    for i in range(6):
        d = i % 3
        if ps.devices[d].frozen:
            continue
        call(ps, sparse_push(sessions[d], seq[d], version=ps.version))
        seq[d] += 1
    ckpt = checkpoint.load(tmp_path)
    assert ckpt.version % 2 == 0 and ckpt.version == ps.version - ps.version % 2
    assert ckpt.meta["extra"] == {"endpoint": "tcp://127.0.0.1:1"}

    fresh = make_ps(rule, crash_probability=0.3, seed=4)
    checkpoint.restore(fresh, ckpt)
    assert fresh.version == ckpt.version and fresh.sessions == {}
    np.testing.assert_array_equal(fresh.theta, ckpt.theta)
    assert fresh.rule.theta is fresh.theta    # restored in place: the rule still updates the PS's Θ
    for k, v in ckpt.rule_state.items():
        np.testing.assert_array_equal(fresh.rule.state_dict()[k], v)
    assert fresh.meter.push_bytes == ckpt.meta["meter"]["push_bytes"] > 0
    # Sessions are gone: devices must say hello again; their seq numbers and frozen state are kept.
    reply = call(fresh, wire.Pull(sessions[0]))
    assert isinstance(reply, wire.Error) and reply.code == "unknown-session"
    for d in range(3):
        assert fresh.devices[d].last_seq == ckpt.meta["devices"][str(d)]["last_seq"]
        if fresh.devices[d].frozen:
            assert call(fresh, wire.Hello(d, "c", 1)).code == "frozen"
        else:
            s = join(fresh, d, attempt=1)
            last = fresh.devices[d].last_seq
            if last >= 0:
                assert not call(fresh, sparse_push(s, last, version=fresh.version)).applied
            assert call(fresh, sparse_push(s, last + 1, version=fresh.version)).applied


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    ps = make_ps()
    s = join(ps)
    call(ps, sparse_push(s, 0))
    checkpoint.save(ps, tmp_path)
    call(ps, sparse_push(s, 1, version=1))

    def torn(f, **arrays):                    # the process dies in the middle of writing
        f.write(b"PK\x03\x04 half a file")
        raise KeyboardInterrupt
    monkeypatch.setattr(np, "savez", torn)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(ps, tmp_path)
    monkeypatch.undo()
    assert checkpoint.load(tmp_path).version == 1   # the previous checkpoint is intact
    with pytest.raises(FileNotFoundError, match="checkpoint: {every: k}"):
        checkpoint.load(tmp_path / "nothing")
