"""Tuning α as a study feature: the study's cells × a log grid of α, short runs scored on validation.

``edgebed study tune <study.yaml>`` runs the study named ``<name>-tuning``: every cell of the study
at every α of ``tuning.lr``, stopped after ``tuning.updates``, evaluated every ``tuning.eval_every``
updates on the last ``tuning.validation_samples`` training samples (``dataset.validation_samples``:
the test set is never read), at ``tuning.seeds``. The rule (``tuning.rule``, fixed in the study
file) scores each (cell, α) from the validation curve's moving average over ``tuning.window``
evaluations, mean over the seeds, and picks the highest (ties: the smaller α); a cell is chosen only
when its whole grid has run. Written next to the study file:

- ``<study>.tuning.csv``: the whole table (cell, α, seed, score, smoothed final and best, raw final, updates, why it ended);
- ``<study>.tuned.yaml``: the rule and the chosen α per cell label, which ``study run`` applies.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Optional

import pandas as pd
import yaml

from ..atomic import replacing
from .spec import Cell, Study, StudyError
from .storage import complete_run, tuned_path


def tuning_study(study: Study) -> Study:
    """The derived study of the tuning runs (its cells: each cell × each α of the grid)."""
    t = study.spec.tuning
    if t is None:
        raise StudyError(f"{study.path}: has no `tuning:` section; add one (lr, updates, eval_every, "
                         "validation_samples, seeds, rule, window) to tune α — see scenarios/studies/README.md")
    cells = []
    for c in study.cells:
        for lr in t.lr:
            extra = (f"stop.updates={t.updates}", f"eval.every={t.eval_every}",
                     f"dataset.validation_samples={t.validation_samples}", f"algorithm.lr={lr!r}")
            cells.append(Cell(f"{c.id}-lr-{lr:g}", f"{c.label} · lr={lr:g}", (*c.overrides, *extra),
                              c.label, f"lr={lr:g}"))
    spec = study.spec.model_copy(update={"name": f"{study.spec.name}-tuning", "seeds": list(t.seeds),
                                         "baseline": None, "tuning": None, "targets": []})
    only = None if study.only is None else frozenset(
        x.id for x in cells if x.group in {c.label for c in study.selected})
    return dataclasses.replace(study, spec=spec, cells=cells, tuned=None, only=only, seeds_only=None)


def score_table(study: Study, runs: dict[tuple[str, int], Path]) -> pd.DataFrame:
    """One row per tuning cell × seed that has a complete run (``runs``: (cell id, seed) → run dir
    or compact result): α, the cell it tunes, the score by the study's rule."""
    from ..analysis.compact import load_any
    from ..analysis.metrics import smoothed_best, smoothed_final
    t = study.spec.tuning
    ts = tuning_study(study)
    rows = []
    for cell in ts.cells:
        lr = float(cell.sweep.removeprefix("lr="))
        for seed in ts.spec.seed_list:
            path = runs.get((cell.id, seed))
            if path is None:
                continue
            run = load_any(path)
            ev = run.evals
            final, best = smoothed_final(ev, t.window), smoothed_best(ev, t.window)
            score = final if t.rule == "final-smoothed" else best
            rows.append({"cell": cell.group, "lr": lr, "seed": seed,
                         "score": score, "smoothed_final": final, "smoothed_best": best,
                         "raw_final": float(ev.sort_values("update")["accuracy"].iloc[-1]) if len(ev) else math.nan,
                         "evals": len(ev), "updates": run.summary.get("updates"),
                         # a diverged α: Θ turned NaN, the PS refused the pushes, the run ended early
                         "ended": run.summary.get("reason"), "run": str(path)})
    return pd.DataFrame(rows)


def choose(study: Study, table: pd.DataFrame) -> tuple[dict, list[str]]:
    """(cell label → chosen α, the labels whose grid is not complete yet)."""
    t = study.spec.tuning
    chosen, missing = {}, []
    for c in study.cells:
        rows = table[table["cell"] == c.label] if not table.empty else table
        have = {(r.lr, r.seed) for r in rows.itertuples()} if not rows.empty else set()
        if any((float(lr), s) not in have for lr in t.lr for s in t.seeds):
            missing.append(c.label)
            continue
        mean = rows.groupby("lr")["score"].mean().fillna(-1.0)   # a diverged run (NaN) loses
        best = mean.max()
        chosen[c.label] = float(min(lr for lr, v in mean.items() if v == best))
    return chosen, missing


def write_tuning(study: Study, table: pd.DataFrame, chosen: dict, missing: list[str]) -> tuple[Path, Path]:
    """``<study>.tuning.csv`` and ``<study>.tuned.yaml`` next to the study file."""
    t = study.spec.tuning
    csv = study.path.with_name(f"{study.path.stem}.tuning.csv")
    with replacing(csv) as tmp:
        table.drop(columns=["run"], errors="ignore").to_csv(tmp, index=False)
    out = tuned_path(study.path)
    head = (f"# Written by `edgebed study tune {study.path.name}` on {time.strftime('%Y-%m-%d %H:%M %Z')}.\n"
            f"# Each cell × α ran {t.updates:,} updates at seeds {t.seeds}, scored on the last "
            f"{t.validation_samples} training samples (validation, never the test set);\n"
            f"# rule {t.rule}: moving average over {t.window} evaluations, mean over seeds, highest "
            f"wins (ties: the smaller α). Whole table: {csv.name}.\n")
    body = {"rule": t.rule, "window": t.window, "horizon": t.updates, "seeds": list(t.seeds),
            "grid": list(t.lr), "chosen": chosen, "not_complete": missing}
    with replacing(out) as tmp:
        tmp.write_text(head + yaml.safe_dump(body, sort_keys=False))
    return csv, out


def complete_runs(study: Study, out: Path, results: Optional[Path]) -> dict[tuple[str, int], Path]:
    """Complete tuning runs of the same resolved scenario, in the study dir or the results dir."""
    ts = tuning_study(study)
    found = {}
    for cell in ts.cells:
        for seed in ts.spec.seed_list:
            p = complete_run(Path(out) / ts.spec.name, results, cell, seed, ts.scenario(cell, seed))
            if p is not None:
                found[(cell.id, seed)] = p
    return found
