"""The PS ingest benchmark's baselines stay in step with the PS: the raw ceiling (``NullPS``: the serve
loop with a PS that does no work) and the stub run through the real serve loop, with clients that
vanish mid-reply (what made ``unsent`` necessary), and report a rate. A change of what the serve loop
asks of a PS can't silently drop the ceiling again (once, ``NullPS`` lacked ``unsent`` and every raw
round crashed with ``Host unreachable`` then an AttributeError)."""
from __future__ import annotations

import threading
import time

import pytest
import zmq

from benchmarks import bench_ps
from edgebed import wire
from edgebed.ps.serve import ZmqServer


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["raw", "stub"])
def test_each_baseline_serves_and_reports_a_rate(how):
    if how == "raw":
        rate, cpu = bench_ps._raw_once("adacomp", 0.5, 2)
    else:
        rate, cpu, _ = bench_ps._serve_ps("adacomp", 0.5, 2, stub=True)
    assert rate > 0 and cpu > 0


@pytest.mark.timeout(60)
def test_the_raw_ceiling_survives_peers_that_vanish_before_their_replies():
    ps = bench_ps.NullPS()
    errors = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    server = ZmqServer(ps, "tcp://127.0.0.1:0").start()
    ctx = zmq.Context()
    try:
        push = wire.encode(wire.Ack(0))
        for _ in range(20):   # each sends a burst and closes without reading: replies find no peer
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.LINGER, 1000)
            d.connect(server.endpoint)
            for _ in range(40):
                d.send_multipart(push)
            d.close()
        time.sleep(0.5)
        live = ctx.socket(zmq.DEALER)
        live.setsockopt(zmq.LINGER, 0)
        live.setsockopt(zmq.RCVTIMEO, 5000)
        live.connect(server.endpoint)
        live.send_multipart(push)
        assert wire.decode(live.recv_multipart()).KIND == "ack"   # still serving
        live.close()
    finally:
        server.stop()
        ctx.term()
        threading.excepthook = hook
    assert not errors, errors
    assert ps.version >= 1 + 20 * 40 * 0.9   # (nearly) every message answered


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rule", ["adacomp", "asgd"])   # sparse and dense pushes
def test_the_interleaved_ingest_switches_between_ps_and_raw(rule):
    """``interleaved`` serves real pushes in its PS windows (the PS applies them: with its short path
    compiled, or in Python, or on its numpy path; or ``compiled_floor`` runs their kernels; or the stub
    answers them) and canned Acks in its raw windows,
    over the same connections: every kind of window answers messages, raw between every two others,
    and every other window is set against the two raw ones beside it."""
    others = {"python": bench_ps.python_short_path, "floor": bench_ps.compiled_floor,
              "numpy": bench_ps.on_numpy_path, "stub": bench_ps.canned_ack}
    res = bench_ps.interleaved(rule, 1.8, window=0.2, sockets=2, warmup=0.1, others=others)
    kinds = [w["kind"] for w in res["window_list"]]
    assert kinds[::2] == ["raw"] * (len(kinds) // 2 + 1) and kinds[1::2][:5] == ["ps", *others]
    assert all(w["messages"] > 0 for w in res["window_list"])
    for kind in ("ps", *others):
        row = res["by_kind"][kind]
        assert len(row["window_ratios"]) == kinds.count(kind) == row["windows"]
        assert row["over_raw"] > 0 and row["serve_us_per_msg"] > 0
    assert res["ps_over_raw"] == res["by_kind"]["ps"]["over_raw"] and res["raw_messages"] > 0
