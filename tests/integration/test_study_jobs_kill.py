"""A killed `study run --jobs 2` takes its worker processes with it: the cells in progress end (as
interrupted runs) and no queued cell starts afterwards."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.unit.study.fakes import COMPRESSION, write_study

ROOT = Path(__file__).resolve().parents[2]


class SlowCell:
    """A picklable run_cell that notes each start (its PID) and then takes a long time."""

    def __init__(self, marks: str):
        self.marks = marks

    def __call__(self, sc, out, progress):
        Path(self.marks, f"{os.getpid()}-{sc.name}").write_text("")
        time.sleep(60)
        raise RuntimeError("not reached in the test")


class PoliteCell(SlowCell):
    """Ends as the engine does on SIGTERM: it records the interrupted run and returns."""

    def __call__(self, sc, out, progress):
        stopped = []
        signal.signal(signal.SIGTERM, lambda *_: stopped.append(1))
        Path(self.marks, f"{os.getpid()}-{sc.name}").write_text("")
        deadline = time.monotonic() + 60
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"status": "incomplete"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.timeout(90)
@pytest.mark.parametrize("cell, sig", [("SlowCell", signal.SIGKILL), ("PoliteCell", signal.SIGTERM)])
def test_killing_the_study_process_ends_its_workers_and_starts_nothing_new(tmp_path, cell, sig):
    """PoliteCell, SIGTERM: a worker whose cell ends on its own after the study process has gone says
    nothing (it printed a BrokenPipeError traceback, twice, trying to send its result back)."""
    path = write_study(tmp_path, **COMPRESSION)            # 3 cells × 2 seeds = 6 runs, 2 at a time
    marks = tmp_path / "marks"
    marks.mkdir()
    script = textwrap.dedent(f"""
        from edgebed.study.runner import load_study, run_study
        from tests.integration.test_study_jobs_kill import {cell}
        run_study(load_study({str(path)!r}), {str(tmp_path / 'out')!r}, {cell}({str(marks)!r}), jobs=2)
    """)
    log = tmp_path / "study.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        started = list(marks.iterdir())
        assert len(started) == 2, (started, log.read_text())
        workers = {int(p.name.split("-")[0]) for p in started}
        proc.send_signal(sig)                              # kill -9: no clean-up of its own
        proc.wait(5)
        deadline = time.monotonic() + 20
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers), "workers outlived the study process"
        time.sleep(1)
        assert len(list(marks.iterdir())) == 2, sorted(p.name for p in marks.iterdir())
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
