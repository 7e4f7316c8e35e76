"""Where the time of an 11 M-parameter AdaComp push goes at the PS: cProfile of ``process``.

    python -m benchmarks.profile_ps_size > benchmarks/results/ps-sizes-profile-adacomp-11m.txt

30 pushes of top-1 % per layer (``bench_ps.payload``) to a PS holding ``tests.sized_models:mlp_11m``,
one device with its pull on record, as ``bench_ps --sizes`` measures ingest.
"""
from __future__ import annotations

import cProfile
import io
import pstats
import time

import numpy as np

from benchmarks import bench_ps
from edgebed import wire

MODEL, PUSHES = "tests.sized_models:mlp_11m", 30


def main() -> int:
    ps, layers, size = bench_ps.make_ps("adacomp", 2, model=MODEL)
    session = wire.decode(ps.process(b"p", bench_ps.frames_bytes(wire.Hello(0)))).session
    ps.rule.on_pull(0, 0)
    v, idx = bench_ps.payload("adacomp", layers, size, np.random.default_rng(0))
    msgs = [[memoryview(f) for f in bench_ps.frames_bytes(wire.Push(session, i, 0, v, idx))] for i in range(PUSHES)]
    prof = cProfile.Profile()
    prof.enable()
    for m in msgs:
        ps.process(b"p", m)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(8)
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {bench_ps._host()}")
    print(f"# {PUSHES} AdaComp pushes of {v.size:,} entries (c = 0.01 per layer) to a PS holding {size:,} "
          "parameters, one device with its pull on record")
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
