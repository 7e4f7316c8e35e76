"""`edgebed run` as a child process, for the integration tests that signal, kill, resume or attack a
real run: write the scenario, start the run in its own process group, wait for what it writes into
its run directory, and end exactly what the test started."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional


def edgebed(*args: str, cwd: Path, env: Optional[dict] = None) -> subprocess.Popen:
    """`edgebed ...` in its own session (process group), so the test can kill exactly what it started;
    stdout and stderr together, as text (SIGINT at its default: see tests/conftest.py)."""
    return subprocess.Popen([sys.executable, "-m", "edgebed.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)


def start_run(tmp: Path, scenario: str, env: Optional[dict] = None) -> subprocess.Popen:
    """Write ``scenario`` (YAML text) to ``tmp/s.yaml`` and start `edgebed run s.yaml --out runs` in ``tmp``."""
    (tmp / "s.yaml").write_text(scenario)
    return edgebed("run", "s.yaml", "--out", "runs", cwd=tmp, env=env)


def wait_for(predicate: Callable, timeout: float, what: str, proc: Optional[subprocess.Popen] = None):
    """``predicate()``'s first true value, polled every 0.05 s; fails after ``timeout`` s, or as soon
    as ``proc`` (the run) has ended, with its output."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended (code {proc.returncode}) before {what}:\n"
                                 f"{proc.communicate()[0][-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def run_dir(tmp: Path, name: str) -> Optional[Path]:
    """The run directory of scenario ``name`` under ``tmp/runs``, once the engine made it."""
    dirs = [d for d in (tmp / "runs").glob(f"{name}-*") if d.is_dir()] if (tmp / "runs").exists() else []
    return dirs[0] if dirs else None


def update_parts(run: Optional[Path]) -> int:
    """How many parts of the updates table the run has flushed (0 before its directory exists)."""
    return len(list((run / "updates").glob("part-*.parquet"))) if run is not None else 0


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (if it is still there) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


def end_run(proc: subprocess.Popen, run: Optional[Path]) -> None:
    """What a test's ``finally`` does: kill the run's group, then end what the run recorded
    (`edgebed clean` of its directory: agents, containers)."""
    kill_group(proc)
    if run is not None:
        from edgebed.emulator.cleanup import clean
        clean(run)


def small_run(name: str, *, seed: int = 5, train: int = 600, n: int = 3, think: str = "20ms",
              classes: Optional[str] = None, stop: str = "{updates: 100000, wall_time: 60s}", every: int = 50,
              test: int = 100, local: bool = False, before_stop: str = "", after: str = "") -> str:
    """The scenario these tests start, signal, kill or attack: a few MLP devices pushing AdaComp
    updates as fast as ``think`` lets them, on a small slice of the bundled digits (YAML text).
    ``classes`` replaces the one default class; ``before_stop`` / ``after`` are extra top-level lines
    (e.g. ``failures: ...``, ``checkpoint: ...``)."""
    classes = classes or f"[{{name: default, share: 1.0, think_time: {think}}}]"
    runtime = "runtime: {name: local}\n" if local else ""
    return (f"\nname: {name}\nseed: {seed}\ndataset: {{train_samples: {train}, test_fraction: 0.1}}\n"
            f"model: {{name: mlp}}\nalgorithm: {{name: adacomp, lr: 0.05, c: 0.05}}\n{runtime}"
            f"workers:\n  n: {n}\n  classes: {classes}\n{before_stop}stop: {stop}\n"
            f"eval: {{every: {every}, test_samples: {test}}}\n{after}")
