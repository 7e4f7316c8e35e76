"""The SLURM executor on a real one-node SLURM (munged, slurmctld, slurmd started by .ci/provision):
the smoke study goes in as one job array through submitit; an array task whose processes are killed while it runs
(as a node failure or preemption would end it) is submitted again and the study completes, with the
compact results the local executor gives."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading

import pytest

from edgebed.study.executors import Resources
from edgebed.study.runner import load_study, run_study
from tests.capabilities import require
from tests.integration.study_cells import (assert_same_result, kill_first_running, local_reference, run_of,
                                           write_smoke_study)


def require_slurm():
    try:
        from edgebed.study.executors.slurm_executor import slurm_problem
    except ImportError:
        require(False, "submitit", "pip install -e '.[slurm]'")
    problem = slurm_problem()
    require(problem is None, "a running SLURM cluster",
            f"{problem}; `bash .ci/provision` (root) starts a one-node one: munged, slurmctld, slurmd")


def kill_job_processes(job: str) -> None:
    """SIGKILL every process of a running SLURM job (an array task id such as ``72_0`` too)."""
    jid = subprocess.run(["squeue", "-h", "-j", job, "-o", "%A"], capture_output=True, text=True,
                         check=True, timeout=30).stdout.split()[0]
    out = subprocess.run(["scontrol", "listpids", jid], capture_output=True, text=True, check=True, timeout=30)
    pids = [int(line.split()[0]) for line in out.stdout.splitlines()[1:] if line.split()]
    assert pids, f"SLURM lists no process of job {job} ({jid}): {out.stdout!r}"
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_study_runs_as_a_job_array_survives_a_cancelled_task_and_matches_the_local_executor(tmp_path):
    require_slurm()
    from edgebed.study.executors import SlurmExecutor
    # cells of 1,500 updates (seconds each): long enough that the task seen running is still running
    # when the kill lands; at 300 updates one could write its result in between
    reference = local_reference(1500)
    path = write_smoke_study(tmp_path / "study", updates=1500)
    sdir = tmp_path / "out" / "exec-smoke"
    cancelled = {}

    def kill_job(t):
        m = re.search(r"job (\S+)", t["worker"])
        if not m:
            return None
        # The task's processes die at once, as on a node failure. (scancel sends SIGTERM first, which
        # submitit's job bypasses: a cell of seconds then finishes within SLURM's KillWait, writes its
        # result, and nothing is retried.)
        kill_job_processes(m.group(1))
        return {"cell": t["cell"], "job": m.group(1)}

    def cancel_one_mid_cell():
        cancelled.update(kill_first_running(sdir, kill_job))

    killer = threading.Thread(target=cancel_one_mid_cell, daemon=True)
    killer.start()
    executor = SlurmExecutor(folder=sdir / "slurm", time_min=10, resources=Resources(cpus=1))
    lines = []
    try:
        status = run_study(load_study(path), tmp_path / "out", progress=lambda line, final: lines.append(line),
                           executor=executor, retries=2)
    finally:
        executor.shutdown(cancel_futures=True)
    killer.join(5)
    assert cancelled, f"no array task was seen running: {lines}"
    assert (status["complete"], status["failed"]) == (2, 0), status["cells"]
    # the first submission was one array of both cells (<array id>_0, _1), the retry a job of its own
    first = cancelled["job"].split("_")[0]
    assert {p.name for p in (sdir / "slurm").iterdir()} >= {f"{first}_0", f"{first}_1"}
    by = {e["cell"]: e for e in status["cells"]}
    assert by[cancelled["cell"]]["attempts"] == 2
    assert any(f"SLURM job {cancelled['job']}" in line and "running it again" in line for line in lines), lines
    for cell in ("asgd", "adacomp-c-0.01"):
        assert_same_result(run_of(sdir, cell), run_of(reference, cell))
