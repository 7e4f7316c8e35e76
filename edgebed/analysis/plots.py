"""Plots of runs as PNG (and on request SVG/PDF) files: several runs' curves on one axes, or a mean
+ min/max band over seeds.

Curves carry a marker at every evaluation (a run with one evaluation still shows its point). Each
labelled group has its own colour, line style, marker, band hatch and line width (the first drawn
widest), so groups whose curves coincide stay visible, one under the other; where two coincide up to
a point, a dotted line there says so (``coincidences``). The axes always show every point; when the early ramp would squash the part where runs differ
(``zoom``), an inset repeats the curves on that part. Legends sit below the axes, never on the data.

Uses matplotlib's object API with the Agg canvas (no pyplot, no display, no global state), so it
runs headless and from any thread. Axes are named by eval columns; ``AXES`` gives each its label,
scale to human units (ingress bytes → MB, accuracy → %) and whether it is drawn on a log scale.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, MaxNLocator

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
    if full <= 0 or hi - lo > 0.5 * full:
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


def _targets(target) -> list[float]:
    if target is None:
        return []
    return [float(target)] if isinstance(target, (int, float)) else [float(t) for t in target]


def _save(fig: Figure, ax, path: Path, target, y: str, ys: Optional[list] = None,
          formats: tuple = (), draw=None, xs: Optional[list] = None) -> Path:
    """Target lines, legend below the axes, zoom panel; write ``path`` (format from its suffix) and
    ``path`` in ``formats``.

    The main axes always show every point. When the part where curves differ is squashed (``zoom``),
    a panel beside them repeats the curves (``draw(panel)``) on the zoomed range, marked on the axes
    by a grey box."""
    sy = _axis(y).scale
    targets = _targets(target)
    for t in targets:
        ax.axhline(t * sy, color="grey", linestyle="--", linewidth=1,
                   label=f"target {t * sy:g}{' %' if y == 'accuracy' else ''}")
    handles, labels = ax.get_legend_handles_labels()
    if handles:   # below the axes, never over the data: the figure grows by the legend's rows
        ncol = 1 if max(len(t) for t in labels) > 40 else min(3, len(handles))
        rows = -(-len(handles) // ncol)
        w, h = fig.get_size_inches()
        extra = 0.19 * rows + 0.1
        fig.set_size_inches(w, h + extra)
        bottom_in = 0.12 * h + extra   # the old bottom margin, in inches, plus the legend
        fig.subplots_adjust(bottom=bottom_in / (h + extra), top=1 - 0.08 * h / (h + extra))
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.005), fontsize="small",
                   ncol=ncol, frameon=False)
    limits = zoom(ys or [], min(targets) if targets else None) if y == "accuracy" else None
    if limits and draw is not None:   # a zoom panel beside the axes: it never covers a point
        if ax.get_title():   # over both panels
            fig.suptitle(ax.get_title(), fontsize="large", y=1 - 0.02 * 4.5 / fig.get_size_inches()[1])
            ax.set_title("")
        box = ax.get_position()
        ax.set_position([box.x0, box.y0, box.width * 0.58, box.height])
        inset = fig.add_axes([box.x0 + box.width * 0.68, box.y0, box.width * 0.32, box.height])
        draw(inset)
        for t in targets:
            inset.axhline(t * sy, color="grey", linestyle="--", linewidth=1)
        if ax.get_xscale() == "log":
            inset.set_xscale("log")
            inset.xaxis.set_major_formatter(_PlainLog(labelOnlyBase=False))
            inset.xaxis.set_minor_formatter(_PlainLog(labelOnlyBase=False))
        inset.set_ylim(limits[0] * sy, limits[1] * sy)
        x0 = _first_x_above(xs or [], ys or [], limits[0])
        if x0 is not None:
            inset.set_xlim(left=x0)
        inset.tick_params(labelsize="x-small")
        if ax.get_xscale() != "log":
            inset.xaxis.set_major_locator(MaxNLocator(3))
        inset.grid(True, alpha=0.3)
        inset.set_title("zoom on the grey box", fontsize="small")
        (x_lo, x_hi), (y_lo, y_hi) = inset.get_xlim(), inset.get_ylim()
        ax.indicate_inset([x_lo, y_lo, x_hi - x_lo, y_hi - y_lo], edgecolor="grey")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for out in dict.fromkeys([path, *(path.with_suffix(f".{f}") for f in formats)]):
        tmp = out.with_name(f".{out.name}.tmp")
        with rc_context({"svg.fonttype": "none"}):   # SVG text stays text: a third of the size
            fig.savefig(tmp, format=out.suffix.lstrip(".") or "png", metadata=_metadata(out.suffix))
        tmp.replace(out)  # a killed report never leaves half a file
    return path


def _first_x_above(xs: list, ys: list, lo: float) -> Optional[float]:
    """The smallest x from which every curve stays at or above ``lo`` (in data units)."""
    import numpy as np
    firsts = []
    for x, y in zip(xs, ys):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        below = np.nonzero(~(y >= lo))[0]
        if len(x) == 0:
            continue
        firsts.append(x[below[-1] + 1] if len(below) and below[-1] + 1 < len(x) else
                      (x[-1] if len(below) else x[0]))
    return float(min(firsts)) if firsts else None


def _metadata(suffix: str) -> dict:
    """No creation date in SVG/PDF, so the same runs give the same bytes (diffable, cacheable)."""
    return {"Date": None} if suffix in (".svg", ".pdf") else {}


def plot_curves(curves: dict[str, pd.DataFrame], x: str, y: str, path: str | Path,
                title: Optional[str] = None, target=None,
                formats: tuple = ()) -> Optional[Path]:
    """One line per labelled frame, ``y`` against ``x`` (column names, see ``AXES``), a marker at
    each point (each is an evaluation).

    ``target`` (one accuracy or several) draws dashed lines; ``formats`` (``"svg"``, ``"pdf"``) writes
    those beside ``path``. Frames without a finite point are left out; returns None (and writes
    nothing) when no frame has one, else ``path``.
    """
    return plot_groups({label: [f] for label, f in curves.items()}, x, y, path, title, target, formats)


def plot_groups(groups: dict[str, list[pd.DataFrame]], x: str, y: str, path: str | Path,
                title: Optional[str] = None, target=None, formats: tuple = (),
                window: int = 1, points: int = 200) -> Optional[Path]:
    """One entry per labelled group of runs: a group of one run is its curve with a marker at every
    evaluation; a group of several (seeds) is their mean as a line and min..max as a band
    (``metrics.band``), labelled with how many runs it averages.

    ``window`` > 1 draws each run's trailing moving average over that many evaluations (the measure
    the targets read), the raw evaluations as faint markers behind it. Returns None (writes
    nothing) when no group has a finite point.
    """
    from .metrics import moving_average
    if window > 1 and y == "accuracy":
        groups = {k: [moving_average(f, window).assign(raw=lambda d: d["accuracy"],
                                                       accuracy=lambda d: d["smoothed"]) for f in fs]
                  for k, fs in groups.items()}
    singles = _nonempty({k: _xy(fs[0], x, y) for k, fs in groups.items() if len(fs) == 1})
    bands = _nonempty({k: band(fs, x, y, points, log=_axis(x).log) for k, fs in groups.items() if len(fs) > 1})
    raws = ({k: _xy(fs[0], x, "raw") for k, fs in groups.items() if len(fs) == 1 and "raw" in fs[0]}
            if window > 1 else {})
    if not singles and not bands:
        return None
    fig, ax, sx, sy = _start(x, y, title)
    order = [k for k in groups if k in singles or k in bands]
    st = {k: _style(i, len(order)) for i, k in enumerate(order)}
    same = [c for c in coincidences(groups, x, y) if c[0] in st and c[1] in st and not c[3]]

    def draw(a, legend: bool = False) -> None:
        for k in order:
            s = st[k]
            if k in bands:
                b = bands[k]
                a.fill_between(b["x"] * sx, b["min"] * sy, b["max"] * sy, facecolor=to_rgba(s["color"], 0.15),
                               edgecolor=to_rgba(s["color"], 0.6), hatch=s["hatch"], linewidth=0,
                               label=f"{k}: band min–max" if legend else None)
                a.plot(b["x"] * sx, b["mean"] * sy, color=s["color"], linewidth=s["width"], linestyle=s["line"],
                       marker=s["marker"], markevery=max(1, len(b) // 8), markersize=s["size"],
                       label=f"{k} ({_runs(int(b['runs'].iloc[0]))}, mean)" if legend else None)
            else:
                p = singles[k]
                if k in raws and not raws[k].empty:
                    a.plot(raws[k][x] * sx, raws[k]["raw"] * sy, color=s["color"], linestyle="none",
                           marker=".", markersize=3, alpha=0.35)
                a.plot(p[x] * sx, p[y] * sy, color=s["color"], marker=s["marker"], linestyle=s["line"],
                       markersize=7 if len(p) == 1 else s["size"], linewidth=s["width"], label=k if legend else None)
        for ka, kb, upto, _ in same:
            a.axvline(upto * sx, color="grey", linestyle=":", linewidth=1,
                      label=f"{ka} = {kb} up to here" if legend else None)

    draw(ax, legend=True)
    if singles and all(len(p) == 1 for p in singles.values()) and not bands and not _axis(x).log:
        ax.margins(x=0.5)   # a lone point sits mid-axes, not on the frame
    ys = [p[y] for p in singles.values()] + [v for b in bands.values() for v in (b["min"], b["max"])]
    xs = [p[x] for p in singles.values()] + [b["x"] for b in bands.values() for _ in (0, 1)]
    if window > 1 and y == "accuracy":
        ax.set_ylabel(f"test accuracy (%)\nmoving average of {window} evaluations")
    return _save(fig, ax, Path(path), target, y, ys, formats, draw=draw,
                 xs=[v * sx for v in xs])


def accuracy_vs_updates(curves: dict[str, pd.DataFrame], path: str | Path,
                        target=None, formats: tuple = ()) -> Optional[Path]:
    return plot_curves(curves, "update", "accuracy", path, "Test accuracy vs applied updates", target, formats)


def accuracy_vs_ingress(curves: dict[str, pd.DataFrame], path: str | Path,
                        target=None, formats: tuple = ()) -> Optional[Path]:
    return plot_curves(curves, "ingress_bytes", "accuracy", path,
                       "Test accuracy vs cumulative PS ingress", target, formats)


def accuracy_vs_virtual_time(curves: dict[str, pd.DataFrame], path: str | Path,
                             target=None, formats: tuple = ()) -> Optional[Path]:
    """None (nothing written) unless some run has virtual time (the sim runtime records it)."""
    return plot_curves(curves, "virtual_time", "accuracy", path,
                       "Test accuracy vs virtual time", target, formats)


def accuracy_vs_wall_time(curves: dict[str, pd.DataFrame], path: str | Path,
                          target=None, formats: tuple = ()) -> Optional[Path]:
    """Runs in real time only (local, docker, spark): a virtual-clock run's wall time says how fast
    the host simulated, not how fast the devices trained, so it is left out."""
    real = {k: f for k, f in curves.items() if f.empty or f["virtual_time"].isna().all()}
    return plot_curves(real, "wall_time", "accuracy", path, "Test accuracy vs wall time", target, formats)


def real_time_only(groups: dict[str, list[pd.DataFrame]]) -> dict[str, list[pd.DataFrame]]:
    """The groups whose runs ran in real time (see ``accuracy_vs_wall_time``)."""
    return {k: fs for k, fs in groups.items()
            if all(f.empty or f["virtual_time"].isna().all() for f in fs)}


def plot_band(groups: dict[str, list[pd.DataFrame]], x: str, y: str, path: str | Path,
              title: Optional[str] = None, target=None,
              points: int = 200, formats: tuple = (), window: int = 1) -> Optional[Path]:
    """Per group (e.g. one study cell), the mean over its runs (seeds) as a line and min..max as a
    band; see ``plot_groups``, which this is (a group of one run is drawn as its curve)."""
    return plot_groups(groups, x, y, path, title, target, formats, window, points)


_LINES = ["-", "--", "-.", ":"]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
_HATCHES = ["//", "\\\\", "||", "--", "xx", ".."]


def _style(i: int, n: int) -> dict:
    """The look of the ``i``-th of ``n`` groups: colour, line style, marker and band hatch cycle at
    different lengths (no two of the first 84 alike); widths and marker sizes shrink with ``i``, so a
    later curve drawn over an earlier identical one leaves the earlier one's edges showing."""
    shrink = i / (n - 1) if n > 1 else 1.0
    return {"color": f"C{i % 10}", "line": _LINES[i % 4], "marker": _MARKERS[i % 7], "hatch": _HATCHES[i % 6],
            "width": 1.5 + 2.0 * (1 - shrink), "size": 3 + 3 * (1 - shrink)}


def coincidences(groups: dict[str, list[pd.DataFrame]], x: str, y: str) -> list[tuple[str, str, float, bool]]:
    """Pairs of groups (in group order) whose runs give the same (x, y) points from their first one
    on, run by run (seed by seed, in order): (group a, group b, the last shared x in data units,
    whether every point is shared). Pairs sharing fewer than two points are left out."""
    import numpy as np
    pts = {k: [_xy(f, x, y).to_numpy(dtype=float) for f in fs] for k, fs in groups.items() if fs}
    keys, out = list(pts), []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if len(pts[a]) != len(pts[b]):
                continue
            shared, whole = [], True
            for pa, pb in zip(pts[a], pts[b]):
                m = min(len(pa), len(pb))
                eq = np.all(pa[:m] == pb[:m], axis=1) if m else np.zeros(0, bool)
                k = m if eq.all() else int(np.argmin(eq))
                whole &= k == len(pa) == len(pb)
                shared.append((k, pa[k - 1, 0] if k else None))
            if min(k for k, _ in shared) >= 2:
                out.append((a, b, float(min(v for _, v in shared)), bool(whole)))
    return out


def coincidence_notes(groups: dict[str, list[pd.DataFrame]], x: str = "update", y: str = "accuracy") -> list[str]:
    """``coincidences`` as report notes, one sentence each."""
    label, scale = _axis(x).label, _axis(x).scale
    return [f"{a} and {b} have the same {_axis(y).label} " + (
        "at every evaluation" if whole else f"up to {label} {upto * scale:,g}, then differ")
        + ": their curves lie on one another (told apart by line style, marker and width)"
        for a, b, upto, whole in coincidences(groups, x, y)]


def _runs(k: int) -> str:
    return "1 run" if k == 1 else f"{k} runs"
