"""A Ctrl-C during set-up ends the run as interrupted — marked incomplete, KeyboardInterrupt to the
caller — also when it lands inside a library that wraps what its callbacks raise: pydantic turns a
KeyboardInterrupt in a serializer (the scenario's units, written into the run directory) into
"Error calling function `write`: KeyboardInterrupt", which `edgebed run` printed as an error (seen in a
fresh-clone run of tests/integration/test_group_signals.py)."""
from __future__ import annotations

import json
import signal

import pytest

from edgebed import units
from edgebed.emulator.engine import Engine
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(120)


def test_an_interrupt_a_library_wraps_during_set_up_still_ends_the_run_interrupted(tmp_path, monkeypatch):
    sc = parse_scenario({"name": "wrapped", "model": {"name": "mlp"}, "workers": {"n": 2},
                         "dataset": {"source": "bundled"}, "stop": {"updates": 5}, "runtime": {"name": "sim"}})
    real, pressed = units._number, []

    def number(x):   # the serializer writing the scenario's units: Ctrl-C lands here
        if not pressed:
            pressed.append(True)
            signal.raise_signal(signal.SIGINT)   # the engine's handler raises at the next bytecode
        return real(x)
    monkeypatch.setattr(units, "_number", number)
    before = signal.getsignal(signal.SIGINT)
    engine = Engine(sc, out=tmp_path / "runs")
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    assert pressed
    summary = json.loads((engine.run_dir / "summary.json").read_text())
    assert summary["status"] == "incomplete" and "set-up" in summary["reason"]
    assert signal.getsignal(signal.SIGINT) is before   # the engine's handlers are gone


def test_edgebed_run_interrupted_in_set_up_answers_first_and_ends_with_the_summary_line(tmp_path, monkeypatch,
                                                                                          capfd):
    """Issue #56: the set-up warning came before "Ctrl-C: stopping …" and the command ended with a bare
    ``interrupted``; now the answer comes first and the last line is the interrupted run's summary line."""
    import yaml

    from edgebed import cli
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "setup-ctrl-c", "model": {"name": "mlp"}, "workers": {"n": 2},
                                    "dataset": {"source": "bundled"}, "stop": {"updates": 5},
                                    "runtime": {"name": "sim"}}))
    real, pressed = units._number, []

    def number(x):   # set-up writes the scenario's units: Ctrl-C lands here
        if not pressed:
            pressed.append(True)
            signal.raise_signal(signal.SIGINT)
        return real(x)
    monkeypatch.setattr(units, "_number", number)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        code = cli.main(["run", str(path), "--out", str(tmp_path / "runs")])
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        monkeypatch.setattr(cli, "_ANSWERING", False)
    out, err = capfd.readouterr()
    assert pressed and code == 130
    answer, warning = err.find("Ctrl-C: stopping"), err.find("interrupted during set-up")
    assert 0 <= answer < warning, err
    assert err.rstrip().splitlines()[-1] != "interrupted", err
    lines = out.strip().splitlines()
    assert lines[0] == "incomplete: interrupted by the user (Ctrl-C / SIGTERM) during set-up", out
    run = lines[-1].removeprefix("  run directory: ")
    assert json.loads((tmp_path / "runs" / run.split("/")[-1] / "summary.json").read_text())["status"] == "incomplete"
