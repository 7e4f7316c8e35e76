"""The PS's shared link over time (``dynamics.ps_link`` on the virtual clock): its utilisation and
queueing delay per sample window, read from the ``ps-link`` rows of the events table, and drawn."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import pandas as pd

from .breakdown import _figure, _legend_right, _write

_FIELDS = ("utilisation", "queue_mean_s", "queue_max_s", "messages", "bytes")


def ps_link_frame(events: Optional[pd.DataFrame]) -> pd.DataFrame:
    """One row per (window, direction): ``virtual_time`` (the window's end, s), ``direction`` (ingress |
    egress), ``utilisation`` (busy share of the window, 0–1), ``queue_mean_s`` / ``queue_max_s`` (s a
    message waited behind others, over those that entered the queue in the window), ``messages``, ``bytes``."""
    cols = ["virtual_time", "direction", *_FIELDS]
    if events is None or events.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for t, detail in zip(*(events.loc[events["event"] == "ps-link", c] for c in ("virtual_time", "detail"))):
        kv = dict(re.findall(r"(\w+)=(\S+)", str(detail)))
        rows.append({"virtual_time": float(t), "direction": kv.get("direction"),
                     **{k: float(kv[k]) for k in _FIELDS if k in kv}})
    return pd.DataFrame(rows, columns=cols)


def plot_ps_link(frames: dict[str, pd.DataFrame], path: str | Path, formats: tuple = (),
                 order: Optional[list[str]] = None) -> Optional[Path]:
    """Utilisation (top) and mean queueing delay (bottom) of the PS link against virtual time, one line
    per run and direction; None (nothing written) when no run has a shared PS link."""
    frames = {k: v for k, v in frames.items() if not v.empty}
    if not frames:
        return None
    fig, (util, queue) = _figure((7, 4.6), rows=2)
    for i, (label, f) in enumerate(frames.items()):
        for direction, style in (("ingress", "-"), ("egress", "--")):
            d = f[f["direction"] == direction]
            if d.empty:
                continue
            name = direction if len(frames) == 1 else f"{label} · {direction}"
            util.step(d["virtual_time"], d["utilisation"] * 100, where="pre", color=f"C{i}", linestyle=style, label=name)
            queue.step(d["virtual_time"], d["queue_mean_s"] * 1e3, where="pre", color=f"C{i}", linestyle=style,
                       label=name)
    util.set_ylabel("utilisation (%)")
    util.set_ylim(0, 105)
    util.set_title("PS link: utilisation and queueing delay per window", fontsize="medium")
    queue.set_ylabel("mean queueing delay (ms)")
    queue.set_xlabel("virtual time (s)")
    queue.set_ylim(bottom=0)
    _legend_right(util)
    return _write(fig, path, formats)
