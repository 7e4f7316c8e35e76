"""A seeded generator of heterogeneous device populations, as a trace (``format.py``).

Where the shape comes from: FedScale (Lai et al., ICML 2022) and Oort (Lai et al., OSDI 2021) drive
their clients from measured mobile-device compute (AI Benchmark) and bandwidth (MobiPerf) traces and
report that both spread over more than an order of magnitude across devices, with a long tail of slow
ones; availability (FedScale's behaviour trace, from a 136k-user study) comes in sessions. Those
papers' fitted parameters are not reproduced here, and the measured traces can't be downloaded on
this machine. **Every parameter below is this project's assumption**, chosen to give that shape; they
are the ``Population`` defaults, so a user can replace them with values fitted to data they have:

- compute: ``slowdown`` log-normal with median ``slowdown_median`` = 2 and σ(log) = 0.8, at least 1 (so
  about 1 device in 20 is more than 7× slower than the fastest class);
- bandwidth: uplink log-normal, median 5 mbit/s, σ(log) = 1.0; downlink the uplink × a log-normal
  ratio with median 4, σ(log) = 0.5 (asymmetric access links);
- availability (optional, ``online_mean_s`` set): alternating exponential online and offline periods.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .format import Trace, TracePoint


@dataclass(frozen=True)
class Population:
    """The generator's parameters (all assumptions; see the module docstring)."""
    slowdown_median: float = 2.0
    slowdown_sigma: float = 0.8
    uplink_median_kbit_s: float = 5000.0
    uplink_sigma: float = 1.0
    down_up_ratio_median: float = 4.0
    down_up_ratio_sigma: float = 0.5
    online_mean_s: Optional[float] = None    # mean online period (None: always online)
    offline_mean_s: float = 600.0            # mean offline period


def generate(n: int, seed: int, horizon_s: float = 3600.0, params: Population = Population()) -> Trace:
    """A trace of ``n`` devices drawn from ``params`` with the stream (seed, device, 0x7E)."""
    trace: Trace = {}
    for d in range(n):
        rng = np.random.default_rng([seed, d, 0x7E])
        slowdown = max(1.0, float(rng.lognormal(math.log(params.slowdown_median), params.slowdown_sigma)))
        up = float(rng.lognormal(math.log(params.uplink_median_kbit_s), params.uplink_sigma))
        down = up * float(rng.lognormal(math.log(params.down_up_ratio_median), params.down_up_ratio_sigma))
        points = [TracePoint(0.0, True if params.online_mean_s else None, round(slowdown, 4), None,
                             round(up, 3), round(down, 3))]
        if params.online_mean_s:
            t, online = 0.0, True
            while True:
                t += float(rng.exponential(params.online_mean_s if online else params.offline_mean_s))
                if t >= horizon_s:
                    break
                online = not online
                points.append(TracePoint(round(t, 6), online))
        trace[d] = points
    return trace
