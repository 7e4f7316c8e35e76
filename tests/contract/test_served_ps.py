"""Whatever the serve loop is handed as its PS has everything ``ps/serve.py`` asks of one: the real
``ParameterServer`` and the ingest benchmark's raw ceiling (``benchmarks/bench_ps.NullPS``). The names
are read from serve.py itself, so a new call there is checked without editing this test. Once the
ceiling was a hand-written stand-in that lacked ``unsent``: every raw round crashed and the dense
ratios had no ceiling beside them (issue 40)."""
from __future__ import annotations

import ast
import inspect

import pytest

from benchmarks import bench_ps
from edgebed.ps import serve
from edgebed.ps.server import ParameterServer


def _asked_of_ps() -> set[str]:
    """Attribute names serve.py reads on its PS: ``self.ps.X``, ``ps.X`` and ``lock = self.ps.lock``."""
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(serve))):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if (isinstance(base, ast.Name) and base.id == "ps") or (
                isinstance(base, ast.Attribute) and base.attr == "ps"):
            names.add(node.attr)
    return names


def test_serve_py_is_read():
    """The walk finds the calls the loop is known to make (else the test below checks nothing)."""
    assert {"process", "refuse", "tick", "unsent", "lock", "hooks", "config", "busy_peers"} <= _asked_of_ps()


def _real():
    ps, _, _ = bench_ps.make_ps("adacomp", 2)
    return ps


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", [_real, bench_ps.NullPS], ids=["ParameterServer", "NullPS"])
def test_every_served_ps_has_what_the_serve_loop_asks(make):
    ps = make()
    missing = sorted(name for name in _asked_of_ps() if not hasattr(ps, name))
    assert not missing, f"{type(ps).__name__} lacks {missing}, which ps/serve.py uses"


def test_the_raw_ceiling_replaces_only_the_work():
    """NullPS is a ParameterServer whose ``process`` alone is its own: the serve loop around it — refusals,
    undelivered replies, ticks, events — is the real PS's, so the ceiling is that of the same loop."""
    assert issubclass(bench_ps.NullPS, ParameterServer)
    own = {name for name, value in vars(bench_ps.NullPS).items() if callable(value) and not name.startswith("__")}
    assert own == {"process"}
