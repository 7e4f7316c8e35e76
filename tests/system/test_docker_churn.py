"""Availability churn on a real docker run (docker/churn.py): devices go offline (container killed) and
come back (started, links re-shaped, hello afresh) at their trace's times; the events table's
availability matches the trace, and an offline device contributes nothing while away."""
import json

import pandas as pd
import pytest

from edgebed.emulator.dynamics_fidelity import realised_online
from edgebed.emulator.runtimes.docker import clean as docker_clean
from edgebed.scenario import parse_scenario
from tests.capabilities import require_docker, require_root

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(290)]

# device 0 away from 22 s to 30 s, device 1 from 26 s to 34 s, device 2 always there; the run is 60 s.
# An agent's start-up in its container (interpreter, torch, data) took 9.5–15 s on the loaded 2-core
# host, so each device has said hello before it leaves, and says it again after it returns
TRACE = "device,time_s,online\n0,0,1\n0,22,0\n0,30,1\n1,0,1\n1,26,0\n1,34,1\n"
END = 60.0
EXPECTED = {0: 52 / 60, 1: 52 / 60, 2: 1.0}
TOLERANCE = 0.03   # of the run: the kill and the start (docker API, re-shaping) took ≤ 0.95 s


def test_docker_devices_go_offline_and_come_back_on_their_trace(tmp_path):
    require_docker()
    require_root()
    from edgebed.emulator.engine import Engine
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    sc = parse_scenario({
        "name": "docker-churn", "seed": 5, "model": {"name": "mlp"},
        "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01},
        "eval": {"every": 1000, "test_samples": 200},
        "workers": {"n": 3, "classes": [{"name": "edge", "share": 1, "uplink": {"rate": "4mbit"}}]},
        "dynamics": {"trace": {"path": str(trace)}},
        "stop": {"wall_time": f"{END:g}s"},
        "runtime": {"name": "docker", "docker": {"agents": "container"}}})
    res = Engine(sc, out=tmp_path / "out").run()
    s, path = res.summary, res.path
    assert s["status"] == "complete", s
    events = pd.read_csv(path / "events.csv")
    updates = pd.read_csv(path / "updates.csv")
    churn = events[events["event"].isin(["offline", "online"])]
    assert [(r.device, r.event) for r in churn.itertuples()] == [(0, "offline"), (1, "offline"),
                                                                 (0, "online"), (1, "online")]
    applied = churn["detail"].str.extract(r"scheduled_s=([\d.]+) applied_s=([\d.]+)").astype(float)
    late = applied[1] - applied[0]
    print("applied late by (s):", list(late), "took (s):", list(churn["detail"].str.extract(r"took_s=([\d.]+)")[0]))
    assert ((late >= 0) & (late <= 0.1 * applied[0])).all(), churn    # within 10 % of the scheduled time
    realised = {d: realised_online(events, d, END) for d in EXPECTED}
    print("realised online fraction:", realised)
    for d, exp in EXPECTED.items():
        assert abs(realised[d] - exp) <= TOLERANCE, (d, realised[d], exp)
    fid = s["fidelity"]["dynamics"]["availability"]
    assert fid[0]["within_tolerance"], fid

    # away: nothing applied from it; back: a new session (hello) and updates again
    for d in (0, 1):
        off = churn[(churn.device == d) & (churn.event == "offline")]["wall_time"].iloc[0]
        on = churn[(churn.device == d) & (churn.event == "online")]["wall_time"].iloc[0]
        mine = updates[updates["device"] == d]["wall_time"]
        assert not mine.between(off + 0.5, on).any(), d
        assert (mine > on).any(), f"device {d} pushed nothing after it came back"
        hellos = events[(events.device == d) & (events.event == "hello")]["wall_time"]
        assert len(hellos) == 2 and hellos.iloc[0] < off < on < hellos.iloc[1]
        assert (mine < off).any(), f"device {d} pushed nothing before it left"
        print(f"device {d}: hello {hellos.iloc[1] - on:.2f} s after its container started again")

    record = json.loads((path / "docker.json").read_text())
    assert record["containers"]["0"]["restarts"] == 1 and record["containers"]["2"].get("restarts", 0) == 0
    # the restarted device's uplink is shaped again: the qdisc on its new eth0 is recorded
    assert record["containers"]["0"]["qdiscs"][0]["where"] == "container eth0"
    manifest = json.loads((path / "manifest.json").read_text())
    assert "trace" in manifest["applied"]["dynamics"]
    # the kernel counted every device's payload, the bytes before its restart included
    kt = json.loads((path / "kernel_traffic.json").read_text())
    ps = json.loads((path / "traffic.json").read_text())
    for d, t in ps["by_device"].items():
        assert kt["devices"][d]["uplink_bytes"] >= 0.95 * t["in_bytes"], (d, kt["devices"][d], t)
    assert docker_clean.leftovers(record["run_id"]) == {"containers": [], "networks": []}


def test_docker_shared_ps_link_caps_the_ps_ingress_and_changes_rate_live(tmp_path):
    """dynamics.ps_link on docker (docker/pslink.py): all devices' pushes share one 4 mbit queue into the
    PS (the bridge's ingress through an ifb), a ps-link event drops it to 1 mbit from 30 s to 38 s; the sampled
    ps-link rows show the link full at its rate, and the teardown removes the ifb."""
    require_docker()
    require_root()
    from edgebed.emulator.engine import Engine
    from edgebed.emulator.runtimes.docker import links
    sc = parse_scenario({
        "name": "docker-ps-link", "seed": 6, "model": {"name": "mlp"},
        "algorithm": {"name": "asgd", "lr": 0.05},        # 800 kB pushes: four devices fill 4 mbit
        "eval": {"every": 1000, "test_samples": 200},
        "workers": {"n": 4, "classes": [{"name": "edge", "share": 1, "uplink": {"rate": "10mbit"}}]},
        "dynamics": {"ps_link": {"ingress": "4mbit", "egress": "20mbit", "sample": "1s"},
                     "events": [{"at": "30s", "duration": "8s", "kind": "ps-link", "direction": "uplink",
                                 "set": {"rate": "1mbit"}}]},
        "stop": {"wall_time": "48s"},
        "runtime": {"name": "docker"}})
    res = Engine(sc, out=tmp_path).run()
    s, path = res.summary, res.path
    assert s["status"] == "complete", s
    events = pd.read_csv(path / "events.csv")
    samples = pd.DataFrame([dict(x.split("=") for x in d.split()) for d in
                            events[events["event"] == "ps-link"]["detail"]])
    ing = samples[samples["direction"] == "ingress"].astype({"at_s": float, "bytes": float, "window_s": float,
                                                             "utilisation": float, "queue_max_s": float})
    mbit = ing["bytes"] * 8 / ing["window_s"] / 1e6
    print(ing.to_string())
    before = mbit[ing["at_s"].between(24, 30)]
    during = mbit[ing["at_s"].between(32, 38)]
    after = mbit[ing["at_s"].between(41, 48)]
    print("PS ingress Mbit/s before/during/after:", before.mean(), during.mean(), after.mean(),
          "utilisation max", ing["utilisation"].max(), "queue max s", ing["queue_max_s"].max())
    assert before.max() <= 4.4 and during.max() <= 1.2 and after.max() <= 4.4
    # a window never straddles a change of rate (the last, cut short by the stop, is mostly tbf's burst)
    assert ing[ing["window_s"] >= 0.5]["utilisation"].max() <= 1.15
    assert before.mean() > 3.0 and after.mean() > 3.0        # the link was the bottleneck
    assert (during > 0.7).all(), during    # no stall: a packet queued under 4 mbit's bucket still leaves
    timed = s["fidelity"]["dynamics"]["events"]
    assert [r["event"] for r in timed] == ["ps-link-set", "ps-link-end"] and all(r["on_time"] for r in timed)
    print("ps-link events applied late by (s):", [r["late_s"] for r in timed])
    record = json.loads((path / "docker.json").read_text())
    ifb = record["ps_link"]["ifb"]
    assert record["ps_link"]["ingress_bps"] == 4e6
    with links.iproute() as ipr:
        assert not ipr.link_lookup(ifname=ifb), "the PS link's ifb outlived the run"
