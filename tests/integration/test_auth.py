"""Secure mode: CURVE + ZAP allow-list on the real serve loop; strangers get nothing, bytes are ciphertext."""
from __future__ import annotations

import json
import os
import select
import socket
import stat
import threading

import numpy as np
import pytest
import zmq

from edgebed.device_agent.agent import Channel, PSUnreachable
from edgebed import wire
from edgebed.wire import auth
from edgebed.ps.rules import RULES
from edgebed.ps.serve import ZmqServer
from edgebed.ps.server import ParameterServer, PSConfig

MARKER = "edgebed-plaintext-marker-7f3a"


class Relay:
    """A raw TCP relay in front of the PS that keeps every byte it forwards (what an eavesdropper sees)."""

    def __init__(self, upstream_port: int):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream = upstream_port
        self.seen = bytearray()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.listener.settimeout(5)
        try:
            down, _ = self.listener.accept()
        except OSError:
            return
        up = socket.create_connection(("127.0.0.1", self.upstream))
        peers = {down: up, up: down}
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select(list(peers), [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    self.seen += data
                    peers[s].sendall(data)
        finally:
            down.close()
            up.close()

    def close(self):
        self._stop.set()
        self.thread.join(2)
        self.listener.close()


def _ps(n: int = 2) -> ParameterServer:
    theta = np.zeros(16, dtype=np.float32)
    return ParameterServer(PSConfig(n_devices=n, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c"),
                           theta, RULES["asgd"](theta, 0.1))


@pytest.fixture
def secure(tmp_path):
    keys = auth.generate(tmp_path, 2)
    ctx = zmq.Context()
    curve = auth.CurveServer(keys, ctx).start()
    server = ZmqServer(_ps(), context=ctx, configure_socket=curve.configure_socket,
                       device_of=curve.device_of).start()
    yield tmp_path, server, ctx
    server.stop()
    curve.stop()
    ctx.term()


def _hello(address: str, ctx, configure, timeout: float = 1.5, device: int = 0, marker: str = "c"):
    ch = Channel(address, timeout, context=ctx, configure_socket=configure)
    ch.sock.setsockopt(zmq.LINGER, 0)
    try:
        ch.send(wire.Hello(device, marker, 0))
        return ch.recv()[0]
    finally:
        ch.close()


def test_keys_are_private_files(tmp_path):
    keys = auth.generate(tmp_path, 3)
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
    files = sorted(p.name for p in keys.iterdir())
    assert files == ["allowed.json", "device-0000.key", "device-0001.key", "device-0002.key", "server.key"]
    for p in keys.iterdir():
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p
    dev = auth.load(keys / "device-0001.key")
    assert dev["server_public"] == auth.load(keys / "server.key")["public"]
    assert dev["public"] in json.loads((keys / "allowed.json").read_text())["allowed"]
    # A resumed run keeps its keys, so devices already running stay admitted.
    assert auth.generate(tmp_path, 3) == keys and auth.load(keys / "device-0001.key") == dev


def test_known_key_works(secure):
    run_dir, server, ctx = secure
    reply = _hello(server.endpoint, ctx, auth.client_configurer(auth.device_key_path(run_dir, 1)), device=1)
    assert isinstance(reply, wire.Welcome)
    assert server.ps.devices[1].session == reply.session


def test_a_key_says_hello_only_as_its_own_device(secure):
    run_dir, server, ctx = secure
    key0 = auth.client_configurer(auth.device_key_path(run_dir, 0))
    reply = _hello(server.endpoint, ctx, key0, device=1)           # device 0's key, device 1's id
    assert isinstance(reply, wire.Error) and reply.code == "wrong-key", reply
    assert "device 0's" in reply.message and 1 not in server.ps.devices
    assert isinstance(_hello(server.endpoint, ctx, key0, device=0), wire.Welcome)
    assert set(server.ps.devices) == {0} and server.ps.errors["wrong-key"] == 1


def test_unknown_key_and_plaintext_get_nothing(secure, tmp_path_factory):
    run_dir, server, ctx = secure
    stranger = tmp_path_factory.mktemp("stranger")
    pub, sec = zmq.curve_keypair()
    server_pub = auth.load(run_dir / "keys" / "server.key")["public"]
    (stranger / "k").write_text(json.dumps({"public": pub.decode(), "secret": sec.decode(),
                                            "server_public": server_pub}))
    with pytest.raises(PSUnreachable):
        _hello(server.endpoint, ctx, auth.client_configurer(stranger / "k"))
    with pytest.raises(PSUnreachable):
        _hello(server.endpoint, ctx, None)                   # no CURVE at all
    assert server.ps.devices == {} and server.ps.meter.messages_in == 0   # nothing reached the PS


@pytest.mark.parametrize("curve", [True, False])
def test_traffic_is_not_readable_on_the_wire(tmp_path, curve):
    keys = auth.generate(tmp_path, 1)
    ctx = zmq.Context()
    srv = auth.CurveServer(keys, ctx).start() if curve else None
    server = ZmqServer(_ps(1), context=ctx, configure_socket=srv.configure_socket if srv else None,
                       device_of=srv.device_of if srv else None).start()
    relay = Relay(int(server.endpoint.rsplit(":", 1)[1]))
    try:
        client = auth.client_configurer(auth.device_key_path(tmp_path, 0)) if curve else None
        reply = _hello(f"tcp://127.0.0.1:{relay.port}", ctx, client, timeout=5, marker=MARKER)
        assert isinstance(reply, wire.Welcome)
        assert server.ps.devices[0].attempt == 0
    finally:
        relay.close()
        server.stop()
        if srv:
            srv.stop()
        ctx.term()
    assert len(relay.seen) > 100
    # The control run (plaintext) proves the relay sees the marker; with CURVE it must not.
    assert (MARKER.encode() in bytes(relay.seen)) is (not curve)


@pytest.mark.timeout(120)
def test_a_secure_local_run_admits_each_agent_with_its_own_key(tmp_path):
    from edgebed.emulator.engine import Engine
    from edgebed.rundir import read_table
    from edgebed.scenario import parse_scenario
    sc = parse_scenario({"name": "curve-e2e", "seed": 1, "dataset": {"train_samples": 1000},
                         "model": {"name": "mlp"}, "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01},
                         "workers": {"n": 3, "classes": [{"name": "a", "share": 1.0}]},
                         "stop": {"updates": 150}, "eval": {"every": 150, "test_samples": 200},
                         "security": {"curve": True}, "runtime": {"name": "local"}})
    res = Engine(sc, out=tmp_path).run()
    assert res.summary["status"] == "complete", res.summary
    traffic = json.loads((res.path / "traffic.json").read_text())
    assert traffic["rejected"] == 0
    assert set(read_table(res.path, "updates")["device"]) == {0, 1, 2}


def test_runs_one_after_another_in_one_process_each_answer_their_own_handshakes(tmp_path):
    """Secure and plaintext runs in turn in one process (a notebook's loop): each run's transport has
    its own ZeroMQ context, so its ZAP handler (key authenticator or connection gate) is never taken
    by the one before, and each admits its devices through its gate. Before, a secure run's
    authenticator right after a plaintext run could find ZAP still taken, and fail to start."""
    from edgebed.emulator.runtimes.transport import SocketTransport
    client_ctx = zmq.Context()
    try:
        for i, secure in enumerate([False, True, False] * 4):
            run = tmp_path / f"run-{i}"   # the run directory: keys go to run/keys
            run.mkdir()
            t = SocketTransport(_ps(1), "tcp://127.0.0.1:0", curve_keys=run if secure else None, n_devices=1)
            try:
                configure = auth.client_configurer(run / auth.KEYS_DIR / "device-0000.key") if secure else None
                reply = _hello(t.endpoint, client_ctx, configure, timeout=5)
                assert isinstance(reply, wire.Welcome), (i, reply)
                assert t.server.gate.state()["admitted"] == 1, (i, t.server.gate.state())
                if i == 1:   # a stranger (no key) gets nothing
                    with pytest.raises(PSUnreachable):
                        _hello(t.endpoint, client_ctx, None, timeout=1)
            finally:
                t.stop()
    finally:
        client_ctx.term()
