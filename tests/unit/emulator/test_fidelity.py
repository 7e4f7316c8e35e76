"""Realized fidelity (emulator/fidelity.py): peak throughput from counters, class rates vs configured."""
import math

import numpy as np
import pandas as pd
import pytest

from edgebed.emulator.fidelity import PeakRate, class_rates, run_duration, run_fidelity, uplink_rates

pytestmark = pytest.mark.timeout(30)


def _counter(rate_bps, busy, every=0.25, until=6.0):
    """Samples of a byte counter every ``every`` s: growing at ``rate_bps`` while ``busy(t)``."""
    t, total, out = 0.0, 0.0, []
    while t <= until:
        out.append((t, int(total)))
        if busy(t):
            total += rate_bps / 8 * every
        t += every
    return out


def test_peak_rate_equals_the_rate_of_a_link_busy_for_seconds():
    peak = PeakRate(window=1.0)
    for t, b in _counter(1e6, lambda t: 1.0 <= t < 4.0):
        peak.add(t, b)
    assert peak.peak_bps == pytest.approx(1e6, rel=1e-6)


def test_peak_rate_of_short_bursts_is_a_lower_bound():
    peak = PeakRate(window=1.0)
    # busy one sample interval in every two seconds: the link idles most of every window
    for t, b in _counter(1e6, lambda t: (t % 2.0) < 0.25):
        peak.add(t, b)
    assert 0 < peak.peak_bps <= 0.26e6


def test_peak_rate_needs_a_whole_window():
    peak = PeakRate(window=1.0)
    peak.add(0.0, 0)
    peak.add(0.5, 10**6)      # half a window: not a measurement yet
    assert peak.peak_bps == 0.0
    peak.add(1.0, 10**6)
    assert peak.peak_bps == pytest.approx(8e6)


def _updates(counts: dict[str, dict[int, int]], t_end=10.0, virtual=False, bytes_in=1000):
    rows = []
    for klass, per_dev in counts.items():
        for d, n in per_dev.items():
            for i in range(n):
                t = t_end * (i + 1) / n
                rows.append({"device": d, "speed_class": klass, "wall_time": 2 * t if virtual else t,
                             "virtual_time": t if virtual else math.nan, "bytes_in": bytes_in})
    return pd.DataFrame(rows)


CLASSES = [
    {"name": "fast", "slowdown": 1.0, "think_time": {"mean": 0.0}, "uplink": {"rate": 1e6}},
    {"name": "slow", "slowdown": 10.0, "think_time": {"mean": 0.0}, "uplink": {"rate": None}},
]


def test_class_rates_realized_vs_configured():
    up = _updates({"fast": {0: 100, 1: 100}, "slow": {2: 10}})
    rows = {r["class"]: r for r in class_rates(up, CLASSES, run_duration(up))}
    assert rows["fast"]["configured_speed_ratio"] == 10 and rows["slow"]["configured_speed_ratio"] == 1
    assert rows["fast"]["realized_rate_ratio"] == 10 and rows["slow"]["realized_rate_ratio"] == 1
    assert rows["fast"]["updates_per_device_per_s"] == pytest.approx(10.0)
    assert rows["fast"]["share"] == pytest.approx(200 / 210, abs=1e-4)


def test_a_class_without_updates_is_listed_with_none():
    up = _updates({"fast": {0: 5}})
    rows = {r["class"]: r for r in class_rates(up, CLASSES, run_duration(up))}
    assert rows["slow"]["updates"] == 0 and rows["slow"]["realized_rate_ratio"] is None


def test_duration_is_virtual_where_the_runtime_has_it():
    assert run_duration(_updates({"fast": {0: 4}}, t_end=3.0, virtual=True)) == pytest.approx(3.0)
    assert run_duration(_updates({"fast": {0: 4}}, t_end=3.0)) == pytest.approx(3.0)
    assert run_duration(pd.DataFrame(columns=["virtual_time", "wall_time"])) == 0.0


def test_uplink_rates_only_for_shaped_classes_and_say_whether_a_push_fills_a_window():
    of = {0: "fast", 1: "fast", 2: "slow"}
    small = _updates({"fast": {0: 3, 1: 3}, "slow": {2: 3}}, bytes_in=20_000)      # 0.16 s at 1 mbit
    rows = uplink_rates({0: 0.9e6, 1: 1.1e6, 2: 5e6}, of, CLASSES, small)
    assert [r["class"] for r in rows] == ["fast"]
    assert rows[0]["peak_over_configured"] == pytest.approx(1.0)
    assert rows[0]["peak_mbit_min"] == 0.9 and rows[0]["peak_mbit_max"] == 1.1
    assert rows[0]["window_filled"] is False
    big = _updates({"fast": {0: 3}}, bytes_in=847_000)                              # 6.8 s at 1 mbit
    assert uplink_rates({0: 1e6}, of, CLASSES, big)[0]["window_filled"] is True


def test_run_fidelity_sections():
    up = _updates({"fast": {0: 20}, "slow": {2: 2}})
    plain = run_fidelity(up, CLASSES, {0: "fast", 2: "slow"})
    assert set(plain) == {"duration_s", "classes"}
    full = run_fidelity(up, CLASSES, {0: "fast", 2: "slow"},
                        {"uplink_peak_bps": {0: np.float64(0.97e6)}, "host_cpu": {"busy_mean": 0.4}})
    assert full["uplink"][0]["peak_mbit_mean"] == pytest.approx(0.97)
    assert full["host_cpu"] == {"busy_mean": 0.4} and "veth" in full["uplink_measured_as"]


def _paced_updates(rates: dict[str, tuple[list[int], float]], t_end=20.0):
    """Each device pushes at a steady rate (updates/s) from t = 0.1 s; staleness 3 everywhere."""
    rows = []
    for klass, (devices, rate) in rates.items():
        for d in devices:
            n = int(rate * t_end)
            for i in range(n):
                rows.append({"device": d, "speed_class": klass, "wall_time": 0.1 + i / rate,
                             "virtual_time": math.nan, "staleness": 3, "bytes_in": 100})
    return pd.DataFrame(rows)


EXPECTED = [
    {"class": "fast", "devices": 2, "cycle_s": 0.1, "rate_per_device": 10.0, "share": 10 / 12,
     "rate_ratio": 5.0, "staleness_mean": 3.0},
    {"class": "slow", "devices": 2, "cycle_s": 0.5, "rate_per_device": 2.0, "share": 2 / 12,
     "rate_ratio": 1.0, "staleness_mean": 3.0},
]
OF = {0: "fast", 1: "fast", 2: "slow", 3: "slow"}
TWO = [{**CLASSES[0], "downlink": {}}, {"name": "slow", "slowdown": 5.0, "think_time": {"mean": 0.0},
                                        "uplink": {"rate": None}, "downlink": {}}]


def test_a_run_at_its_expected_rates_is_faithful():
    ups = _paced_updates({"fast": ([0, 1], 10.0), "slow": ([2, 3], 2.0)})
    fid = run_fidelity(ups, TWO, OF, timing={"expected": EXPECTED, "tolerance": 0.1, "dilation": 1.0,
                                             "link_model": "app", "step_time_s": 0.01})
    assert fid["verdict"]["faithful"], fid["verdict"]
    fast = fid["expected"][0]
    assert fast["rate_per_device"] == pytest.approx(10.0, rel=0.02) and fast["share"] == pytest.approx(0.833, abs=0.01)
    assert fast["rate_ratio"] == pytest.approx(5.0, rel=0.05)   # the window ends at the run's last push


def test_the_verdict_names_the_distorted_class_and_by_how_much():
    ups = _paced_updates({"fast": ([0, 1], 6.0), "slow": ([2, 3], 2.0)})      # fast at 60 % of its rate
    events = pd.DataFrame([{"device": 0, "event": "bye", "detail": 'stop pacing={"steps":120,"overruns":30,'
                            '"overrun_s":0.3,"max_overrun_s":0.02,"lags":2,"lag_s":0.5,"budget_s":0.01}'},
                           {"device": 2, "event": "bye", "detail": "stop"}])
    fid = run_fidelity(ups, TWO, OF, timing={"expected": EXPECTED, "tolerance": 0.1, "dilation": 2.0},
                       events=events)
    v = fid["verdict"]
    assert not v["faithful"]
    d = {x["class"]: x for x in v["distorted"]}
    assert d["fast"]["rate_per_device_off"] == pytest.approx(-0.4, abs=0.02)
    # the slow class kept its rate; its share grew because the fast one lost updates
    assert "rate_per_device_off" not in d["slow"] and d["slow"]["share_off"] == pytest.approx(0.5, abs=0.05)
    assert v["suggested_dilation"] >= 2.0 / 0.6
    assert "fast rate per device -40%" in v["summary"] and "25% of steps" in v["summary"]
    assert fid["pacing"]["fast"]["overruns"] == 30 and "slow" not in fid["pacing"]
    assert v["fell_behind"] == {"fast": {"lags": 2, "seconds": 0.5}}


def test_crashed_devices_count_only_while_alive():
    # both classes at their expected rates; fast device 0 and slow device 2 crash (fail-stop) at t ≈ 10 s
    ups = _paced_updates({"fast": ([0, 1], 10.0), "slow": ([2, 3], 2.0)})
    ups = ups[~(ups["device"].isin([0, 2]) & (ups["wall_time"] > 10.0))].reset_index(drop=True)
    # after the crashes half of the update rate is gone: τ = (others' rate) × interval, 3 before them
    late, ups["staleness"] = ups["wall_time"] > 10.0, ups["staleness"].astype(float)
    fast = ups["speed_class"] == "fast"
    ups.loc[late & fast, "staleness"] = 3 * (12 - 10) / (24 - 10)
    ups.loc[late & ~fast, "staleness"] = 3 * (12 - 2) / (24 - 2)
    timing = {"expected": EXPECTED, "tolerance": 0.1, "dilation": 1.0}
    blind = run_fidelity(ups, TWO, OF, timing=timing)    # crashes unknown: dead devices read as a slow host
    assert not blind["verdict"]["faithful"]
    events = pd.DataFrame([{"device": d, "event": "crash", "detail": "fail-stop"} for d in (0, 2)])
    fid = run_fidelity(ups, TWO, OF, timing=timing, events=events)
    assert fid["verdict"]["faithful"], fid["verdict"]
    fast, slow = fid["expected"]
    assert fast["crashed"] == 1 and slow["crashed"] == 1
    assert fast["rate_per_device"] == pytest.approx(10.0, rel=0.03)
    # each class was alive 1.5 device-runs of 2: the expected shares stay 10:2, and staleness follows the
    # update rate of the devices still alive (75 % of it on average here)
    assert fast["expected_share"] == pytest.approx(10 / 12, abs=0.01) and fast["share"] == pytest.approx(10 / 12, abs=0.01)
    assert 0.6 * 3.0 < fast["expected_staleness_mean"] < 0.8 * 3.0
    from edgebed.emulator.fidelity import expected_caption, expected_frame
    assert list(expected_frame(fid)["crashed"]) == [1, 1] and "crashed" not in expected_frame(blind)
    assert "crashed devices count only while alive" in expected_caption(fid)


def test_no_updates_is_not_judged_faithful():
    fid = run_fidelity(pd.DataFrame(columns=["device", "speed_class", "wall_time", "virtual_time", "staleness",
                                             "bytes_in"]), TWO, OF, timing={"expected": EXPECTED})
    assert fid["verdict"]["faithful"] is False and "not judged" in fid["verdict"]["summary"]


def test_expected_frame_shows_realized_next_to_expected():
    from edgebed.emulator.fidelity import expected_caption, expected_frame
    ups = _paced_updates({"fast": ([0, 1], 10.0), "slow": ([2, 3], 2.0)})
    fid = run_fidelity(ups, TWO, OF, timing={"expected": EXPECTED, "link_model": "app", "step_time_s": 0.01})
    f = expected_frame(fid).set_index("class")
    assert f.loc["fast", "share"] == pytest.approx(0.833, abs=0.01) and f.loc["fast", "expected_share"] == 0.8333
    assert "app link semantics" in expected_caption(fid)


def test_the_verdict_judges_staleness_and_says_what_it_checks():
    ups = _paced_updates({"fast": ([0, 1], 10.0), "slow": ([2, 3], 2.0)})
    ups["staleness"] = 3 * 1.47          # rates and shares as expected, τ 47 % above the expectation
    v = run_fidelity(ups, TWO, OF, timing={"expected": EXPECTED, "tolerance": 0.1, "dilation": 1.0})["verdict"]
    assert not v["faithful"] and v["kind"] == "distorted"
    assert {d["class"]: d["staleness_mean_off"] for d in v["distorted"]} == pytest.approx({"fast": 0.47, "slow": 0.47})
    assert "staleness mean +47%" in v["summary"]
    assert "rate per device and share" in v["checks"] and "mean staleness" in v["checks"]
    # below the mean-field value (as the virtual clock's fast classes are) is not a distortion
    ups["staleness"] = 3 * 0.7
    low = run_fidelity(ups, TWO, OF, timing={"expected": EXPECTED, "tolerance": 0.1, "dilation": 1.0})["verdict"]
    assert low["faithful"] and low["summary"].startswith("faithful: every class within 10%")


def test_a_host_slower_by_one_factor_is_not_a_distorted_heterogeneity():
    # both classes at 6 % of their rates: ratio 5, shares 10:2 and staleness kept
    ups = _paced_updates({"fast": ([0, 1], 0.6), "slow": ([2, 3], 0.12)}, t_end=400.0)
    v = run_fidelity(ups, TWO, OF, timing={"expected": EXPECTED, "tolerance": 0.1, "dilation": 1.0})["verdict"]
    assert v["kind"] == "slower host" and not v["faithful"]
    assert v["host_speed"] == pytest.approx(0.06, abs=0.005)
    assert v["summary"].startswith("slower host: every class ran at 6% of its expected rate")
    assert "heterogeneity is kept" in v["summary"] and "timing.dilation" in v["summary"]
    # a single class that is slower: the same, said for one class
    one = [{**EXPECTED[0], "devices": 2, "share": 1.0, "staleness_mean": 1.0}]
    single = _paced_updates({"fast": ([0, 1], 0.6)}, t_end=400.0).assign(staleness=1)
    v1 = run_fidelity(single, TWO[:1], {0: "fast", 1: "fast"}, timing={"expected": one, "tolerance": 0.1})["verdict"]
    assert v1["kind"] == "slower host" and "no heterogeneity to distort" in v1["summary"]
    # only the fast class slowed: its ratio and the shares change — distorted, not a slow host
    skew = _paced_updates({"fast": ([0, 1], 6.0), "slow": ([2, 3], 2.0)})
    assert run_fidelity(skew, TWO, OF, timing={"expected": EXPECTED, "tolerance": 0.1})["verdict"]["kind"] == "distorted"
