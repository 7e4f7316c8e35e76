"""Study executors on this machine's processes: the registry, retries of a worker that really dies,
Ctrl-C, the lock against a second driver, and the live view that `study status` shows.

(The Ray and SLURM engines run for real in tests/integration/test_study_ray.py and _slurm.py.)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from edgebed.cli import main
from edgebed.study import progress as live
from edgebed.study.executors import EXECUTORS, INSTALL_HINTS, ExecutorError, LocalExecutor, make_executor
from edgebed.study.runner import StudyError, load_study, run_study
from tests.unit.study.fakes import COMPRESSION, DiesBesideASlowCell, DiesOnce, FakeRunner, Slow, write_study

ROOT = Path(__file__).resolve().parents[3]


def test_registry_has_every_engine_installed_here_and_names_the_rest(monkeypatch):
    assert EXECUTORS["local"] is LocalExecutor
    # the test environment installs edgebed[all]: both cluster engines are registered
    assert {"ray", "slurm"} <= set(EXECUTORS) and not INSTALL_HINTS
    with pytest.raises(ExecutorError, match="unknown; use one of local, ray, slurm"):
        make_executor("dask")
    monkeypatch.delitem(EXECUTORS, "ray")
    monkeypatch.setitem(INSTALL_HINTS, "ray", "pip install 'edgebed[ray]'")
    with pytest.raises(ExecutorError, match=r"not installed here; pip install 'edgebed\[ray\]'"):
        make_executor("ray")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_process_that_dies_is_retried_and_the_study_completes(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    (tmp_path / "marks").mkdir()
    lines = []
    status = run_study(study, tmp_path / "out", DiesOnce(str(tmp_path / "marks"), "adacomp-s1"),
                       lambda line, final: lines.append(line), jobs=2)
    assert (status["complete"], status["failed"]) == (6, 0)
    entry = next(e for e in status["cells"] if e["label"] == "adacomp" and e["seed"] == 1)
    assert entry["attempts"] == 2 and entry["status"] == "complete"
    assert any("adacomp · seed 1: a local worker process died" in line and "running it again" in line
               for line in lines)
    assert (tmp_path / "out" / "st" / entry["run"] / "summary.json").is_file()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_that_dies_costs_the_cell_beside_it_nothing(tmp_path):
    """One dead process is one lost attempt, of its own cell: the cell running next to it is neither
    killed nor charged (a shared process pool breaks as a whole and would charge both)."""
    study = load_study(write_study(tmp_path, **COMPRESSION))
    (tmp_path / "marks").mkdir()
    lines = []
    status = run_study(study, tmp_path / "out", DiesBesideASlowCell(str(tmp_path / "marks"), "adacomp-s1", always=True),
                       lambda line, final: lines.append(line), jobs=2, retries=1)
    by = {(e["label"], e["seed"]): e for e in status["cells"]}
    assert by[("adacomp", 1)]["status"] == "failed" and by[("adacomp", 1)]["attempts"] == 2
    others = [e for k, e in by.items() if k != ("adacomp", 1)]
    assert [(e["status"], e["attempts"]) for e in others] == [("complete", 1)] * 5, \
        "\n".join(lines)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_cell_whose_worker_always_dies_fails_after_the_retries_and_the_rest_goes_on(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    (tmp_path / "marks").mkdir()
    status = run_study(study, tmp_path / "out", DiesOnce(str(tmp_path / "marks"), "comp-asgd-s2", always=True),
                       jobs=2, retries=1)
    failed = [e for e in status["cells"] if e["status"] == "failed"]
    assert [(e["label"], e["seed"], e["attempts"]) for e in failed] == [("comp-asgd", 2, 2)]
    assert "worker lost 2 times" in failed[0]["error"]
    # the other five ran to the end; a later invocation runs only the failed one again
    assert status["complete"] == 5
    again = run_study(load_study(study.path), tmp_path / "out", FakeRunner(), jobs=2)
    assert (again["complete"], again["skipped"], again["failed"]) == (1, 5, 0)


class InterruptAfterFirst:
    """The progress callback: the user presses Ctrl-C when the first cell × seed has finished."""

    def __init__(self):
        self.lines = []

    def __call__(self, line, final):
        self.lines.append(line)
        if ": complete in" in line and not any(": complete in" in x for x in self.lines[:-1]):
            self.first = line.split("] ", 1)[1].split(":")[0]      # "asgd · seed 1"
            raise KeyboardInterrupt


@pytest.mark.timeout(120)
def test_ctrl_c_cancels_what_is_outstanding_and_keeps_each_finished_result_whole(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    user = InterruptAfterFirst()
    with pytest.raises(KeyboardInterrupt):
        run_study(study, tmp_path / "out", Slow(), user, jobs=2)
    status = json.loads((tmp_path / "out" / "st" / "status.json").read_text())
    by = {f"{e['label']} · seed {e['seed']}": e for e in status["cells"]}
    assert by[user.first]["status"] == "complete"     # the one that finished before Ctrl-C
    assert len(status["cells"]) == 6, json.dumps([status["cells"], live.read(tmp_path / "out" / "st")], indent=0)
    assert status["not run"] >= 2   # queued ones never started
    for e in status["cells"]:
        if e["status"] == "complete":      # whole: the report's loader reads it
            run = tmp_path / "out" / "st" / e["run"]
            assert json.loads((run / "summary.json").read_text())["status"] == "complete"
    snap = live.read(tmp_path / "out" / "st")
    assert snap["finished"] and live.counts(snap)["running"] == 0
    # the next invocation resumes: only what did not finish runs
    again = FakeRunner()
    st = run_study(load_study(study.path), tmp_path / "out", again)
    assert st["skipped"] == sum(e["status"] == "complete" for e in status["cells"])
    assert st["complete"] + st["skipped"] == 6


def test_a_second_driver_on_the_same_study_directory_is_refused(tmp_path):
    path = write_study(tmp_path, **COMPRESSION)
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from edgebed.study.lock import StudyLock
        with StudyLock({str(out / 'st')!r}, "edgebed study run (the first driver)"):
            print("locked", flush=True)
            time.sleep(60)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StudyError, match=rf"another study driver is writing here \(pid {holder.pid} "
                                             r"on .*the first driver\)"):
            run_study(load_study(path), out, FakeRunner())
        assert not (out / "st" / "status.json").exists()          # nothing was written
    finally:
        holder.kill()                                            # killed: the kernel drops its lock
        holder.wait()
        holder.stdout.close()
    status = run_study(load_study(path), out, FakeRunner())
    assert status["complete"] == 6


def test_the_results_directory_is_locked_too(tmp_path, capsys):
    from edgebed.study.lock import StudyLock
    path = write_study(tmp_path, **COMPRESSION)
    with StudyLock(tmp_path / "res", "another study run"):
        assert main(["study", "run", str(path), "--out", str(tmp_path / "out"),
                     "--results", str(tmp_path / "res")]) == 2
    assert "another study driver is writing here" in capsys.readouterr().err


def test_live_view_fits_80_columns_and_says_who_runs_what():
    now = 10_000.0
    snap = {"study": "compression-paper-protocol-with-a-long-name", "executor": "ray (10.1.2.3:6379)",
            "workers": 2, "pid": 42, "host": "login-node-01.cluster.example.org", "started": now - 700,
            "finished": None, "tasks": [
                {"cell": "a", "seed": 1, "label": "adacomp c=0.01 · lr=0.1 · some very long label", "state":
                 "complete", "worker": "n1:1", "started": now - 700, "wall_time_s": 300.0, "attempts": 1},
                {"cell": "b", "seed": 1, "label": "asgd", "state": "complete", "worker": "n2:2",
                 "started": now - 700, "wall_time_s": 500.0, "attempts": 1},
                {"cell": "c", "seed": 1, "label": "comp-asgd c=0.01", "state": "running",
                 "worker": "10.1.2.3:5012 node 3fa2c1d0", "started": now - 100, "wall_time_s": None, "attempts": 1},
                {"cell": "d", "seed": 2, "label": "adacomp c=0.1", "state": "retry", "worker": None,
                 "started": None, "wall_time_s": None, "attempts": 2},
                {"cell": "e", "seed": 1, "label": "asgd", "state": "queued", "worker": None,
                 "started": None, "wall_time_s": None, "attempts": 0},
                {"cell": "f", "seed": 1, "label": "x", "state": "failed", "worker": None, "started": None,
                 "wall_time_s": None, "attempts": 3, "error": "worker lost 3 times"}]}
    lines = live.render(snap, now=now)
    assert all(len(x) <= 80 for x in lines)
    assert live.counts(snap) == {"done": 2, "running": 1, "failed": 1, "queued": 2}
    assert "done 2 · running 1 · failed 1 · queued 2 (of 6)" in lines[1]
    # median 400 s; 2 queued at 400 s + 300 s left of the running one, over 2 workers: 550 s
    assert "median cell 6:40" in lines[1] and "ETA 9:10" in lines[1]
    assert any("comp-asgd c=0.01 · seed 1" in x and "10.1.2.3:5012" in x and "1:40" in x for x in lines)
    assert any(x.strip().startswith("retry 2") for x in lines)
    assert any("failed" in x and "worker lost 3 times" in x for x in lines)


def test_study_status_shows_the_drivers_view(tmp_path, capsys):
    path = write_study(tmp_path, **COMPRESSION)
    run_study(load_study(path), tmp_path / "out", FakeRunner(fail=("comp-asgd-s1",)))
    capsys.readouterr()
    assert main(["study", "status", str(path), "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "done 5 · running 0 · failed 1 · queued 0 (of 6)" in text
    assert "local, in this process" in text and "finished" in text


def _hold(path: str, seconds: float) -> int:
    """A task that says when it started and ended (its own file), for the overlap test below."""
    t0 = time.time()
    time.sleep(seconds)
    Path(path).write_text(f"{t0} {time.time()}")
    return os.getpid()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_local_executor_runs_at_most_its_workers_at_once_and_cancels_what_waits(tmp_path):
    ex = LocalExecutor(2)
    try:
        futs = [ex.submit(_hold, str(tmp_path / f"t{i}"), 1.0) for i in range(5)]
        assert futs[4].cancel()                       # still queued: it never starts
        pids = [f.result(timeout=60) for f in futs[:4]]
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    assert len(set(pids)) == 4 and os.getpid() not in pids     # a process of its own each
    spans = [tuple(map(float, (tmp_path / f"t{i}").read_text().split())) for i in range(4)]
    for t, _ in spans:                                # never more than two running at any start
        assert sum(a <= t < b for a, b in spans) <= 2
    assert not (tmp_path / "t4").exists()
