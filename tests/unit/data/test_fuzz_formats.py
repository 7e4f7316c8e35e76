"""A fuzz test per untrusted-file format (issue 51): seeded random mutations of a small valid file each
end in a valid load or the format's one clear error (``DatasetError`` / ``TraceError``, which
``bounded.LimitError`` is), each within 1 s, with the child's address space capped at 200 MB over
what it maps once the valid file has loaded (``fuzz_runner.py``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz_runner import FORMATS

CASES = 300
RUNNER = Path(__file__).with_name("fuzz_runner.py")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_mutated_files_load_or_give_the_clear_error(tmp_path, fmt):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    p = subprocess.run([sys.executable, str(RUNNER), fmt, "51", str(CASES), str(tmp_path)], capture_output=True,
                       text=True, timeout=50, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["bad"] == [], json.dumps(got["bad"][:5], indent=1)
    assert got["slow"] == [], got["slow"]
    assert got["loaded"] + got["refused"] == CASES
    assert got["refused"] > 0, "no mutation was refused: the fuzzing reached nothing"
