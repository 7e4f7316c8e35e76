"""The engine ↔ node agent message set (runtime.swarm.agents: service): every documented message
round-trips, and decoding is total — any frames either decode to a well-typed message or raise
ProtocolError, never anything else."""
import json
import random

import pytest

from edgebed.emulator.runtimes.swarm import protocol
from edgebed.emulator.runtimes.swarm.protocol import VERSION, ProtocolError, decode, encode

pytestmark = pytest.mark.timeout(30)

COUNTERS = {"uplink_bytes": 10, "downlink_bytes": 20, "uplink_packets": 1, "downlink_packets": 2}
VALID = {
    "hello": {"node": "n1", "container": "edgebed-r-agents.n1.t", "version": 1},
    "shaped": {"device": 3, "entry": {"ifname": "eth1", "qdiscs": []}},
    "report": {"t": 12.5, "tasks": {"3": {"state": "running", "exit_code": None}}, "counters": {"3": COUNTERS}},
    "ack": {"req": 7, "ok": False, "error": "no such container"},
    "error": {"message": "no route", "device": None},
    "logs": {"device": 3, "text": "hello\n"},
    "bye": {"reason": "the engine said bye"},
    "setup": {"services": [{"name": "s", "class": "edge", "devices": [0, 1]}], "classes": {"edge": {}},
              "ps_host": "10.0.0.1", "downlink": True, "report_every": 0.5},
    "quota": {"req": 1, "device": 0, "cpus": 0.5},
    "freeze": {"req": 2, "device": 0},
    "signal": {"req": 3, "device": 0, "sig": 15},
    "ping": {},
}


def test_every_message_round_trips_and_reports_are_keyed_by_device():
    assert set(VALID) == set(protocol.SCHEMA)
    for kind, fields in VALID.items():
        msg = decode(encode(kind, **fields))
        assert msg.kind == kind
    rep = decode(encode("report", **VALID["report"]))
    assert rep["counters"] == {3: COUNTERS} and rep["tasks"] == {3: {"state": "running", "exit_code": None}}


@pytest.mark.parametrize("frames, why", [
    ([VERSION], "expected 2 frames"),
    ([b"edgebed-swarm-agent/0", b"{}"], "version"),
    ([VERSION, b"\xff\xfe"], "not JSON"),
    ([VERSION, b"[1, 2]"], "string 'type'"),
    ([VERSION, b'{"type": "reboot"}'], "unknown message type"),
    ([VERSION, b'{"type": "freeze", "req": 1}'], "missing ['device']"),
    ([VERSION, b'{"type": "ping", "x": 1}'], "unexpected ['x']"),
    ([VERSION, b'{"type": "freeze", "req": true, "device": 1}'], "freeze.req"),
    ([VERSION, b'{"type": "quota", "req": 1, "device": 1, "cpus": "1"}'], "quota.cpus"),
    ([VERSION, json.dumps({"type": "report", "t": 1, "tasks": {"x": {}}, "counters": {}}).encode()], "not an integer"),
    ([VERSION, json.dumps({"type": "report", "t": 1, "tasks": {}, "counters": {"1": {**COUNTERS, "uplink_bytes": -1}}}).encode()], "non-negative"),
    ([VERSION, b"[" * 100000 + b"]" * 100000], "not JSON"),
    ([VERSION, b" " * (protocol.MAX_BYTES + 1)], "bytes (max"),
])
def test_malformed_messages_are_refused_with_a_reason(frames, why):
    with pytest.raises(ProtocolError, match=why.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        decode(frames)


def test_decode_is_total_on_garbage_and_on_mutations_of_valid_messages():
    rng = random.Random(25)
    values = [None, True, 0, -1, 2**70, 1.5, "", "x", [], [1], {}, {"a": 1}, {"1": None}]
    for _ in range(3000):
        if rng.random() < 0.3:
            frames = [rng.choice([VERSION, b"", b"\x00" * 3]), bytes(rng.randrange(256) for _ in range(rng.randrange(40)))]
            frames = frames[: rng.randrange(4)]
        else:
            kind = rng.choice(list(VALID))
            obj = {"type": kind, **json.loads(json.dumps(VALID[kind]))}
            key = rng.choice(list(obj) + ["extra"])
            obj[key] = rng.choice(values)
            frames = [VERSION, json.dumps(obj).encode()]
        try:
            decode(frames)
        except ProtocolError:
            pass
