"""How a run's updates and traffic break down, as plots: staleness distribution per speed class,
per speed class update share and rate, PS traffic by speed class and by message type, live devices
and crashes over the run. Speed classes always in scenario order; legends beside or below the axes.

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

from .describe import ordered
from .plots import MB, _metadata

WIDE = (7, 3.6)


def _figure(size=WIDE, cols: int = 1, rows: int = 1):
    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharex=rows > 1).ravel()
    for ax in axes:
        ax.grid(True, axis="y", alpha=0.3)
    return fig, axes


def _write(fig: Figure, path: Path, formats: tuple, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for out in dict.fromkeys([path, *(path.with_suffix(f".{f}") for f in formats)]):
        tmp = out.with_name(f".{out.name}.tmp")
        with rc_context({"svg.fonttype": "none"}):
            fig.savefig(tmp, format=out.suffix.lstrip("."), metadata=_metadata(out.suffix), bbox_inches="tight")
        tmp.replace(out)
    return path


def _legend_right(ax, title: Optional[str] = None) -> None:
    """The legend to the right of the axes, off the data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small", frameon=False, title=title,
                  title_fontsize="x-small")


def staleness(updates: dict[str, pd.DataFrame], path: str | Path, formats: tuple = (),
              order: Optional[list[str]] = None) -> Optional[Path]:
    """Distribution of the global staleness τ of applied updates: per run one panel, in it one step
    histogram per speed class (``order``: scenario order) with its median marked; τ ≈ devices − 1
    is the fully asynchronous steady state. Shares are of the class's own updates."""
    data = {k: u.dropna(subset=["staleness"]) for k, u in updates.items() if len(u)}
    data = {k: u for k, u in data.items() if len(u)}
    if not data:
        return None
    runs = list(data)[:6]
    fig, axes = _figure((7, 0.6 + 2.6 * len(runs)), rows=len(runs))
    hi = int(max(u["staleness"].max() for u in data.values()))
    bins = np.arange(-0.5, hi + 1.5, max(1, (hi + 1) // 60))
    for ax, run in zip(axes, runs):
        u = data[run]
        classes = ordered(u["speed_class"].unique(), [order or []])
        for i, k in enumerate(classes):
            v = u.loc[u["speed_class"] == k, "staleness"].to_numpy()
            if not len(v):
                continue
            ax.step(*_hist(v, bins), where="mid", color=f"C{i}",
                    label=f"{k}: {len(v):,} updates, median {np.median(v):g}")
            ax.axvline(np.median(v), color=f"C{i}", linestyle=":", linewidth=1)
        ax.set_ylabel("share of the class's\nupdates (%)", fontsize="small")
        ax.set_title(f"Staleness per speed class: {run}" if len(runs) > 1 else "Staleness per speed class",
                     fontsize="medium")
        _legend_right(ax)
    axes[-1].set_xlabel("global staleness τ (updates applied since the device's pull)")
    return _write(fig, path, formats)


def _hist(values: np.ndarray, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    counts, edges = np.histogram(values, bins=bins)
    return (edges[:-1] + edges[1:]) / 2, 100.0 * counts / max(1, len(values))


def classes(shares: dict[str, pd.DataFrame], path: str | Path, formats: tuple = (),
            order: Optional[list[str]] = None) -> Optional[Path]:
    """Per speed class (``order``: scenario order): share of applied updates (%) and updates per
    device, side by side; one bar group per run (``shares``: run → ``metrics.class_shares`` frame)."""
    shares = {k: v for k, v in shares.items() if not v.empty}
    if not shares:
        return None
    fig, (left, right) = _figure((7, 3.4), cols=2)
    names = ordered([c for v in shares.values() for c in v["speed_class"]], [order or []])
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
        fig.legend(*left.get_legend_handles_labels(), loc="lower center", ncol=min(3, len(shares)),
                   fontsize="x-small", frameon=False, bbox_to_anchor=(0.5, -0.02))
        fig.subplots_adjust(bottom=0.3)
    return _write(fig, path, formats, tight=len(shares) == 1)


def traffic(traffic: dict[str, dict], path: str | Path, formats: tuple = (),
            order: Optional[list[str]] = None) -> Optional[Path]:
    """PS payload bytes in and out, by speed class (left, ``order``: scenario order) and by wire
    message type (right), per run (``traffic``: run → traffic.json). The legend sits below the bars."""
    traffic = {k: t for k, t in traffic.items() if t.get("by_kind")}
    if not traffic:
        return None
    fig, (left, right) = _figure((7, 3.6), cols=2)
    for ax, key, xlabel in ((left, "by_class", "speed class"), (right, "by_kind", "message type")):
        found = {n for t in traffic.values() for n in (t.get(key) or {})}
        names = ordered(found, [order or []]) if key == "by_class" else sorted(found)
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
            ax.bar(x + 2 * i * width, ins, width, label=f"in (to PS){suffix}", color=f"C{2 * i}")
            ax.bar(x + (2 * i + 1) * width, outs, width, label=f"out (from PS){suffix}", color=f"C{2 * i + 1}")
            top = max(top, *ins, *outs)
        ax.set_xticks(x + width * (2 * len(traffic) - 1) / 2, [n or "—" for n in names],
                      rotation=30 if len(names) > 4 else 0, fontsize="small")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("PS payload (MB)")
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_ylim(0, max(top, 0.01) * 4)   # headroom on the log part: the tallest bar stays inside
    left.set_title("Traffic by speed class", fontsize="medium")
    right.set_title("Traffic by message type", fontsize="medium")
    shown = left if left.get_visible() else right
    handles, labels = shown.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(handles)), fontsize="x-small",
               frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.08 + 0.05 * ((len(handles) - 1) // 4), 1, 1))
    return _write(fig, path, formats, tight=False)


def timeline(lives: dict[str, pd.DataFrame], path: str | Path, formats: tuple = (),
             order: Optional[list[str]] = None) -> Optional[Path]:
    """Live devices against applied updates (``describe.live_devices``): per speed class for one run,
    the total per run for several; a cross at each crash, a triangle where a device was lost."""
    lives = {k: v for k, v in lives.items() if not v.empty}
    if not lives:
        return None
    fig, (ax,) = _figure((7, 3.4))
    one = len(lives) == 1
    for i, (label, v) in enumerate(lives.items()):
        cols = ordered([c for c in v.columns if c not in ("update", "total", "event")], [order or []])
        # classes with equal counts overlap: each its own dash pattern, so both stay visible
        series = [(k, v[k], f"C{j}", ("-", (0, (5, 3)), (0, (1, 2)), "-.")[j % 4]) for j, k in enumerate(cols)] \
            if one and len(cols) > 1 else []
        series.append(("all devices" if one else label, v["total"], "black" if one else f"C{i}", "-"))
        for name, s, color, style in series:
            ax.step(v["update"], s, where="post", label=name, color=color, linestyle=style,
                    linewidth=2 if name == "all devices" else 1.6)
        for event, marker in (("crash", "x"), ("lost", "v")):
            hit = v[v["event"] == event]
            if len(hit):
                ax.plot(hit["update"], hit["total"], linestyle="none", marker=marker, markersize=6,
                        color="black" if one else f"C{i}",
                        label=f"{event} ({len(hit)})" + ("" if one else f" · {label}"))
    ax.set_xlabel("applied updates")
    ax.set_ylabel("live devices")
    ax.set_ylim(bottom=0)
    ax.set_title("Live devices and crashes", fontsize="medium")
    _legend_right(ax)
    return _write(fig, path, formats)
