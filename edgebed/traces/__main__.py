"""``python -m edgebed.traces``: import FedScale's pickles or generate a population, as a trace file.

    python -m edgebed.traces fedscale --capacity client_device_capacity --behaviour client_behave_trace \\
        --n 100 --horizon 2h -o trace.csv
    python -m edgebed.traces generate --n 100 --seed 1 --online-mean 20min --offline-mean 10min -o trace.csv
"""
from __future__ import annotations

import argparse
import sys

from ..units import parse_duration
from .fedscale import import_fedscale
from .format import TraceError, write_trace
from .population import Population, generate


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgebed.traces", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="verb", required=True)
    f = sub.add_parser("fedscale", help="import FedScale's capacity and/or behaviour pickles")
    f.add_argument("--capacity", help="client_device_capacity pickle")
    f.add_argument("--behaviour", help="client_behave_trace pickle")
    g = sub.add_parser("generate", help="a seeded population (parameters: edgebed/traces/population.py)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--online-mean", help="mean online period, e.g. 20min (unset: always online)")
    g.add_argument("--offline-mean", default="10min", help="mean offline period")
    for s in (f, g):
        s.add_argument("--n", type=int, required=s is g, help="devices")
        s.add_argument("--horizon", default="24h", help="availability up to this time, e.g. 2h")
        s.add_argument("-o", "--out", required=True, help="trace file to write (.csv or .json)")
    a = p.parse_args(argv)
    try:
        horizon = parse_duration(a.horizon)
        if a.verb == "fedscale":
            trace = import_fedscale(a.capacity, a.behaviour, a.n, horizon)
        else:
            params = Population(online_mean_s=parse_duration(a.online_mean) if a.online_mean else None,
                                offline_mean_s=parse_duration(a.offline_mean))
            trace = generate(a.n, a.seed, horizon, params)
    except (TraceError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_trace(trace, a.out)
    print(f"{a.out}: {len(trace)} devices, {sum(len(v) for v in trace.values())} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
