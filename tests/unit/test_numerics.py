"""Numerics profiles (edgebed/numerics.py): child environments, fingerprints, and what reports say."""
from __future__ import annotations

import ast
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgebed import numerics

pytestmark = pytest.mark.timeout(60)


def test_portable_child_gets_every_pin_and_the_profile():
    env = numerics.child_env("portable", {"PATH": "/bin"})
    assert {k: env[k] for k in numerics.PINS} == numerics.PINS
    assert env[numerics.ENV] == "portable" and env["PATH"] == "/bin"


def test_native_child_of_a_portable_process_loses_the_pins_but_keeps_a_users_own_settings():
    inherited = numerics.child_env("native", {**numerics.environment("portable"), "PATH": "/bin"})
    assert not set(numerics.PINS) & set(inherited) and inherited[numerics.ENV] == "native"
    own = numerics.child_env("native", {"ATEN_CPU_CAPABILITY": "default", "PATH": "/bin"})
    assert own["ATEN_CPU_CAPABILITY"] == "default"   # not put there by edgebed: native runs what it says


def test_unknown_profile_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="portable, native"):
        numerics.environment("fast")


def test_summarize_says_when_runs_are_not_comparable_bit_for_bit():
    a = {"profile": "portable", "id": "aaa", "torch": "2.13.0", "cpu_capability": "AVX2"}
    b = {**a, "profile": "native", "id": "bbb", "cpu_capability": "AVX512"}
    same = numerics.summarize([a, a])
    assert not same["mixed"] and same["groups"] == {numerics.describe(a): 2}
    mixed = numerics.summarize([a, b, None])
    assert mixed["mixed"] and "not comparable bit for bit" in mixed["text"]
    assert "3" not in mixed["text"].split(" run")[0] and "not recorded" in mixed["text"]


def test_of_run_reads_a_run_dirs_manifest_and_a_compact_results_summary(tmp_path):
    fp = {"profile": "portable", "id": "abc"}
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "manifest.json").write_text(json.dumps({"numerics": fp}))
    (tmp_path / "compact").mkdir()
    (tmp_path / "compact" / "summary.json").write_text(json.dumps({"compact": {"numerics": fp}}))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text("{}")
    assert numerics.of_run(tmp_path / "full") == fp == numerics.of_run(tmp_path / "compact")
    assert numerics.of_run(tmp_path / "old") is None


def test_fingerprint_under_portable_matches_the_recorded_reference_on_this_host():
    fp = numerics.enter("portable")
    assert fp["cpu_capability"] == "AVX2" and fp["onednn"] is False and fp["threads"] == 1
    assert fp["reproducible"], fp["problem"]   # an x86-64 host with AVX2: it must compute the reference
    assert fp["id"] == numerics.enter("portable")["id"]   # the same process, the same fingerprint


LATE = """
import os, json
import torch
torch.ones(3).add_(1)                         # a torch operation before the profile: kernels are chosen
from edgebed import numerics
native = torch.backends.cpu.get_cpu_capability()
try:
    numerics.apply("portable")
    print(json.dumps({"native": native, "error": None}))
except numerics.NumericsError as err:
    print(json.dumps({"native": native, "error": str(err)}))
"""


def test_portable_is_refused_once_torch_runs_other_kernels_in_the_process():
    env = {k: v for k, v in os.environ.items() if k not in numerics.PINS and k != numerics.ENV}
    out = subprocess.run([sys.executable, "-c", LATE], env=env, capture_output=True, text=True, timeout=60)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got["native"] == "AVX2":   # an AVX2-only host: its own kernels are the portable ones
        assert got["error"] is None
    else:
        assert "already runs" in got["error"] and "edgebed run" in got["error"]


def test_a_host_without_avx2_is_told_its_tables_compare_only_with_its_own_type(monkeypatch):
    # ARM or an x86-64 without AVX2 can't run the portable kernels: the fingerprint says so plainly.
    monkeypatch.setattr(numerics, "_host_has_avx2", lambda: False)
    monkeypatch.setattr(numerics, "_cpu_model", lambda: "Some ARM core")
    fp = numerics.fingerprint("portable")
    assert fp["problem"] and "has no AVX2" in fp["problem"] and "Some ARM core" in fp["problem"]
    assert "same host type" in fp["problem"]


def test_a_host_computing_another_reference_is_named_with_both_hashes(monkeypatch):
    here = numerics.enter("portable")
    monkeypatch.setattr(numerics, "_reference_hash", lambda: "0123456789abcdef")
    fp = numerics.fingerprint("portable")
    assert fp["reproducible"] is False
    recorded = numerics.PORTABLE_REFERENCE[fp["torch"].split("+")[0]]
    assert "0123456789abcdef" in fp["problem"] and recorded in fp["problem"]
    # its id differs from this (reproducing) host's, so `study status` and `report` keep the runs apart
    assert fp["id"] != here["id"]
    assert numerics.summarize([fp, here])["mixed"]


def test_another_torch_version_has_no_reference_and_says_so(monkeypatch):
    monkeypatch.setattr(numerics, "PORTABLE_REFERENCE", {})
    fp = numerics.fingerprint("portable")
    assert fp["reproducible"] is None and "no portable reference recorded" in fp["problem"]



def test_a_host_whose_numpy_computes_another_reference_is_named_with_its_dispatch(monkeypatch):
    """What an AVX2-only host running numpy's old tie-dependent selection would have been told."""
    here = numerics.enter("portable")
    monkeypatch.setattr(numerics, "_numpy_reference_hash", lambda: "fedcba9876543210")
    fp = numerics.fingerprint("portable")
    assert fp["reproducible"] is False and fp["id"] != here["id"]
    assert "fedcba9876543210" in fp["problem"] and numerics.NUMPY_REFERENCE[fp["numpy"]] in fp["problem"]
    assert "SIMD" in fp["problem"] and fp["numpy_simd"]["found"]


# Kernels whose bits follow the host: numpy's transcendental ufuncs and sorts of floats are dispatched
# by SIMD level, np.dot and np.linalg go through OpenBLAS's per-CPU kernel, argpartition's pick among
# equal values depends on the kernel. Code whose results reach a run's tables must not call them;
# analysis (reports, plots) and studies read tables, they don't make them.
HOST_DEPENDENT = re.compile(r"np\.(dot|vdot|inner|matmul|einsum|linalg|argpartition|partition|exp|expm1|log|log1p|"
                            r"log2|log10|sin|cos|tan|arctan|arcsin|arccos|tanh|sinh|cosh|cbrt|power|float_power)\b"
                            r"|(?<![\w.])np\.(sort|argsort)\(|\s@\s")
ALLOWED = {
    # the one partition whose *value* is used (the k-th largest: one value whatever the kernel)
    ("compression/ops.py", "np.partition"),
    # a fast path whose verdict the exact test repeats: the result is the same on every host
    ("ps/aggregate.py", "np.dot"),
    # sorts of integer arrays (positions, sample indices): equal integers are indistinguishable
    ("data/__init__.py", "np.sort("), ("data/partitions.py", "np.sort("), ("emulator/verdict.py", "np.sort("),
    ("data/scenario_set.py", "np.sort("),
}


def test_no_host_dependent_numpy_kernel_on_the_table_path():
    root = Path(numerics.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("analysis/", "study/")):
            continue
        text = path.read_text()
        docs = {n for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                for n in range(node.lineno, node.end_lineno + 1)}
        for no, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if no in docs:
                continue
            for m in HOST_DEPENDENT.finditer(code):
                if "sort(" in m.group(0) and 'kind="stable"' in code:   # stable: ties in a fixed order
                    continue
                if not any(rel == f and m.group(0).startswith(w) for f, w in ALLOWED):
                    found.append(f"{rel}:{no}: {line.strip()}")
    assert not found, "host-dependent numpy kernels on the table path:\n" + "\n".join(found)

DRIVER_FIRST = """
import json
from edgebed.analysis import paper_bytes
from edgebed import numerics
sizes = [paper_bytes.per_update(m, a, 0.01) for m in ("cnn", "mlp") for a in ("asgd", "adacomp", "comp-asgd")]
numerics.apply("portable")        # raises NumericsError if the byte counts ran a CPU kernel first
print(json.dumps({"sizes": sizes}))
"""


def test_a_study_driver_can_count_paper_bytes_before_a_cell_applies_portable():
    """The study driver compacts a finished run (paper-encoding bytes need the model's layer
    layout) before the next in-process cell applies the numerics profile: that must run no CPU
    kernel, or the cell fails ("already runs AVX512 kernels") — it did, resuming the paper study."""
    env = {k: v for k, v in os.environ.items() if k not in numerics.PINS and k != numerics.ENV}
    out = subprocess.run([sys.executable, "-c", DRIVER_FIRST], env=env, capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert all(s > 0 for s in json.loads(out.stdout.strip().splitlines()[-1])["sizes"])
