"""The PS's descriptor budget (ps/fdbudget.py): room below the limit, and shutdown only of its own sockets."""
from __future__ import annotations

import resource
import socket

import pytest

from edgebed.ps.fdbudget import FdBudget, open_descriptors, raise_soft_limit, reserve_for, shut

pytestmark = pytest.mark.timeout(10)


def test_the_budget_leaves_the_reserve_and_what_the_process_holds():
    held = open_descriptors()
    budget = FdBudget(limit=1024)
    assert budget.reserve == reserve_for(1024) == 128
    assert budget.allowed(0) == 1024 - held - 128


def test_the_soft_limit_is_raised_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        assert raise_soft_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= min(hard, 1 << 20)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_shut_ends_a_connection_on_the_ps_port_and_nothing_else(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    with open(tmp_path / "table", "wb") as f:   # a file that took a closed connection's number
        assert not shut(f.fileno(), port)
    assert not shut(conn.fileno(), port + 1)     # a socket, but not on the PS's port
    assert shut(conn.fileno(), port)
    client.settimeout(2)
    assert client.recv(1) == b""                 # the peer sees the PS hang up
    for s in (client, conn, listener):
        s.close()
