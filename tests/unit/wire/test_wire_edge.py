"""Edge validation: what a peer may put in a header, and what the PS does with sessions, seqs, empties."""
import json

import numpy as np
import pytest

from edgebed import wire
from edgebed.ps.rules import RULES
from edgebed.ps.server import ParameterServer, PSConfig

H = wire._PREFIX


def head(mtype: int, fields: dict, raw: str | None = None) -> bytes:
    return H.pack(b"EB", 1, mtype) + (raw or json.dumps(fields)).encode()


@pytest.mark.parametrize("frames, what", [
    ([head(1, {"device": 1, "speed_class": "\ud800", "arrays": []})], "not valid UTF-8"),
    ([head(1, {"device": 1, "speed_class": "x" * 257, "arrays": []})], "at most 256"),
    ([head(8, {"session": "s", "reason": "x" * 4097, "arrays": []})], "at most 4096"),
    ([head(1, {"device": -1, "arrays": []})], "outside 0..2**63-1"),
    ([head(1, {"device": 2 ** 63, "arrays": []})], "outside 0..2**63-1"),
    ([head(5, {}, raw='{"session":"s","seq":0,"version":0,"loss":Infinity,"arrays":[["values","<f4",[1]]]}'),
      np.zeros(1, np.float32)], "finite"),
    ([head(5, {"session": "s", "seq": 0, "version": 0, "loss": 10 ** 400, "arrays": [["values", "<f4", [1]]]}),
      np.zeros(1, np.float32)], "float64"),
    ([head(3, {"session": "s", "arrays": []})] + [b""] * 10, "at most 3"),
])
def test_edge_refuses(frames, what):
    with pytest.raises(wire.WireError) as info:
        wire.decode(frames)
    assert what in str(info.value)


def test_int_loss_and_null_loss_become_floats():
    frames = [head(5, {"session": "s", "seq": 0, "version": 0, "loss": 10 ** 19, "arrays": [["values", "<f4", [1]]]}),
              np.zeros(1, np.float32)]
    assert wire.decode(frames).loss == 1e19 and isinstance(wire.decode(frames).loss, float)


def make_ps(rule="asgd"):
    theta = np.zeros(8, np.float32)
    return ParameterServer(PSConfig(n_devices=2, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c"), theta,
                           RULES[rule](theta, 0.1))


def ask(ps, peer, msg):
    return wire.decode(ps.process(peer, wire.encode(msg)))


def test_session_is_bound_to_the_peer_that_opened_it():
    ps = make_ps()
    s = ask(ps, b"A", wire.Hello(0)).session
    assert ask(ps, b"B", wire.Pull(s)).code == "unknown-session"
    assert isinstance(ask(ps, b"A", wire.Pull(s)), wire.Model)
    assert ps.errors == {"unknown-session": 1}


def test_a_hijackers_seq_does_not_block_the_device():
    ps = make_ps()
    thief = ask(ps, b"T", wire.Hello(0)).session
    ask(ps, b"T", wire.Pull(thief))
    assert ask(ps, b"T", wire.Push(thief, 2 ** 62, 0, np.ones(8, np.float32))).applied
    honest = ask(ps, b"H", wire.Hello(0)).session        # the device takes its slot back
    ask(ps, b"H", wire.Pull(honest))
    assert ask(ps, b"H", wire.Push(honest, 7, 1, np.ones(8, np.float32))).applied
    assert ps.version == 2


def test_empty_push_is_refused_and_not_counted_except_as_a_dynamic_averaging_report():
    ps = make_ps()
    s = ask(ps, b"A", wire.Hello(0)).session
    ask(ps, b"A", wire.Pull(s))
    reply = ask(ps, b"A", wire.Push(s, 0, 0, np.empty(0, np.float32), np.empty(0, np.uint32)))
    assert reply.code == "bad-payload" and "empty push" in reply.message
    assert ps.version == 0 and ps.devices[0].last_seq == -1     # refused: sequence state unchanged
    assert RULES["dynamic-averaging"].empty_push_is_report


def test_a_busy_peer_gets_no_model():
    ps = make_ps()
    s = ask(ps, b"A", wire.Hello(0)).session
    ps.busy_peers.add(b"A")
    assert ask(ps, b"A", wire.Pull(s)).code == "busy"
    ps.busy_peers.discard(b"A")
    assert isinstance(ask(ps, b"A", wire.Pull(s)), wire.Model)
