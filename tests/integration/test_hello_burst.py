"""Hello burst at start-up: the engine thread reads PS state while the serve thread adds devices."""
import sys
import time
import threading

import numpy as np
import pytest
import zmq

from edgebed import wire
from edgebed.ps.rules import ASGD
from edgebed.ps.serve import ZmqServer
from edgebed.ps.server import ParameterServer, PSConfig

pytestmark = pytest.mark.timeout(120)

N_DEVICES, CLIENTS, ROUNDS = 1000, 8, 3


def _burst(endpoint: str, devices: range, ready: threading.Barrier, errors: list) -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        ready.wait()
        todo = list(devices)
        window = 4   # requests in flight per socket (an agent has 1), within the PS's per-peer send queue
        for d in todo[:window]:           # pipelined (within the PS's per-peer send queue)
            sock.send_multipart(wire.encode(wire.Hello(d, "fast", 0)))
        for i in range(len(todo)):
            if not sock.poll(20000):
                errors.append("no Welcome within 20 s")
                return
            reply = wire.decode(sock.recv_multipart())
            if not isinstance(reply, wire.Welcome):
                errors.append(repr(reply))
            if i + window < len(todo):
                sock.send_multipart(wire.encode(wire.Hello(todo[i + window], "fast", 0)))
    finally:
        sock.close()


def test_engine_reads_during_a_hello_burst_never_fail():
    """What the engine's run loop reads on its own thread — silent devices, the traffic meter — while
    a thousand devices say hello: no 'dictionary changed size during iteration', ever."""
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)           # many more thread switches: the race shows in every round
    failures, client_errors, reads = [], [], 0
    try:
        for _ in range(ROUNDS):
            theta = np.zeros(100, np.float32)
            ps = ParameterServer(PSConfig(n_devices=N_DEVICES, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                                          class_of=lambda d: f"class-{d % 3}"),
                                 theta, ASGD(theta, 0.1))
            server = ZmqServer(ps).start()
            ready = threading.Barrier(CLIENTS + 1)
            per = N_DEVICES // CLIENTS
            clients = [threading.Thread(target=_burst, args=(server.endpoint, range(k * per, (k + 1) * per),
                                                              ready, client_errors)) for k in range(CLIENTS)]
            for c in clients:
                c.start()
            ready.wait()
            while any(c.is_alive() for c in clients):
                try:
                    ps.silent_devices(0.0)
                    ps.meter.to_dict()
                except RuntimeError as err:
                    failures.append(str(err))
                reads += 1
                time.sleep(0.0005)        # the engine reads between ticks, it doesn't spin on the lock
            for c in clients:
                c.join()
            server.stop()
            # first: a client that gave up explains a missing device (and the PS's refusals, if any, why)
            assert client_errors == [], (client_errors, ps.errors)
            assert len(ps.meter.to_dict()["by_device"]) == N_DEVICES
    finally:
        sys.setswitchinterval(old_interval)
    assert client_errors == []
    assert reads > 0
    assert failures == [], f"{len(failures)} of {reads} reads failed, first: {failures[0]}"
