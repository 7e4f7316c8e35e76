"""The model zoo (edgebed/zoo/): each model resolves by its registry name with ``model.args``, builds on
torch's meta device against its data's shape, and takes one SGD step on CPU that lowers its loss."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from edgebed.device_agent.trainer import Trainer
from edgebed.models import model_layers
from edgebed.scenario import ScenarioError, parse_scenario
from edgebed.workload import input_problems, resolve

pytestmark = pytest.mark.timeout(120)

# (model section, one sample's shape, classes): Fashion-MNIST's 1×28×28 and CIFAR's 3×32×32 images,
# LEAF Shakespeare's 80-character windows over its 80-character vocabulary.
CASES = [
    ({"name": "resnet20", "args": {"depth": 8, "width": 8, "in_channels": 1, "size": 28}}, (1, 28, 28), 10),
    ({"name": "resnet20", "args": {}}, (3, 32, 32), 10),
    ({"name": "mobilenet-small", "args": {"width": 0.25, "in_channels": 1, "size": 28}}, (1, 28, 28), 10),
    ({"name": "mobilenet-small", "args": {"width": 0.25}}, (3, 32, 32), 10),
    ({"name": "char-lstm", "args": {"hidden": 32}}, (80,), 80),
]


@pytest.mark.parametrize("model,shape,classes", CASES, ids=lambda c: str(c))
def test_each_zoo_model_takes_its_data_and_one_step_lowers_its_loss(model, shape, classes):
    w = resolve(model)
    assert w.input_shape == shape and w.num_classes == classes
    assert input_problems(model, shape, classes) == []                     # built on meta, no kernel runs
    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, 20)
    if w.input_dtype == "int64":
        x = rng.integers(0, classes, (20, *shape))
    else:   # images whose class is visible, already normalised (as the data path hands them over)
        x = rng.standard_normal((20, *shape)).astype(np.float32) + y[:, None, None, None].astype(np.float32) / 5
    tr = Trainer(model, x, y, 20, seed=0, device=0)   # one batch = the whole set: same samples twice
    before = tr.params()
    theta = before.copy()
    g, loss0 = tr.gradient(theta)
    assert g.shape == theta.shape and np.isfinite(g).all() and np.abs(g).sum() > 0
    _, loss1 = tr.gradient(theta - 0.05 * g)
    assert loss1 < loss0


def test_resnet_depth_and_width_are_arguments_and_a_wrong_depth_is_refused():
    n20 = sum(l.size for l in model_layers({"name": "resnet20", "args": {}}))
    n8 = sum(l.size for l in model_layers({"name": "resnet20", "args": {"depth": 8}}))
    assert n20 == 272_474      # He et al. 2016 Table 6: ResNet-20 has 0.27 M parameters
    assert n8 < n20 / 3
    # the counts docs/your-own-model.md quotes
    assert sum(l.size for l in model_layers({"name": "resnet20", "args": {"depth": 8, "in_channels": 1}})) == 77_754
    assert sum(l.size for l in model_layers({"name": "mobilenet-small", "args": {}})) == 136_778
    assert sum(l.size for l in model_layers({"name": "char-lstm", "args": {}})) == 819_920
    bn = [l.name for l in model_layers({"name": "resnet20", "args": {"depth": 8}}) if ".bn" in l.name or l.name.startswith("bn")]
    assert bn, "the ResNet has BatchNorm layers"
    with pytest.raises(ValueError, match="depth 6n \\+ 2"):
        resolve({"name": "resnet20", "args": {"depth": 10}}).factory()


def test_a_zoo_model_with_the_wrong_channels_is_explained():
    problems = input_problems({"name": "resnet20", "args": {}}, (1, 28, 28), 10)
    assert len(problems) == 1 and "cannot take the data set's samples (1×28×28, 10 classes)" in problems[0]
    # and says which model.args set its input: the zoo's input spec follows its arguments
    [msg] = input_problems({"name": "resnet20", "args": {"in_channels": 3, "size": 28}}, (1, 28, 28), 10)
    assert "With model.args {in_channels: 3, size: 28} it takes 3×28×28 samples" in msg
    assert "set model.args.in_channels and model.args.size so that it takes 1×28×28" in msg


def test_model_args_are_part_of_the_resolved_scenario():
    base = {"name": "z", "workers": {"n": 2}, "stop": {"updates": 5}}
    sc = parse_scenario({**base, "model": {"factory": "resnet20", "args": {"depth": 8}}},
                        overrides=("model.args.width=4",))
    assert sc.model.name == "resnet20" and sc.model.args == {"depth": 8, "width": 4}
    assert sc.to_dict()["model"] == {"name": "resnet20", "args": {"depth": 8, "width": 4}}
    assert "args" not in parse_scenario(base).to_dict()["model"]     # absent when empty: old runs compare equal
    with pytest.raises(ScenarioError, match="name: or factory:, not both"):
        parse_scenario({**base, "model": {"factory": "resnet20", "name": "cnn"}})


def test_model_args_reach_the_device_in_the_welcome():
    from edgebed.emulator.welcome import welcome_config
    sc = parse_scenario({"name": "z", "workers": {"n": 2}, "stop": {"updates": 5},
                         "model": {"name": "resnet20", "args": {"depth": 8, "width": 4}}})
    cfg = welcome_config(sc, 0, "none", {})
    assert cfg.model_args == {"depth": 8, "width": 4}
    assert sum(l.size for l in model_layers(cfg.workload)) == sum(l.size for l in model_layers(sc.model))
    plain = welcome_config(parse_scenario({"name": "z", "workers": {"n": 2}, "stop": {"updates": 5}}), 0, "none", {})
    assert "model_args" not in plain.to_dict()      # the Welcome's bytes are unchanged without args


def test_zoo_models_are_torch_modules_with_batchnorm_where_promised():
    for name, has_bn in (("resnet20", True), ("mobilenet-small", True), ("char-lstm", False)):
        m = resolve(name).factory()
        assert isinstance(m, torch.nn.Module)
        assert any(isinstance(x, torch.nn.BatchNorm2d) for x in m.modules()) == has_bn


def test_calibration_times_a_step_on_the_data_sets_samples():
    from torch import nn

    from edgebed.emulator.calibration import calibrate_step_time
    from edgebed.workload import Workload
    lin = Workload("lin", lambda: nn.Sequential(nn.Flatten(), nn.Linear(72, 4)))   # 2×6×6 in, 4 classes
    assert calibrate_step_time(lin, 10, "asgd", 1.0, steps=3, data=((2, 6, 6), 4)) > 0
    lstm = {"name": "char-lstm", "args": {"hidden": 8, "layers": 1}}                # token ids, 80 classes
    assert calibrate_step_time(lstm, 10, "adacomp", 0.01, steps=3) > 0


def test_a_zoo_module_imported_first_still_registers_the_zoo():
    """``from edgebed.zoo.char_lstm import CharLSTM`` before anything else imported the workload
    registry half-way through edgebed.zoo's own import (a circular ImportError)."""
    code = ("from edgebed.zoo.char_lstm import CharLSTM\nfrom edgebed.workload import WORKLOADS\n"
            "print(sorted(WORKLOADS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['char-lstm',", "'cnn',", "'mlp',", "'mobilenet-small',", "'resnet20']"]
