"""The scenario's dynamics section: validated with errors that say where, refused by runtimes that
can't apply it, absent from the resolved scenario when unused."""
from __future__ import annotations

import pytest

from edgebed.emulator.runtimes import get_runtime
from edgebed.scenario import ScenarioError, parse_scenario

BASE = {"name": "d", "workers": {"n": 4, "classes": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}]},
        "stop": {"updates": 10}, "runtime": {"name": "sim"}}
CHURN = {"availability": {"classes": {"b": {"online": {"dist": "exponential", "mean": "8s"},
                                            "offline": "4s"}}}}


def _sc(dynamics, **extra):
    return parse_scenario({**BASE, "dynamics": dynamics, **extra})


def test_unused_dynamics_leave_the_resolved_scenario_unchanged():
    assert "dynamics" not in parse_scenario(BASE).to_dict()
    assert _sc(CHURN).to_dict(units=False)["dynamics"]["availability"]["classes"]["b"]["offline"]["mean"] == 4.0
    assert _sc(CHURN).to_dict()["dynamics"]["availability"]["classes"]["b"]["offline"]["mean"] == "4s"


@pytest.mark.parametrize("dynamics, says", [
    ({"availability": {"classes": {"c": {"online": "1s", "offline": "1s"}}}}, "no speed class named 'c'"),
    ({"events": [{"at": "1s", "kind": "link", "set": {"rate": "1mbit"}}]}, "needs classes: or devices:"),
    ({"events": [{"at": "1s", "kind": "partition", "devices": [9], "duration": "1s"}]}, "device 9 is not in 0..3"),
    ({"events": [{"at": "1s", "kind": "partition", "devices": [1]}]}, "needs duration"),
    ({"events": [{"at": "1s", "kind": "ps-link", "set": {"rate": "1mbit"}}]}, "needs dynamics.ps_link"),
    ({"events": [{"at": "1s", "kind": "link", "classes": ["a"]}]}, "needs set:"),
    ({"availability": {"classes": {"a": {"online": {"dist": "uniform", "mean": "1s", "spread": "2s"},
                                         "offline": "1s"}}}}, "exceeds the mean"),
])
def test_bad_dynamics_are_refused_with_the_key(dynamics, says):
    with pytest.raises(ScenarioError, match=says) as err:
        _sc(dynamics)
    assert "dynamics" in str(err.value)


@pytest.mark.parametrize("runtime", ["local", "docker", "spark"])
def test_a_runtime_that_cannot_apply_dynamics_refuses_them_at_validate(runtime, tmp_path):
    sc = _sc(CHURN, runtime={"name": runtime})
    try:
        rt = get_runtime(runtime)(sc, tmp_path)
    except Exception as err:   # an optional backend that isn't installed here
        pytest.skip(f"{runtime}: {err}")
    problems = rt.check()
    assert any("dynamics: 'availability' is not applied by the" in p for p in problems), problems


def test_sim_applies_every_part(tmp_path):
    sc = _sc({**CHURN, "ps_link": {"ingress": "10mbit"},
              "events": [{"at": "1s", "kind": "ps-link", "set": {"rate": "1mbit"}}]})
    assert not [p for p in get_runtime("sim")(sc, tmp_path).check() if "dynamics" in p]


def test_sim_refuses_churn_with_a_round_based_rule_or_another_link_model(tmp_path):
    sc = _sc(CHURN, algorithm={"name": "model-averaging"})
    assert any("gradient rules only" in p for p in get_runtime("sim")(sc, tmp_path).check())
    sc = _sc(CHURN, runtime={"name": "sim", "sim": {"link_model": "app"}})
    assert any("link_model: network" in p for p in get_runtime("sim")(sc, tmp_path).check())


def test_docker_changes_only_link_rates_live():
    from edgebed.emulator.runtimes.docker.live import LiveLinkEvents
    ok = _sc({"events": [{"at": "3s", "duration": "3s", "kind": "link", "classes": ["a"], "set": {"rate": "1mbit"}}]},
             runtime={"name": "docker"})
    assert LiveLinkEvents.problems(ok) == [] and ok.dynamics.parts() == ["event:link"]
    bad = _sc({"events": [{"at": "3s", "kind": "link", "classes": ["a"], "set": {"delay": "50ms"}}]},
              runtime={"name": "docker"})
    assert "changes only a link's rate live" in LiveLinkEvents.problems(bad)[0]


def test_event_rows_read_the_measured_time_of_real_time_runtimes():
    import math
    import pandas as pd
    from edgebed.emulator.dynamics_fidelity import event_rows
    ev = pd.DataFrame({"virtual_time": [math.nan, math.nan], "event": ["net-link", "net-link-end"], "device": [-1, -1],
                       "detail": ["scheduled_s=3 applied_s=3.044 event=0", "scheduled_s=6 applied_s=6.9 event=0"]})
    rows = event_rows(ev)
    assert [r["on_time"] for r in rows] == [True, False] and rows[0]["late_s"] == 0.044
