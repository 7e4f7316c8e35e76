"""Fuzz one untrusted-file format in this (child) process: write a small valid file, load seeded random
mutations of it, and report each outcome as JSON on stdout — a valid load, the format's one clear
error type (``DatasetError`` for data sets, ``TraceError`` for traces), or anything else ("bad").

Run as ``python fuzz_runner.py FORMAT SEED CASES DIR``. Once the valid file is written and loaded,
the address space is capped at what is mapped then plus ``MEMORY`` bytes, so a mutation that makes a
loader allocate more ends in MemoryError — reported as bad — instead of taking the host's memory.
"""
from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import random
import resource
import sys
import tarfile
import time
import traceback
from pathlib import Path

import numpy as np

MEMORY = 200 << 20
SLOW_S = 1.0


# --- valid files --------------------------------------------------------------------------------

def _npz() -> bytes:
    b = io.BytesIO()
    np.savez(b, x=np.arange(5 * 4, dtype=np.float32).reshape(5, 4), y=np.array([0, 1, 2, 1, 0]),
             users=np.array([3, 3, 4, 4, 4]))
    return b.getvalue()


def _idx() -> bytes:
    return bytes([0, 0, 8, 3]) + (4).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + bytes(range(256)) * 12 \
        + bytes(4 * 784 - 256 * 12)


def _cifar_tar() -> bytes:
    rng = np.random.default_rng(0)
    files = {"batches.meta": {b"label_names": [b"a", b"b", b"c"], b"num_vis": 3072}}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        files[name] = {b"labels": [0, 1], b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8)}
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as tar:
        for name, obj in files.items():
            raw = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return b.getvalue()


def _cifar_meta() -> bytes:
    return pickle.dumps({b"label_names": [b"a", b"b", b"c"], b"num_vis": 3072, b"nested": [[1, 2.5], (3,)]},
                        protocol=2)


def _png() -> bytes:
    from PIL import Image
    b = io.BytesIO()
    Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8)).save(b, format="PNG")
    return b.getvalue()


def _leaf() -> bytes:
    return json.dumps({"users": ["a", "b"], "num_samples": [2, 1],
                       "user_data": {"a": {"x": [[0.0, 0.5, 1.0, 0.25], [1.0, 0.0, 0.0, 1.0]], "y": [0, 3]},
                                     "b": {"x": [[0.5, 0.5, 0.5, 0.5]], "y": [2]}}}).encode()


def _parquet() -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq
    b = io.BytesIO()
    pq.write_table(pa.table({"image": [[0.0, 1.0, 0.5, 0.25], [1.0, 0.0, 0.0, 1.0], [0.5] * 4],
                             "label": [0, 2, 1], "user": ["u", "v", "u"]}), b)
    return b.getvalue()


def _csv_trace() -> bytes:
    return (b"device,time_s,online,slowdown,ms_per_sample,uplink_kbit_s,downlink_kbit_s\n"
            b"0,0,1,1.5,,2000,10000\n0,30,0,,,,\n1,0,1,,20,500,800\n1,45.5,1,,,,\n")


def _json_trace() -> bytes:
    return json.dumps({"format": "edgebed-trace/1", "devices": {
        "0": [{"time_s": 0, "online": True, "slowdown": 1.5, "uplink_kbit_s": 2000}, {"time_s": 30, "online": False}],
        "1": [{"time_s": 0, "ms_per_sample": 20.0}]}}).encode()


def _fedscale() -> bytes:
    return pickle.dumps({1: {"active": [0.0, 500.0], "inactive": [100.0, 800.0], "finish_time": 1000.0},
                         2: {"active": [10.0], "inactive": [20.0], "finish_time": 3600.0}}, protocol=2)


def _flash() -> bytes:
    return json.dumps({"d1": {"isSuccess": True, "trace_start": 0, "trace_end": 3600,
                              "ready_time": [[0, 100], [1000, 2000]]},
                       "d2": {"guid": "g", "model": "m", "messages":
                              "2020-01-02 00:00:00\tscreen_lock\n2020-01-02 00:00:05\twifi\n"
                              "2020-01-02 00:00:09\tbattery_charged_on\n2020-01-02 01:00:00\tscreen_unlock\n"}}).encode()


# --- loaders: file bytes → load, in a fresh directory ---------------------------------------------

def _load_npz(raw: bytes, d: Path):
    from edgebed.data.npz import load_npz, read_rows
    (d / "s.npz").write_bytes(raw)
    ds = load_npz(d / "s.npz", users_key="users")
    return len(ds), read_rows(d / "s.npz", "x", [0, len(ds) - 1]).shape


def _load_idx(raw: bytes, d: Path):
    from edgebed.data import load_idx
    (d / "i").write_bytes(raw)
    (d / "i.gz").write_bytes(gzip.compress(raw))
    return load_idx(d / "i").shape, load_idx(d / "i.gz").shape


def _load_cifar_tar(raw: bytes, d: Path):
    from edgebed.data.cifar import load_cifar
    (d / "c.tar.gz").write_bytes(gzip.compress(raw, compresslevel=1))
    return len(load_cifar(d / "c.tar.gz"))


def _load_cifar_meta(raw: bytes, d: Path):
    from edgebed.data import safe_pickle
    from edgebed.data.cifar import load_cifar
    (d / "meta.pkl").write_bytes(raw)
    safe_pickle.load(d / "meta.pkl")
    sub = d / "cifar-10-batches-py"
    sub.mkdir()
    (sub / "batches.meta").write_bytes(raw)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (sub / name).write_bytes(pickle.dumps({b"labels": [0], b"data": np.zeros((1, 3072), np.uint8)}, protocol=2))
    return len(load_cifar(d))


def _load_png(raw: bytes, d: Path):
    from PIL import Image
    from edgebed.data.imagefolder import load_imagefolder
    for c in ("a", "b"):
        (d / "set" / c).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(d / "set" / c / "ok.png")
    (d / "set" / "b" / "fuzzed.png").write_bytes(raw)
    return load_imagefolder(d / "set").x.shape


def _load_leaf(raw: bytes, d: Path):
    from edgebed.data.leaf import load_leaf
    (d / "l.json").write_bytes(raw)
    return len(load_leaf(d / "l.json"))


def _load_parquet(raw: bytes, d: Path):
    from edgebed.data.tabular import TableReader
    (d / "t.parquet").write_bytes(raw)
    return TableReader(d / "t.parquet", user_column="user").read().x.shape


def _load_trace(suffix: str):
    def load(raw: bytes, d: Path):
        from edgebed.traces import read_trace
        (d / f"t{suffix}").write_bytes(raw)
        return len(read_trace(d / f"t{suffix}"))
    return load


def _load_fedscale(raw: bytes, d: Path):
    from edgebed.traces.fedscale import import_fedscale
    (d / "b.pkl").write_bytes(raw)
    return len(import_fedscale(behaviour=d / "b.pkl"))


def _load_flash(raw: bytes, d: Path):
    from edgebed.traces.flash import import_flash
    (d / "f.json").write_bytes(raw)
    return len(import_flash(d / "f.json"))


FORMATS = {   # name: (valid file, loader, text?, the clear error's module and name)
    "npz": (_npz, _load_npz, False, "data"), "idx": (_idx, _load_idx, False, "data"),
    "cifar-tar": (_cifar_tar, _load_cifar_tar, False, "data"),
    "cifar-pickle": (_cifar_meta, _load_cifar_meta, False, "data"),
    "png": (_png, _load_png, False, "data"), "leaf": (_leaf, _load_leaf, True, "data"),
    "parquet": (_parquet, _load_parquet, False, "data"),
    "csv-trace": (_csv_trace, _load_trace(".csv"), True, "traces"),
    "json-trace": (_json_trace, _load_trace(".json"), True, "traces"),
    "fedscale": (_fedscale, _load_fedscale, False, "traces"), "flash": (_flash, _load_flash, True, "traces"),
}


# --- mutations -----------------------------------------------------------------------------------

_TEXT_PIECES = [b"1e308", b"1e-300", b"-1", b"NaN", b"Infinity", b"99999999999999", b"[]", b"{}", b"null",
                b'"x"', b"true", b"[" * 3000, b"0.0", b"1000000000000", b",", b'"', b"\n", b"\\"]


def mutate(raw: bytes, rng: random.Random, text: bool) -> bytes:
    b = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(7 if text else 5)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:                                    # flip bytes
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1:                                        # truncate
            del b[i:]
        elif op == 2:                                        # insert random bytes
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 3 and b:                                  # big numbers in a header: 0xff.. runs
            n = rng.choice((2, 4, 8))
            b[i:i + n] = b"\xff" * n
        elif op == 4 and b:                                  # duplicate a slice
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 64)]
        elif op == 5:                                        # replace a token with a hostile one
            j = i + rng.randint(0, 12)
            b[i:j] = rng.choice(_TEXT_PIECES)
        elif op == 6:                                        # replace a number by a hostile one
            digits = [k for k, c in enumerate(b) if chr(c).isdigit()]
            if digits:
                k = rng.choice(digits)
                b[k:k + 1] = rng.choice(_TEXT_PIECES[:6] + [b"1e-9", b"0"])
        if not b:
            b = bytearray(raw[:1])
    return bytes(b)


def _mapped_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")


def main(fmt: str, seed: int, cases: int, work: str) -> None:
    make, load, text, layer = FORMATS[fmt]
    from edgebed.data import DatasetError
    from edgebed.traces import TraceError
    clear = DatasetError if layer == "data" else TraceError
    root = Path(work)
    valid = make()
    first = root / "valid"
    first.mkdir()
    baseline = load(valid, first)            # the unmutated file loads (and imports everything once)
    cap = _mapped_bytes() + MEMORY
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    rng = random.Random(seed)
    out = {"format": fmt, "cases": cases, "loaded": 0, "refused": 0, "bad": [], "slow": [], "max_s": 0.0,
           "baseline": repr(baseline)[:80], "messages": []}
    for case in range(cases):
        raw = mutate(valid, rng, text)
        d = root / f"c{case}"
        d.mkdir()
        t0 = time.perf_counter()
        try:
            load(raw, d)
            out["loaded"] += 1
        except clear as err:
            out["refused"] += 1
            if len(out["messages"]) < 3:
                out["messages"].append(str(err)[:200])
        except BaseException as err:  # noqa: BLE001 — anything else is what the fuzz test looks for
            out["bad"].append({"case": case, "error": f"{type(err).__name__}: {str(err)[:200]}",
                               "where": traceback.format_exc().splitlines()[-3][:200]})
        dt = time.perf_counter() - t0
        out["max_s"] = max(out["max_s"], dt)
        if dt > SLOW_S:
            out["slow"].append({"case": case, "seconds": round(dt, 3)})
    print(json.dumps(out))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
