"""``device: cuda`` (issue #38): refused at validate where torch sees no CUDA device, and by a runtime
that gives its devices no GPU; on the CPU nothing changes (the Welcome's bytes included). The GPU path
itself runs only where there is one (``gpu`` marker; ``benchmarks/gpu_check.py``)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from edgebed import cli, wire
from edgebed.emulator.welcome import welcome_config
from edgebed.scenario import load_scenario

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[3]
QUICK = str(ROOT / "scenarios" / "quickstart.yaml")


def _validate(capsys, *sets: str) -> dict:
    code = cli.main(["validate", QUICK, "--set", "runtime.name=sim", *[a for s in sets for a in ("--set", s)], "--json"])
    out = json.loads(capsys.readouterr().out)[0]
    assert code == (0 if out["ok"] else 2), out
    return out


def test_validate_refuses_cuda_where_torch_sees_no_gpu(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = _validate(capsys, "device=cuda")
    assert not r["ok"]
    (err,) = [e for e in r["errors"] if "device: cuda" in e]
    assert "sees no CUDA device" in err and "set device: cpu" in err and err.startswith(QUICK)


def test_validate_takes_the_cpu_and_a_gpu_it_sees(capsys, monkeypatch):
    assert _validate(capsys)["ok"] and _validate(capsys, "device=cpu")["ok"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # what a CUDA machine answers
    assert _validate(capsys, "device=cuda")["ok"]


def test_a_runtime_without_gpus_refuses_cuda(monkeypatch):
    from edgebed.emulator.runtimes.base import cuda_problems
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    (err,) = cuda_problems("cuda", "docker", supported=False)
    assert "the docker runtime gives its devices no GPU" in err
    assert cuda_problems("cpu", "docker", supported=False) == []


def test_the_welcome_names_the_device_only_when_it_is_not_the_cpu():
    cpu = load_scenario(QUICK)
    cuda = load_scenario(QUICK, ("device=cuda",))
    w_cpu, w_cuda = (welcome_config(s, 0, "dense", {}) for s in (cpu, cuda))
    assert "torch_device" not in w_cpu.to_dict()    # the CPU's Welcome: the same bytes as before the key
    assert w_cuda.to_dict()["torch_device"] == "cuda"
    assert wire.WelcomeConfig.from_dict(w_cuda.to_dict()).torch_device == "cuda"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_gradient_on_the_gpu_equals_the_cpus_within_float_error():
    from edgebed.device_agent.trainer import Trainer
    from edgebed.models import initial_theta
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 255, (40, 28, 28), dtype=np.uint8), rng.integers(0, 10, 40, dtype=np.uint8)
    theta, _ = initial_theta("cnn", 0)
    g = {d: Trainer("cnn", x, y, 10, 0, 0, d).gradient(theta)[0] for d in ("cpu", "cuda")}
    assert g["cuda"].dtype == np.float32 and g["cuda"].shape == theta.shape
    np.testing.assert_allclose(g["cuda"], g["cpu"], rtol=1e-3, atol=1e-5)


def test_the_gpu_check_says_there_is_no_cuda_device_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from benchmarks import gpu_check
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "gpu_check: no CUDA device" in err and "nothing was written" in err
    assert not out.exists()
