"""Availability churn and crash recovery on the local runtime (runtimes/local.py, live_churn.py): a device
offline is its agent process killed, coming back or recovering is a new agent process that says hello
afresh and pulls; each change lands on time and is recorded."""
from __future__ import annotations

import pandas as pd
import pytest

from edgebed.emulator.engine import Engine
from edgebed.emulator.runtimes import get_runtime
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(120)

# seed 1977: device 1's crash stream fails its 18th push, nobody else's within 800 pushes
SCENARIO = {"name": "local-churn", "seed": 1977, "model": {"name": "mlp"},
            "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01}, "eval": {"every": 100000, "test_samples": 100},
            "workers": {"n": 3, "classes": [{"name": "edge", "share": 1}]},
            "failures": {"crash_probability": 0.002},
            "stop": {"wall_time": "4s"}, "runtime": {"name": "local"}}


def test_local_devices_leave_come_back_and_recover_with_new_agent_processes(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("device,time_s,online\n0,0,1\n0,1.5,0\n0,2.5,1\n")
    sc = parse_scenario({**SCENARIO, "dynamics": {"trace": {"path": str(trace)},
                                                  "availability": {"recover_after": "0.5s"}}})
    res = Engine(sc, out=tmp_path / "out").run()
    assert res.summary["status"] == "complete", res.summary
    events = pd.read_csv(res.path / "events.csv")
    updates = pd.read_csv(res.path / "updates.csv")
    churn = events[events["event"].isin(["offline", "online"])]
    assert [(r.device, r.event) for r in churn.itertuples()] == [(0, "offline"), (0, "online")]
    off, on = churn["wall_time"]
    mine = updates[updates["device"] == 0]["wall_time"]
    assert (mine < off).any() and not mine.between(off + 0.1, on).any() and (mine > on).any()
    crash = events[(events.event == "crash") & (events.device == 1)]["wall_time"]
    recover = events[(events.event == "recover") & (events.device == 1)]["wall_time"]
    assert len(crash) == 1 and len(recover) == 1
    assert 0.5 <= recover.iloc[0] - crash.iloc[0] <= 1.0    # recover_after 0.5 s, applied from the engine's tick
    hellos = events[(events.device.isin([0, 1])) & (events.event == "hello")]
    assert list(hellos.groupby("device").size()) == [2, 2]        # a new agent process each time
    for d in (0, 1):   # the new agent says hello as the device's second attempt, as on the virtual clock
        assert list(hellos[hellos.device == d].detail.str.split().str[0]) == ["attempt=0", "attempt=1"]
    back = {0: churn["wall_time"].iloc[1], 1: recover.iloc[0]}
    print("hello s after the new agent process started:",
          {d: round(hellos[hellos.device == d]["wall_time"].iloc[1] - t, 3) for d, t in back.items()},
          "late s:", {r["event"]: r["late_s"] for r in res.summary["fidelity"]["dynamics"]["events"]})
    assert (updates[updates["device"] == 1]["wall_time"] > recover.iloc[0]).any()
    dyn = res.summary["fidelity"]["dynamics"]
    # (the recovery, due ~1 s into the run, is judged above: 10 % of its time is one engine tick)
    assert dyn["availability"][0]["within_tolerance"] and [r["event"] for r in dyn["events"]] == ["recover"]


def test_local_refuses_what_it_cannot_apply_saying_what_to_do(tmp_path):
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("device,time_s,online,uplink_kbit_s\n0,0,1,800\n")
    sc = parse_scenario({**SCENARIO, "dynamics": {"trace": {"path": str(speeds)}}})
    problems = get_runtime("local")(sc, tmp_path).check()
    assert any("online column only" in p and "uplink_kbit_s" in p and "runtime docker or sim" in p for p in problems)
    sc = parse_scenario({**SCENARIO, "dynamics": {"events": [{"at": "1s", "kind": "link", "devices": [0],
                                                               "set": {"rate": "1mbit"}}]}})
    assert any("'event:link' is not applied by the local runtime" in p
               for p in get_runtime("local")(sc, tmp_path).check())


def test_a_crashed_device_goes_offline_recovers_while_away_and_starts_when_it_comes_back(tmp_path):
    """The virtual clock's rule on a real runtime: churn goes on while a device is crashed. Device 1
    crashes at its 18th push (seed 1977, well before 2 s), its trace takes it offline at 2 s while it is
    still crashed, its recovery (2.5 s after the crash) comes while it is away — recorded "; offline",
    no new agent — and at 5 s, when it comes back, a new agent says hello and pushes. (Before, a
    crashed device's offline and online were skipped and its recovery started it at once.)"""
    trace = tmp_path / "trace.csv"
    trace.write_text("device,time_s,online\n1,0,1\n1,2,0\n1,5,1\n")
    sc = parse_scenario({**SCENARIO, "stop": {"wall_time": "6.5s"},
                         "dynamics": {"trace": {"path": str(trace)}, "availability": {"recover_after": "2.5s"}}})
    res = Engine(sc, out=tmp_path / "out").run()
    assert res.summary["status"] == "complete", res.summary
    events = pd.read_csv(res.path / "events.csv")
    updates = pd.read_csv(res.path / "updates.csv")
    mine = events[(events.device == 1) & events.event.isin(["hello", "crash", "offline", "recover", "online"])]
    print(mine[["wall_time", "event", "detail"]].to_string())
    assert list(mine.event) == ["hello", "crash", "offline", "recover", "online", "hello"], list(mine.event)
    hellos = list(mine[mine.event == "hello"].detail.str.split().str[0])
    assert hellos == ["attempt=0", "attempt=1"], hellos   # the sim's rows: its second attempt
    at = dict(zip(mine.event[1:5], mine.wall_time[1:5]))
    assert "; offline" in mine[mine.event == "recover"]["detail"].iloc[0]
    assert (updates[updates.device == 1]["wall_time"] > at["online"]).any(), "nothing after it came back"
    assert not updates[updates.device == 1]["wall_time"].between(at["crash"] + 0.1, at["online"]).any()
