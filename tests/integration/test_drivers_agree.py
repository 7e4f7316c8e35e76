"""Both drivers of the device state machine — the socket agent (runtime local) and the virtual clock
(runtime sim) — emit the same protocol messages for the same scenario and seed."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from edgebed.emulator.engine import Engine
from edgebed import wire
from edgebed.ps.server import ParameterServer
from edgebed.scenario import parse_scenario

ALGORITHMS = [{"name": "adacomp", "c": 0.05}, {"name": "dynamic-averaging", "local_steps": 3, "delta": 0.05},
              {"name": "easgd", "loss_threshold": 2.0}]


def _digest(msg: wire.Message) -> tuple:
    """A message as comparable data: arrays by hash, the random session token left out."""
    out = [msg.kind]
    for key, value in sorted(vars(msg).items()):
        if key == "session":
            continue
        if isinstance(value, np.ndarray):
            value = (value.dtype.str, value.shape, hashlib.sha256(value.tobytes()).hexdigest()[:16])
        elif isinstance(value, float) and value != value:
            value = "nan"
        out.append((key, value))
    return tuple(out)


def _messages(monkeypatch, tmp_path, runtime: str, algorithm: dict) -> list[tuple]:
    seen = []
    process = ParameterServer.process

    def recording(self, peer, frames, principal=None):
        seen.append(_digest(wire.decode([bytes(f) for f in frames])))
        return process(self, peer, frames, principal)
    monkeypatch.setattr(ParameterServer, "process", recording)
    sc = parse_scenario({
        "name": f"agree-{runtime}", "seed": 4, "dataset": {"train_samples": 500}, "model": {"name": "mlp"},
        "algorithm": {"lr": 0.05, "batch_size": 10, **algorithm},
        "workers": {"n": 1, "classes": [{"name": "only", "share": 1, "think_time": "1ms"}]},
        "stop": {"updates": 12}, "eval": {"every": 100, "test_samples": 100}, "runtime": {"name": runtime}})
    Engine(sc, out=tmp_path / runtime).run()
    monkeypatch.undo()
    return seen


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", ALGORITHMS, ids=[a["name"] for a in ALGORITHMS])
def test_socket_agent_and_virtual_clock_send_the_same_messages(algorithm, monkeypatch, tmp_path):
    agent = _messages(monkeypatch, tmp_path, "local", algorithm)
    sim = _messages(monkeypatch, tmp_path, "sim", algorithm)
    kinds = [m[0] for m in sim]
    assert kinds[0] == "hello" and kinds[-1] == "bye" and kinds.count("push") >= 12
    assert agent == sim
