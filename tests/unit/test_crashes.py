"""``failures.crash``: an exact number of devices, chosen and timed by a seed (edgebed/crashes.py)."""
from __future__ import annotations

import copy

import pytest

from edgebed.scenario import ScenarioError, apply_override, parse_scenario

BASE = {
    "name": "crash", "seed": 5, "model": {"name": "mlp"},
    "workers": {"n": 20, "classes": [{"name": "fast", "share": 0.5}, {"name": "slow", "share": 0.5, "slowdown": 3}]},
    "stop": {"updates": 1000}, "runtime": {"name": "sim"},
}


def _sc(crash=None, **top):
    data = copy.deepcopy(BASE)
    data.update(top)
    if crash is not None:
        data["failures"] = {"crash": crash}
    return parse_scenario(data)


def test_a_fraction_is_an_exact_number_of_devices_spread_over_the_classes():
    s = _sc({"fraction": "10%", "between": [100, 400]}).crash_schedule()
    assert len(s.at) == 2 and s.unit == "updates"
    assert s.intended == {"fast": 1, "slow": 1}
    assert sum(d < 10 for d in s.at) == 1 and sum(d >= 10 for d in s.at) == 1   # one of each class block
    assert all(100 <= p <= 400 and float(p).is_integer() for p in s.at.values())


def test_the_seed_chooses_and_times_the_devices_and_nothing_else_does():
    a = _sc({"devices": 3, "between": [100, 400]}).crash_schedule()
    again = _sc({"devices": 3, "between": [100, 400]}).crash_schedule()
    other = _sc({"devices": 3, "between": [100, 400], "seed": 6}).crash_schedule()
    assert a == again and len(a.at) == 3
    assert other.at != a.at
    # stop.updates does not move the schedule (p = k / stop.updates did): the window states it
    longer = _sc({"devices": 3, "between": [100, 400]}, stop={"updates": 4000}).crash_schedule()
    assert longer.at == a.at


def test_a_window_in_time_is_in_seconds_and_written_back_with_its_unit():
    sc = _sc({"devices": 2, "between": ["30s", "2min"]})
    s = sc.crash_schedule()
    assert s.unit == "s" and all(30.0 <= p <= 120.0 for p in s.at.values())
    written = sc.to_dict()
    assert written["failures"]["crash"]["between"] == ["30s", "120s"]
    assert parse_scenario(written).crash_schedule() == s
    assert _sc({"devices": 1, "between": [0, "1min"]}).crash_schedule().unit == "s"   # 0 is 0 in any unit


def test_without_a_window_the_crashes_fall_within_stop_updates():
    s = _sc({"devices": 4}).crash_schedule()
    assert all(1 <= p <= 1000 for p in s.at.values())


def test_the_probability_form_is_kept_and_writes_no_crash_key():
    sc = parse_scenario({**copy.deepcopy(BASE), "failures": {"crash_probability": 0.01}})
    assert sc.crash_schedule() is None
    assert "crash" not in sc.to_dict()["failures"]


@pytest.mark.parametrize("crash, top, words", [
    ({"fraction": 0.1, "devices": 2}, {}, ["exactly one of fraction", "devices"]),
    ({"between": [1, 5]}, {}, ["exactly one of fraction"]),
    ({"devices": 21}, {}, ["21 devices", "workers.n is 20", "at most 20"]),
    ({"devices": 2, "between": [10, "1min"]}, {}, ["mixes updates", "[30s, 2min]"]),
    ({"devices": 2, "between": [400, 100]}, {}, ["0 ≤ t0 ≤ t1"]),
    ({"devices": 2, "between": [2000, 3000]}, {}, ["starts after stop.updates (1000)", "inside the run"]),
    ({"devices": 2}, {"stop": {"wall_time": "10min"}}, ["between is needed", "stop.updates is unset"]),
    ({"fraction": 1.5}, {}, ["outside [0, 1]"]),
])
def test_bad_crash_specs_say_what_and_where(crash, top, words):
    with pytest.raises(ScenarioError) as err:
        _sc(crash, **top)
    text = str(err.value)
    assert "failures.crash" in text
    for w in words:
        assert w in text, (w, text)


def test_both_forms_at_once_are_refused():
    with pytest.raises(ScenarioError, match="not both"):
        parse_scenario({**copy.deepcopy(BASE), "failures": {"crash_probability": 0.01, "crash": {"devices": 1}}})


def test_a_study_axis_can_sweep_the_fraction_into_a_scenario_without_one():
    data = copy.deepcopy(BASE)
    assert apply_override(data, "failures.crash.fraction=0.2") == "failures.crash.fraction"
    assert len(parse_scenario(data).crash_schedule().at) == 4
    apply_override(data, "failures.crash.fraction=0")
    s = parse_scenario(data).crash_schedule()
    assert s.at == {} and s.intended == {"fast": 0, "slow": 0}


def test_a_study_sweeps_the_crash_fraction_as_a_grid_axis(tmp_path):
    from edgebed.study.runner import load_study
    from tests.unit.study.fakes import write_study
    study = load_study(write_study(tmp_path, set={"workers.n": 20},
                                   sweep={"failures.crash.fraction": [0, 0.1, 0.2]}))
    assert [c.label for c in study.cells] == ["fraction=0", "fraction=0.1", "fraction=0.2"]
    counts = [len(study.scenario(c, 1).crash_schedule().at) for c in study.cells]
    assert counts == [0, 2, 4]
    a, b = (study.scenario(study.cells[1], s).crash_schedule().at for s in (1, 2))
    assert a != b   # each seed of a cell draws its own devices and points


def test_a_checkpoint_keeps_which_scheduled_crashes_happened():
    """A resumed run must not crash a device twice (nor skip one): the fired set is in the PS state."""
    import numpy as np

    from edgebed import wire
    from edgebed.crashes import CrashSchedule
    from edgebed.ps.rules import RULES
    from edgebed.ps.server import ParameterServer, PSConfig

    def ps():
        theta = np.zeros(8, np.float32)
        cfg = PSConfig(n_devices=2, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                       class_of=lambda d: "c", crash_at=CrashSchedule({0: 0, 1: 0}, "updates"))
        return ParameterServer(cfg, theta, RULES["asgd"](theta, 0.1))
    a = ps()
    assert a._draw_crash(0) and not a._draw_crash(0)   # once
    b = ps()
    b.restore(a.state(), a.theta.copy(), a.rule.state_dict())
    assert not b._draw_crash(0) and b._draw_crash(1)
