"""How edgebed reaches a Docker engine: a docker SDK client, or one clear error and nothing leaked.

The docker SDK opens a Unix socket per connection and, when the connect is refused (no dockerd, or a
stale socket file after a reboot), drops it unclosed: a ResourceWarning at some later garbage
collection, far from the cause. So a Unix endpoint is probed first with a socket this module closes,
and an engine that does not answer raises :class:`EngineUnreachable` before the SDK is asked. A TCP
endpoint (``tcp://host:2376``) goes to the SDK as it is.
"""
from __future__ import annotations

import os
import socket
from typing import Optional

LOCAL = "unix:///var/run/docker.sock"


class EngineUnreachable(ConnectionError):
    """The Docker engine at an endpoint does not answer."""


def endpoint(url: Optional[str] = None) -> str:
    """The engine endpoint: ``url``, else ``DOCKER_HOST``, else the local socket."""
    return url or os.environ.get("DOCKER_HOST") or LOCAL


def probe(url: Optional[str] = None, timeout: float = 5.0) -> None:
    """Raise :class:`EngineUnreachable` when nothing accepts a connection at a Unix endpoint."""
    url = endpoint(url)
    if not url.startswith("unix://"):
        return
    path = url[len("unix://"):]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
        except OSError as err:
            raise EngineUnreachable(f"{path}: {err.strerror or err}") from None


def client(url: Optional[str] = None, timeout: float = 120):
    """A docker SDK client for the engine at ``url`` (default :func:`endpoint`)."""
    import docker
    probe(url)
    if url is None:
        return docker.from_env(timeout=timeout)
    return docker.DockerClient(base_url=url, timeout=timeout)
