"""The traffic meter's tally (edgebed/ps/_shortpath.c, ``Tally``): the compiled short path counts its
pushes and Acks there, without the meter's lock, and every read of the meter folds it in. What a
reader sees must be what the meter's own counting gives: the same totals, and, read from another
thread while pushes flow, never a push counted in one counter and not yet in another."""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from edgebed import wire
from edgebed.ps import server
from edgebed.ps.rules import RULES
from edgebed.ps.server import Hooks, ParameterServer, PSConfig
from tests.capabilities import require

N, DEVICES = 2_000, 4


def _ps():
    require(server._SHORT is not None,
            "the compiled short path for pushes (edgebed/ps/_shortpath.c)",
            "a C compiler at install time: `make setup` (pip install -e .) builds it")
    theta = np.linspace(-1, 1, N, dtype=np.float32)
    ps = ParameterServer(PSConfig(n_devices=DEVICES, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                                  class_of=lambda d: f"c{d % 2}"), theta, RULES["adacomp"](theta, 0.01), Hooks())
    sessions = [wire.decode(ps.process(b"p%d" % d, wire.encode(wire.Hello(d)))).session for d in range(DEVICES)]
    for d, s in enumerate(sessions):
        ps.process(b"p%d" % d, wire.encode(wire.Pull(s)))
    return ps, sessions


def _pushes(sessions, count: int, seed: int = 0) -> list[tuple[bytes, list]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        d = i % len(sessions)
        k = int(rng.integers(5, 60))   # pushes of different sizes, so a byte count shows which ones it holds
        idx = np.sort(rng.choice(N, k, replace=False)).astype(np.uint32)
        vals = (rng.standard_normal(k) * 1e-3).astype(np.float32)
        frames = wire.encode(wire.Push(sessions[d], i // len(sessions) + 1, 0, vals, idx, 0.5))
        out.append((b"p%d" % d, [memoryview(f) if not isinstance(f, np.ndarray) else memoryview(f.data) for f in frames]))
    return out


def test_the_tally_counts_what_the_meter_would():
    """The same pushes to a PS whose meter has the tally and to one whose meter hasn't (the short path
    then counts through the meter's dicts, as it did before the tally): the same traffic.json."""
    fast, sessions = _ps()
    slow, slow_sessions = _ps()
    slow.meter.tally = None
    for (peer, frames), (_, slow_frames) in zip(_pushes(sessions, 400), _pushes(slow_sessions, 400)):
        assert fast._push(peer, frames, None) is not None
        assert slow._push(peer, slow_frames, None) is not None
    assert "push" not in fast.meter._by_kind, "the short path counted in the tally, not yet folded in"
    assert slow.meter._by_kind["push"]["in_msgs"] == 400
    assert fast.meter.to_dict() == slow.meter.to_dict()
    assert fast.meter.push_bytes == slow.meter.push_bytes > 0
    assert fast.meter.by_device[3]["pushes"] == 100
    assert fast.meter.tally.take() is None, "a read folded everything in"


def test_a_checkpoints_counts_replace_what_the_tally_held():
    ps, sessions = _ps()
    pushes = _pushes(sessions, 40)
    for peer, frames in pushes[:20]:
        ps._push(peer, frames, None)
    state = ps.meter.state()
    for peer, frames in pushes[20:]:
        ps._push(peer, frames, None)
    ps.meter.load_state(state)   # the tally holds the last 20: they are not counted on top
    assert ps.meter.state() == state


def test_a_reader_on_another_thread_sees_every_push_whole():
    """The engine reads the meter from its own thread while the PS thread applies pushes. Every read
    must be one moment's counts: the totals, the per-kind and the per-device counts agree, and never
    go back. Two readers fold at once here; the last read counts every push exactly once."""
    ps, sessions = _ps()
    pushes = _pushes(sessions, 6_000, seed=1)
    hello_bytes = ps.meter.state()
    done, problems, reads = threading.Event(), [], [0, 0]

    def reader(slot: int) -> None:
        last = -1
        while not done.is_set():
            s = ps.meter.state() if slot == 0 else ps.meter.to_dict()
            kinds, devs = s["by_kind"], s["by_device"].values()
            if not (s["ingress_bytes"] == sum(k["in_bytes"] for k in kinds.values())
                    and s["messages_in"] == sum(k["in_msgs"] for k in kinds.values())
                    and s["egress_bytes"] == sum(k["out_bytes"] for k in kinds.values())
                    and s["push_bytes"] == kinds.get("push", {}).get("in_bytes", 0)
                    == sum(d["push_bytes"] for d in devs)
                    and kinds.get("push", {}).get("in_msgs", 0) == sum(d["pushes"] for d in devs)
                    and kinds.get("ack", {}).get("out_msgs", 0) in (kinds.get("push", {}).get("in_msgs", 0),
                                                                     kinds.get("push", {}).get("in_msgs", 0) - 1)
                    and s["ingress_bytes"] >= last):
                problems.append(s)
            last = s["ingress_bytes"]
            reads[slot] += 1

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)   # threads change hands as often as CPython lets them
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for peer, frames in pushes:
            assert ps._push(peer, frames, None) is not None
            if len(problems) > 3:
                break
    finally:
        done.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(switch)
    assert not problems, f"{len(problems)} torn reads; the first: {problems[0]}"
    assert min(reads) > 10, reads
    pushed = sum(wire.frames_nbytes(frames) for _, frames in pushes)
    assert ps.meter.push_bytes == pushed
    assert ps.meter.ingress_bytes == hello_bytes["ingress_bytes"] + pushed
    assert ps.meter.by_kind["ack"]["out_msgs"] == len(pushes)


@pytest.mark.parametrize("device", [-1, 1 << 22])
def test_a_device_number_the_tally_does_not_take_is_counted_the_meters_way(device):
    """Device numbers outside the tally's range go to the meter's own counters: still counted once."""
    ps, sessions = _ps()
    st = ps.devices.pop(3)
    ps.devices[device] = st
    ps.sessions[sessions[3]] = device
    ps._window.pop(3, None)
    pushes = [p for p in _pushes(sessions, 40) if p[0] == b"p3"]
    for peer, frames in pushes:
        assert ps._push(peer, frames, None) is not None
    assert ps.meter.by_device[device]["pushes"] == len(pushes) == 10
    assert ps.meter.by_kind["push"]["in_msgs"] == 10
