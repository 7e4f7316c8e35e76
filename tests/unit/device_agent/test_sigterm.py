"""The device agent's SIGTERM handler ends it with 143 wherever the signal lands — also inside an
import, where a SystemExit raised by the handler came out of a module's initialisation as another
error (exit 1, seen once on swarm in tests/contract/test_agent_handles.py) or aborted torch's
(SIGABRT, seen here when SIGTERM met the agent's torch import)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)

# A module whose initialisation is interrupted and wraps what it gets, as a C extension's init does.
WRAPPING = """
import os, signal, time
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
except BaseException as e:
    raise RuntimeError(f"initialisation failed: {e!r}")
"""
DRIVER = """
import signal, sys
sys.path.insert(0, {where!r})
from edgebed.device_agent.__main__ import on_sigterm
signal.signal(signal.SIGTERM, on_sigterm)
try:
    {body}
finally:
    print("finally ran", flush=True)
"""


def _run(tmp_path, body: str):
    (tmp_path / "wrapping.py").write_text(WRAPPING)
    code = textwrap.dedent(DRIVER).format(where=str(tmp_path), body=body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)


def test_sigterm_inside_an_import_ends_the_agent_with_143(tmp_path):
    p = _run(tmp_path, "import wrapping")
    assert p.returncode == 143, (p.returncode, p.stderr[-2000:])
    assert "RuntimeError" not in p.stderr


def test_sigterm_elsewhere_ends_it_with_143_through_its_finally_blocks(tmp_path):
    p = _run(tmp_path, "import os, time; os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)")
    assert p.returncode == 143, (p.returncode, p.stderr[-2000:])
    assert "finally ran" in p.stdout   # sys.exit: what is queued still leaves
