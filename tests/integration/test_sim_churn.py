"""scenarios/churn.yaml end to end on the virtual clock: churn, a trace, timed network events and a
shared PS link are applied at their scheduled virtual time and recorded (events, manifest, fidelity)."""
from __future__ import annotations

import json

from pathlib import Path

import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario, read_yaml

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "churn.yaml"
TRACE = ROOT / "scenarios" / "traces" / "churn-trace.csv"

pytestmark = pytest.mark.timeout(300)


def _run(out: Path):
    sc = parse_scenario(read_yaml(SCENARIO), str(SCENARIO), (f"dynamics.trace.path={TRACE}",))
    result = Engine(sc, out=out).run()
    return result, read_table(result.path, "events"), read_table(result.path, "updates")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("churn"))


def _at(events, event, device=None):
    rows = events[events["event"] == event]
    if device is not None:
        rows = rows[rows["device"] == device]
    return list(rows["virtual_time"])


def test_timed_network_events_take_effect_at_their_scheduled_virtual_time(run):
    result, events, updates = run
    assert result.summary["status"] == "complete"
    assert _at(events, "net-link") == [6.0] and _at(events, "net-link-end") == [12.0]
    assert _at(events, "partition") == [15.0] and _at(events, "partition-end") == [18.0]
    assert _at(events, "ps-link-set") == [20.0] and _at(events, "ps-link-end") == [25.0]
    link = events[events["event"] == "net-link"]["detail"].iloc[0]
    assert "devices=0,1,2,3" in link and "rate=2e+06" in link   # the home class, uplink at 2 mbit
    # Cut off from the PS: no update of devices 2 and 3 lands inside the partition (pushes already on
    # the wire when it began land within their transfer time), and they contribute again after it.
    cut = updates[updates["device"].isin([2, 3])]
    assert not ((cut["virtual_time"] > 15.5) & (cut["virtual_time"] < 18.0)).any()
    assert (cut["virtual_time"] > 18.0).any()
    fid = result.summary["fidelity"]["dynamics"]
    assert fid["verdict"]["events_late"] == 0 and fid["verdict"]["events_on_time"] >= 7
    assert "timed events applied on time" in result.summary["fidelity"]["verdict"]["summary"]


def test_trace_sets_availability_speed_and_bandwidth(run):
    _, events, updates = run
    assert _at(events, "offline", 1) == [5.0] and _at(events, "online", 1) == [9.0]
    away = updates[(updates["device"] == 1) & (updates["virtual_time"] > 5.5) & (updates["virtual_time"] < 9.0)]
    assert away.empty
    assert (updates[updates["device"] == 1]["virtual_time"] > 9.0).any()   # it rejoined and pulled afresh
    hello = events[(events["device"] == 1) & (events["event"] == "hello")]
    assert list(hello["detail"].str.extract(r"attempt=(\d+)")[0]) == ["0", "1"]
    trace = events[(events["event"] == "trace") & (events["device"] == 0)]
    assert list(trace["virtual_time"]) == [10.0] and "uplink_kbit_s=1000" in trace["detail"].iloc[0]
    # from 10 s device 0 computes 4x slower (0.2 → 0.8 ms per sample) over an 8x slower uplink (8 → 1
    # mbit; the home class's 2 mbit event ends at 12 s and leaves the trace's 1 mbit): fewer pushes
    mine = updates[updates["device"] == 0]["virtual_time"]
    before = ((mine > 1) & (mine <= 6)).sum() / 5
    after = ((mine > 12) & (mine <= 15)).sum() / 3
    assert after < 0.8 * before


def test_churn_drops_work_in_flight_and_devices_come_back(run):
    result, events, updates = run
    phones = [4, 5, 6, 7]
    off = events[(events["event"] == "offline") & events["device"].isin(phones)]
    on = events[(events["event"] == "online") & events["device"].isin(phones)]
    assert len(off) >= 5 and len(on) >= 3
    wasted = off["detail"].str.extract(r"wasted_bytes=(\d+)")[0].astype(int)
    assert wasted.sum() > 0
    sim = json.loads((result.path / "sim.json").read_text())
    assert sim["wasted_uplink_bytes"] == wasted.sum() + sum(
        int(x) for x in events[events["event"] == "offline"]["detail"].str.extract(r"wasted_bytes=(\d+)")[0]
        [~events[events["event"] == "offline"]["device"].isin(phones)])
    for d in phones:   # while away (after what was already queued at the PS), no update of it is applied
        times = events[(events["device"] == d) & events["event"].isin(("offline", "online"))]
        spans = list(zip(times["virtual_time"], times["event"]))
        for (t0, e0), (t1, e1) in zip(spans, spans[1:]):
            if e0 == "offline" and e1 == "online":
                mine = updates[(updates["device"] == d) & (updates["virtual_time"] > t0 + 0.5)
                               & (updates["virtual_time"] < t1)]
                assert mine.empty, (d, t0, t1)
    rows = {r["class"]: r for r in result.summary["fidelity"]["dynamics"]["availability"]}
    assert 0.3 < rows["phone"]["realised_online"] < 1.0 and rows["phone"]["expected_online"] == pytest.approx(8 / 12, abs=1e-3)
    assert rows["home"]["expected_online"] == pytest.approx(1 - 4 / 30 / 4, abs=1e-3)   # device 1's 4 s away
    assert rows["home"]["realised_online"] == pytest.approx(rows["home"]["expected_online"], abs=1e-3)


def test_a_crash_is_followed_by_recovery_after_its_delay(run):
    _, events, _ = run
    crashes = events[events["event"] == "crash"]
    recovered = events[events["event"] == "recover"]
    assert len(recovered) >= 1
    for _, r in recovered.iterrows():
        crash = crashes[crashes["device"] == r["device"]]["virtual_time"]
        assert any(abs(r["virtual_time"] - 3.0 - t) < 1e-9 for t in crash)   # recover_after: 3s
        later = events[(events["device"] == r["device"]) & (events["event"] == "hello")
                       & (events["virtual_time"] >= r["virtual_time"])]
        assert len(later) >= 1 or r["detail"].endswith("offline")


def test_shared_ps_link_records_utilisation_and_queueing(run):
    result, events, _ = run
    rows = events[events["event"] == "ps-link"]
    ingress = rows[rows["detail"].str.contains("direction=ingress")]
    assert len(ingress) >= 25
    util = ingress["detail"].str.extract(r"utilisation=([0-9.e+-]+)")[0].astype(float)
    assert ((util >= 0) & (util <= 1 + 1e-9)).all() and util.max() > 0.1
    # halved capacity from 20 s to 25 s: the queue at the PS is longer than before
    q = ingress["detail"].str.extract(r"queue_mean_s=([0-9.e+-]+)")[0].astype(float)
    t = ingress["virtual_time"]
    assert q[(t > 20) & (t <= 25)].mean() > q[(t > 1) & (t <= 6)].mean()
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert manifest["applied"]["dynamics"]["ps-link"] == "model"
    assert set(manifest["applied"]["dynamics"]) == {"availability", "recovery", "trace", "event:link",
                                                    "event:partition", "event:ps-link", "ps-link"}


def test_same_seed_same_dynamics(run, tmp_path):
    _, events, updates = run
    _, events2, updates2 = _run(tmp_path)
    cols = ["virtual_time", "device", "event", "detail"]
    kept = lambda e: e[e["event"] != "exit"][cols].reset_index(drop=True)  # noqa: E731 (exits: at the drain)
    assert kept(events).equals(kept(events2))
    assert updates["virtual_time"].equals(updates2["virtual_time"])


def test_report_draws_the_ps_link_and_tables_the_dynamics(run, tmp_path):
    from edgebed.analysis.report import write_report
    result, _, _ = run
    rep = write_report([result.path], out=tmp_path / "report")
    assert rep.plots["ps_link"].is_file() and rep.plots["ps_link"].stat().st_size > 10_000
    md = rep.markdown.read_text()
    assert "Availability (dynamics)" in md and "Timed events (dynamics)" in md and "ps_link.png" in md


@pytest.mark.slow
def test_realised_online_fraction_meets_the_expected_long_run_value(tmp_path):
    """Over many on/off cycles (≈ 40 per device) the realised online fraction of a churning class is
    within tolerance of E[on] / (E[on] + E[off]), with a diurnal pattern whose factor averages to 1."""
    sc = parse_scenario({
        "name": "churn-long", "seed": 2, "dataset": {"train_samples": 2000}, "model": {"name": "mlp"},
        "algorithm": {"name": "adacomp", "lr": 0.05, "batch_size": 10, "c": 0.05},
        "workers": {"n": 6, "classes": [{"name": "phone", "share": 1, "think_time": "200ms",
                                         "uplink": {"rate": "50mbit"}, "downlink": {"rate": "50mbit"}}]},
        "dynamics": {"availability": {"classes": {"phone": {
            "online": {"dist": "exponential", "mean": "4s"}, "offline": {"dist": "lognormal", "mean": "2s"},
            "diurnal": {"period": "60s", "amplitude": 0.5, "peak": "15s"}}}}},
        "stop": {"wall_time": "240s"}, "eval": {"every": 100000, "test_samples": 200},
        "runtime": {"name": "sim"}})
    result = Engine(sc, out=tmp_path).run()
    row = result.summary["fidelity"]["dynamics"]["availability"][0]
    assert row["expected_online"] == pytest.approx(4 / 6, abs=1e-3)   # 240 s = 4 whole diurnal periods
    assert row["within_tolerance"], row
    assert abs(row["realised_online"] - row["expected_online"]) < 0.1


def test_docker_draws_the_same_churn_schedule_as_the_virtual_clock(run):
    """docker/churn.py replays the virtual clock's stream (seed, device, 0xC1): the same scenario and seed
    take the phones offline and back at the same (emulated) times on both runtimes."""
    from edgebed.emulator.runtimes.docker.churn import churn_changes
    _, events, _ = run
    sc = parse_scenario(read_yaml(SCENARIO), str(SCENARIO), (f"dynamics.trace.path={TRACE}",))
    churn = sc.dynamics.availability.classes["phone"]
    for d in (4, 5, 6, 7):
        rows = events[(events["device"] == d) & events["event"].isin(["offline", "online"])]
        got = [(t, ev == "online") for t, ev in zip(rows["virtual_time"], rows["event"])]
        want = churn_changes(churn, sc.seed, d, float(events["virtual_time"].max()))
        assert len(got) >= 2 and [on for _, on in got] == [on for _, on in want[:len(got)]], d
        assert [t for t, _ in got] == pytest.approx([t for t, _ in want[:len(got)]], abs=1e-9), d


def test_the_live_churn_scenario_runs_on_the_virtual_clock_too(tmp_path):
    """scenarios/churn-live.yaml (the docker system test's) with runtime.name=sim: the same trace, crash,
    recovery and events, at their virtual times."""
    live = ROOT / "scenarios" / "churn-live.yaml"
    sc = parse_scenario(read_yaml(live), str(live), ("runtime.name=sim",
                        f"dynamics.trace.path={ROOT / 'scenarios' / 'traces' / 'churn-live-trace.csv'}"))
    result = Engine(sc, out=tmp_path).run()
    events = read_table(result.path, "events")
    assert result.summary["status"] == "complete"
    assert _at(events, "offline", 0) == [32.0] and _at(events, "online", 0) == [38.0]
    assert _at(events, "offline", 3) == [42.0] and _at(events, "online", 3) == [47.0]   # class phone's churn
    assert _at(events, "trace", 1) == [28.0]
    assert _at(events, "net-link") == [30.0] and _at(events, "ps-link-set") == [35.0]
    crash, recover = _at(events, "crash", 2), _at(events, "recover", 2)
    assert len(crash) >= 1 and recover[0] == pytest.approx(crash[0] + 6.0)   # recover_after: 6s
    dyn = result.summary["fidelity"]["dynamics"]
    rows = {r["class"]: r for r in dyn["availability"]}
    assert dyn["verdict"]["faithful"] and rows["edge"]["expected_online"] == pytest.approx((2 + 44 / 50) / 3, abs=1e-3)
    assert rows["phone"]["expected_online"] == pytest.approx(42 / 47, abs=1e-3)
