"""A user's model from a module outside the repository trains end to end on the virtual clock and on
the local runtime (real agent processes that import it from the scenario's directory)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import load_scenario

pytestmark = pytest.mark.timeout(240)

MODULE = textwrap.dedent('''
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self, hidden=32):
            super().__init__()
            self.fc1 = nn.Linear(784, hidden)
            self.fc2 = nn.Linear(hidden, 10)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(torch.flatten(x, 1))))

    def tiny():
        return Tiny()
''')
SCENARIO = textwrap.dedent('''
    name: user-model-{runtime}
    seed: 2
    model: {{name: "usernets.tiny:tiny"}}
    algorithm: {{name: asgd, lr: 0.05, batch_size: 10}}
    workers: {{n: 2}}
    stop: {{updates: 300, wall_time: 3min}}
    eval: {{every: 100, test_samples: 500}}
    runtime: {{name: {runtime}}}
''')
PARAMS = 784 * 32 + 32 + 32 * 10 + 10


@pytest.mark.parametrize("runtime", ["sim", "local"])
def test_a_model_from_outside_the_repository_trains(runtime, tmp_path, monkeypatch):
    user = tmp_path / "user"
    (user / "usernets").mkdir(parents=True)
    (user / "usernets" / "__init__.py").write_text("")
    (user / "usernets" / "tiny.py").write_text(MODULE)
    (user / "scenario.yaml").write_text(SCENARIO.format(runtime=runtime))
    monkeypatch.setattr(sys, "path", list(sys.path))           # the engine adds the user's directory
    monkeypatch.setenv("PYTHONPATH", "")
    sc = load_scenario(user / "scenario.yaml")
    try:
        run = Engine(sc, tmp_path / "runs").run()
    finally:
        for name in [m for m in sys.modules if m.startswith("usernets")]:
            del sys.modules[name]
    assert run.summary["status"] == "complete" and run.summary["updates"] == 300
    updates = read_table(run.path, "updates")
    assert set(updates["entries"]) == {PARAMS}                 # ASGD pushes the user's whole Θ
    evals = read_table(run.path, "evals").sort_values("update")
    assert list(evals["update"]) == [100, 200, 300]
    # chance is 0.10; a 784-32-10 net after 300 updates of batch 10 is far above it
    assert evals["accuracy"].iloc[-1] > 0.5


def test_validate_builds_a_user_model_and_explains_a_shape_mismatch(tmp_path):
    (tmp_path / "usernets").mkdir()
    (tmp_path / "usernets" / "__init__.py").write_text("")
    (tmp_path / "usernets" / "tiny.py").write_text(MODULE + textwrap.dedent('''
        def rgb():   # a model for 32×32 colour images, not the 28×28 grey digits the scenario trains on
            return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
    '''))
    base = "name: v\nworkers: {n: 2}\nstop: {updates: 100}\neval: {every: 50}\nruntime: {name: sim}\n"
    (tmp_path / "good.yaml").write_text(base + "model: {name: 'usernets.tiny:tiny'}\n")
    (tmp_path / "bad.yaml").write_text(base + "model: {name: 'usernets.tiny:rgb'}\n")
    run = lambda f: subprocess.run([sys.executable, "-m", "edgebed.cli", "validate", f], cwd=tmp_path,  # noqa: E731
                                   capture_output=True, text=True, timeout=100)
    good = run("good.yaml")
    assert good.returncode == 0, good.stderr
    assert f"{PARAMS:,} parameters" in good.stdout and "MFLOP per step (batch 10)" in good.stdout
    bad = run("bad.yaml")
    assert bad.returncode == 2
    assert "bad.yaml: model.name: model 'usernets.tiny:rgb' cannot take the data set's samples (1×28×28" in bad.stderr
    assert "Make its first layer take 1×28×28 inputs" in bad.stderr
