"""`python -m edgebed.cli` exits with the code the command chose when a Ctrl-C it caught had landed in
code run from source text (a dataclass's or namedtuple's generated methods, built during imports):
CPython remembers such an interrupt and, without edgebed.cli's ``_forget_caught_interrupt``, ends a
``python -m`` program by SIGINT at exit for it. The test suite's runs are started so (a start-up Ctrl-C
test once saw exit -2 instead of 130 this way)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ENTRY = '''
import runpy
import edgebed.console as console

real = console.setup_logging


def interrupted(*args, **kwargs):   # the command's set-up, with a Ctrl-C landing in exec'd source
    real(*args, **kwargs)
    exec("raise KeyboardInterrupt")


console.setup_logging = interrupted
runpy.run_module("edgebed.cli", run_name="__main__", alter_sys=True)
'''


@pytest.mark.timeout(60)
def test_a_caught_interrupt_in_execd_code_leaves_exit_130_not_death_by_sigint(tmp_path):
    (tmp_path / "entry.py").write_text(ENTRY)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run([sys.executable, "-m", "entry", "runs"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=50)
    assert "interrupted" in p.stderr, p.stderr[-2000:]
    assert p.returncode == 130, (p.returncode, p.stderr[-2000:])
