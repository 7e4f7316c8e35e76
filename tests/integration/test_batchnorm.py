"""A BatchNorm model is evaluated with the statistics that belong to its weights, on every rule.

A small conv-BN-ReLU-pool-linear network trains on the virtual clock under each update rule (and on the
local runtime under ASGD and model averaging: agent processes, the evaluator in its own). The final
accuracy edgebed records must equal, within 0.1 point, what plain PyTorch computes (``model.eval()``
forward over the same test samples) for the same final weights and running statistics, taken from the
run's checkpoint:

- gradient rules (``model.buffers`` recompute, their default): the checkpoint holds the weights; the
  statistics are recomputed for them by ``torch.optim.swa_utils.update_bn`` over the training samples
  edgebed's docs name (the first ``model.buffer_samples`` of a seeded permutation, batches of 100);
- averaging rules (``average``, their default): the checkpoint's Θ carries the averaged running
  statistics after the weights (layout kind ``buffer``), and those are what PyTorch evaluates with.

Before buffers were part of the model, edgebed evaluated every rule with the initial statistics
(mean 0, variance 1) and the checkpoint held the weights only.
"""
from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import torch

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import load_scenario

pytestmark = pytest.mark.timeout(300)

MODULE = textwrap.dedent('''
    import torch
    from torch import nn

    def bncnn():
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(8 * 7 * 7, 10))

    class Ema(nn.Module):   # a moving average in a buffer of its own: no policy can carry it
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(784, 10)
            self.register_buffer("avg", torch.zeros(10))

        def forward(self, x):
            y = self.fc(torch.flatten(x, 1))
            self.avg.mul_(0.9).add_(0.1 * y.mean(0).detach())
            return y
''')
SCENARIO = textwrap.dedent('''
    name: bn-{rule}
    seed: 4
    model: {{name: "bnnets.net:bncnn", buffer_samples: 1000}}
    dataset: {{train_samples: 3000}}
    algorithm: {algorithm}
    workers: {{n: 3}}
    stop: {{updates: {updates}}}
    eval: {{every: {updates}, test_samples: 1000}}
    checkpoint: {{every: {updates}}}
    runtime: {{name: {runtime}}}
''')
RULES = {
    "asgd": ("{name: asgd, lr: 0.05, batch_size: 10}", 240),
    "comp-asgd": ("{name: comp-asgd, lr: 0.05, batch_size: 10, c: 0.1}", 240),
    "adacomp": ("{name: adacomp, lr: 0.05, batch_size: 10, c: 0.05}", 240),
    "model-averaging": ("{name: model-averaging, lr: 0.05, batch_size: 10, local_steps: 10}", 24),
    "dynamic-averaging": ("{name: dynamic-averaging, lr: 0.05, batch_size: 10, local_steps: 10, delta: 2.0}", 24),
    "easgd": ("{name: easgd, lr: 0.05, batch_size: 10, moving_rate: 0.3, loss_threshold: 1.0}", 60),
}
GRADIENT = {"asgd", "comp-asgd", "adacomp"}


def _run(tmp_path, monkeypatch, rule: str, runtime: str = "sim"):
    algorithm, updates = RULES[rule]
    user = tmp_path / "user"
    (user / "bnnets").mkdir(parents=True)
    (user / "bnnets" / "__init__.py").write_text("")
    (user / "bnnets" / "net.py").write_text(MODULE)
    (user / "scenario.yaml").write_text(SCENARIO.format(rule=rule, algorithm=algorithm, updates=updates,
                                                        runtime=runtime))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    sc = load_scenario(user / "scenario.yaml")
    try:
        run = Engine(sc, tmp_path / "runs").run()
        from bnnets.net import bncnn
        return sc, run, bncnn
    finally:
        for name in [m for m in sys.modules if m.startswith("bnnets")]:
            del sys.modules[name]


def _pytorch_accuracy(sc, run, factory, rule: str) -> tuple[float, int]:
    """(accuracy plain PyTorch computes for the checkpoint's weights and statistics, its update)."""
    from edgebed.data import load_dataset, normalize
    from edgebed.ps import checkpoint
    ckpt = checkpoint.load(run.path / "checkpoint")
    model = factory()
    params = [p for p in model.parameters()]
    stats = [b for n, b in model.named_buffers() if n.endswith(("running_mean", "running_var"))]
    n_params = sum(p.numel() for p in params)
    theta = torch.from_numpy(ckpt.theta)
    ds = load_dataset(sc.dataset, sc.seed)
    with torch.no_grad():
        off = 0
        for p in params:
            p.copy_(theta[off:off + p.numel()].view(p.shape))
            off += p.numel()
        if rule in GRADIENT:
            assert ckpt.theta.size == n_params            # a gradient rule's Θ: the weights only
            pick = np.random.default_rng([sc.seed, 0xB7]).permutation(len(ds.train_y))[:sc.model.buffer_samples]
            x = torch.from_numpy(normalize(ds.train_x[pick]))
            loader = [x[i:i + 100] for i in range(0, len(x), 100)]
            torch.optim.swa_utils.update_bn(loader, model)
        else:
            assert ckpt.theta.size == n_params + sum(b.numel() for b in stats), "Θ carries no statistics"
            for b in stats:
                b.copy_(theta[off:off + b.numel()].view(b.shape))
                off += b.numel()
    model.eval()
    n = sc.eval.test_samples
    with torch.no_grad():
        out = model(torch.from_numpy(normalize(ds.test_x[:n])))
    acc = float((out.argmax(1) == torch.from_numpy(ds.test_y[:n].astype(np.int64))).float().mean())
    assert float(stats[0].abs().sum()) > 0               # statistics that moved from their initial 0
    return acc, ckpt.version


@pytest.mark.parametrize("rule", list(RULES))
def test_recorded_accuracy_is_what_pytorch_computes_for_the_final_weights_and_statistics(rule, tmp_path,
                                                                                         monkeypatch):
    sc, run, factory = _run(tmp_path, monkeypatch, rule)
    assert run.summary["status"] == "complete"
    expected, version = _pytorch_accuracy(sc, run, factory, rule)
    evals = read_table(run.path, "evals").set_index("update")
    recorded = float(evals.loc[version, "accuracy"])
    print(f"{rule}: edgebed {recorded:.4f} pytorch {expected:.4f} (update {version})")
    assert expected > 0.5, f"{rule}: the model did not learn ({expected:.3f})"
    assert abs(recorded - expected) <= 0.001, f"{rule}: edgebed recorded {recorded:.4f}, PyTorch {expected:.4f}"


def test_batched_gradients_train_a_batchnorm_model(tmp_path, monkeypatch):
    sc, run, factory = _run(tmp_path, monkeypatch, "asgd", runtime="sim, sim: {max_batch: 3}")
    assert run.summary["status"] == "complete"
    expected, version = _pytorch_accuracy(sc, run, factory, "asgd")
    recorded = float(read_table(run.path, "evals").set_index("update").loc[version, "accuracy"])
    print(f"asgd max_batch 3: edgebed {recorded:.4f} pytorch {expected:.4f}")
    assert expected > 0.5 and abs(recorded - expected) <= 0.001


def test_validate_refuses_state_no_policy_carries(tmp_path, monkeypatch, capsys):
    from edgebed.cli import main
    (tmp_path / "bnnets").mkdir()
    (tmp_path / "bnnets" / "__init__.py").write_text("")
    (tmp_path / "bnnets" / "net.py").write_text(MODULE)
    base = "name: v\nworkers: {n: 2}\nstop: {updates: 100}\neval: {every: 50}\nruntime: {name: sim}\n"
    (tmp_path / "good.yaml").write_text(base + "model: {name: 'bnnets.net:bncnn'}\n")
    (tmp_path / "bad.yaml").write_text(base + "model: {name: 'bnnets.net:Ema'}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    try:
        assert main(["validate", "good.yaml"]) == 0, capsys.readouterr()
        assert "32 running statistics (model.buffers: recompute)" in capsys.readouterr().out   # adacomp
        assert main(["validate", "bad.yaml"]) == 2
    finally:
        for name in [m for m in sys.modules if m.startswith("bnnets")]:
            del sys.modules[name]
    err = capsys.readouterr().err
    assert "bad.yaml: model.name: buffer 'avg' (float32) changes in a training step" in err
    assert "make it an nn.Parameter" in err


@pytest.mark.parametrize("rule", ["asgd", "model-averaging"])
def test_the_local_runtime_records_what_pytorch_computes(rule, tmp_path, monkeypatch):
    """Real agent processes and the evaluator's own process: recompute (asgd) and average."""
    sc, run, factory = _run(tmp_path, monkeypatch, rule, runtime="local")
    assert run.summary["status"] == "complete"
    expected, version = _pytorch_accuracy(sc, run, factory, rule)
    recorded = float(read_table(run.path, "evals").set_index("update").loc[version, "accuracy"])
    print(f"local {rule}: edgebed {recorded:.4f} pytorch {expected:.4f}")
    assert abs(recorded - expected) <= 0.001
