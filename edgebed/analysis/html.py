"""Self-contained HTML pages from jinja2 templates (``analysis/templates/``): run and study reports.

``page.html.j2`` is the shell every page shares (style, header, footer); ``sections.html.j2`` lays
out intro paragraphs, key facts and sections of tables and figures. Callers build the content —
a report decides what to say, the templates only how it looks. Figures are embedded as data URIs,
so the page is one file that opens anywhere.
"""
from __future__ import annotations

import base64
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from .. import __version__
from ..atomic import replacing

# Column names as people read them, with units; anything else: underscores become spaces.
COLUMN_NAMES = {
    "class": "speed class", "speed_class": "speed class", "devices": "devices",
    "ps_payload_in_mb": "PS payload in (MB)", "kernel_uplink_mb": "kernel uplink bytes (MB)",
    "overhead_pct": "overhead (%)", "configured_speed_ratio": "configured speed ratio",
    "realized_rate_ratio": "realized rate ratio", "updates_per_device_per_s": "updates / device / s",
    "think_time_s": "think time (s)", "configured_mbit": "configured (Mbit/s)",
    "peak_mbit_mean": "peak (Mbit/s, mean)", "peak_mbit_min": "peak min", "peak_mbit_max": "peak max",
    "window_filled": "a push fills a window", "in_bytes": "in (bytes)", "out_bytes": "out (bytes)",
    "in_msgs": "messages in", "out_msgs": "messages out", "message_type": "message type",
    "share_pct": "share of updates (%)", "expected_share_pct": "expected share (%)",
    "rate_per_device": "rate (updates/s per device)", "expected_rate_per_device": "expected rate (updates/s per device)",
    "rate_ratio": "rate ratio to slowest (×)", "expected_rate_ratio": "expected rate ratio (×)",
    "staleness_mean": "staleness τ, mean (updates)", "expected_staleness_mean": "expected τ, mean (updates)",
    "staleness_p50": "τ median (updates)", "crashed": "crashed devices",
}


def column_name(col: str) -> str:
    return COLUMN_NAMES.get(col, str(col).replace("_", " "))


def cell(v) -> str:
    """One table cell for people: — for missing, yes/no, thousands separators, 3 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT:
        return "—"
    if isinstance(v, (bool,)) or type(v).__name__ == "bool_":
        return "yes" if v else "no"
    if isinstance(v, (int,)) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") in "iu"):
        return f"{int(v):,}"
    if isinstance(v, float) or (hasattr(v, "dtype") and getattr(v.dtype, "kind", "") == "f"):
        v = float(v)
        if v == int(v) and abs(v) < 1e15:
            return f"{int(v):,}"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)


def human(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as display strings under human column names (for markdown and HTML tables)."""
    out = frame.copy().astype(object)
    for c in out.columns:
        out[c] = [cell(v) for v in frame[c]]
    return out.rename(columns={c: column_name(c) for c in frame.columns})


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    caption: str = ""


def table(frame: pd.DataFrame, caption: str = "") -> Table:
    """A frame for the template: cells via ``cell`` (strings pass through); numeric columns right-aligned."""
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) or _looks_numeric(frame[c]) for c in frame.columns]
    shown = human(frame)
    return Table(list(shown.columns), shown.values.tolist(), numeric, caption)


def _looks_numeric(col: pd.Series) -> bool:
    """A column of display strings that are numbers (``12.34``, ``1,234``, ``191.3×``, ``—``)."""
    vals = [str(v) for v in col if str(v) not in ("—", "", "no evals", "not reached")]
    return bool(vals) and all(v.replace(",", "").replace("×", "").replace("%", "").strip()
                              .lstrip("-").replace(".", "", 1).isdigit() for v in vals)


@dataclass
class Figure:
    src: str          # data: URI
    alt: str
    caption: str = ""
    width: Optional[int] = None


_MIME = {".svg": "image/svg+xml", ".png": "image/png"}


def figure(path: Path, alt: str, caption: str = "") -> Figure:
    """An image file embedded as a data URI (SVG preferred: sharp at any zoom)."""
    path = Path(path)
    data = base64.b64encode(path.read_bytes()).decode()
    return Figure(f"data:{_MIME[path.suffix]};base64,{data}", alt, caption)


@dataclass
class Section:
    heading: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def render(title: str, sections: list[Section], intro: list[str] = (), facts: list[tuple[str, str]] = (),
           notes: list[str] = (), subtitle: str = "", template: str = "sections.html.j2") -> str:
    import jinja2
    env = jinja2.Environment(loader=jinja2.PackageLoader("edgebed.analysis", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template(template).render(
        title=title, subtitle=subtitle, intro=list(intro), facts=list(facts), sections=sections,
        notes=list(notes), version=__version__, generated=time.strftime("%Y-%m-%d %H:%M %Z"))


def write(path: Path, text: str) -> Path:
    path = Path(path)
    with replacing(path) as tmp:
        tmp.write_text(text)
    return path
