"""Secure mode: ZeroMQ CURVE encryption with a per-run server key and an allow-list of device keys.

``generate(run_dir, n)`` writes ``run_dir/keys/`` (mode 0700): ``server.key`` (the PS keypair),
``device-NNNN.key`` (that device's keypair plus the server's public key) and ``allowed.json`` (the
device public keys), every file 0600. The PS side (``CurveServer``) runs a ZAP handler
(``zmq.auth.ThreadAuthenticator``) on the serve loop's context that admits exactly the allowed
keys: a peer with any other key never completes the handshake, so it gets no reply at all. A device
finds its key file through the environment variable ``EDGEBED_CURVE_KEY`` (``client_from_env``).

A key is bound to its device: the serve loop reads each message's ZAP "User-Id" (the client key) and
the PS refuses a hello for another device (``wrong-key``). Limit: keys live in the run directory, so
whoever can read it can join the run as those devices.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Optional

import zmq

from ..atomic import replacing

ENV_KEY = "EDGEBED_CURVE_KEY"
KEYS_DIR = "keys"


def _write_private(path: Path, data: dict) -> None:
    """Create ``path`` with mode 0600 from the start (no window where it is world-readable)."""
    with replacing(path, mode=0o600) as tmp:
        tmp.write_text(json.dumps(data))


def device_key_path(run_dir: str | Path, device: int) -> Path:
    return Path(run_dir) / KEYS_DIR / f"device-{device:04d}.key"


def generate(run_dir: str | Path, n_devices: int) -> Path:
    """Write a fresh server keypair and one keypair per device into ``run_dir/keys``; returns it.

    Existing keys are kept (a resumed run reuses them, so running devices stay admitted)."""
    keys = Path(run_dir) / KEYS_DIR
    keys.mkdir(mode=0o700, exist_ok=True)
    os.chmod(keys, 0o700)
    server = keys / "server.key"
    if not server.exists():
        pub, sec = zmq.curve_keypair()
        _write_private(server, {"public": pub.decode(), "secret": sec.decode()})
    server_pub = load(server)["public"]
    allowed = []
    for d in range(n_devices):
        path = device_key_path(run_dir, d)
        if not path.exists():
            pub, sec = zmq.curve_keypair()
            _write_private(path, {"public": pub.decode(), "secret": sec.decode(), "server_public": server_pub,
                                  "device": d})
        allowed.append(load(path)["public"])
    _write_private(keys / "allowed.json", {"allowed": allowed})
    return keys


def load(path: str | Path) -> dict:
    """A key file: {"public", "secret"[, "server_public", "device"]}, Z85 strings."""
    return json.loads(Path(path).read_text())


class _AllowList:
    def __init__(self, keys: set[bytes]):
        self.keys = keys
        self.gate = None   # ps.gate.ConnectionGate of the socket: its cap on connections

    def callback(self, domain: str, key: bytes) -> bool:   # called by the ZAP handler, key in Z85
        return key in self.keys and (self.gate is None or self.gate.admit())


class CurveServer:
    """ZAP authenticator + server-side socket set-up for one run. ``start`` before binding, ``stop`` after."""

    def __init__(self, keys_dir: str | Path, context: Optional[zmq.Context] = None):
        self.keys_dir = Path(keys_dir)
        self.ctx = context or zmq.Context.instance()
        self.server = load(self.keys_dir / "server.key")
        allowed = load(self.keys_dir / "allowed.json")["allowed"]   # device d's public key at index d
        self.allowed = _AllowList({k.encode() for k in allowed})
        # The ZAP handler labels each connection with its key (ZeroMQ's "User-Id", Z85): the serve
        # loop looks the device up here, and the PS admits a hello only for that device.
        self.device_of = {k: d for d, k in enumerate(allowed)}
        self._auth = None

    def start(self) -> "CurveServer":
        from zmq.auth.thread import ThreadAuthenticator
        self._auth = ThreadAuthenticator(self.ctx)
        self._auth.start()
        self._auth.configure_curve_callback("*", credentials_provider=self.allowed)
        return self

    def configure_socket(self, sock: zmq.Socket) -> None:
        """For ZmqServer(configure_socket=...): CURVE server with this run's keypair."""
        sock.curve_secretkey = self.server["secret"].encode()
        sock.curve_publickey = self.server["public"].encode()
        sock.curve_server = True

    def stop(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None


def client_configurer(key_path: str | Path) -> Callable[[zmq.Socket], None]:
    """For Channel(configure_socket=...): CURVE client with a device key file."""
    key = load(key_path)

    def configure(sock: zmq.Socket) -> None:
        sock.curve_secretkey = key["secret"].encode()
        sock.curve_publickey = key["public"].encode()
        sock.curve_serverkey = key["server_public"].encode()
    return configure


def client_from_env() -> Optional[Callable[[zmq.Socket], None]]:
    """The CURVE set-up for this device if EDGEBED_CURVE_KEY names a key file, else None (plaintext)."""
    path = os.environ.get(ENV_KEY)
    return client_configurer(path) if path else None
