"""Top-k selection on real CNN gradients: argpartition alone (what topk_indices was), the version that
gathered the nonzero entries by boolean indexing (until 2026-11-24), and today's topk_indices
(``np.compress``), the same picks checked on every call.

The paper CNN is trained by plain SGD (α = 0.1, b = 10, bundled digits) and, after 0, 500 and 3,000
steps, 10 gradients are taken; per gradient: the zero fraction of FC1 and the time of AdaComp's
selection (top-c per layer) and Comp-ASGD's (top-c over Θ) at c = 0.01, median over 5 repetitions.
    python -m benchmarks.bench_topk   → benchmarks/results/topk.json
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from edgebed.compression.ops import keep_count, top_c, top_c_per_layer
from edgebed.data import load_bundled, normalize
from edgebed.models import build_model, grad_flat, initial_theta

OUT = Path(__file__).parent / "results" / "topk.json"


def argpartition_topk(x: np.ndarray, k: int) -> np.ndarray:
    n = x.size
    idx = np.argpartition(np.abs(x), n - k)[n - k:]
    idx.sort()
    return idx.astype(np.uint32)


def bool_index_topk(x: np.ndarray, k: int) -> np.ndarray:
    """topk_indices as it was before 2026-11-24: the nonzero values gathered by boolean indexing."""
    a = np.abs(x)
    v = a[a != 0]
    if v.size > k:
        top = np.partition(v, v.size - k)[v.size - k:]
        keep = a >= top[0]
        if np.count_nonzero(keep) == k and not np.isnan(top).any():
            return np.flatnonzero(keep).astype(np.uint32)
    return argpartition_topk(x, k)


def _old_per_layer(g, c, bounds, topk=argpartition_topk):
    return np.concatenate([topk(g[o:o + s], keep_count(s, c)) + np.uint32(o) for o, s in bounds])


def _timed(f, reps: int = 5):
    ts, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3, out


def main(steps=(0, 500, 3000), grads_per_point: int = 10, c: float = 0.01) -> dict:
    torch.set_num_threads(1)
    ds = load_bundled(0.2)
    x_all = torch.from_numpy(normalize(ds.train_x))
    y_all = torch.from_numpy(ds.train_y.astype(np.int64))
    m = build_model("cnn", 1)
    layers = initial_theta("cnn", 1)[1]
    bounds = [(L.offset, L.size) for L in layers]
    fc1 = next(L for L in layers if L.name == "fc1.weight")
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
            t_new_l, new_l = _timed(lambda: top_c_per_layer(g, c, bounds))
            t_old_l, old_l = _timed(lambda: _old_per_layer(g, c, bounds))
            t_bool_l, bool_l = _timed(lambda: _old_per_layer(g, c, bounds, bool_index_topk))
            t_new_g, new_g = _timed(lambda: top_c(g, c))
            t_old_g, old_g = _timed(lambda: argpartition_topk(g, keep_count(g.size, c)))
            assert np.array_equal(new_l, old_l) and np.array_equal(new_g, old_g) and np.array_equal(new_l, bool_l)
            rows.append({"sgd_steps": done, "fc1_zero_fraction": float(np.mean(g[fc1.offset:fc1.offset + fc1.size] == 0)),
                         "model_zero_fraction": float(np.mean(g == 0)),
                         "per_layer_argpartition_ms": t_old_l, "per_layer_bool_index_ms": t_bool_l, "per_layer_ms": t_new_l,
                         "global_argpartition_ms": t_old_g, "global_ms": t_new_g})
    summary = []
    for s in steps:
        rs = [r for r in rows if r["sgd_steps"] == s]
        summary.append({"sgd_steps": s, **{k: float(np.mean([r[k] for r in rs])) for k in rs[0] if k != "sgd_steps"},
                        "per_layer_max_argpartition_ms": max(r["per_layer_argpartition_ms"] for r in rs),
                        "per_layer_max_ms": max(r["per_layer_ms"] for r in rs)})
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average_start": os.getloadavg(), "c": c,
           "what": __doc__.strip().splitlines()[0], "identical_picks": True, "summary": summary, "rows": rows}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    for s in main()["summary"]:
        print(f"after {s['sgd_steps']:>5} steps: FC1 zeros {100 * s['fc1_zero_fraction']:.0f} %  per layer "
              f"{s['per_layer_argpartition_ms']:.2f} → (boolean index {s['per_layer_bool_index_ms']:.2f}) → {s['per_layer_ms']:.2f} ms (max {s['per_layer_max_argpartition_ms']:.2f} → "
              f"{s['per_layer_max_ms']:.2f})  global {s['global_argpartition_ms']:.2f} → {s['global_ms']:.2f} ms")
