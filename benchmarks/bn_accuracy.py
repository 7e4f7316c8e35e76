"""BatchNorm accuracy per rule: what edgebed records, what plain PyTorch computes for the final weights
and statistics, and what the weights score with their initial statistics (mean 0, variance 1), which is
what edgebed recorded before running statistics were part of the model (``model.buffers``).

The scenarios are those of ``tests/integration/test_batchnorm.py`` (a conv-BN network, 3 devices on
the virtual clock, 3,000 MNIST training samples, 1,000 test samples, seed 4).

    python -m benchmarks.bn_accuracy   → benchmarks/results/bn_accuracy.json
"""
from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_data_shard import cpu_model

HERE = Path(__file__).resolve().parent


def _accuracy(model, x, y) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def main() -> dict:
    sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
    import test_batchnorm as t   # the scenarios and the PyTorch side of the test
    from edgebed.data import load_dataset, normalize
    from edgebed.ps import checkpoint
    from edgebed.rundir import read_table
    out = {"what": __doc__.split("\n\n")[0], "host": {"cpu_model": cpu_model(), "cpus": os.cpu_count(),
           "python": platform.python_version(), "torch": torch.__version__, "loadavg_before": os.getloadavg()},
           "rules": {}}

    class _Patch:   # the test's monkeypatch, outside pytest
        def setattr(self, obj, name, value):
            setattr(obj, name, value)

        def setenv(self, name, value):
            os.environ[name] = value
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    for rule in t.RULES:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                sc, run, factory = t._run(Path(tmp), _Patch(), rule)
            finally:
                sys.path[:] = saved_path
                os.environ.pop("PYTHONPATH", None) if saved_env is None else os.environ.update(PYTHONPATH=saved_env)
            pytorch, version = t._pytorch_accuracy(sc, run, factory, rule)
            recorded = float(read_table(run.path, "evals").set_index("update").loc[version, "accuracy"])
            ckpt = checkpoint.load(run.path / "checkpoint")
            model = factory()   # initial statistics; the checkpoint's weights
            theta = torch.from_numpy(ckpt.theta)
            with torch.no_grad():
                off = 0
                for p in model.parameters():
                    p.copy_(theta[off:off + p.numel()].view(p.shape))
                    off += p.numel()
            ds = load_dataset(sc.dataset, sc.seed)
            n = sc.eval.test_samples
            initial = _accuracy(model, torch.from_numpy(normalize(ds.test_x[:n])),
                                torch.from_numpy(ds.test_y[:n].astype(np.int64)))
            out["rules"][rule] = {"policy": sc.buffer_policy(), "update": version, "recorded": recorded,
                                  "pytorch": pytorch, "initial_statistics": initial,
                                  "statistics_bytes": run.summary.get("statistics_bytes", 0),
                                  "push_bytes": run.summary["push_bytes"]}
            print(rule, out["rules"][rule], flush=True)
    out["host"]["loadavg_after"] = os.getloadavg()
    path = HERE / "results" / "bn_accuracy.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
