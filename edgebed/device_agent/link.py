"""Application-level link emulation: the delays a shaped access link would add, applied in the agent.

Used where the runtime can't shape in the kernel (local processes on loopback; netem-less kernels).
Transfer time of a message = bytes·8 / rate (a token bucket with a one-message burst: the agent sends
one message at a time) + delay + jitter (uniform in ±jitter, truncated at 0). Loss: each message is
lost with probability ``loss`` and re-sent after a 200 ms retransmission timeout (Linux's minimum
TCP RTO), repeatedly — the cost a lossy link adds to a reliable transport, at message granularity.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

RTO = 0.2


@dataclass
class AppLink:
    rate: Optional[float] = None   # bits/s; None = unshaped
    delay: float = 0.0             # s
    jitter: float = 0.0            # s
    loss: float = 0.0              # per message
    seed: int = 0

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)
        self.applied_seconds = 0.0
        self.sleep = time.sleep     # a paced device sleeps through its Pacer (device_agent/pacing.py)

    @classmethod
    def from_config(cls, cfg: dict, seed: int) -> "AppLink":
        return cls(cfg.get("rate"), cfg.get("delay", 0.0), cfg.get("jitter", 0.0), cfg.get("loss", 0.0), seed)

    def transfer_time(self, nbytes: int) -> float:
        t = 0.0
        while self.loss > 0 and self.rng.random() < self.loss:
            t += RTO
        if self.rate:
            t += nbytes * 8.0 / self.rate
        if self.delay or self.jitter:
            t += max(0.0, self.delay + (self.rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0))
        return t

    def traverse(self, nbytes: int) -> float:
        """Sleep for the time ``nbytes`` take on this link; returns that time."""
        t = self.transfer_time(nbytes)
        if t > 0 or self.sleep is not time.sleep:
            self.sleep(t)
        self.applied_seconds += t
        return t
