"""The portable numerics profile gives the same virtual-clock tables on hosts whose instruction sets
differ, and the test can tell: under ``native`` the same pair of "hosts" gives different tables.

One machine can't be two CPU types, but it can make its libraries behave like a smaller one: host B
is this machine with ATen limited to its baseline kernels, MKL to AVX2 and oneDNN to SSE4.1 (what an
older or AVX2-only host picks on its own). Each run is a fresh process started with that environment,
as `edgebed run` would be on such a host."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from edgebed import numerics

ROOT = Path(__file__).resolve().parents[2]
HOST_B = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
DRIVER = """
import json, sys, tempfile
from pathlib import Path
from tests.integration.test_sim_golden import SCENARIOS, run_tables
sc = dict(SCENARIOS[sys.argv[1]], numerics=sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    got = run_tables(sc, Path(tmp))
manifest_fp = got.pop("numerics", None)
print(json.dumps(got))
"""


def _clean_env() -> dict:
    """This environment without the suite's portable pins: what a user's shell has."""
    return {k: v for k, v in os.environ.items() if k not in numerics.PINS and k != numerics.ENV}


def _run(scenario: str, profile: str, host: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", DRIVER, scenario, profile], cwd=ROOT, env={**_clean_env(), **host},
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, f"{profile} run on host {host or 'as is'} failed:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_portable_tables_identical_across_instruction_sets_native_differ():
    jobs = [(p, h) for p in ("portable", "native") for h in ({}, HOST_B)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda job: _run("cnn-asgd", *job), jobs))
    (port_a, port_b, nat_a, nat_b) = results
    assert port_a == port_b, "portable numerics gave different tables on the two instruction sets"
    differ = {c for c in nat_a["columns"]["updates"] if nat_a["columns"]["updates"][c] != nat_b["columns"]["updates"][c]}
    assert "loss" in differ, ("native numerics gave the same loss column on both instruction sets: the test "
                              "can't show that portable removes a difference")
    assert nat_a != port_a   # native on this host is not portable either (oneDNN, AVX-512 or AVX2+FMA kernels)
