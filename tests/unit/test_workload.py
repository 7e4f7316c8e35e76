"""One registry resolves every model: the paper's by key, a user's by import path; no module compares
a model's name; a frozen parameter stays out of Θ."""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgebed.models import build_model, get_flat, grad_flat, layers_of, model_layers, set_flat
from edgebed.scenario import ScenarioError, load_scenario, parse_scenario
from edgebed.workload import WORKLOADS, input_problems, num_params, resolve, step_flops

pytestmark = pytest.mark.timeout(60)
BASE = "name: t\nworkers: {n: 2}\nstop: {updates: 5}\n"
PKG = Path(__file__).resolve().parents[2] / "edgebed"

USER_MODULE = textwrap.dedent('''
    import torch
    from torch import nn
    from edgebed.workload import Workload

    class Tiny(nn.Module):
        def __init__(self, hidden=16):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1), requires_grad=False)   # frozen: not in Θ
            self.fc1 = nn.Linear(784, hidden)
            self.fc2 = nn.Linear(hidden, 10)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1) * self.scale)))

    def tiny():
        return Tiny()

    wide = Workload("wide", lambda: Tiny(64))
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    pkg = tmp_path / "mynets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tiny.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("mynets")]:
        del sys.modules[name]


def test_the_paper_models_are_the_registrys_first_entries():
    assert list(WORKLOADS)[:2] == ["cnn", "mlp"]
    assert num_params("cnn") == 211_690 and num_params("mlp") == 199_210
    assert resolve("cnn").channels_last and not resolve("mlp").channels_last


def test_a_user_model_resolves_by_import_path_and_leaves_its_frozen_parameter_out(user_module):
    w = resolve("mynets.tiny:tiny")
    assert w.input_shape == (1, 28, 28) and w.num_classes == 10
    model = build_model("mynets.tiny:tiny", seed=1)
    assert [l.name for l in layers_of(model)] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert num_params("mynets.tiny:tiny") == 784 * 16 + 16 + 16 * 10 + 10
    assert resolve("mynets.tiny:wide").name == "wide" and num_params("mynets.tiny:wide") == 784 * 64 + 64 + 650
    import torch
    import torch.nn.functional as F
    theta = get_flat(model)
    set_flat(model, theta + 1)
    F.cross_entropy(model(torch.zeros(4, 1, 28, 28)), torch.zeros(4, dtype=torch.int64)).backward()
    assert grad_flat(model).shape == theta.shape
    assert np.allclose(get_flat(model), theta + 1)
    # matmul FLOPs of one batch-10 step: fc1 forward + weight gradient (its input needs none), fc2
    # forward + weight gradient + input gradient, 2·b per multiply-add
    assert step_flops("mynets.tiny:tiny") == 2 * 10 * (2 * 784 * 16 + 3 * 16 * 10)


def test_an_unknown_model_says_what_to_use():
    with pytest.raises(ValueError, match="cnn.*mlp.*import path"):
        resolve("resnet")
    with pytest.raises(ScenarioError, match="model.name"):
        parse_scenario({"name": "t", "workers": {"n": 2}, "stop": {"updates": 5}, "model": {"name": "resnet"}})
    with pytest.raises(ValueError, match="cannot import.*PYTHONPATH.*model.path"):
        resolve("no_such_pkg.mod:net")


def test_a_scenarios_import_path_is_found_from_its_own_directory(tmp_path):
    (tmp_path / "scenario.yaml").write_text(BASE + "model: {name: 'mynets.tiny:tiny'}\n")
    sc = load_scenario(tmp_path / "scenario.yaml")
    assert sc.model.path == str(tmp_path.resolve())
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "s.yaml").write_text(BASE + "model: {name: 'mynets.tiny:tiny', path: '..'}\n")
    assert load_scenario(tmp_path / "sub" / "s.yaml").model.path == str(tmp_path.resolve())
    assert "path" not in parse_scenario({"name": "t", "workers": {"n": 2}, "stop": {"updates": 5}}).to_dict()["model"]   # the built-ins' scenario.yaml as before


def test_meta_layout_matches_the_built_model():
    assert model_layers("cnn") == layers_of(build_model("cnn"))


def test_no_module_compares_a_model_name():
    """Behaviour comes from the workload (channels_last, num_classes, step_time), never from its key:
    only the registries (workload.py, zoo/__init__.py) spell the built-ins' and the zoo's names as strings."""
    names = "cnn|mlp|resnet20|mobilenet-small|char-lstm"
    pattern = re.compile(rf"""(==|!=|\bin\b|\[)\s*["']({names})["']|["']({names})["']\s*(==|!=|:)""")
    registries = {PKG / "workload.py", PKG / "zoo" / "__init__.py"}
    hits = [f"{p.relative_to(PKG.parent)}:{i}: {line.strip()}"
            for p in PKG.rglob("*.py") if p not in registries
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_a_model_that_cannot_take_the_data_says_what_where_and_what_to_do(user_module):
    assert input_problems("mynets.tiny:tiny", (1, 28, 28), 10) == []
    [shape] = input_problems("mynets.tiny:tiny", (3, 32, 32), 10)
    assert "model.name" in shape and "3×32×32" in shape and "first layer" in shape
    [classes] = input_problems("cnn", (1, 28, 28), 100)
    assert "100 classes" in classes and "last layer output 100" in classes


def test_the_evaluator_reports_the_workloads_loss_and_metric():
    import dataclasses

    import torch
    from edgebed.ps.evaluator import evaluate
    cnn = resolve("cnn")
    model = build_model(cnn)
    theta = get_flat(model)
    x = torch.zeros(20, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    y = torch.arange(20) % 10
    acc, loss = evaluate(model, theta, x, y, workload=cnn)
    assert (acc, loss) == evaluate(model, theta, x, y)                  # the paper's: the default
    strict = dataclasses.replace(cnn, correct=lambda out, labels: 0,
                                 loss=lambda out, labels, reduction="mean": out.sum() * 0 + 7 * len(labels))
    assert evaluate(model, theta, x, y, workload=strict) == (0.0, 7.0)


def test_a_recurrent_models_step_flops_count_its_gates():
    """torch's FlopCounterMode counts no LSTM kernel on the CPU: the char-LSTM's step looked like its
    output layer alone (0.15 MFLOP), so the virtual clock gave it a near-free step."""
    hidden, embed, steps, batch, vocab = 32, 8, 80, 10, 80
    gates = 2 * 4 * hidden * ((embed + hidden) + (hidden + hidden))     # two layers, per sample and step
    recurrent = 3 * gates * steps * batch                               # forward + backward (2×)
    output = 2 * batch * (2 * hidden * vocab + hidden * vocab)          # fc forward, weight and input gradients
    # (where torch runs the LSTM as separate matmuls — under portable numerics — the counter counts
    # them itself and leaves out the first layer's input gradient: 0.3 % less)
    assert step_flops({"name": "char-lstm", "args": {"hidden": hidden}}) == pytest.approx(recurrent + output, rel=0.01)
