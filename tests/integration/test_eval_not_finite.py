"""An evaluation whose loss is NaN is an event and a reason the run is not complete (issue 51, 1).

Under ``model.buffers: average`` a running variance poisoned below zero made every evaluation score
0.099 with loss NaN, and the run still ended ``complete``, ``errors: {}``. Whatever makes Θ compute
no finite loss, the run must say so: here a model that is NaN in evaluation mode only (it trains
normally), on the virtual clock. Before: ``complete``; now: ``failed``, reason ``evaluation not
finite: …``, an ``eval-not-finite`` event in the run directory, and the run stopped at that evaluation."""
from __future__ import annotations

import sys
import textwrap

import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import load_scenario

pytestmark = pytest.mark.timeout(60)

MODULE = textwrap.dedent('''
    import torch
    from torch import nn

    class NanInEval(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(784, 10)

        def forward(self, x):
            y = self.fc(torch.flatten(x, 1))
            return y if self.training else y * float("nan")
''')
SCENARIO = textwrap.dedent('''
    name: nan-eval
    seed: 2
    model: {name: "naneval.net:NanInEval"}
    dataset: {train_samples: 600}
    algorithm: {name: asgd, lr: 0.05}
    workers: {n: 2}
    stop: {updates: 400}
    eval: {every: 20, test_samples: 100}
    runtime: {name: sim}
''')


def test_a_nan_evaluation_is_an_event_and_the_run_is_failed(tmp_path, monkeypatch):
    (tmp_path / "naneval").mkdir()
    (tmp_path / "naneval" / "__init__.py").write_text("")
    (tmp_path / "naneval" / "net.py").write_text(MODULE)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    try:
        run = Engine(load_scenario(tmp_path / "s.yaml"), tmp_path / "runs").run()
    finally:
        for name in [m for m in sys.modules if m.startswith("naneval")]:
            del sys.modules[name]
    s = run.summary
    assert s["status"] == "failed", s
    assert s["reason"].startswith("evaluation not finite: the evaluation at update 20 gave loss nan"), s["reason"]
    events = read_table(run.path, "events")
    bad = events[events["event"] == "eval-not-finite"]
    assert len(bad) == 1 and "update 20" in bad["detail"].iloc[0], events
    assert s["updates"] < 400, "the run went on after a NaN evaluation"
