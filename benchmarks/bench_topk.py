"""Top-k selection on real gradients of the paper CNN and the MLP: plain ``np.argpartition``, the
selection before the tie rule (a partition of the nonzero values, ties left to argpartition), and
today's ``topk_indices`` (ties at the threshold to the lowest positions: the same picks on every host).

Each model is trained by plain SGD (α = 0.1, b = 10, bundled digits) and, after 0, 500 and 3,000 steps,
10 gradients are taken; per gradient: the zero fraction of its largest layer (FC1), the time of AdaComp's
selection (top-c per layer) and Comp-ASGD's (top-c over Θ) at c = 0.01 by each method (median of 5
repetitions, the three methods interleaved), whether the tie rule's pick differs from argpartition's
(a tie at a threshold decided it), and a check of today's pick against the definition (a stable sort).
    python -m benchmarks.bench_topk   → benchmarks/results/topk.json
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from edgebed.compression.ops import keep_count, top_c, top_c_per_layer
from edgebed.data import load_bundled, normalize
from edgebed.models import build_model, grad_flat, initial_theta
from edgebed.numerics import _cpu_model, _numpy_simd

OUT = Path(__file__).parent / "results" / "topk.json"


def argpartition_topk(x: np.ndarray, k: int) -> np.ndarray:
    n = x.size
    idx = np.argpartition(np.abs(x), n - k)[n - k:]
    idx.sort()
    return idx.astype(np.uint32)


def previous_topk(x: np.ndarray, k: int) -> np.ndarray:
    """topk_indices before the tie rule (until 2026-11-28): argpartition's pick whenever a tie at the
    threshold left a choice."""
    a = np.abs(x)
    v = np.compress(a != 0, a)
    if v.size > k:
        top = np.partition(v, v.size - k)[v.size - k:]
        keep = np.flatnonzero(a >= top[0])
        if keep.size == k and not np.isnan(top).any():
            return keep.astype(np.uint32)
    return argpartition_topk(x, k)


def by_rank(x: np.ndarray, k: int) -> np.ndarray:
    """The tie rule's definition (|x| descending, then position), by a stable sort: slow, obviously right."""
    order = np.argsort(-np.abs(x.astype(np.float64)), kind="stable")
    return np.sort(order[:k]).astype(np.uint32)


def _per_layer(g, c, bounds, topk):
    return np.concatenate([topk(g[o:o + s], keep_count(s, c)) + np.uint32(o) for o, s in bounds])


METHODS = {"argpartition": argpartition_topk, "previous": previous_topk, "tie_rule": None}


def _timed_all(g, c, bounds, reps: int = 5) -> dict:
    """Median ms of each method, per layer and global, the methods interleaved in every repetition."""
    times = {f"{w}_{m}_ms": [] for w in ("per_layer", "global") for m in METHODS}
    for _ in range(reps):
        for m, f in METHODS.items():
            t = time.perf_counter()
            top_c_per_layer(g, c, bounds) if f is None else _per_layer(g, c, bounds, f)
            times[f"per_layer_{m}_ms"].append(time.perf_counter() - t)
            t = time.perf_counter()
            top_c(g, c) if f is None else f(g, keep_count(g.size, c))
            times[f"global_{m}_ms"].append(time.perf_counter() - t)
    return {k: float(np.median(v)) * 1e3 for k, v in times.items()}


def measure(model: str, steps, grads_per_point: int, c: float) -> list[dict]:
    ds = load_bundled(0.2)
    x_all = torch.from_numpy(normalize(ds.train_x))
    y_all = torch.from_numpy(ds.train_y.astype(np.int64))
    m = build_model(model, 1)
    layers = initial_theta(model, 1)[1]
    bounds = [(L.offset, L.size) for L in layers]
    first = max(layers, key=lambda L: L.size)   # FC1 of both: the one with blank-pixel or dead-unit zeros
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rows, done, b = [], 0, 0

    def batch():
        nonlocal b
        i = (b * 10) % (len(y_all) - 10)
        b += 1
        return x_all[i:i + 10], y_all[i:i + 10]

    for target in steps:
        while done < target:
            xb, yb = batch()
            opt.zero_grad()
            F.cross_entropy(m(xb), yb).backward()
            opt.step()
            done += 1
        for _ in range(grads_per_point):
            xb, yb = batch()
            m.zero_grad()
            F.cross_entropy(m(xb), yb).backward()
            g = grad_flat(m)
            layer_pick, global_pick = top_c_per_layer(g, c, bounds), top_c(g, c)
            assert np.array_equal(layer_pick, _per_layer(g, c, bounds, by_rank))
            assert np.array_equal(global_pick, by_rank(g, keep_count(g.size, c)))
            rows.append({"model": model, "sgd_steps": done,
                         "largest_layer_zero_fraction": float(np.mean(g[first.offset:first.offset + first.size] == 0)),
                         "model_zero_fraction": float(np.mean(g == 0)),
                         "tie_decided_per_layer": not np.array_equal(layer_pick, _per_layer(g, c, bounds, argpartition_topk)),
                         "tie_decided_global": not np.array_equal(global_pick, argpartition_topk(g, keep_count(g.size, c))),
                         **_timed_all(g, c, bounds)})
    return rows


def main(models=("cnn", "mlp"), steps=(0, 500, 3000), grads_per_point: int = 10, c: float = 0.01) -> dict:
    torch.set_num_threads(1)
    load = os.getloadavg()
    rows = [r for model in models for r in measure(model, steps, grads_per_point, c)]
    summary = []
    for model in models:
        for s in steps:
            rs = [r for r in rows if r["model"] == model and r["sgd_steps"] == s]
            summary.append({"model": model, "sgd_steps": s,
                            **{k: float(np.mean([r[k] for r in rs])) for k in rs[0] if k not in ("model", "sgd_steps")},
                            **{f"per_layer_max_{m}_ms": max(r[f"per_layer_{m}_ms"] for r in rs) for m in METHODS}})
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": {"cpu": _cpu_model(), "machine": platform.machine(),
           "numpy": np.__version__, "numpy_simd": _numpy_simd(), "load_average_start": load,
           "load_average_end": os.getloadavg()},
           "c": c, "what": __doc__.strip().splitlines()[0], "tie_rule_equals_definition": True,
           "summary": summary, "rows": rows}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    for s in main()["summary"]:
        print(f"{s['model']} after {s['sgd_steps']:>5} steps: zeros {100 * s['largest_layer_zero_fraction']:.0f} % "
              f"ties decided {100 * s['tie_decided_per_layer']:.0f} %  per layer argpartition "
              f"{s['per_layer_argpartition_ms']:.2f} / previous {s['per_layer_previous_ms']:.2f} / tie rule "
              f"{s['per_layer_tie_rule_ms']:.2f} ms   global {s['global_argpartition_ms']:.2f} / "
              f"{s['global_previous_ms']:.2f} / {s['global_tie_rule_ms']:.2f} ms")
