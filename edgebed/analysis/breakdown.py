"""How a run's updates and traffic break down, as plots: staleness distribution, per speed class
update share and rate, PS traffic by speed class and by message type.

Same conventions as ``plots``: matplotlib's object API on the Agg canvas, one figure per call,
written atomically in each requested format; a function returns None (writes nothing) when no run
has the data.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib import rc_context
from matplotlib.figure import Figure

from .plots import MB, _metadata

WIDE = (7, 3.6)


def _figure(size=WIDE, cols: int = 1):
    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, cols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
    return fig, axes


def _write(fig: Figure, path: Path, formats: tuple) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for out in dict.fromkeys([path, *(path.with_suffix(f".{f}") for f in formats)]):
        tmp = out.with_name(f".{out.name}.tmp")
        with rc_context({"svg.fonttype": "none"}):
            fig.savefig(tmp, format=out.suffix.lstrip("."), metadata=_metadata(out.suffix))
        tmp.replace(out)
    return path


def staleness(updates: dict[str, pd.DataFrame], path: str | Path, formats: tuple = ()) -> Optional[Path]:
    """Distribution of the global staleness τ of applied updates, one step histogram per run, with
    the median marked; τ ≈ devices − 1 is the fully asynchronous steady state."""
    data = {k: u["staleness"].dropna().to_numpy() for k, u in updates.items() if len(u)}
    data = {k: v for k, v in data.items() if len(v)}
    if not data:
        return None
    fig, (ax,) = _figure()
    hi = int(max(v.max() for v in data.values()))
    bins = np.arange(-0.5, hi + 1.5, max(1, (hi + 1) // 60))
    for label, v in data.items():
        (line,) = ax.step(*_hist(v, bins), where="mid", label=f"{label} (median {np.median(v):g})")
        ax.axvline(np.median(v), color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xlabel("global staleness τ (updates applied since the device's pull)")
    ax.set_ylabel("share of applied updates (%)")
    ax.set_title("Staleness distribution")
    ax.legend(fontsize="small", loc="best")
    return _write(fig, path, formats)


def _hist(values: np.ndarray, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    counts, edges = np.histogram(values, bins=bins)
    return (edges[:-1] + edges[1:]) / 2, 100.0 * counts / max(1, len(values))


def classes(shares: dict[str, pd.DataFrame], path: str | Path, formats: tuple = ()) -> Optional[Path]:
    """Per speed class: share of applied updates (%) and updates per device, side by side; one bar
    group per run (``shares``: run → ``metrics.class_shares`` frame)."""
    shares = {k: v for k, v in shares.items() if not v.empty}
    if not shares:
        return None
    fig, (left, right) = _figure((7, 3.4), cols=2)
    names = list(dict.fromkeys(c for v in shares.values() for c in v["speed_class"]))
    width = 0.8 / len(shares)
    x = np.arange(len(names))
    for i, (label, v) in enumerate(shares.items()):
        v = v.set_index("speed_class").reindex(names)
        left.bar(x + i * width, 100 * v["share"].fillna(0), width, label=label)
        right.bar(x + i * width, v["updates_per_device"].fillna(0), width, label=label)
    for ax, ylabel in ((left, "share of applied updates (%)"), (right, "applied updates per device")):
        ax.set_xticks(x + width * (len(shares) - 1) / 2, names)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("speed class")
    left.set_title("Update share per class", fontsize="medium")
    right.set_title("Update rate per class", fontsize="medium")
    if len(shares) > 1:
        left.legend(fontsize="x-small")
    return _write(fig, path, formats)


def traffic(traffic: dict[str, dict], path: str | Path, formats: tuple = ()) -> Optional[Path]:
    """PS payload bytes in and out, by speed class (left) and by wire message type (right), per run
    (``traffic``: run → traffic.json)."""
    traffic = {k: t for k, t in traffic.items() if t.get("by_kind")}
    if not traffic:
        return None
    fig, (left, right) = _figure((7, 3.6), cols=2)
    for ax, key, xlabel in ((left, "by_class", "speed class"), (right, "by_kind", "message type")):
        names = sorted({n for t in traffic.values() for n in (t.get(key) or {})})
        if not names:
            ax.set_visible(False)
            continue
        x = np.arange(len(names))
        width = 0.8 / (2 * len(traffic))
        top = 0.0
        for i, (label, t) in enumerate(traffic.items()):
            part = t.get(key) or {}
            ins = [part.get(n, {}).get("in_bytes", 0) / MB for n in names]
            outs = [part.get(n, {}).get("out_bytes", 0) / MB for n in names]
            suffix = f" · {label}" if len(traffic) > 1 else ""
            ax.bar(x + 2 * i * width, ins, width, label=f"in (to PS){suffix}")
            ax.bar(x + (2 * i + 1) * width, outs, width, label=f"out (from PS){suffix}")
            top = max(top, *ins, *outs)
        ax.set_xticks(x + width * (2 * len(traffic) - 1) / 2, [n or "—" for n in names],
                      rotation=30 if len(names) > 4 else 0, fontsize="small")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("PS payload (MB)")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(0, max(top, 0.01) * 4)   # headroom on the log part: the tallest bar stays inside
    left.set_title("Traffic by speed class", fontsize="medium")
    right.set_title("Traffic by message type", fontsize="medium")
    right.legend(fontsize="x-small")
    return _write(fig, path, formats)
