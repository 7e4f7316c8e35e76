"""Targets measured like the paper: per run, accuracy-to-target on the smoothed curve at several
targets; per cell, min/mean/max over seeds and the ingress ratio split into its two factors.

A run's record (``run_record``) holds, for each target t, the first update at which the moving
average of test accuracy (``metrics.moving_average``) reached t, our PS ingress there (wire bytes:
float32 values + uint32 indices, every message type) and the paper-equivalent push bytes there
(``paper_bytes``: pickle protocol 2 of Python lists). The ratio against the baseline cell is

    ingress ratio = (baseline bytes per update / cell bytes per update) × (baseline updates / cell updates)

where bytes per update = ingress to target / updates to target; both factors are reported, in our
wire bytes and in the paper's encoding.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from . import tables
from .metrics import (applied_updates, best_accuracy, final_accuracy, smoothed_best, smoothed_final,
                      smoothed_to_target, total_ingress)
from .runs import Run

# Default targets: the highest of these that every evaluated run's (smoothed) curve reached.
LADDER = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99)


def _key(t: float) -> str:
    return f"{100 * t:g}"


def run_record(run: Run, targets: list[float], window: int, paper: bool = True) -> dict:
    """Smoothed best/final accuracy, staleness, crashes, bytes per update and, per target, the hit.
    ``paper=False`` leaves the paper-encoding bytes out (NaN) for full runs: they need torch's model
    shapes, a 2–10 s import a run report does without."""
    comp = run.summary.get("compact")
    if comp is None:
        from .compact import compact_of
        comp = compact_of(run, paper=paper)[0]["compact"]
    tau, sigma = comp.get("staleness_tau") or {}, comp.get("adacomp_sigma_mean") or {}
    crashes = comp.get("crashes") or {}
    rec = {"smoothed_best": smoothed_best(run.evals, window),
           "smoothed_final": smoothed_final(run.evals, window),
           "tau_mean": tau.get("mean"), "tau_p50": tau.get("p50"), "tau_p90": tau.get("p90"),
           "sigma_mean": sigma.get("mean"), "sigma_p50": sigma.get("p50"), "sigma_p90": sigma.get("p90"),
           "crash_median_update": crashes.get("median_update"),
           "crash_updates": " ".join(str(u) for u in crashes.get("updates") or []),
           "push_bytes_per_update": comp.get("push_bytes_per_update"),
           "paper_bytes_per_update": comp.get("paper_bytes_per_update")}
    per = comp.get("paper_bytes_per_update") or math.nan
    for t in targets:
        hit = smoothed_to_target(run.evals, t, window)
        k = _key(t)
        rec[f"updates_to_{k}"] = hit.update if hit else None
        rec[f"ingress_to_{k}"] = hit.ingress_bytes if hit else None
        rec[f"paper_bytes_to_{k}"] = hit.update * per if hit else None
        rec[f"wall_time_to_{k}"] = hit.wall_time if hit else None
    return rec


def default_targets(runs: list[Run], window: int = 1) -> list[float]:
    """The target a report uses when none is given: the highest ``LADDER`` accuracy that every run
    with evaluations reached on its (``window``-smoothed) curve, so every run has an "updates to
    target" and an ingress ratio; none when some evaluated run stayed below 50 %."""
    best = [smoothed_best(r.evals, window) for r in runs if not r.evals.empty]
    best = [b for b in best if not math.isnan(b)]
    if not best:
        return []
    reached = [t for t in LADDER if t <= min(best) + 1e-12]
    return reached[-1:]


def run_row(cell: str, label: str, seed: int, run: Run, targets: list[float], window: int,
            paper: bool = True) -> dict:
    """One run as numbers, the same for a run report and a study: what it is, what it reached (raw and
    ``window``-smoothed), what it cost, and per target the hit on the smoothed curve (``run_record``)."""
    algo = run.algorithm_params
    workers = run.scenario.get("workers") or {}
    dev = run.summary.get("devices") or {}
    c = algo.get("c")
    return {"cell": cell, "label": label, "seed": seed, "run": run.name, "path": str(run.path),
            "status": str(run.summary.get("status", "unknown")), "algorithm": run.algorithm,
            "c": float(c) if isinstance(c, (int, float)) else math.nan, "n": int(workers.get("n") or 0),
            "evals": len(run.evals), "final_accuracy": final_accuracy(run.evals),
            "best_accuracy": best_accuracy(run.evals),
            "updates": applied_updates(run.updates, run.evals, run.summary),
            "ingress_bytes": total_ingress(run.updates, run.evals, run.summary),
            "egress_bytes": run.summary.get("egress_bytes"),
            "crashed": dev.get("crashed"), "alive_at_end": dev.get("alive_at_end"),
            "wall_time_s": run.summary.get("wall_time_s"),
            **run_record(run, targets, window, paper)}


def _stats(v: list) -> tuple[float, float, float, int]:
    x = [float(a) for a in v if a is not None and not (isinstance(a, float) and math.isnan(a))]
    if not x:
        return math.nan, math.nan, math.nan, 0
    return float(np.mean(x)), min(x), max(x), len(x)


def target_table(per_run: pd.DataFrame, target: float, baseline_of: dict[str, Optional[str]]) -> pd.DataFrame:
    """One row per cell at ``target``: seeds that reached it, updates / ingress / paper bytes to it
    (mean, min, max over those seeds), bytes per update, and the ratio vs the baseline cell with its
    two factors; ``ratio_min``/``ratio_max`` pair the seeds (seed s of the cell vs seed s of the
    baseline) where both reached the target."""
    k = _key(target)
    rows = []
    cells = list(dict.fromkeys(per_run["cell"])) if not per_run.empty else []
    by_cell = {c: per_run[per_run["cell"] == c] for c in cells}
    for c in cells:
        d = by_cell[c]
        upd, ing, pap = (_stats(list(d[f"{x}_to_{k}"])) for x in ("updates", "ingress", "paper_bytes"))
        row = {"cell": c, "label": d["label"].iloc[0], "target": target, "seeds": len(d), "reached": upd[3],
               "updates_mean": upd[0], "updates_min": upd[1], "updates_max": upd[2],
               "ingress_mean": ing[0], "ingress_min": ing[1], "ingress_max": ing[2],
               "paper_bytes_mean": pap[0],
               "bytes_per_update": ing[0] / upd[0] if upd[3] else math.nan,
               "paper_bytes_per_update": pap[0] / upd[0] if upd[3] else math.nan}
        b = baseline_of.get(c)
        bd = by_cell.get(b) if b else None
        if bd is not None and upd[3]:
            bu, bi, bp = (_stats(list(bd[f"{x}_to_{k}"])) for x in ("updates", "ingress", "paper_bytes"))
            row["baseline"] = bd["label"].iloc[0]
            row["updates_factor"] = bu[0] / upd[0] if bu[3] else math.nan
            row["bytes_per_update_factor"] = (bi[0] / bu[0]) / row["bytes_per_update"] if bu[3] else math.nan
            row["ingress_ratio"] = bi[0] / ing[0] if bu[3] else math.nan
            row["paper_ratio"] = bp[0] / pap[0] if bu[3] else math.nan
            pairs = d.merge(bd, on="seed", suffixes=("", "_b"))
            paired = [r[f"ingress_to_{k}_b"] / r[f"ingress_to_{k}"] for _, r in pairs.iterrows()
                      if pd.notna(r[f"ingress_to_{k}"]) and pd.notna(r[f"ingress_to_{k}_b"])]
            row["ratio_min"] = min(paired) if paired else math.nan
            row["ratio_max"] = max(paired) if paired else math.nan
            row["ratio_pairs"] = len(paired)
        rows.append(row)
    return pd.DataFrame(rows)


def run_ratios(per_run: pd.DataFrame, targets: list[float], baseline_of: dict[str, Optional[str]]) -> pd.DataFrame:
    """``per_run`` with, per target, each run's ingress ratio: its baseline cell's mean ingress to the
    target (over the seeds that reached it) / the run's own (NaN where either did not reach it)."""
    out = per_run.copy()
    for t in targets:
        k = _key(t)
        mean = {c: _stats(list(per_run.loc[per_run["cell"] == c, f"ingress_to_{k}"]))[0]
                for c in dict.fromkeys(per_run["cell"])}
        out[f"ingress_ratio_{k}"] = [
            mean.get(baseline_of.get(c) or "", math.nan) / v if v is not None and not pd.isna(v) and v > 0
            else math.nan for c, v in zip(per_run["cell"], per_run[f"ingress_to_{k}"])]
    return out


def display(tt: pd.DataFrame, first: str = "cell") -> pd.DataFrame:
    """The markdown/HTML view of a ``target_table``; ``first`` names its first column."""
    out = []
    for r in tt.to_dict("records"):
        reached = f"{r['reached']}/{r['seeds']}"
        rng = lambda lo, hi, f: "" if lo == hi else f" [{f(lo)}–{f(hi)}]"  # noqa: E731
        row = {first: r["label"], "reached": reached,
               "updates to target": tables.DASH if not r["reached"] else
               f"{r['updates_mean']:,.0f}" + rng(r["updates_min"], r["updates_max"], lambda v: f"{v:,.0f}"),
               "ingress (MB)": tables.DASH if not r["reached"] else
               tables.mb(r["ingress_mean"]) + rng(r["ingress_min"], r["ingress_max"], tables.mb),
               "kB / update (wire · paper)": tables.DASH if not r["reached"] else
               _kb(r["bytes_per_update"]) + " · " + _kb(r["paper_bytes_per_update"])}
        ratio = r.get("ingress_ratio", math.nan)
        if r.get("baseline") == r["label"]:
            row["ratio vs baseline"] = "baseline"
        elif isinstance(ratio, float) and not math.isnan(ratio):
            pair = (f" [{r['ratio_min']:.1f}–{r['ratio_max']:.1f}×, {int(r['ratio_pairs'])} seed pairs]"
                    if r.get("ratio_pairs", 0) > 1 else "")
            row["ratio vs baseline"] = (f"{_x(ratio)} = {_x(r['bytes_per_update_factor'])} "
                                        f"per update × {r['updates_factor']:.2f} updates{pair}")
            row["paper-encoding ratio"] = _x(r["paper_ratio"])
        else:
            row["ratio vs baseline"] = tables.DASH
        out.append(row)
    df = pd.DataFrame(out)
    if "paper-encoding ratio" in df:
        df["paper-encoding ratio"] = df["paper-encoding ratio"].fillna(tables.DASH)
    if "baseline" not in tt:   # nothing to compare with (one group)
        df = df.drop(columns=["ratio vs baseline"], errors="ignore")
    if tt.empty or tt["paper_bytes_per_update"].isna().all():   # a run report: wire bytes only
        df = df.drop(columns=["paper-encoding ratio"], errors="ignore")
        df = df.rename(columns={"kB / update (wire · paper)": "kB / update"})
        df["kB / update"] = [v.removesuffix(f" · {tables.DASH}") for v in df["kB / update"]]
    return df


def _x(ratio: float) -> str:
    """A ratio with one decimal (``191.0×``, ``0.6×``); below 0.1 two significant digits (``0.0075×``)."""
    if ratio is None or pd.isna(ratio):
        return tables.DASH
    return f"{ratio:,.1f}×" if ratio >= 0.095 else f"{ratio:.2g}×"


def _kb(nbytes: float) -> str:
    """Bytes as kB with one decimal; small values keep two significant digits (10 B → ``0.01``)."""
    if nbytes is None or pd.isna(nbytes):
        return tables.DASH
    v = nbytes / 1e3
    return f"{v:.2g}" if 0 < v < 0.05 else f"{v:,.1f}"
