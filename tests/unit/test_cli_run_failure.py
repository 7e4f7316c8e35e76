"""`edgebed run` reports a run that failed inside the run loop like any failed run.

The engine records such a failure (the evaluator died, the serve loop died) in summary.json and then
re-raises it; the CLI must still print the run's summary on stdout and exit 1, as it does for a run
whose devices all failed — which of the two a broken dataset causes first is a race."""
from __future__ import annotations

from pathlib import Path

from edgebed import cli
from edgebed.emulator import engine as engine_mod
from edgebed.rundir import write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
FAILED = {"status": "failed", "reason": "RuntimeError: the evaluator failed (DatasetError: bad magic)",
          "updates": 0, "wall_time_s": 1.5, "updates_per_s": 0.0, "final_accuracy": None,
          "best_accuracy": None, "ingress_bytes": 0, "push_bytes": 0, "egress_bytes": 0,
          "devices": {"said_hello": 2, "crashed": 0, "lost": 0}}


def _raising_run(summary):
    def run(self):
        path = self._setup_path = Path(self.out) / "evfail-1"
        path.mkdir(parents=True)
        if summary is not None:
            write_json_atomic(path / "summary.json", summary)
        raise RuntimeError("the evaluator failed (DatasetError: bad magic)")
    return run


def test_a_recorded_failure_prints_the_summary_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine_mod.Engine, "run", _raising_run(FAILED))
    rc = cli.main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.startswith("failed: RuntimeError: the evaluator failed (DatasetError: bad magic)")
    assert f"run directory: {tmp_path / 'evfail-1'}" in out


def test_a_failure_with_nothing_recorded_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(engine_mod.Engine, "run", _raising_run(None))
    rc = cli.main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == "" and "the evaluator failed" in captured.err
