"""Runs recorded before each algorithm had its own keys (their scenario.yaml holds the one flat
``algorithm`` section: every algorithm's keys) still count as the same scenario for a study's resume,
and still load in analysis: the committed compact results are such runs."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from edgebed.analysis import metrics
from edgebed.analysis.compact import load_compact
from edgebed.api import _classes
from edgebed.algorithms import FLAT_KEYS
from edgebed.scenario import parse_scenario
from edgebed.study.runner import load_study
from edgebed.study.storage import compact_done, same_scenario
from edgebed.study.tuning import complete_runs, tuning_study

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[3]
STUDIES = ROOT / "scenarios" / "studies"
RESULTS = ROOT / "benchmarks" / "results" / "studies"


def recorded(path: Path) -> dict:
    return yaml.safe_load((path / "scenario.yaml").read_text())


@pytest.mark.parametrize("study, cell, seed, flat", [
    ("compression", "adacomp-c-0.01", 1, True),
    ("crashes-paper", "n-200-no-crash", 1, True),
    ("crashes-paper", "n-100-no-crash-half-set", 1, True),
    ("crashes-paper", "n-200-crash-p-0.0004", 1, False),   # re-run in today's form beside the old ones
    ("crashes-paper", "n-200-no-crash", 2, False),
])
def test_committed_results_are_the_same_scenario_as_todays_study(study, cell, seed, flat):
    st = load_study(STUDIES / f"{study}.yaml")
    [c] = [c for c in st.cells if c.id == cell]
    run = RESULTS / study / "runs" / cell / f"seed-{seed}"
    keys = recorded(run)["algorithm"].keys()
    assert (set(FLAT_KEYS) <= keys) is flat                       # the form it was committed in
    sc = st.scenario(c, seed)
    assert compact_done(RESULTS / study, c, seed, sc) == run      # `study run --results` skips it
    # ... and a change of the algorithm's parameters is still a change
    assert not same_scenario(recorded(run), sc.model_copy(update={"algorithm": sc.algorithm.model_copy(
        update={"c": 0.1})}))
    assert not same_scenario(recorded(run), parse_scenario(st.base, "base", (
        *c.overrides, f"seed={seed}", f"name={sc.name}", "algorithm.name=comp-asgd")))


def test_committed_tuning_runs_of_every_algorithm_are_found():
    """The tuning grid's 30 committed runs (asgd's recorded with AdaComp's c) are all taken."""
    st = load_study(STUDIES / "compression-tuned.yaml")
    ts = tuning_study(st)
    found = complete_runs(st, Path("/nonexistent"), RESULTS / "compression-tuned-tuning")
    assert len(found) == len(ts.cells) * len(ts.spec.seed_list) == 30
    asgd = RESULTS / "compression-tuned-tuning" / "runs" / "asgd-lr-0.1" / "seed-1"
    assert recorded(asgd)["algorithm"]["c"] == 0.01 and found[("asgd-lr-0.1", 1)] == asgd


def test_beyond_adacomp_shares_the_tuned_compression_studys_runs():
    """beyond-adacomp's ASGD and AdaComp c = 0.01 are compression-tuned's very experiments: each of
    its 3 + 3 runs is compression-tuned's (same resolved scenario but the name), and so are the 12
    tuning runs. An edit to either study file that breaks this fails here, not in a rerun."""
    beyond, tuned = load_study(STUDIES / "beyond-adacomp.yaml"), load_study(STUDIES / "compression-tuned.yaml")
    for cid in ("asgd", "adacomp-c-0.01"):
        [b] = [c for c in beyond.cells if c.id == cid]
        [t] = [c for c in tuned.cells if c.id == cid]
        for seed in (1, 2, 3):
            ours = beyond.scenario(b, seed)
            assert compact_done(RESULTS / "compression-tuned", t, seed, ours) is not None
            assert compact_done(RESULTS / "beyond-adacomp", b, seed, ours) is not None
    found = complete_runs(beyond, Path("/nonexistent"), RESULTS / "beyond-adacomp-tuning")
    assert len(found) == len(tuning_study(beyond).cells) == 48
    assert {k[0] for k in found if k[0].startswith(("asgd-", "adacomp-c-0.01-lr"))} == \
        {f"{c}-lr-{lr:g}" for c in ("asgd", "adacomp-c-0.01") for lr in beyond.spec.tuning.lr}


def test_old_runs_load_in_analysis():
    adacomp = load_compact(RESULTS / "compression" / "runs" / "adacomp-c-0.01" / "seed-1")
    assert adacomp.algorithm_params == {"name": "adacomp", "lr": 0.01, "batch_size": 10, "c": 0.01}
    assert adacomp.label.endswith("· adacomp c=0.01")
    asgd = load_compact(RESULTS / "compression-tuned-tuning" / "runs" / "asgd-lr-0.1" / "seed-1")
    assert asgd.algorithm_params == {"name": "asgd", "lr": 0.1, "batch_size": 10}
    assert asgd.label.endswith("· asgd")                 # no c: ASGD sends every entry
    s = metrics.summarize("a", asgd.scenario, asgd.summary, asgd.updates, asgd.evals, 0.9)
    assert s.algorithm == "asgd" and math.isnan(s.c)
    s = metrics.summarize("b", adacomp.scenario, adacomp.summary, adacomp.updates, adacomp.evals, 0.9)
    assert s.c == 0.01
    assert len(_classes(adacomp.scenario)) == 200   # validates: the per-device table keeps its classes
