"""Same bits whatever numpy's SIMD dispatch: the 7 golden scenarios on two "hosts" of one machine.

Host A is this machine as it is; host B is this machine with numpy's highest SIMD groups switched off
(``NPY_DISABLE_CPU_FEATURES``), OpenBLAS on another kernel (``OPENBLAS_CORETYPE``), ATen, MKL and
oneDNN limited and edgebed's own products (``edgebed/_gemm.c``) on their scalar path instead of AVX2, as
``tests/integration/test_numerics_hosts.py`` does. Every golden scenario runs under
``portable`` on both, once with today's top-k tie rule and once with the rule before it (argpartition's
own pick among equal values); per scenario: whether the tables are identical, the columns that differ,
and both hosts' fingerprints. Under the old rule every scenario's ``events`` table differs too: each
host's fingerprint sees its numpy reference differ from the recorded one and says so, in an event
naming its own hash.

    .venv/bin/python -m benchmarks.numerics_dispatch   → benchmarks/results/numerics-dispatch.json
"""
from __future__ import annotations

import datetime as dt
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from edgebed import numerics
from tests.integration.test_numerics_hosts import GOLDEN, HOST_B, _differ, _run

OUT = Path(__file__).parent / "results" / "numerics-dispatch.json"


def main() -> dict:
    load = os.getloadavg()
    jobs = [(GOLDEN, "portable", host, rule) for rule in ("new", "old") for host in ({}, HOST_B)]
    with ThreadPoolExecutor(2) as pool:
        new_a, new_b, old_a, old_b = pool.map(lambda job: _run(*job), jobs)
    out = {"date": dt.datetime.now().isoformat(timespec="minutes"), "cpu": numerics._cpu_model(),
           "load_average": {"start": load, "end": os.getloadavg()}, "host_b": HOST_B,
           "what": __doc__.strip().splitlines()[0]}
    for rule, a, b in (("tie_rule", new_a, new_b), ("argpartition_ties", old_a, old_b)):
        differ = _differ(a, b)
        out[rule] = {"identical": sum(not d for d in differ.values()), "of": len(differ),
                     "differ": {k: v for k, v in differ.items() if v},
                     # updates or evals differ (not only the events table, where a host whose numpy
                     # reference differs from the recorded one gets its warning, in its own words)
                     "trajectory_differs": sorted(k for k, v in differ.items()
                                                  if any(not c.startswith("events.") for c in v)),
                     "fingerprint_a": a["_fingerprint"], "fingerprint_b": b["_fingerprint"]}
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    r = main()
    for rule in ("tie_rule", "argpartition_ties"):
        x = r[rule]
        print(f"{rule}: {x['identical']} of {x['of']} identical; ids {x['fingerprint_a']['id']} / "
              f"{x['fingerprint_b']['id']}; trajectories differ: {x['trajectory_differs']}")
