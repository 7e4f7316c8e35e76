"""A script that calls ``edgebed.run`` at module level, with no ``__main__`` guard, on the local runtime:
its agents and evaluator never re-import it (edgebed/nomain.py), so it runs once, every agent says
hello, and nothing it started outlives it."""
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = textwrap.dedent('''
    import edgebed
    print("module level ran")
    run = edgebed.run({"name": "noguard", "seed": 1, "model": {"name": "mlp"},
                       "dataset": {"test_fraction": 0.1},
                       "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
                       "workers": {"n": 2}, "stop": {"updates": 20, "wall_time": "60s"},
                       "eval": {"every": 20, "test_samples": 200}, "runtime": {"name": "local"}},
                      out="runs", progress=False)
    s = run.summary
    print("SUMMARY", s["status"], s["updates"], s["devices"]["said_hello"])
''')


def _marked(mark: str) -> list[str]:
    """Processes whose environment carries ``mark`` (what the script, and whatever it started, inherit)."""
    left = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if f"EDGEBED_TEST_MARK={mark}".encode() in (p / "environ").read_bytes().split(b"\0"):
                    cmdline = (p / "cmdline").read_bytes().replace(b"\0", b" ")[:120]
                    left.append(f"{p.name}: {cmdline!r}")
            except OSError:
                pass
    return left


def test_a_script_without_a_main_guard_runs_once_and_leaves_nothing(tmp_path):
    (tmp_path / "noguard.py").write_text(SCRIPT)
    mark = uuid.uuid4().hex
    env = {**os.environ, "EDGEBED_TEST_MARK": mark}
    try:
        done = subprocess.run([sys.executable, "noguard.py"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=100)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.count("module level ran") == 1
        assert "SUMMARY complete 20 2" in done.stdout, done.stdout + done.stderr[-3000:]
        assert len(list((tmp_path / "runs").iterdir())) == 1   # one run, not one per agent
        assert "freeze_support" not in done.stderr
        assert _marked(mark) == []
    finally:
        for line in _marked(mark):   # only what this test's script started
            os.kill(int(line.split(":")[0]), 9)
