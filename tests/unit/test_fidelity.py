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
