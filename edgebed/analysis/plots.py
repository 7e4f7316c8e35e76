"""Plots of runs as PNG (and on request SVG/PDF) files: several runs' curves on one axes, or a mean
+ min/max band over seeds.

Curves carry a marker at every evaluation (a run with one evaluation still shows its point), and
accuracy axes zoom to the band that matters (``zoom``): the early ramp is cut off when keeping it
would squash the part where runs differ.

Uses matplotlib's object API with the Agg canvas (no pyplot, no display, no global state), so it
runs headless and from any thread. Axes are named by eval columns; ``AXES`` gives each its label,
scale to human units (ingress bytes → MB, accuracy → %) and whether it is drawn on a log scale.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from .metrics import band

MB = 1e6  # bytes; "MB" throughout the report is 10^6 bytes


class Axis(NamedTuple):
    label: str
    scale: float
    log: bool


AXES: dict[str, Axis] = {
    "update": Axis("applied updates", 1.0, False),
    "ingress_bytes": Axis("cumulative PS ingress (MB, log)", 1 / MB, True),
    "push_bytes": Axis("cumulative push bytes at the PS (MB, log)", 1 / MB, True),
    "wall_time": Axis("wall time (s)", 1.0, False),
    "virtual_time": Axis("virtual time (s)", 1.0, False),
    "accuracy": Axis("test accuracy (%)", 100.0, False),
    "loss": Axis("test loss", 1.0, False),
}


def _axis(col: str) -> Axis:
    return AXES.get(col, Axis(col, 1.0, False))


def _xy(frame: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The finite (x, y) points of a frame in x order; positive x only on a log axis."""
    f = frame[[x, y]].dropna().sort_values(x, kind="stable")
    return f[f[x] > 0] if _axis(x).log else f


class _PlainLog(LogFormatter):
    """Log-axis tick labels as plain numbers (``4``, ``20``, ``0.003`` MB) instead of ``4×10⁰``."""

    def _num_to_string(self, x, vmin, vmax):
        return f"{x:g}"


def _new_axes(x: str, y: str, title: Optional[str]):
    fig = Figure(figsize=(7, 4.5), dpi=100)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.12, top=0.92)  # fixed: tight_layout costs a draw
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_xlabel(_axis(x).label)
    ax.set_ylabel(_axis(y).label)
    if _axis(x).log:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_PlainLog(labelOnlyBase=False))
        ax.xaxis.set_minor_formatter(_PlainLog(labelOnlyBase=False))
    if title:
        ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def zoom(values: list, target: Optional[float] = None, keep: float = 0.75) -> Optional[tuple[float, float]]:
    """y-limits showing the last ``keep`` of each curve's points (and the target), or None when the
    whole range is already readable. ``values``: one array of y values per curve, in x order."""
    import numpy as np
    arrays = [np.asarray(v, dtype=float) for v in values if len(v)]
    arrays = [a[np.isfinite(a)] for a in arrays]
    arrays = [a for a in arrays if len(a)]
    if not arrays:
        return None
    tails = np.concatenate([a[int(len(a) * (1 - keep)):] if len(a) > 3 else a for a in arrays])
    everything = np.concatenate(arrays)
    lo, hi = float(tails.min()), float(everything.max())
    if target is not None:
        lo, hi = min(lo, target), max(hi, target)
    full = hi - float(everything.min())
    if full <= 0 or hi - lo > 0.6 * full:
        return None
    pad = max(0.08 * (hi - lo), 0.005 * max(abs(hi), 1e-9))
    return lo - pad, hi + pad


def _nonempty(frames: dict) -> dict:
    """The labelled frames that have rows."""
    return {label: f for label, f in frames.items() if not f.empty}


def _start(x: str, y: str, title: Optional[str]):
    """New axes, and the factors that put ``x`` and ``y`` in their display units."""
    fig, ax = _new_axes(x, y, title)
    return fig, ax, _axis(x).scale, _axis(y).scale


def _save(fig: Figure, ax, path: Path, target: Optional[float], y: str, ys: Optional[list] = None,
          formats: tuple = ()) -> Path:
    """Target line, zoom, legend; write ``path`` (format from its suffix) and ``path`` in ``formats``."""
    sy = _axis(y).scale
    if target is not None:
        ax.axhline(target * sy, color="grey", linestyle="--", linewidth=1,
                   label=f"target {target * sy:g}{' %' if y == 'accuracy' else ''}")
    limits = zoom(ys or [], target) if y == "accuracy" else None
    if limits:
        ax.set_ylim(limits[0] * sy, limits[1] * sy)
        ax.text(0.01, 0.01, "y axis zoomed: early points are below it", transform=ax.transAxes,
                fontsize="x-small", color="grey")
    ax.legend(loc="best", fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for out in dict.fromkeys([path, *(path.with_suffix(f".{f}") for f in formats)]):
        tmp = out.with_name(f".{out.name}.tmp")
        with rc_context({"svg.fonttype": "none"}):   # SVG text stays text: a third of the size
            fig.savefig(tmp, format=out.suffix.lstrip(".") or "png", metadata=_metadata(out.suffix))
        tmp.replace(out)  # a killed report never leaves half a file
    return path


def _metadata(suffix: str) -> dict:
    """No creation date in SVG/PDF, so the same runs give the same bytes (diffable, cacheable)."""
    return {"Date": None} if suffix in (".svg", ".pdf") else {}


def plot_curves(curves: dict[str, pd.DataFrame], x: str, y: str, path: str | Path,
                title: Optional[str] = None, target: Optional[float] = None,
                formats: tuple = ()) -> Optional[Path]:
    """One line per labelled frame, ``y`` against ``x`` (column names, see ``AXES``), a marker at
    each point (each is an evaluation).

    ``target`` draws the target accuracy as a dashed line; ``formats`` (``"svg"``, ``"pdf"``) writes
    those beside ``path``. Frames without a finite point are left out; returns None (and writes
    nothing) when no frame has one, else ``path``.
    """
    points = _nonempty({label: _xy(f, x, y) for label, f in curves.items()})
    if not points:
        return None
    fig, ax, sx, sy = _start(x, y, title)
    for label, p in points.items():
        ax.plot(p[x] * sx, p[y] * sy, label=label, marker="o", markersize=7 if len(p) == 1 else 3,
                linewidth=1.5)
    if all(len(p) == 1 for p in points.values()) and not _axis(x).log:
        ax.margins(x=0.5)   # a lone point sits mid-axes, not on the frame
    return _save(fig, ax, Path(path), target, y, [p[y] for p in points.values()], formats)


def accuracy_vs_updates(curves: dict[str, pd.DataFrame], path: str | Path,
                        target: Optional[float] = None, formats: tuple = ()) -> Optional[Path]:
    return plot_curves(curves, "update", "accuracy", path, "Test accuracy vs applied updates", target, formats)


def accuracy_vs_ingress(curves: dict[str, pd.DataFrame], path: str | Path,
                        target: Optional[float] = None, formats: tuple = ()) -> Optional[Path]:
    return plot_curves(curves, "ingress_bytes", "accuracy", path,
                       "Test accuracy vs cumulative PS ingress", target, formats)


def accuracy_vs_virtual_time(curves: dict[str, pd.DataFrame], path: str | Path,
                             target: Optional[float] = None, formats: tuple = ()) -> Optional[Path]:
    """None (nothing written) unless some run has virtual time (the sim runtime records it)."""
    return plot_curves(curves, "virtual_time", "accuracy", path,
                       "Test accuracy vs virtual time", target, formats)


def accuracy_vs_wall_time(curves: dict[str, pd.DataFrame], path: str | Path,
                          target: Optional[float] = None, formats: tuple = ()) -> Optional[Path]:
    """Runs in real time only (local, docker, spark): a virtual-clock run's wall time says how fast
    the host simulated, not how fast the devices trained, so it is left out."""
    real = {k: f for k, f in curves.items() if f.empty or f["virtual_time"].isna().all()}
    return plot_curves(real, "wall_time", "accuracy", path, "Test accuracy vs wall time", target, formats)


def plot_band(groups: dict[str, list[pd.DataFrame]], x: str, y: str, path: str | Path,
              title: Optional[str] = None, target: Optional[float] = None,
              points: int = 200) -> Optional[Path]:
    """Per group (e.g. one study cell), the mean over its runs (seeds) as a line and min..max as a band.

    Runs are interpolated on a common grid of ``x`` covering the range all of a group's runs
    reach (see ``metrics.band``). The legend says how many runs each line averages. Returns None
    when no group has data.
    """
    bands = _nonempty({label: band(frames, x, y, points, log=_axis(x).log) for label, frames in groups.items()})
    if not bands:
        return None
    fig, ax, sx, sy = _start(x, y, title)
    for label, b in bands.items():
        (line,) = ax.plot(b["x"] * sx, b["mean"] * sy, label=f"{label} ({_runs(int(b['runs'].iloc[0]))})",
                          linewidth=1.5)
        ax.fill_between(b["x"] * sx, b["min"] * sy, b["max"] * sy, color=line.get_color(), alpha=0.2,
                        linewidth=0)
    return _save(fig, ax, Path(path), target, y, [v for b in bands.values() for v in (b["min"], b["max"])])


def _runs(k: int) -> str:
    return "1 run" if k == 1 else f"{k} runs"
