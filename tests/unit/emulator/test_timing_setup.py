"""Timing resolution (emulator/timing_setup.py): calibrated step time, dilation (given or auto), what agents are told."""
from __future__ import annotations

import pytest

from edgebed.emulator.runtimes import get_runtime
from edgebed.emulator.timing_setup import agent_timing, resolve_timing
from edgebed.emulator.welcome import welcome_config
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(60)


def scenario(runtime="local", **timing):
    return parse_scenario({
        "name": "t", "model": {"name": "mlp"}, "algorithm": {"name": "adacomp", "c": 0.01},
        "workers": {"n": 4, "classes": [
            {"name": "fast", "share": 0.5, "think_time": "10ms", "uplink": {"rate": "1mbit", "delay": "5ms"}},
            {"name": "slow", "share": 0.5, "slowdown": 4, "think_time": "40ms"}]},
        "stop": {"updates": 10, "wall_time": "30s"}, "runtime": {"name": runtime}, "timing": timing})


def resolve(sc, tmp_path):
    """(the resolved timing the manifest records, the runtime on the executed scenario)"""
    runtime, timing = resolve_timing(sc, get_runtime(sc.runtime.name), tmp_path)
    return timing, runtime


def test_a_given_dilation_slows_the_executed_scenario_and_the_agents_budgets(tmp_path):
    timing, rt = resolve(scenario(pacing=True, step_time="2ms", dilation=3, wait="4ms"), tmp_path)
    assert timing["dilation"] == 3.0 and timing["link_model"] == "app"
    fast = rt.scenario.workers.classes[0]
    assert fast.think_time.mean == pytest.approx(0.03) and fast.uplink.rate == pytest.approx(1e6 / 3)
    assert rt.scenario.stop.wall_time == pytest.approx(90)
    exp = {r["class"]: r for r in timing["expected"]}
    assert exp["fast"]["compute_s"] == pytest.approx(0.002) and exp["slow"]["compute_s"] == pytest.approx(0.008)
    t = agent_timing(rt.scenario, timing, rt)(3)                               # device 3: class slow
    assert t["pacing"] and t["step_time"] == pytest.approx(0.006) and t["wait"]["mean"] == pytest.approx(0.012)
    assert t["max_lag"] == pytest.approx(3 * exp["slow"]["cycle_s"] * 3)
    w = welcome_config(rt.scenario, 3, "top-c-per-layer", rt.applied(), t)
    assert w.timing is t and w.speed_class["slowdown"] == 4


def test_auto_dilation_is_calibrated_and_recorded(tmp_path):
    timing, rt = resolve(scenario(pacing=True, step_time="0.01ms", dilation="auto"), tmp_path)
    # a 10 µs budget is far below a real MLP step: the calibrated factor gives the step room
    assert timing["calibrated_step_s"] > 0
    assert timing["dilation"] >= 1.5 * timing["calibrated_step_s"] / 1e-5 * 0.99
    assert "free cores" in timing["dilation_from"]


def test_the_virtual_clock_is_never_dilated_and_takes_a_calibrated_step_time(tmp_path):
    timing, rt = resolve(scenario("sim", step_time="calibrate", dilation=5), tmp_path)
    assert timing["dilation"] == 1.0
    assert rt.step_time == pytest.approx(timing["calibrated_step_s"], rel=1e-3)
    assert timing["step_time_from"] == "calibrated on this host"


def test_no_timing_means_no_timing_in_welcome(tmp_path):
    timing, rt = resolve(scenario(), tmp_path)
    assert agent_timing(rt.scenario, timing, rt) is None
    assert "timing" not in welcome_config(rt.scenario, 0, "top-c-per-layer", rt.applied()).to_dict()


def test_dilation_without_pacing_is_refused_with_what_to_do(tmp_path):
    from edgebed.scenario import ScenarioError
    with pytest.raises(ScenarioError, match="needs timing.pacing: true"):
        resolve(scenario(dilation=2), tmp_path)
