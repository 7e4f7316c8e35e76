"""The virtual clock's tables for the gradient rules stay bit-identical to the recorded ones, on every
host that computes the portable numerics profile's reference gradient (``edgebed/numerics.py``).

The fixture (``tests/fixtures/sim_golden.json``) holds the numerics fingerprint it was recorded under
(``_numerics``: profile portable) and, per scenario, a SHA-256 per column of its ``updates``, ``evals``
and ``events`` tables (wall-clock columns excluded). The tables were first recorded at commit 63d2d44
(native numerics, on another host type), re-recorded under ``portable``, and again on 2026-11-28 when
top-k selection got its tie rule (lowest positions first; before, numpy's SIMD level picked among
equal values, and three MLP scenarios differed on an AVX2-only host). They are the same on any x86-64
host with AVX2 for the same torch and numpy, whatever numpy's SIMD dispatch and OpenBLAS's kernel
(``test_numerics_hosts.py`` varies both). A host that computes another reference gradient
fails with the fingerprint mismatch named, never a column list that hides why. Re-record only on
purpose: ``.venv/bin/python tests/integration/test_sim_golden.py --record``.
"""
from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sim_golden.json"
TABLES = ("updates", "evals", "events")
WALL = {"wall_time"}

_CLASSES = [
    {"name": "fast", "share": 0.34, "slowdown": 1, "think_time": "5ms"},
    {"name": "slowlink", "share": 0.33, "slowdown": 1,
     "uplink": {"rate": "2mbit", "delay": "20ms", "jitter": "5ms", "loss": "2%"},
     "downlink": {"rate": "20mbit", "delay": "5ms"}},
    {"name": "slowcpu", "share": 0.33, "slowdown": 4,
     "think_time": {"dist": "exponential", "mean": "5ms"}, "uplink": {"rate": "10mbit"}},
]


def _base(name: str, algorithm: dict, model: str = "mlp", n: int = 6, updates: int = 300, **extra) -> dict:
    sc = {"name": name, "seed": 3, "dataset": {"train_samples": 2000}, "model": {"name": model},
          "algorithm": {"lr": 0.05, "batch_size": 10, **algorithm},
          "workers": {"n": n, "classes": copy.deepcopy(_CLASSES)},
          "failures": {"crash_probability": 0.01}, "stop": {"updates": updates},
          "eval": {"every": 100, "test_samples": 300}, "runtime": {"name": "sim", "sim": {}}}
    for key, value in extra.items():
        sc[key] = {**sc.get(key, {}), **value} if isinstance(value, dict) else value
    return sc


SCENARIOS = {
    "mlp-asgd": _base("mlp-asgd", {"name": "asgd"}),
    "mlp-comp-asgd-app": _base("mlp-comp-asgd-app", {"name": "comp-asgd", "c": 0.05},
                               runtime={"name": "sim", "sim": {"link_model": "app"}}),
    "mlp-adacomp-batched": _base("mlp-adacomp-batched", {"name": "adacomp", "c": 0.02},
                                 runtime={"name": "sim", "sim": {"max_batch": 4, "step_jitter": 0.2}}),
    "mlp-asgd-target": _base("mlp-asgd-target", {"name": "asgd"}, updates=2000,
                             stop={"target_accuracy": 0.5}, eval={"every": 20, "test_samples": 300}),
    "mlp-adacomp-walltime": _base("mlp-adacomp-walltime", {"name": "adacomp", "c": 0.05}, updates=5000,
                                  stop={"wall_time": "0.4s"}),
    "cnn-adacomp": _base("cnn-adacomp", {"name": "adacomp", "c": 0.01}, model="cnn", n=5, updates=200),
    "cnn-asgd": _base("cnn-asgd", {"name": "asgd"}, model="cnn", n=4, updates=150,
                      eval={"every": 50, "test_samples": 200}),
}


def column_hashes(frame: pd.DataFrame) -> dict[str, str]:
    """SHA-256 of each column's exact values (floats by their bytes; NaN as one fixed pattern)."""
    out = {}
    for col in sorted(c for c in frame.columns if c not in WALL):
        s = frame[col]
        if s.dtype.kind in "fiub":
            data = np.ascontiguousarray(s.to_numpy(dtype=np.float64)).tobytes()
        else:
            data = "\x1f".join(map(str, s.tolist())).encode()
        out[col] = hashlib.sha256(data).hexdigest()[:24]
    return out


def run_tables(scenario: dict, out: Path) -> dict:
    from edgebed.emulator.engine import Engine
    from edgebed.rundir import read_table
    from edgebed.scenario import parse_scenario
    result = Engine(parse_scenario(copy.deepcopy(scenario)), out=out).run()
    tables = {t: read_table(result.path, t) for t in TABLES}
    return {"rows": {t: len(f) for t, f in tables.items()},
            "columns": {t: column_hashes(f) for t, f in tables.items()},
            "ingress_bytes": result.summary["ingress_bytes"], "updates": result.summary["updates"]}


def same_numerics(recorded: dict) -> None:
    """Fails, naming why, unless this process computes the fixture's reference gradient."""
    from edgebed import numerics
    here = numerics.enter("portable")
    if here["id"] != recorded["id"]:
        pytest.fail(f"numerics fingerprint mismatch: this host's id is {here['id']} under portable (reference "
                    f"gradient {here['reference_gradient']}, numpy reference {here.get('numpy_reference')}; torch "
                    f"{here['torch']}, {here['cpu_capability']} kernels, numpy {here['numpy']} with SIMD "
                    f"{here.get('numpy_simd')}, BLAS {here.get('blas')}, CPU {here['cpu']}); the fixture was "
                    f"recorded with id {recorded['id']} ({recorded['reference_gradient']}, "
                    f"{recorded.get('numpy_reference')}; torch {recorded['torch']}, numpy {recorded['numpy']}, CPU "
                    f"{recorded['cpu']}). {here['problem'] or ''} The tables can't be compared bit for bit on this host.")


def with_workers(scenario: dict, workers: int) -> dict:
    """``scenario`` with its devices' work computed by ``workers`` processes (runtime.sim.workers)."""
    sc = copy.deepcopy(scenario)
    if workers > 1:
        sc["runtime"]["sim"]["workers"] = workers
    return sc


# Workers compute each device's work ahead in other processes (emulator/runtimes/sim_pool.py): the tables
# must be the recorded ones. The batched scenario computes in the clock's process (vmap) by definition.
CASES = [pytest.param(name, w, id=f"{name}-workers{w}", marks=[pytest.mark.slow] if w > 1 else [])
         for name in sorted(SCENARIOS) for w in (1, 2)
         if not (w > 1 and SCENARIOS[name]["runtime"]["sim"].get("max_batch", 1) > 1)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name,workers", CASES)
def test_sim_tables_bit_identical_to_recorded(name, workers, tmp_path):
    fixture = json.loads(FIXTURE.read_text())
    same_numerics(fixture["_numerics"])
    golden = fixture[name]
    assert golden["scenario"] == SCENARIOS[name], "the scenario changed: re-record on purpose, or restore it"
    got = run_tables(with_workers(golden["scenario"], workers), tmp_path)
    assert got["rows"] == golden["rows"]
    for table in TABLES:
        differ = {c for c in golden["columns"][table] if got["columns"][table].get(c) != golden["columns"][table][c]}
        assert not differ, f"{name}: {table} columns {sorted(differ)} differ from the recorded run"
        assert set(got["columns"][table]) == set(golden["columns"][table])
    assert (got["ingress_bytes"], got["updates"]) == (golden["ingress_bytes"], golden["updates"])


AFTER_NATIVE = """
import json, sys, tempfile
from pathlib import Path
import torch
from edgebed import numerics
numerics.apply("portable")
torch.ones(3) + 1                                    # torch's kernels chosen under portable's pins
numerics.apply("native")                             # removes the pins from the environment
torch.mm(torch.ones(64, 64), torch.ones(64, 64))     # a native product: MKL's first call
from tests.integration.test_sim_golden import SCENARIOS, run_tables
with tempfile.TemporaryDirectory() as tmp:
    print(json.dumps(run_tables(dict(SCENARIOS["mlp-adacomp-batched"]), Path(tmp))))
"""


@pytest.mark.timeout(120)
def test_a_native_product_earlier_in_the_process_leaves_portable_batched_tables_alone():
    """MKL reads its pins at its first call. The first portable profile applied in a process makes
    that call (numerics._start_mkl); before, a native product run first fixed MKL's branch, and the
    batched gradients (vmap: torch's own kernels) of a later portable run came out other bits."""
    import os
    import subprocess
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", AFTER_NATIVE], cwd=root, capture_output=True, text=True,
                         timeout=100, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-3000:]
    got, golden = json.loads(out.stdout.strip().splitlines()[-1]), json.loads(FIXTURE.read_text())["mlp-adacomp-batched"]
    assert got["columns"] == golden["columns"] and got["rows"] == golden["rows"]


def record() -> None:
    import tempfile
    from edgebed import numerics
    out = {"_numerics": numerics.enter("portable")}
    with tempfile.TemporaryDirectory() as tmp:
        for name, sc in SCENARIOS.items():
            out[name] = {"scenario": sc, **run_tables(sc, Path(tmp) / name)}
            print(name, out[name]["rows"], out[name]["updates"], file=sys.stderr)
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        record()
    else:
        sys.exit("usage: test_sim_golden.py --record   (overwrites tests/fixtures/sim_golden.json)")
