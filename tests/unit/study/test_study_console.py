"""What a study says on the console (issue #56, point 3): each finished run once, also from worker
processes whose stderr is a pipe; the runtime and the executor by name; API overrides as overrides."""
from __future__ import annotations

import logging
import re

import pytest

from edgebed.study.runner import load_study, run_study
from tests.unit.study.fakes import FakeRunner, write_study

CELLS = dict(cells=[{"label": "asgd", "set": {"algorithm.name": "asgd"}},
                    {"label": "adacomp", "set": {"algorithm.name": "adacomp", "runtime.name": "sim"}}], seeds=1)


@pytest.mark.timeout(120)
def test_a_study_in_worker_processes_says_each_finished_run_once(tmp_path, capfd):
    lines = []
    run_study(load_study(write_study(tmp_path, **CELLS)), tmp_path / "out", FakeRunner(),
              progress=lambda line, final: lines.append(line), jobs=2)
    _, err = capfd.readouterr()   # the workers' stderr (a pipe here, as `| tee log`)
    said = lines + err.splitlines()
    for label in ("asgd", "adacomp"):
        done = [s for s in said if f"] {label} · seed 1: complete in" in s]
        assert len(done) == 1, said
        assert re.search(r"complete in [\d.]+ s on \S+:\d+$", done[0]), done[0]   # the driver's, with its worker
    head = next(s for s in lines if s.startswith("running 2 cell × seed runs"))
    assert head == "running 2 cell × seed runs: runtime local, sim; executor local, 2 processes"


def test_the_in_process_study_names_its_runtime_and_executor_too(tmp_path):
    lines = []
    run_study(load_study(write_study(tmp_path, **CELLS)), tmp_path / "out", FakeRunner(),
              progress=lambda line, final: lines.append(line))
    assert "running 2 cell × seed runs: runtime local, sim; executor local, in this process" in lines


def test_edgebed_run_overrides_are_named_as_overrides_not_as_set(caplog):
    from edgebed.launch import scenario_of
    from edgebed.scenario import ScenarioError
    data = {"name": "api", "algorithm": {"name": "adacomp", "c": 0.01}, "workers": {"n": 4},
            "stop": {"updates": 100}}
    with caplog.at_level(logging.WARNING):
        sc, _ = scenario_of(data, overrides={"algorithm.name": "asgd"})
    assert sc.algorithm.name == "asgd"
    assert "overrides['algorithm.name'] = 'asgd' (on <dict>): asgd does not take c=0.01" in caplog.text
    assert "--set" not in caplog.text
    with pytest.raises(ScenarioError) as err:
        scenario_of(data, overrides={"workers.n": 0})
    assert str(err.value).startswith("overrides['workers.n'] = '0' (on <dict>): workers.n:"), str(err.value)
    with pytest.raises(ScenarioError) as err:
        scenario_of(data, overrides=["workers.classes.9.share=1"])
    assert "--set" not in str(err.value).split(";")[0] and "overrides['workers.classes.9.share']" in str(err.value)


def test_a_piped_study_console_keeps_the_first_run_line_after_the_head_line():
    """The head line ("running …", final) used to start the 30 s quiet period of a piped console, so the
    first run's "run directory: …" line right after it was never printed."""
    import io

    from edgebed.console import RunProgress
    stream = io.StringIO()
    shown = RunProgress(stream, force_terminal=False)
    shown("running 2 cell × seed runs: runtime sim; executor local, in this process", True)
    shown("[1/2] asgd · seed 1 | run directory: runs/x", False)
    shown("[1/2] asgd · seed 1 | 10% | updates 10", False)   # within 30 s of the last live line: quiet
    shown("[1/2] asgd · seed 1: complete in 1.0 s", True)
    assert stream.getvalue().splitlines() == [
        "running 2 cell × seed runs: runtime sim; executor local, in this process",
        "[1/2] asgd · seed 1 | run directory: runs/x", "[1/2] asgd · seed 1: complete in 1.0 s"]
