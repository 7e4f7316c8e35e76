"""Report of runs: synthetic run dirs with known curves give the hand-computed numbers, files and errors."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from edgebed import rundir
from edgebed.analysis import ReportError, write_report
from edgebed.analysis import metrics, plots, tables
from edgebed.analysis.runs import load_run

PNG = b"\x89PNG\r\n\x1a\n"
NAN = math.nan


def make_run(root, name, algorithm="asgd", c=0.01, n=4, evals=(), bytes_per_update=1000,
             status="complete", classes=None, virtual=False, scenario_name=None):
    """A run dir whose evals are ``(update, accuracy)`` pairs and whose PS ingress is linear in updates.

    Every applied update is one push of ``bytes_per_update`` bytes, so cumulative ingress at
    update u is ``u * bytes_per_update``. ``classes`` maps speed class → (devices, updates each).
    """
    path = root / name
    w = rundir.RunWriter(path)
    last = max((u for u, _ in evals), default=0)
    if classes:  # each device of a class pushes `each` times
        pushers = [cls for cls, (devices, each) in classes.items() for _ in range(devices * each)]
        devices = [d for d, (devs, each) in enumerate(_blocks(classes)) for _ in range(each)]
    else:        # one class, devices take turns, `last` updates in all
        pushers, devices = ["default"] * last, [i % n for i in range(last)]
    for i, (cls, dev) in enumerate(zip(pushers, devices), start=1):
        w.append("updates", {"update": i, "wall_time": 0.01 * i, "virtual_time": NAN, "device": dev,
                             "speed_class": cls, "staleness": 0, "sigma_mean": NAN, "sigma_max": NAN,
                             "entries": 1, "bytes_in": bytes_per_update, "loss": 1.0})
    for u, acc in evals:
        w.append("evals", {"update": u, "wall_time": 0.01 * u, "virtual_time": 0.5 * u if virtual else NAN,
                           "ingress_bytes": u * bytes_per_update, "push_bytes": u * bytes_per_update,
                           "accuracy": acc, "loss": 1 - acc})
    w.flush()
    scenario = {"name": scenario_name or name, "seed": 0, "algorithm": {"name": algorithm, "lr": 0.1,
                "batch_size": 10, "c": c}, "workers": {"n": n}, "stop": {"updates": last or 1}}
    (path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    (path / "summary.json").write_text(json.dumps({"status": status}))
    return path


def _blocks(classes):
    """(class, updates each) per device, devices numbered class by class."""
    return [(cls, each) for cls, (devices, each) in classes.items() for _ in range(devices)]


ASGD = [(100, 0.5), (200, 0.8), (300, 0.95), (400, 0.975), (500, 0.98)]
ADACOMP = [(100, 0.6), (200, 0.9), (300, 0.971), (400, 0.99)]
COMP = [(100, 0.5), (200, 0.9), (300, 0.96), (400, 0.95)]


@pytest.fixture
def trio(tmp_path):
    runs = tmp_path / "runs"
    return [make_run(runs, "trio-asgd", "asgd", evals=ASGD, bytes_per_update=1000),
            make_run(runs, "trio-comp", "comp-asgd", c=0.1, evals=COMP, bytes_per_update=100),
            make_run(runs, "trio-adacomp", "adacomp", c=0.01, evals=ADACOMP, bytes_per_update=10)]


# --- metrics -----------------------------------------------------------------------------------

def evals_of(pairs, bytes_per_update=1000):
    return pd.DataFrame({"update": [u for u, _ in pairs], "wall_time": [0.01 * u for u, _ in pairs],
                         "ingress_bytes": [u * bytes_per_update for u, _ in pairs],
                         "accuracy": [a for _, a in pairs]})


def test_to_target_is_the_first_eval_at_or_above_target_in_update_order():
    shuffled = evals_of([ASGD[4], ASGD[1], ASGD[3], ASGD[0], ASGD[2]])
    assert metrics.to_target(shuffled, 0.97) == (400, 400_000, 4.0)
    assert metrics.to_target(evals_of([(10, 0.5), (20, 0.97)]), 0.97).update == 20  # reaching = ≥
    assert metrics.to_target(evals_of(COMP), 0.97) is None


def test_final_is_last_update_and_best_is_max():
    ev = evals_of([(300, 0.96), (100, 0.5), (400, 0.95)])
    assert metrics.final_accuracy(ev) == 0.95
    assert metrics.best_accuracy(ev) == 0.96
    empty = evals_of([])
    assert math.isnan(metrics.final_accuracy(empty)) and math.isnan(metrics.best_accuracy(empty))


def test_summary_row_of_a_run(tmp_path):
    run = load_run(make_run(tmp_path, "a", "adacomp", c=0.01, n=4, evals=ADACOMP, bytes_per_update=10))
    s = metrics.summarize(run.name, run.scenario, run.summary, run.updates, run.evals, 0.97)
    assert (s.algorithm, s.c, s.n, s.status) == ("adacomp", 0.01, 4, "complete")
    assert (s.final_accuracy, s.best_accuracy) == (0.99, 0.99)
    assert s.updates == 400 and s.ingress_bytes == 4000
    assert (s.updates_to_target, s.ingress_to_target) == (300, 3000)


def test_summary_prefers_the_runs_own_totals_when_it_wrote_them():
    ev = evals_of(ASGD)
    no_updates = rundir.SCHEMAS["updates"].empty_table().to_pandas()
    s = metrics.summarize("r", {}, {"updates": 520, "ingress_bytes": 777_777}, no_updates, ev, 0.97)
    assert (s.updates, s.ingress_bytes, s.algorithm, s.status) == (520, 777_777, "unknown", "unknown")


def test_ingress_ratio_is_baseline_over_run():
    assert metrics.ingress_ratio(400_000, 3000) == pytest.approx(133.333, rel=1e-4)
    assert math.isnan(metrics.ingress_ratio(400_000, None))
    assert math.isnan(metrics.ingress_ratio(None, 3000))


def test_class_shares_give_shares_and_realized_rate_ratios(tmp_path):
    classes = {"slow": (3, 2), "fast": (3, 200), "medium": (4, 20)}
    run = load_run(make_run(tmp_path, "h", n=10, classes=classes, evals=[(10, 0.1)]))
    shares = metrics.class_shares(run.updates)
    assert list(shares["speed_class"]) == ["fast", "medium", "slow"]
    assert list(shares["updates"]) == [600, 80, 6]
    assert shares["share"].tolist() == pytest.approx([600 / 686, 80 / 686, 6 / 686])
    assert list(shares["devices"]) == [3, 4, 3]
    assert shares["rate_ratio"].tolist() == pytest.approx([100, 10, 1])
    assert metrics.class_shares(run.updates.iloc[:0]).empty


def test_band_is_mean_min_max_over_the_range_every_seed_covers():
    a = pd.DataFrame({"x": [0.0, 10.0], "y": [0.0, 10.0]})          # y = x
    b = pd.DataFrame({"x": [0.0, 4.0, 8.0], "y": [2.0, 6.0, 10.0]})   # y = x + 2, stops at 8
    bd = metrics.band([a, b], "x", "y", points=5)
    assert bd["x"].tolist() == [0, 2, 4, 6, 8]
    assert bd["mean"].tolist() == pytest.approx([1, 3, 5, 7, 9])
    assert bd["min"].tolist() == pytest.approx([0, 2, 4, 6, 8])
    assert bd["max"].tolist() == pytest.approx([2, 4, 6, 8, 10])
    assert (bd["runs"] == 2).all()
    c = pd.DataFrame({"x": [0.0, 2.0, 16.0], "y": [0.0, 2.0, 16.0]})
    log = metrics.band([c, b], "x", "y", points=3, log=True)  # x = 0 can't be on a log grid
    assert log["x"].tolist() == pytest.approx([4, math.sqrt(32), 8])
    assert metrics.band([a.assign(x=a.x + 20), b], "x", "y").empty  # disjoint seeds: no band


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.floats(0, 1), min_size=2, max_size=6), min_size=1, max_size=4))
def test_band_mean_lies_within_min_max(ys):
    frames = [pd.DataFrame({"x": range(len(y)), "y": y}) for y in ys]
    bd = metrics.band(frames, "x", "y", points=7)
    assert ((bd["min"] <= bd["mean"] + 1e-12) & (bd["mean"] <= bd["max"] + 1e-12)).all()


# --- tables ------------------------------------------------------------------------------------

def test_human_units():
    assert tables.mb(400_000) == "0.40" and tables.mb(1_234_567_890) == "1,234.57"
    assert tables.mb(3000) == "0.003" and tables.mb(0) == "0.00"  # small AdaComp runs don't read 0.00
    assert tables.pct(0.9785) == "97.85"
    assert tables.times(191.27) == "191.3×" and tables.times(0.0471) == "0.047×"
    assert tables.times(NAN) == "—"


def test_markdown_table_shape():
    md = tables.to_markdown(pd.DataFrame({"run": ["a|b"], "updates": ["10"]}))
    assert md.splitlines() == ["| run | updates |", "|:---|---:|", "| a\\|b | 10 |"]


# --- plots -------------------------------------------------------------------------------------

def is_png(path):
    return path is not None and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG


def test_plots_write_pngs_and_skip_what_has_no_data(tmp_path):
    curves = {"asgd": evals_of(ASGD).assign(virtual_time=NAN), "none": evals_of([]).assign(virtual_time=NAN)}
    assert is_png(plots.accuracy_vs_updates(curves, tmp_path / "u.png", target=0.97))
    assert is_png(plots.accuracy_vs_ingress(curves, tmp_path / "i.png"))
    assert plots.accuracy_vs_virtual_time(curves, tmp_path / "v.png") is None
    assert not (tmp_path / "v.png").exists()
    curves["asgd"]["virtual_time"] = curves["asgd"]["update"] * 0.5
    assert is_png(plots.accuracy_vs_virtual_time(curves, tmp_path / "v.png"))


def test_plot_band_over_seeds(tmp_path):
    seeds = [evals_of([(u, a + d) for u, a in ADACOMP], 10) for d in (-0.01, 0.0, 0.005)]
    out = plots.plot_band({"adacomp c=0.01": seeds, "asgd": [evals_of(ASGD)]}, "ingress_bytes",
                          "accuracy", tmp_path / "band.png", target=0.97)
    assert is_png(out)
    assert plots.plot_band({"empty": [evals_of([])]}, "update", "accuracy", tmp_path / "e.png") is None


# --- report ------------------------------------------------------------------------------------

def test_report_of_a_trio_compares_ingress_to_target_against_asgd(trio, tmp_path):
    res = write_report(trio, target=0.97)
    assert res.out_dir.parent == tmp_path / "reports" and res.out_dir.name.startswith("compare-")
    assert res.baseline == "trio-asgd"
    assert {"accuracy_vs_updates", "accuracy_vs_ingress", "accuracy_vs_wall_time"} <= set(res.plots)
    assert "accuracy_vs_virtual_time" not in res.plots   # no virtual time here
    assert all(is_png(p) for p in res.plots.values())
    assert all(p.with_suffix(".svg").exists() for p in res.plots.values())   # the page embeds these
    assert all(p.exists() for p in res.files)

    csv = pd.read_csv(res.table_csv).set_index("run")
    assert csv.loc["trio-asgd", "updates_to_97"] == 400
    assert csv.loc["trio-asgd", "ingress_to_97"] == 400_000
    assert csv.loc["trio-adacomp", "updates_to_97"] == 300
    assert csv.loc["trio-adacomp", "ingress_to_97"] == 3000
    assert csv.loc["trio-adacomp", "ingress_ratio_97"] == pytest.approx(133.333, rel=1e-4)   # 400,000 / 3,000
    assert csv.loc["trio-asgd", "ingress_ratio_97"] == 1.0
    assert pd.isna(csv.loc["trio-comp", "updates_to_97"])
    assert csv.loc["trio-comp", "best_accuracy"] == 0.96 and csv.loc["trio-comp", "final_accuracy"] == 0.95

    md = res.table_markdown
    rows = {line.split("|")[1].strip(): line for line in md.splitlines()[2:]}
    assert set(rows) == {"trio-asgd", "trio-comp", "trio-adacomp"}
    assert "| 400 | 0.004 | 300 |" in rows["trio-adacomp"] and "| 500 | 0.50 | 400 |" in rows["trio-asgd"]
    assert "not reached" in rows["trio-comp"]
    text = res.markdown.read_text()
    assert md in text and "accuracy_vs_ingress.png" in text
    to97 = text.split("## To 97 %")[1]
    assert "| 1.0 | baseline |" in to97 and "| 0.01 | 133.3× = 100.0× per update × 1.33 updates |" in to97
    by_label = pd.read_csv(res.target_csvs[0.97]).set_index("label")
    assert by_label["reached"].tolist() == [1, 0, 1] and by_label["updates_mean"].iloc[2] == 300


def test_baseline_can_be_chosen_by_name_or_path(trio, tmp_path):
    res = write_report(trio, out=tmp_path / "r1", baseline="trio-adacomp")
    csv = pd.read_csv(res.table_csv).set_index("run")   # default target: 96 %, which every run reached
    assert csv.loc["trio-asgd", "ingress_ratio_96"] == pytest.approx(0.0075)  # 3000/400000
    assert "0.0075×" in res.markdown.read_text()
    assert res.baseline == "trio-adacomp"
    assert write_report(trio, out=tmp_path / "r2", baseline=str(trio[1])).baseline == "trio-comp"
    with pytest.raises(ReportError, match="'nope' is not one of the runs"):
        write_report(trio, out=tmp_path / "r3", baseline="nope")


def test_without_asgd_the_first_run_is_the_baseline(trio, tmp_path):
    assert write_report(trio[1:], out=tmp_path / "r").baseline == "trio-comp"


def test_single_run_report_goes_into_the_run_and_has_no_ratio(tmp_path):
    run = make_run(tmp_path, "solo", "adacomp", evals=ADACOMP, bytes_per_update=10, virtual=True)
    res = write_report([run])
    assert res.out_dir == run / "report" and res.baseline is None
    assert is_png(res.plots["accuracy_vs_virtual_time"])
    assert "ingress ratio" not in res.table_markdown and "solo" in res.table_markdown


def test_incomplete_run_and_run_without_evals_are_reported_not_fatal(trio, tmp_path):
    killed = make_run(tmp_path / "runs", "killed", "adacomp", evals=ADACOMP[:2], status="incomplete")
    empty = make_run(tmp_path / "runs", "empty", "adacomp", evals=[], status="failed")
    res = write_report([trio[0], killed, empty], out=tmp_path / "r", target=0.97)
    rows = {line.split("|")[1].strip(): line for line in res.table_markdown.splitlines()[2:]}
    assert "| incomplete |" in rows["killed"] and "not reached" in rows["killed"]
    assert "| failed |" in rows["empty"] and rows["empty"].count("no evals") == 3
    assert any("empty: no evaluations" in n for n in res.notes)
    assert any("killed: status is 'incomplete'" in n for n in res.notes)
    assert is_png(res.plots["accuracy_vs_updates"])


def test_report_of_runs_without_any_evals_writes_the_table_but_no_plots(tmp_path):
    res = write_report([make_run(tmp_path, "e", evals=[], status="incomplete")])
    assert res.plots == {} and "no evals" in res.table_markdown
    assert any("no accuracy plots" in n for n in res.notes)


def test_report_shows_speed_class_shares_when_a_run_has_several(tmp_path):
    run = make_run(tmp_path, "het", n=6, classes={"fast": (2, 100), "slow": (4, 5)}, evals=[(10, 0.3)])
    res = write_report([run])
    shares = pd.read_csv(res.classes_csv)
    assert shares["updates"].tolist() == [200, 20] and shares["rate_ratio"].tolist() == [20.0, 1.0]
    assert "## Applied updates per speed class" in res.markdown.read_text()


def test_bad_paths_raise_report_error_naming_the_path(trio, tmp_path):
    missing = tmp_path / "runs" / "no-such-run"
    with pytest.raises(ReportError, match=f"{missing}: no such directory"):
        write_report([trio[0], missing])
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ReportError, match=f"{plain}: not a run directory .missing scenario.yaml and summary"):
        write_report([plain])
    with pytest.raises(ReportError, match=r"contains 3 runs .* pass those instead"):
        write_report([tmp_path / "runs"])
    (trio[0] / "summary.json").write_text("{not json")
    with pytest.raises(ReportError, match=f"{trio[0]}: .*unreadable"):
        write_report([trio[0]])
    with pytest.raises(ReportError, match="no run directories"):
        write_report([])
    with pytest.raises(ReportError, match="target accuracy"):
        write_report([trio[1]], target=97)


def test_report_puts_kernel_bytes_next_to_ps_payload(tmp_path):
    """Docker runs carry kernel counters: the report shows on-the-wire vs payload bytes per class."""
    from edgebed.analysis.report import write_report
    from edgebed.analysis.sections import wire_vs_payload
    from edgebed.analysis.runs import load_run
    path = make_run(tmp_path, "dock", evals=[(10, 0.5)])
    (path / "traffic.json").write_text(json.dumps({"by_class": {"fast": {"in_bytes": 1_000_000}}}))
    (path / "kernel_traffic.json").write_text(json.dumps({
        "classes": {"fast": {"uplink_bytes": 1_500_000, "downlink_bytes": 9, "devices": 2}},
        "ps": {"ingress_bytes": 1_600_000}}))
    wire = wire_vs_payload(load_run(path))
    fast = wire[wire["class"] == "fast"].iloc[0]
    assert fast["overhead_pct"] == pytest.approx(50.0) and fast["kernel_uplink_mb"] == pytest.approx(1.5)
    assert wire[wire["class"] == "PS interface"].iloc[0]["overhead_pct"] == pytest.approx(60.0)
    text = write_report([path], tmp_path / "rep").markdown.read_text()
    assert "on-the-wire" in text and "1.5" in text
    assert wire_vs_payload(load_run(make_run(tmp_path, "plain", evals=[(10, 0.5)]))) is None


def test_report_shows_the_runs_realized_fidelity(tmp_path):
    """summary.json's fidelity section (engine, emulator/fidelity.py) becomes tables in the report."""
    from edgebed.emulator.fidelity import run_fidelity
    path = make_run(tmp_path, "fid", n=6, classes={"fast": (2, 100), "slow": (4, 5)}, evals=[(10, 0.3)])
    ups = pd.read_parquet(path / "updates")
    ups["wall_time"] = np.linspace(0.1, 10.0, len(ups))
    classes = [{"name": "fast", "slowdown": 1.0, "think_time": {"mean": 0.0}, "uplink": {"rate": 1e6}},
               {"name": "slow", "slowdown": 10.0, "think_time": {"mean": 0.0}, "uplink": {"rate": None}}]
    fid = run_fidelity(ups, classes, dict(zip(ups["device"], ups["speed_class"])),
                       {"uplink_peak_bps": {0: 0.96e6, 1: 0.98e6}, "host_cpu": {
                           "busy_mean": 0.42, "saturated_share": 0.1, "samples": 50}})
    (path / "summary.json").write_text(json.dumps({"status": "complete", "fidelity": fid}))
    text = write_report([path], tmp_path / "rep").markdown.read_text()
    section = text.split("## Realized fidelity: `fid`")[1]
    assert "| fast | 10 | 20 |" in section.replace(".0 ", " ")        # configured 10, realized 20
    assert "0.97" in section and "42 % busy" in section and "10 % of 50 samples" in section
    # a one-class run without runtime measurements has nothing to compare: no section
    plain = make_run(tmp_path, "plain", evals=[(10, 0.5)])
    assert "Realized fidelity" not in write_report([plain], tmp_path / "rep2").markdown.read_text()
