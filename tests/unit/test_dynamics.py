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


@pytest.mark.parametrize("runtime", ["spark", "swarm"])
def test_a_runtime_that_cannot_apply_dynamics_refuses_them_at_validate(runtime, tmp_path):
    sc = _sc(CHURN, runtime={"name": runtime})
    try:
        rt = get_runtime(runtime)(sc, tmp_path)
    except Exception as err:   # an optional backend that isn't installed here
        pytest.skip(f"{runtime}: {err}")
    problems = rt.check()
    assert any("dynamics: 'availability' is not applied by the" in p and "docker" in p and "local" in p
               for p in problems), problems    # it says which runtimes do


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


def test_docker_applies_churn_only_with_agents_in_containers_a_gradient_rule_and_a_trace_it_can_apply(tmp_path):
    """docker/churn.py stops and starts containers, docker/tracelive.py changes rates and CPU quotas:
    forked agents, round-based rules, an absolute compute speed (ms_per_sample) and a slowdown under
    pacing are refused at validate, naming the key; crash recovery, bandwidth and slowdown are not."""
    from edgebed.emulator.runtimes.docker.runtime import DockerRuntime

    def problems(dynamics, **extra):
        sc = _sc(dynamics, runtime={"name": "docker", **extra.pop("runtime", {})}, **extra)
        return DockerRuntime(sc, tmp_path)._churn_problems()
    assert problems(CHURN) == []
    assert "agents: container" in problems(CHURN, runtime={"docker": {"agents": "forked"}})[0]
    assert "gradient rule" in problems(CHURN, algorithm={"name": "model-averaging"})[0]
    recovery = {"availability": {"recover_after": "5s"}}
    assert problems(recovery) == []
    assert "agents: container" in problems(recovery, runtime={"docker": {"agents": "forked"}})[0]
    online = tmp_path / "online.csv"
    online.write_text("device,time_s,online\n0,0,1\n0,5,0\n")
    assert problems({"trace": {"path": str(online)}}) == []
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("device,time_s,online,slowdown,uplink_kbit_s,downlink_kbit_s\n0,0,1,2,800,4000\n0,9,,1,200,\n")
    assert problems({"trace": {"path": str(speeds)}}) == []
    assert "timing.pacing" in problems({"trace": {"path": str(speeds)}}, timing={"pacing": True})[0]
    absolute = tmp_path / "absolute.csv"
    absolute.write_text("device,time_s,ms_per_sample\n0,0,0.5\n")
    assert "ms_per_sample" in problems({"trace": {"path": str(absolute)}})[0]


def test_docker_no_longer_refuses_crash_recovery_at_validate(tmp_path):
    from edgebed.emulator.runtimes.docker.runtime import DockerRuntime
    sc = _sc({"availability": {"recover_after": "5s"}}, runtime={"name": "docker"})
    rt = DockerRuntime(sc, tmp_path)
    assert "recovery" in rt.capabilities.dynamics and rt.recovery is not None


class _Clock:
    t_running, dilation = 0.0, 2.0

    def __init__(self):
        self.t = 0.0

    def elapsed(self):
        return self.t


def test_docker_recovery_is_due_after_the_virtual_clocks_delay_and_applied_from_the_drive(tmp_path):
    """LiveRecovery draws each delay from the stream (seed, device, 0xC2) as sim does, in emulated
    seconds (× dilation on the wall clock), and records ``recover`` with scheduled_s= and applied_s=."""
    import numpy as np
    from types import SimpleNamespace
    from edgebed.emulator.runtimes.docker.churn import LiveRecovery
    from edgebed.emulator.runtimes.sim_dynamics import draw
    sc = _sc({"availability": {"recover_after": {"dist": "exponential", "mean": "5s"}}}, seed=3)
    recovered = []
    rt = SimpleNamespace(scenario=sc, clock=_Clock(), recover_device=lambda d, ps: recovered.append(d) or True,
                         handle_of=lambda d: SimpleNamespace(offline=False))   # online when it recovers
    live = LiveRecovery(rt)
    rt.clock.t = 8.0                  # emulated 4 s
    live.crashed(1)
    rng = np.random.default_rng([3, 1, 0xC2])
    due = 4.0 + draw(sc.dynamics.availability.recover_after, rng)
    assert live.seconds_to_next() == pytest.approx(due * 2 - 8.0)
    rows = []
    ps = SimpleNamespace(stopped=None)
    live.tick(ps, lambda d, ev, detail: rows.append((d, ev, detail)))
    assert rows == [] and recovered == []
    rt.clock.t = due * 2 + 0.1
    live.tick(ps, lambda d, ev, detail: rows.append((d, ev, detail)))
    assert recovered == [1] and rows[0][:2] == (1, "recover")
    assert f"scheduled_s={due:.4f} applied_s={(due * 2 + 0.1) / 2:.4f}" in rows[0][2]


def test_docker_trace_sets_start_values_and_changes_rates_at_their_time(tmp_path):
    """LiveTrace: rows at t ≤ 0 are the device's start values (its first shaping), later rows are due at
    their time; the profile in force carries the trace's rate in real bit/s (÷ dilation)."""
    from types import SimpleNamespace
    from edgebed.emulator.runtimes.docker.tracelive import LiveTrace
    from edgebed.traces import TracePoint
    sc = _sc({}, runtime={"name": "docker"})
    rt = SimpleNamespace(scenario=sc, clock=_Clock())
    trace = {0: [TracePoint(0.0, True, 2.0, None, 800.0), TracePoint(5.0, None, None, None, 200.0)],
             1: [TracePoint(3.0, False)]}
    live = LiveTrace(rt, trace)
    assert live.slowdown(0) == 2.0 and live.slowdown(1) is None
    klass = sc.class_of(0)
    assert live.profile(0, "uplink", klass).rate == 400e3 and live.profile(1, "uplink", klass) is klass.uplink
    assert [(t, d) for t, d, _ in live.todo] == [(5.0, 0)]     # device 1's row: online only (LiveChurn's)
    assert live.seconds_to_next() == 10.0
def test_docker_churn_schedule_starts_online_and_follows_the_trace(tmp_path):
    from edgebed.emulator.runtimes.docker.churn import schedule
    from edgebed.traces import TracePoint
    sc = _sc(CHURN, runtime={"name": "docker"})
    trace = {0: [TracePoint(0.0, False), TracePoint(3.0, True)], 1: [TracePoint(0.0, None, 2.0)]}
    per_device, away = schedule(sc, trace, 100.0)
    assert away == {0} and per_device[0] == [(3.0, True)]
    assert set(per_device) == {0, 2, 3}                 # device 1: class a, no churn, no online rows
    for d in (2, 3):                                    # class b: alternating, starting with offline
        changes = per_device[d]
        assert [on for _, on in changes] == [i % 2 == 1 for i in range(len(changes))] and len(changes) >= 6
        assert all(b > a for (a, _), (b, _) in zip(changes, changes[1:])) and changes[-1][0] < 100


def test_realised_availability_of_a_real_time_runtime_reads_applied_s():
    """docker's offline/online rows have no virtual time: their applied_s= (emulated seconds since the
    agents started) is when the device left and came back."""
    import math
    import pandas as pd
    from edgebed.emulator.dynamics_fidelity import realised_online
    ev = pd.DataFrame({"virtual_time": [math.nan] * 3, "event": ["hello", "offline", "online"], "device": [0, 0, 0],
                       "detail": ["attempt=0", "scheduled_s=10 applied_s=10.5 took_s=0.5",
                                  "scheduled_s=20 applied_s=20.5 took_s=0.5"]})
    assert realised_online(ev, 0, 40.0) == pytest.approx(30 / 40)


def test_docker_counts_a_leaving_devices_unacknowledged_bytes_as_wasted():
    """The Send-Q of the agent's established sockets (ss in its netns) at the kill: bytes it sent that
    the PS never got, lost with it (the offline row's wasted_bytes=, docker.json's wasted_uplink_bytes)."""
    from edgebed.emulator.runtimes.docker.churn import send_queue_bytes
    ss = "0      16088  172.18.0.3:41234 172.18.0.1:40001\n0      0      172.18.0.3:41240 172.18.0.1:40001\n"
    assert send_queue_bytes(ss) == 16088 and send_queue_bytes("") == 0
