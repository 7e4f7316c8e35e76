"""The compiled short path for pushes (edgebed/ps/_shortpath.c) as C code: it keeps no reference it
takes (the objects it reads keep their reference counts over thousands of pushes, and no object is
left behind), and an exception from the Python it calls (a hook, the rule) reaches the caller with
the traffic meter's lock released. What it computes is test_push_paths.py's."""
from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from edgebed import wire
from edgebed.ps import server
from edgebed.ps.rules import RULES
from edgebed.ps.server import Hooks, ParameterServer, PSConfig
from tests.capabilities import require

N = 500


def _compiled():
    require(server._SHORT is not None, "the compiled short path for pushes (edgebed/ps/_shortpath.c)",
            "a C compiler at install time: `make setup` (pip install -e .) builds it; without one the PS runs "
            "ParameterServer._push_py, the same steps in Python")


def _pushing(rule: str, hooks: Hooks):
    theta = np.linspace(-1, 1, N, dtype=np.float32)
    ps = ParameterServer(PSConfig(n_devices=2, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                                  class_of=lambda d: "c"), theta, RULES[rule](theta, 0.01), hooks)
    session = wire.decode(ps.process(b"peer", wire.encode(wire.Hello(0)))).session
    ps.process(b"peer", wire.encode(wire.Pull(session)))
    rng = np.random.default_rng(0)
    sparse = rule != "asgd"

    def push(seq: int) -> list:
        idx = np.sort(rng.choice(N, 20, replace=False)).astype(np.uint32) if sparse else None
        vals = (rng.standard_normal(20 if sparse else N) * 1e-3).astype(np.float32)
        return [memoryview(f) if not isinstance(f, np.ndarray) else memoryview(f.data)
                for f in wire.encode(wire.Push(session, seq, ps.version, vals, idx, 0.5))]
    return ps, session, push


@pytest.mark.parametrize("rule", ["adacomp", "asgd"])
def test_it_keeps_no_reference(rule):
    _compiled()
    ps, session, push = _pushing(rule, Hooks())
    messages = [push(seq) for seq in range(1, 3001)]
    ps.process(b"peer", messages[0])   # first-use allocations (the meter's rows) before counting
    watched = [session, ps, ps.config, ps.devices[0], ps.meter, ps.hooks, ps.rule, ps.theta,
               ps.meter.by_kind["push"], ps.meter.by_device[0], ps.meter.tally, wire._ACK_APPLIED]
    counts = [sys.getrefcount(x) for x in watched]
    gc.collect()
    objects = len(gc.get_objects())
    for frames in messages[1:]:
        assert ps.process(b"peer", frames) is not None
    gc.collect()
    assert ps.version == 3000 and ps.devices[0].pushes == 3000
    assert [sys.getrefcount(x) for x in watched] == counts
    assert len(gc.get_objects()) <= objects + 50   # nothing piles up (a leak would leave ~3,000)


@pytest.mark.parametrize("where", ["record", "apply", "compiled_step", "clock"])
def test_an_exception_from_python_it_calls_reaches_the_caller_with_the_meter_unlocked(where):
    _compiled()

    def boom(*args):
        raise RuntimeError(f"boom in {where}")
    hooks = Hooks(record=lambda table, row: table == "updates" and boom()) if where == "record" else Hooks()
    ps, session, push = _pushing("adacomp", hooks)
    if where == "apply":   # a rule without a compiled step
        ps.rule.compiled_step, ps.rule.apply = None, boom
    elif where == "compiled_step":
        ps.rule.compiled_step = boom
    elif where == "clock":
        ps.hooks.clock = boom
    with pytest.raises(RuntimeError, match=f"boom in {where}"):
        ps.process(b"peer", push(1))
    assert not ps.meter._lock.locked()
    ps.meter.to_dict()   # the engine can still read the counts
