"""Memory per agent: an agent that loads only its own shard of a large ``.npz`` against one that loads
the whole set first (what every agent did before issue 37), and against a memory-mapped read.

A 50,000 × 3 × 32 × 32 uint8 set (CIFAR-sized, 153.6 MB of samples) is written once to a temporary
``.npz`` (``np.savez``, uncompressed). Each case runs in a fresh Python process that imports numpy and
edgebed.data, then either does nothing more (the baseline), reads the whole ``x`` (``np.load``),
indexes device 0's IID shard (n devices) out of the memory-mapped ``x`` and keeps the map, or takes
that shard through ``formats.load_shard`` (rows read with ``pread``, no map); it reports its resident
set at the end, private and file-backed, and its peak (``VmHWM`` of /proc/self/status; ``ru_maxrss``
is not used: Linux carries it across ``exec`` from the parent), each minus the baseline's. A map
counts far more than the rows touched as resident (the page cache's large folios around each row):
that is why ``load_shard`` reads rows with ``pread`` instead. The same set as Parquet (a fixed-size
list column of uint8, row groups of 1,000 rows): ``load_shard`` reads the row groups holding the
shard's rows (an IID shard of a tenth touches nearly all groups, one at a time).
    python -m benchmarks.bench_data_shard   → benchmarks/results/data_shard.json
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "results" / "data_shard.json"
N, SHAPE = 50_000, (3, 32, 32)

CHILD = r"""
import sys, json
import numpy as np
from edgebed.data import formats
from edgebed.data.partitions import make_partition
path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = formats.LoadSpec("npz", path)
if mode == "parquet":
    spec = formats.LoadSpec("parquet", path.replace(".npz", ".parquet"), options={"shape": [3, 32, 32]})
    mode = "shard" if n else "labels"
rows = 0
if mode == "whole":
    with np.load(path) as z:
        x = z["x"]; y = z["y"]
    rows = len(x)
elif mode == "memmap":
    y, k, _ = formats.labels(spec)
    shards, _ = make_partition("iid", y, n, 0, k)
    ds = formats.load(spec)               # kept alive: the map stays, as for an ArraySet held
    part = np.ascontiguousarray(ds.x[shards[0]])
    rows = len(part)
elif mode == "labels":                    # pyarrow imported, the file opened, the label column read
    y, k, _ = formats.labels(spec)
elif mode == "shard":
    y, k, _ = formats.labels(spec)
    shards, _ = make_partition("iid", y, n, 0, k)
    part = formats.load_shard(spec, shards[0])
    rows = len(part)
    assert part.x.shape[1:] == (3, 32, 32)
st = {l.split(":")[0]: int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(("VmHWM", "VmRSS", "RssAnon", "RssFile"))}
print(json.dumps({"rows": rows, **st}))
"""


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def run(path: Path, mode: str, n: int = 0) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), mode, str(n)], capture_output=True, text=True,
                       check=True, cwd=Path(__file__).parents[1])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(repeats: int = 3) -> dict:
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "host": {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
                          "numpy": np.__version__, "kernel": platform.release(), "loadavg_before": os.getloadavg()},
                 "set": {"samples": N, "sample_shape": list(SHAPE), "dtype": "uint8",
                         "x_bytes": N * int(np.prod(SHAPE))},
                 "metrics": {"rss_mib": "VmRSS at the end, the data still held (MiB, median of runs)",
                             "anon_mib": "RssAnon at the end: the process's private memory",
                             "file_mib": "RssFile at the end: file pages mapped (shared page cache)",
                             "hwm_mib": "VmHWM, the peak resident set (the kernel updates it lazily)",
                             "*_over_baseline": "the same minus the baseline process's"},
                 "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.npz"
        rng = np.random.default_rng(0)
        x, y = rng.integers(0, 256, (N, *SHAPE), dtype=np.uint8), rng.integers(0, 10, N)
        np.savez(path, x=x, y=y)
        import pyarrow as pa
        import pyarrow.parquet as pq
        row = int(np.prod(SHAPE))
        pq.write_table(pa.table({"image": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), row),
                                 "label": y}), path.with_suffix(".parquet"), row_group_size=1000)
        del x, y
        cases = [("baseline", 0), ("whole", 0), ("memmap", 10), ("memmap", 1000),
                 ("shard", 10), ("shard", 100), ("shard", 1000), ("parquet", 0), ("parquet", 10), ("parquet", 100)]
        runs: dict = {c: [] for c in cases}
        for _ in range(repeats):
            for mode, n in cases:
                runs[(mode, n)].append(run(path, mode, n))
    keys = {"rss_mib": "VmRSS", "anon_mib": "RssAnon", "file_mib": "RssFile", "hwm_mib": "VmHWM"}
    med = {c: {k: float(np.median([r[v] for r in rs])) / 1024 for k, v in keys.items()} for c, rs in runs.items()}
    base = med[("baseline", 0)]
    label = {"baseline": "baseline (imports only)", "whole": "whole set (np.load, before issue 37)",
             "memmap": "memmap + fancy index, 1 device of {n}", "shard": "load_shard (pread), 1 device of {n}",
             "parquet": "load_shard, Parquet (row groups of 1,000), 1 device of {n}"}
    label["parquet0"] = "Parquet: pyarrow imported, labels read, no rows"
    for (mode, n), m in med.items():
        rows = runs[(mode, n)][0]["rows"]
        name = label["parquet0"] if (mode, n) == ("parquet", 0) else label[mode].format(n=n)
        out["cases"].append({"case": name, "rows": rows,
                             "rows_mib": round(rows * int(np.prod(SHAPE)) / 2**20, 2),
                             **{k: round(v, 1) for k, v in m.items()},
                             **{f"{k}_over_baseline": round(v - base[k], 1) for k, v in m.items()}})
    out["host"]["loadavg_after"] = os.getloadavg()
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    res = main()
    for c in res["cases"]:
        print(f"{c['case']:>40}: {c['rows']:>6} rows ({c['rows_mib']:6.2f} MiB)  +{c['rss_mib_over_baseline']:6.1f} "
              f"MiB resident ({c['anon_mib_over_baseline']:+6.1f} private, {c['file_mib_over_baseline']:+6.1f} file), "
              f"peak +{c['hwm_mib_over_baseline']:6.1f}")
