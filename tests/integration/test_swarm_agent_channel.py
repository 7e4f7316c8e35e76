"""The engine's end of the node agents' channel (runtime.swarm.agents: service) on real loopback
sockets: a peer that sends garbage, messages before its hello or under another node's name is
dropped message by message while the run goes on; requests are answered by acks, and fail at once
to an agent that ended or fell silent; bye ends it."""
import time

import pytest
import zmq

from edgebed.emulator.runtimes.swarm import protocol
from edgebed.emulator.runtimes.swarm.remote import AgentHub, HubError

pytestmark = pytest.mark.timeout(30)
COUNTERS = {"uplink_bytes": 1000, "downlink_bytes": 50, "uplink_packets": 3, "downlink_packets": 1}


def agent(hub, node):
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.ROUTING_ID, node.encode())
    s.setsockopt(zmq.LINGER, 0)
    s.connect(hub.endpoint)
    return s


def recv(sock, kind, timeout=5.0):
    """The next message of ``kind`` the engine sent this agent (pings skipped)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sock.poll(100):
            msg = protocol.decode(sock.recv_multipart())
            if msg.kind == kind:
                return msg
    raise AssertionError(f"no {kind} within {timeout} s")


def test_garbage_is_dropped_and_the_channel_goes_on():
    samples = []
    hub = AgentHub("127.0.0.1", on_counters=lambda d, t, c: samples.append((d, t, c["uplink_bytes"])))
    a = agent(hub, "node-a")
    try:
        a.send_multipart(protocol.encode("report", t=1.0, tasks={}, counters={"0": COUNTERS}))  # before hello
        a.send_multipart([b"junk"])
        a.send_multipart([protocol.VERSION, b"{not json"])
        a.send_multipart(protocol.encode("hello", node="node-b", container="", version=1))       # wrong name
        a.send_multipart(protocol.encode("hello", node="node-a", container="t", version=1))
        a.send_multipart(protocol.encode("quota", req=1, device=0, cpus=1.0))                    # engine's kind
        a.send_multipart([protocol.VERSION, b'{"type": "report", "t": 2, "tasks": {}, "counters": {"0": {"uplink_bytes": "x"}}}'])
        a.send_multipart(protocol.encode("report", t=2.0, tasks={"0": {"state": "running", "exit_code": None}},
                                         counters={"0": COUNTERS}))
        assert hub.wait_for(lambda: 0 in hub.counters, 5)
        assert hub.dropped == 6 and list(hub.hello) == ["node-a"]
        assert samples == [(0, 2.0, 1000)] and hub.tasks[0]["state"] == "running"
        hub.send_setup(services=[], classes={}, ps_host="127.0.0.1", downlink=True, report_every=0.5)
        assert recv(a, "setup")["ps_host"] == "127.0.0.1"
        # a request is answered by its ack; a refusal becomes HubError; silence a timeout
        import threading
        def answer(ok):
            m = recv(a, "freeze")
            a.send_multipart(protocol.encode("ack", req=m["req"], ok=ok, error="" if ok else "no such container"))
        t = threading.Thread(target=answer, args=(True,))
        t.start()
        hub.request("node-a", "freeze", device=0)
        t.join()
        t = threading.Thread(target=answer, args=(False,))
        t.start()
        with pytest.raises(HubError, match="no such container"):
            hub.request("node-a", "freeze", device=0)
        t.join()
        with pytest.raises(HubError, match="no answer"):
            hub.request("node-a", "signal", timeout=0.3, device=0, sig=15)
        hub.seen["node-a"] -= 60                 # silent for a minute: not asked, no 20 s wait
        t0 = time.monotonic()
        with pytest.raises(HubError, match="silent"):
            hub.request("node-a", "signal", device=0, sig=9)
        assert time.monotonic() - t0 < 1
        hub.seen["node-a"] += 60                 # heard again
        t = threading.Thread(target=lambda: (recv(a, "bye"), a.send_multipart(protocol.encode("bye", reason="asked"))))
        t.start()
        assert hub.bye(timeout=5) == [] and hub.byes == {"node-a": "asked"}
        t.join()
        with pytest.raises(HubError, match="ended"):
            hub.request("node-a", "signal", device=0, sig=9)
    finally:
        a.close()
        hub.close()
