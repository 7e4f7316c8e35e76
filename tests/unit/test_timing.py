"""Expected timing, time dilation, waiting-time draws and the pacer's schedule (edgebed/timing.py,
device_agent/pacing.py)."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed import timing as tm
from edgebed.device_agent.pacing import Pacer, PacingStats
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(60)

SIZES = tm.MessageSizes(pull=100, model=800_000, push=16_000, ack=80)


def klass(name, slowdown=1.0, think=0.0, up=None, down=None):
    return {"name": name, "slowdown": slowdown, "think_time": {"dist": "constant", "mean": think, "spread": 0.0},
            "uplink": {"rate": None, "delay": 0.0, "jitter": 0.0, "loss": 0.0, **(up or {})},
            "downlink": {"rate": None, "delay": 0.0, "jitter": 0.0, "loss": 0.0, **(down or {})}}


def test_cycle_is_compute_think_wait_and_transfers():
    c = klass("a", slowdown=2, think=0.010, up={"rate": 1e6, "delay": 0.005})
    [r] = tm.expected_timing([c], [3], SIZES, step_time=0.001, link_model="app",
                             wait={"dist": "exponential", "mean": 0.02})
    up = (100 + 16_000) * 8 / 1e6 + 2 * 0.005           # pull and push up, each with the delay
    assert r["cycle_s"] == pytest.approx(0.002 + 0.010 + 0.02 + up, abs=1e-6)
    assert r["rate_per_device"] == pytest.approx(1 / r["cycle_s"], rel=1e-4)


def test_shares_and_ratios_follow_cycles_and_device_counts():
    rows = tm.expected_timing([klass("fast", think=0.01), klass("slow", slowdown=10, think=0.01)], [1, 3],
                              SIZES, step_time=0.01, link_model="network")
    fast, slow = rows
    assert fast["cycle_s"] == pytest.approx(0.02) and slow["cycle_s"] == pytest.approx(0.11)
    assert fast["share"] + slow["share"] == pytest.approx(1.0, abs=1e-5)
    assert fast["share"] == pytest.approx((1 / 0.02) / (1 / 0.02 + 3 / 0.11), abs=1e-5)
    assert fast["rate_ratio"] == pytest.approx(5.5, rel=1e-4) and slow["rate_ratio"] == 1.0


def test_link_semantics_move_time_between_interval_and_cycle():
    """The PS sees an app-link push when it is sent, a network push after its transfer: same cycle,
    different staleness window."""
    c = klass("a", think=0.01, up={"rate": 1e6, "delay": 0.02})
    app, net = (tm.expected_timing([c], [4], SIZES, 0.001, m)[0] for m in ("app", "network"))
    assert app["cycle_s"] == pytest.approx(net["cycle_s"])
    push_up = 16_000 * 8 / 1e6 + 0.02
    pull_up = 100 * 8 / 1e6 + 0.02
    assert net["interval_s"] - app["interval_s"] == pytest.approx(push_up - pull_up, abs=1e-6)
    assert net["staleness_mean"] > app["staleness_mean"]


def test_kernel_rate_counts_framing_and_burst_and_overlaps_delay():
    rate = 1e6
    data, acks = tm.wire_bytes(16_000)
    assert data == 16_000 + 12 * tm.FRAME_OVERHEAD and acks == tm.FRAME_OVERHEAD
    assert tm.kernel_rate_time(16_000, rate) == pytest.approx((data - tm.tbf_burst(rate)) * 8 / rate)
    assert tm.kernel_rate_time(1_000, rate) == 0.0           # within the bucket's burst
    # dilated: the kernel holds rate/k with a burst of that rate; emulated time is real / k
    k = 5
    assert tm.kernel_rate_time(16_000, rate, k) == pytest.approx((data - tm.tbf_burst(rate / k)) * 8 / (rate / k) / k)
    # the agent sleeps the delay while the bytes are on the wire: a short delay hides in the transfer
    c = klass("a", up={"rate": rate, "delay": 0.001})
    [kr] = tm.expected_timing([c], [1], SIZES, 0.0, "kernel-rate")
    [net] = tm.expected_timing([c], [1], SIZES, 0.0, "network")
    assert kr["cycle_s"] < net["cycle_s"]


def test_mean_delay_matches_draws():
    rng = np.random.default_rng(0)
    for cfg in ({"dist": "uniform", "mean": 0.01, "spread": 0.03}, {"dist": "exponential", "mean": 0.02},
                {"dist": "constant", "mean": 0.005}):
        draws = [tm.draw_delay(cfg, rng) for _ in range(20_000)]
        assert np.mean(draws) == pytest.approx(tm.mean_delay(cfg), rel=0.03)


def test_a_disabled_waiting_time_draws_nothing():
    rng = np.random.default_rng(1)
    before = rng.bit_generator.state
    assert tm.draw_delay({"dist": "constant", "mean": 0.0}, rng) == 0.0
    assert tm.draw_delay({"dist": "exponential", "mean": 0.0}, rng) == 0.0
    assert rng.bit_generator.state == before
    assert not tm.wait_enabled({"dist": "exponential", "mean": 0.0, "spread": 0.0})
    assert tm.wait_enabled({"dist": "exponential", "mean": 0.01, "spread": 0.0})


def _scenario(**timing):
    return parse_scenario({
        "name": "t", "workers": {"n": 4, "classes": [
            {"name": "a", "share": 0.5, "think_time": "10ms", "uplink": {"rate": "2mbit", "delay": "5ms", "jitter": "1ms"}},
            {"name": "b", "share": 0.5, "slowdown": 3}]},
        "stop": {"updates": 10, "wall_time": "1min"}, "failures": {"lost_after": "30s"}, "timing": timing})


def test_dilation_scales_every_configured_time():
    sc = _scenario(wait={"dist": "exponential", "mean": "4ms"})
    d = tm.dilate(sc, 4.0)
    a = d.workers.classes[0]
    assert a.think_time.mean == pytest.approx(0.04)
    assert a.uplink.rate == pytest.approx(0.5e6) and a.uplink.delay == pytest.approx(0.02)
    assert a.uplink.jitter == pytest.approx(0.004)
    assert d.timing.wait.mean == pytest.approx(0.016)
    assert d.stop.wall_time == pytest.approx(240) and d.failures.lost_after == pytest.approx(120)
    assert d.workers.classes[1].slowdown == 3          # compute budgets are scaled where paced
    assert tm.dilate(sc, 1.0) is sc


def test_timing_section_is_absent_from_resolved_scenarios_when_off():
    """Older runs' resolved scenarios must still compare equal (a study resumes on that)."""
    assert "timing" not in _scenario().to_dict()
    assert _scenario(pacing=True).to_dict()["timing"]["pacing"] is True


def test_suggested_dilation_grows_with_demand_and_step_time():
    rows = tm.expected_timing([klass("a", think=0.01)], [16], SIZES, 0.001, "app")
    quiet = tm.suggest_dilation(rows, real_step_s=0.0005, step_time=0.001, cores=8)
    busy = tm.suggest_dilation(rows, real_step_s=0.0005, step_time=0.001, cores=0.5)
    slow_steps = tm.suggest_dilation(rows, real_step_s=0.01, step_time=0.001, cores=8)
    assert quiet == 1.0 and busy > 1.0 and slow_steps >= 15.0


def test_steady_rates_start_when_the_last_device_of_a_class_pushed():
    times = {0: [0.0, 1.0, 2.0, 3.0, 4.0], 1: [2.0, 3.0, 4.0], 2: [0.5, 4.5]}
    r = tm.steady_rates(times, {0: "a", 1: "a", 2: "b"})
    assert r["a"]["updates"] == 4 and r["a"]["seconds"] == pytest.approx(2.5)    # window (2.0, 4.5]
    assert r["a"]["rate_per_device"] == pytest.approx(4 / 2 / 2.5)
    assert r["b"]["updates"] == 1
    assert "c" not in tm.steady_rates(times, {0: "a", 3: "c"})                     # device 3 never pushed


def test_distortion_allows_tolerance_plus_counting_noise():
    assert tm.distortion(10.0, {"updates": 10_000, "rate_per_device": 10.5}, 0.1) is None
    assert tm.distortion(10.0, {"updates": 10_000, "rate_per_device": 8.0}, 0.1) == pytest.approx(-0.2)
    assert tm.distortion(10.0, {"updates": 25, "rate_per_device": 6.0}, 0.1) is None   # 25 updates: ±40 %


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_pacer_compute_phase_lasts_its_budget_never_less():
    clk = FakeClock()
    p = Pacer(step_time=0.01, slowdown=2, max_lag=1.0, clock=clk, sleep=clk.sleep)
    clk.t += 0.004                          # real compute took 4 ms of a 20 ms budget
    assert p.computed(0.004) == pytest.approx(0.016)
    assert p.overruns == 0
    clk.t += 0.016
    clk.t += 0.030                          # 30 ms: over budget by 10 ms
    assert p.computed(0.030) == 0.0
    assert p.overruns == 1 and p.max_overrun_s == pytest.approx(0.010)


def test_pacer_absorbs_overhead_in_the_next_phase_and_counts_lags():
    clk = FakeClock()
    p = Pacer(step_time=0.001, slowdown=1, max_lag=0.05, clock=clk, sleep=clk.sleep)
    start = clk.t
    p.sleep(0.010)                          # a link transfer
    clk.t += 0.003                          # host overhead (the PS round trip)
    p.sleep(0.020)                          # think: 3 ms shorter, so the schedule holds
    assert clk.t == pytest.approx(start + 0.030)
    clk.t += 0.2                            # a host stall longer than max_lag
    p.sleep(0.010)
    assert p.lags == 1 and p.lag_s == pytest.approx(0.19)
    assert p.deadline == pytest.approx(clk.t)


def test_pacer_over_kernel_links_waits_at_least_the_wire_time():
    clk = FakeClock()
    p = Pacer(0.001, 1, 1.0, kernel_rates=(1e6, None), clock=clk, sleep=clk.sleep)
    sent_at = p.deadline
    p.replied(sent_at, 16_000, 100)         # the reply came back faster than the bytes could go
    assert p.deadline == pytest.approx(sent_at + tm.kernel_rate_time(16_000, 1e6))


def test_bye_carries_pacing_stats():
    p = Pacer(0.001, 1, 1.0)
    p.computed(0.5)
    reason = p.bye_reason("stop")
    assert reason.startswith('stop pacing={"steps":1,"overruns":1,')   # the bytes on the wire, as before
    st = PacingStats.of_bye(reason)
    assert st == p.stats() and st.overruns == 1 and st.steps == 1
    assert PacingStats.of_bye("stop") is None and PacingStats.of_bye("stop pacing={broken") is None


@pytest.mark.parametrize("tail", ['{"steps":1}', '[1,2]', '{"steps":1,"overruns":0,"overrun_s":0,'
                                  '"max_overrun_s":0,"lags":0,"lag_s":"x","budget_s":0.1}',
                                  '{"steps":-1,"overruns":0,"overrun_s":0,"max_overrun_s":0,"lags":0,'
                                  '"lag_s":0,"budget_s":0.1}'])
def test_a_malformed_pacing_report_is_ignored_not_fatal(tail):
    """A Bye's reason comes from a peer: stats that are not the seven numbers count as none, so the
    run's verdict is still written (it read them by key before)."""
    assert PacingStats.of_bye(f"stop pacing={tail}") is None


def test_the_verdict_counts_only_well_formed_pacing_reports():
    import pandas as pd

    from edgebed.emulator.verdict import pacing_stats
    p = Pacer(0.001, 1, 1.0)
    p.computed(0.5)
    events = pd.DataFrame({"event": ["bye", "bye"], "device": [0, 1],
                           "detail": ["stop pacing={}", p.bye_reason("stop")]})
    out = pacing_stats(events, {0: "fast", 1: "fast"})
    assert out["fast"]["devices"] == 1 and out["fast"]["overruns"] == 1


def test_steady_rates_count_a_crashed_device_only_while_alive():
    # two devices at 1 update/s over (0, 10]; device 1 crashes after its push at t = 5
    times = {0: [float(t) for t in range(11)], 1: [float(t) for t in range(6)]}
    plain = tm.steady_rates(times, {0: "a", 1: "a"})
    assert plain["a"]["rate_per_device"] == pytest.approx(15 / 2 / 10)    # reads as a slow class
    r = tm.steady_rates(times, {0: "a", 1: "a"}, ended={1: 5.0})
    assert r["a"]["device_seconds"] == pytest.approx(15.0)                # 10 s + 5 s alive
    assert r["a"]["rate_per_device"] == pytest.approx(1.0)
