"""Bytes of one c = 0.01 AdaComp push of the paper CNN, and of one model pull, per wire encoding.

    python -m benchmarks.bench_encodings        → benchmarks/results/encodings.json

The gradient is real: the paper CNN at its initial Θ (seed 0), one batch of 10 bundled digits, and a
second one after 200 plain SGD steps (gradients shrink as training goes). Bytes are whole messages as
the PS counts them (header frame + payload frames); errors are relative to the float32 values.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from edgebed.compression import make_compressor
from edgebed.compression.downlink import ModelDownlink
from edgebed.data import load_bundled
from edgebed.device_agent.trainer import Trainer
from edgebed.models import initial_theta
from edgebed import wire
from edgebed.wire.codec import Codec

OUT = Path(__file__).parent / "results" / "encodings.json"
ENCODINGS = {
    "v1 (uint32 + f32)": None,
    "varint + f32": Codec("f32", "varint"),
    "bitmap + f32": Codec("f32", "bitmap"),
    "varint + f16": Codec("f16", "varint"),
    "varint + bf16": Codec("bf16", "varint"),
    "varint + f16 + zstd": Codec("f16", "varint", True),
    "varint + bf16 + zstd": Codec("bf16", "varint", True),
}


def push_sizes(trainer, theta, layers) -> dict:
    grad, _ = trainer.gradient(theta)
    out = {}
    sparse = make_compressor("top-c-per-layer", 0.01, layers).compress(grad)
    for name, codec in ENCODINGS.items():
        msg = wire.Push("0123456789abcdef", 12345, 67890, sparse.values, sparse.indices, 0.1234, codec=codec)
        frames = wire.encode(msg)
        got = wire.decode([bytes(memoryview(f)) for f in frames])
        err = np.abs(got.values - sparse.values) / np.abs(sparse.values)
        out[name] = {"bytes": wire.frames_nbytes(frames), "median_rel_error": float(np.median(err)),
                     "max_rel_error": float(err.max())}
    q = make_compressor("top-c-per-layer", 0.01, layers, quantize="q8", rng=np.random.default_rng(0)).compress(grad)
    for name, z in (("varint + q8", False), ("varint + q8 + zstd", True)):
        frames = wire.encode(wire.Push("0123456789abcdef", 12345, 67890, q.values, q.indices, 0.1234,
                                       codec=Codec("f32", "varint", z), q8=q.q8))
        err = np.abs(q.values - sparse.values) / np.abs(sparse.values)
        out[name] = {"bytes": wire.frames_nbytes(frames), "median_rel_error": float(np.median(err)),
                     "max_rel_error": float(err.max()), "note": "stochastic rounding: unbiased, error per push"}
    small = np.abs(grad[sparse.indices] * 0.01)
    out["_entries"] = int(sparse.entries)
    out["_lr_scaled_f16_subnormal_share"] = float(np.mean(small < 6.104e-5))   # α = 0.01 · g
    return out


def main() -> None:
    theta, layers = initial_theta("cnn", 0)
    ds = load_bundled(0.2)
    trainer = Trainer("cnn", ds.train_x[:2000], ds.train_y[:2000], 10, "dense", 1.0, 0, 0)
    res = {"machine": "2 cores, CPU only", "date": time.strftime("%Y-%m-%d"), "model": "paper CNN",
           "parameters": int(theta.size), "push_c0.01_initial": push_sizes(trainer, theta, layers)}
    trained = theta.copy()
    for _ in range(200):
        g, _ = trainer.gradient(trained)
        trained -= 0.05 * g
    res["push_c0.01_after_200_steps"] = push_sizes(trainer, trained, layers)
    pulls = {"v1 f32": wire.frames_nbytes(wire.encode(wire.Model(1, trained)))}
    for v in ("f16", "bf16"):
        for z in (False, True):
            m = ModelDownlink(Codec(v, "auto", z)).model(0, 1, trained)
            pulls[f"{v}{' + zstd' if z else ''}"] = wire.frames_nbytes(wire.encode(m))
    res["pull_full_model"] = pulls
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
