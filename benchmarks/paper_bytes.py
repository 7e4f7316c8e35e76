"""Paper-equivalent bytes: real pickles (protocol 2, index/value Python lists) of real compressed
gradients next to the byte model (edgebed/analysis/paper_bytes.py) and our wire bytes.

For each model × compressor × c: 20 gradients of the untrained model on consecutive batches of 10
bundled digits; the mean pickle size, its min/max, the model's expected size and its error, and our
wire format's push size (header + float32 values + uint32 indices) for the same update.
    python -m benchmarks.paper_bytes   → benchmarks/results/paper_bytes.json
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from edgebed.analysis import paper_bytes as pb
from edgebed.compression import make_compressor
from edgebed import wire

OUT = Path(__file__).parent / "results" / "paper_bytes.json"


def main(batches: int = 20) -> dict:
    rows = []
    for model in ("cnn", "mlp"):
        grads, layers = pb.sample_gradients(model, batches)
        for comp, algo, cs in (("dense", "asgd", [1.0]), ("top-c-per-layer", "adacomp", [0.1, 0.01, 0.001]),
                               ("top-c", "comp-asgd", [0.1, 0.01, 0.001])):
            for c in cs:
                real, ours = [], []
                for g in grads:
                    sp = make_compressor(comp, c, layers).compress(g)
                    real.append(pb.real_pickle_size(sp.indices, sp.values))
                    push = wire.Push("s" * 8, 1, 1, sp.values, sp.indices, 1.0)
                    ours.append(wire.frames_nbytes(wire.encode(push)))
                model_b = pb.per_update(model, algo, c)
                rows.append({"model": model, "algorithm": algo, "c": c, "entries": int(sp.entries),
                             "pickle_mean": float(np.mean(real)), "pickle_min": int(min(real)),
                             "pickle_max": int(max(real)), "model_bytes": model_b,
                             "model_error": model_b / float(np.mean(real)) - 1,
                             "wire_bytes_mean": float(np.mean(ours))})
    dense = {r["model"]: r for r in rows if r["algorithm"] == "asgd"}
    for r in rows:
        d = dense[r["model"]]
        r["paper_ratio_vs_dense"] = d["pickle_mean"] / r["pickle_mean"]
        r["wire_ratio_vs_dense"] = d["wire_bytes_mean"] / r["wire_bytes_mean"]
    out = {"date": time.strftime("%Y-%m-%d"), "what": __doc__.strip().splitlines()[0],
           "gradients_per_row": batches, "pickle_protocol": 2, "rows": rows}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    for r in main()["rows"]:
        print(f"{r['model']} {r['algorithm']:9s} c={r['c']:<5g} pickle {r['pickle_mean']:>11,.0f} B "
              f"model {r['model_bytes']:>11,.0f} ({100 * r['model_error']:+.2f} %)  wire {r['wire_bytes_mean']:>9,.0f} B  "
              f"ratio vs dense: paper {r['paper_ratio_vs_dense']:.1f}× wire {r['wire_ratio_vs_dense']:.1f}×")
