"""NormClip: no push moves Θ by more than a few times what recent pushes did (``security.robust``).

The value bound (``ParameterServer.value_limit``) stops a push that would move Θ by a hundred times its
scale, not a stealthy poisoner that stays under it: one device of 8 pushing a dense ±19 under ASGD
(α = 0.05) moves every entry by 0.95 a push and takes the model from 0.925 to 0.105 within one
evaluation (issue 51, 4). With this option the PS scales each push whose L2 norm is over ``clip`` × the
median norm of the last ``window`` pushes it applied down to that norm (the median: honest devices
are most of the pushes, so a minority can't raise it; the norms recorded are those applied, after
clipping). The first ``WARMUP`` pushes of the run set the median and are not clipped. The direction of a push is
kept, so an honest push larger than usual still counts, only less. Off by default; its cost on honest
runs: benchmarks/results/robust.md.

What it does not do: stop a poisoner that pushes the same direction push after push. Clipped to
``clip`` × an honest norm, its pushes add up while honest gradients partly cancel, and the damage it
does raises the honest norms, and with them the bound. With 7 honest MLP devices and one pushing a
fixed ±19 pattern (tests/unit/ps/test_ps_harm.py's harness): accuracy 0.816 after 200 rounds at
clip 1.5 (0.14 at clip 3), 0.324 after 400 at 1.5; honest alone 0.94. It buys time; the harm count
(``DeviceState.moved``) names the device.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Optional

import numpy as np

WARMUP = 3   # pushes applied before the median means anything (the first ones are not clipped)


class NormClip:
    def __init__(self, clip: float, window: int = 64):
        if not clip > 1.0:
            raise ValueError(f"security.robust.clip must be over 1 (a multiple of the median push norm), got {clip}")
        self.clip = clip
        self.recent: deque = deque(maxlen=window)
        self.clipped: dict[int, int] = {}   # device → its pushes clipped

    def apply(self, device: int, values: np.ndarray) -> tuple[np.ndarray, Optional[float]]:
        """``values``, scaled down if over the bound, and the factor by which its norm was over the
        median (None: not clipped). float32 in, float32 out; ``values`` itself is never written."""
        if not values.size:   # a quiet report (dynamic averaging) moves nothing and sets no norm
            return values, None
        v = values.astype(np.float32, copy=False)
        # float64 squares are exact and np.add.reduce sums in one fixed order: the same norm on every host
        norm = math.sqrt(float(np.add.reduce(np.square(v, dtype=np.float64))))
        over = None
        if len(self.recent) >= WARMUP:
            median = statistics.median(self.recent)
            cap = self.clip * median
            if norm > cap and median > 0:
                over = norm / median
                v = v * np.float32(cap / norm)
                norm = cap
                self.clipped[device] = self.clipped.get(device, 0) + 1
        self.recent.append(norm)
        return v, over
