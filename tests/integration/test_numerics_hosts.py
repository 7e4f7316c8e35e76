"""The portable numerics profile gives the same virtual-clock tables on hosts whose instruction sets
differ, and the test can tell: under ``native``, or under the tie rule top-k selection had before
(``np.argpartition``'s own pick among equal values), the same pair of "hosts" gives different tables.

One machine can't be two CPU types, but it can make its libraries behave like a smaller one. Host B is
this machine with ATen limited to its baseline kernels, MKL to AVX2, oneDNN to SSE4.1, numpy's SIMD
dispatch without its highest groups (AVX-512 where this host has it, else AVX2: numpy's
``NPY_DISABLE_CPU_FEATURES``), OpenBLAS on another kernel (``OPENBLAS_CORETYPE``) and edgebed's own
products (``edgebed/_gemm.c``, portable's Linear and Conv2d layers) on their scalar path instead of AVX2
(``EDGEBED_GEMM_PATH``; for the MLP scenarios, the CNN's being slow there): what an older or AVX2-only host picks on its own, and what a host without AVX2
computes for the products. Each run is a fresh process started with that environment, as
`edgebed run` would be on such a host."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from edgebed import numerics
from tests.integration.test_sim_golden import FIXTURE, same_numerics

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ("cnn-adacomp", "cnn-asgd", "mlp-adacomp-batched", "mlp-adacomp-walltime", "mlp-asgd",
          "mlp-asgd-target", "mlp-comp-asgd-app")


def _numpy_off() -> str:
    """numpy's dispatch groups host B goes without: the AVX-512 ones this host has, else AVX2's."""
    found = numerics._numpy_simd().get("found", [])
    top = [f for f in found if f.startswith(("AVX512", "X86_V4"))]
    return " ".join(top or [f for f in found if f == "X86_V3"])


HOST_B = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "SSE41",
          "NPY_DISABLE_CPU_FEATURES": _numpy_off(), "OPENBLAS_CORETYPE": "Sandybridge", "EDGEBED_GEMM_PATH": "scalar"}

# The selection as it was before the tie rule: argpartition's pick among entries equal to the k-th
# largest (which one depends on the kernel numpy dispatched). Kept here to show the test can fail.
OLD_RULE = """
import numpy as np
from edgebed.compression import ops
def topk_indices(x, k):
    n = x.size
    k = max(1, min(int(k), n))
    if k == n:
        return np.arange(n, dtype=np.uint32)
    idx = np.argpartition(np.abs(x), n - k)[n - k:]
    idx.sort()
    return idx.astype(np.uint32)
ops.topk_indices = topk_indices
"""
DRIVER = """
import json, sys, tempfile
from pathlib import Path
if sys.argv[3] == "old":
    exec(OLD_RULE)
from edgebed import numerics
from tests.integration.test_sim_golden import SCENARIOS, run_tables
out = {}
for name in sys.argv[1].split(","):
    sc = dict(SCENARIOS[name], numerics=sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        out[name] = run_tables(sc, Path(tmp))
fp = numerics.fingerprint(sys.argv[2])
out["_fingerprint"] = {k: fp[k] for k in ("id", "numpy_reference", "reference_gradient", "numpy_simd", "blas", "gemm")}
print(json.dumps(out))
"""


def _clean_env() -> dict:
    """This environment without the suite's portable pins: what a user's shell has."""
    return {k: v for k, v in os.environ.items() if k not in numerics.PINS and k != numerics.ENV}


def _run(scenarios, profile: str, host: dict, rule: str = "new") -> dict:
    code = f"OLD_RULE = {OLD_RULE!r}\n{DRIVER}"
    out = subprocess.run([sys.executable, "-c", code, ",".join(scenarios), profile, rule], cwd=ROOT,
                         env={**_clean_env(), **host}, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, f"{profile} run on host {host or 'as is'} failed:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def _differ(a: dict, b: dict) -> dict[str, list[str]]:
    """Per scenario, the columns of its tables that differ between two runs."""
    return {name: sorted(f"{t}.{c}" for t in a[name]["columns"] for c in a[name]["columns"][t]
                         if a[name]["columns"][t][c] != b[name]["columns"][t].get(c))
            for name in a if not name.startswith("_")}


def test_host_b_really_runs_other_numpy_kernels():
    """Host B's numpy runs without the dispatch groups it names, and OpenBLAS on another kernel."""
    assert HOST_B["NPY_DISABLE_CPU_FEATURES"], "numpy finds no SIMD group above its baseline here"
    code = ("from edgebed import numerics; import json; "
            "print(json.dumps([numerics._numpy_simd(), numerics._blas_kernel()]))")
    run = lambda env: json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                                                text=True, timeout=60, check=True).stdout)
    (simd_a, blas_a), (simd_b, blas_b) = run(_clean_env()), run({**_clean_env(), **HOST_B})
    assert set(HOST_B["NPY_DISABLE_CPU_FEATURES"].split()) <= set(simd_a["found"]) - set(simd_b["found"])
    assert blas_b == "Sandybridge" and blas_a != blas_b


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_portable_tables_identical_across_instruction_sets_native_and_old_ties_differ():
    # Host A's portable tables are the recorded fixture: test_sim_golden checks this host against it
    # (and fails, naming the fingerprint, where this host can't match it), so host B is compared with
    # the fixture rather than with a second run of all seven here.
    fixture = json.loads(FIXTURE.read_text())
    same_numerics(fixture["_numerics"])
    # Host B computes the products on the scalar path for the MLP scenarios; the CNN ones (the scalar
    # path's convolutions cost ~80 s of CPU there) on AVX2 — tests/unit/test_portable_ops.py shows
    # the CNN's gradient identical on both paths.
    cnn = [g for g in GOLDEN if g.startswith("cnn")]
    avx2_b = {k: v for k, v in HOST_B.items() if k != "EDGEBED_GEMM_PATH"}
    jobs = [([g for g in GOLDEN if g not in cnn], "portable", HOST_B, "new"), (cnn, "portable", avx2_b, "new"),
            (["mlp-adacomp-batched", "mlp-comp-asgd-app"], "portable", {}, "old"),
            (["mlp-adacomp-batched", "mlp-comp-asgd-app"], "portable", HOST_B, "old"),
            (["cnn-asgd"], "native", {}, "new"), (["cnn-asgd"], "native", HOST_B, "new")]
    with ThreadPoolExecutor(2) as pool:
        port_b, cnn_b, old_a, old_b, nat_a, nat_b = pool.map(lambda job: _run(*job), jobs)
    port_a = {n: fixture[n] for n in GOLDEN}
    # The promise: equal fingerprints, identical tables, for every golden scenario.
    assert port_b["_fingerprint"]["id"] == cnn_b["_fingerprint"]["id"] == fixture["_numerics"]["id"]
    assert (fixture["_numerics"]["gemm"], port_b["_fingerprint"]["gemm"]) == ("avx2", "scalar")
    port_b = {**port_b, **{n: cnn_b[n] for n in cnn}}
    assert not any(_differ(port_a, port_b).values()), f"portable tables differ: {_differ(port_a, port_b)}"
    assert {n: port_a[n]["updates"] for n in GOLDEN} == {n: port_b[n]["updates"] for n in GOLDEN}
    # The test can fail: the old tie rule gives other tables on host B, and the fingerprint sees it.
    old = _differ(old_a, old_b)
    assert any(old.values()), ("the old tie rule gave the same tables on both hosts: this pair of hosts "
                               "can't show what the tie rule fixes")
    assert old_a["_fingerprint"]["numpy_reference"] != old_b["_fingerprint"]["numpy_reference"]
    # And native numerics differ as before (torch's kernels), from each other and from portable's.
    assert "updates.loss" in _differ(nat_a, nat_b)["cnn-asgd"]
    assert nat_a["cnn-asgd"]["columns"] != port_a["cnn-asgd"]["columns"]
