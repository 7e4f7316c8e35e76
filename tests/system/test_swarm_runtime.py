"""Swarm runtime on a real two-node Docker Swarm on this machine (``.ci/swarm-up``: two extra engines,
each in its own network namespace; the main dockerd is never a node).

The first test runs small stdlib senders instead of the agent (the runtime's ``agent_command`` hook)
so the shaped rate is measured on its own, per node, once with the link agents in the engine process
(``agents: engine``) and once as a global service of node agent processes (``agents: service``), where
the engine must not enter any task's namespace itself; the second runs the engine with real device
agents end to end. All check that nothing of the run is left on the swarm or on either node.
"""
import json
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from edgebed.emulator import cleanup
from edgebed.emulator.runtimes.base import AgentSpec
from edgebed.scenario import parse_scenario
from tests.capabilities import require_swarm
from tests.system.test_docker_runtime import Receiver

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def swarm():
    return require_swarm()


def swarm_section(env, **extra):
    return {"manager": env["MANAGER"], "nodes": [env["MANAGER"], env["WORKER"]], **extra}


# agents: service — each node agent mounts its own node's engine socket: .ci/swarm-up links
# /run/edgebed-swarm/node-<node id>.sock to each node's socket, and Swarm fills in {{.Node.ID}}
NODE_SOCKET = "/run/edgebed-swarm/node-{{.Node.ID}}.sock"


def node_leftovers(env, run_id):
    """Per node: the run's containers (any, the node agents' too), and edgebed qdiscs or ifb devices in
    the node's own network namespace (the agents share it: network host)."""
    import docker
    from edgebed.emulator.runtimes.docker import links
    out = {}
    for key, ns in (("MANAGER", "ebsw-m"), ("WORKER", "ebsw-w")):
        cli = docker.DockerClient(base_url=env[key], timeout=60)
        try:
            found = [c.name for c in cli.containers.list(all=True, filters={"label": f"edgebed.run={run_id}"})]
        finally:
            cli.close()
        with links.iproute(ns) as ipr:
            found += [f"ifb {i}" for i in ipr.link_lookup(ifname=links.IFB_NAME)]
            found += [f"qdisc {q.get_attr('TCA_KIND')} on #{q['index']}" for q in ipr.get_qdiscs()
                      if q["handle"] in (links.ROOT_HANDLE, links.INGRESS_HANDLE)]
        if found:
            out[ns] = found
    return out


def sender(seconds):
    def command(rt, spec):   # spec.device is the runtime's "{device}" placeholder, filled in per task
        host, port = spec.env["SINK"].rsplit(":", 1)
        code = (f"import socket, time\n"
                f"s = socket.create_connection(({host!r}, {port}), timeout=30)\n"
                f"s.sendall(b'{spec.device}\\n')\n"
                f"chunk = b'x' * 65536; end = time.monotonic() + {seconds}\n"
                f"while time.monotonic() < end: s.send(chunk)\n"
                f"s.close()\n"
                f"print('sender done', flush=True)\n")
        return [rt.image.python, "-c", code]
    return command


@pytest.mark.measures
@pytest.mark.parametrize("agents", ["engine", "service"])
def test_shaped_on_both_nodes_crash_and_nothing_left(swarm, agents, monkeypatch):
    from edgebed.emulator.runtimes.docker import links
    from edgebed.emulator.runtimes.swarm import clean
    from edgebed.emulator.runtimes.swarm.runtime import SwarmRuntime
    n, rate = 4, 4e6
    extra = {"agents": "service", "node_socket": NODE_SOCKET} if agents == "service" else {}
    sc = parse_scenario({"name": "swarmtest", "workers": {"n": n, "classes": [
        {"name": "edge", "share": 1, "uplink": {"rate": "4mbit"}, "downlink": {"rate": "8mbit"}}]},
        "stop": {"updates": 10},
        "runtime": {"name": "swarm", "swarm": swarm_section(swarm, max_per_node=2, quota_after="start", **extra)}})
    entered = []                         # every namespace this (the engine's) process opens a socket in
    real_socket_in = links._netlink_socket_in
    monkeypatch.setattr(links, "_netlink_socket_in", lambda ns: entered.append(ns) or real_socket_in(ns))

    class TestRuntime(SwarmRuntime):
        def agent_command(self, spec):
            return sender(7.0)(self, spec)
    run_dir = Path(tempfile.mkdtemp(prefix="edgebed-swarmtest-"))
    rt = TestRuntime(sc, run_dir)
    assert rt.check() == []
    rt.ps_bind()
    assert rt.ps_host == swarm["HOST_ADDR"]
    rx = Receiver(rt.ps_host, n)
    try:
        handles = rt.start([AgentSpec(d, "edge", "", env={"SINK": f"{rt.ps_host}:{rx.port}"}) for d in range(n)])
        devs = rt.record["devices"]
        nodes = {devs[str(d)]["node"] for d in range(n)}
        assert len(nodes) == 2, devs                  # max_per_node=2: two tasks on each node
        for d in range(n):
            kinds = [q["kind"] for q in devs[str(d)]["qdiscs"]]
            assert devs[str(d)]["uplink"]["rate"] == "kernel" and kinds == ["tbf", "ingress+tbf"], devs[str(d)]
            assert devs[str(d)]["cpus"] == 1.0
            by = devs[str(d)]["shaped_by"]
            assert by["mode"] == agents and by["node"] == devs[str(d)]["node"], by
        if agents == "service":          # shaped by the node agents: this process entered no task namespace
            assert not [ns for ns in entered if ns != links.NEW_NETNS], entered
            assert rt.agents == {} and len(rt.hub.hello) == 2
        # crash one device once every device sends: it stops contributing and stays down
        deadline = time.monotonic() + 60
        while len(rx.timeline) < n or any(not rx.timeline[d] for d in range(n)):
            assert time.monotonic() < deadline, f"senders did not connect: {sorted(rx.timeline)}"
            time.sleep(0.1)
        time.sleep(3.0)
        crashed = handles[0]
        crashed.freeze()
        t_freeze = time.monotonic()
        assert crashed.poll() is None                 # frozen, not ended
        deadline = time.monotonic() + 60
        while any(h.poll() is None for h in handles[1:]) and time.monotonic() < deadline:
            rt.sample_counters()
            time.sleep(0.2)
        assert [h.poll() for h in handles[1:]] == [0] * (n - 1)
        time.sleep(0.5)
        # the crashed device delivered at most what was in flight (socket buffer + tbf queue)
        late = rx.bytes_between(0, t_freeze + 2.0, time.monotonic())
        assert late == 0, f"crashed device kept sending: {late} B after the freeze"
        assert crashed.poll() is None                 # paused all along; restart-condition none
        rates = {d: rx.goodput(d) for d in range(1, n)}
        rt.sample_counters(force=True)
        kt = rt.kernel_traffic()
    finally:
        rx.close()
        record = rt.record
        rt.cleanup()
    per_node = {}
    for d, r in rates.items():
        per_node.setdefault(record["devices"][str(d)]["node"], []).append(r)
    print("uplink goodput Mbit/s per node:", {k[:12]: [round(r / 1e6, 3) for r in v] for k, v in per_node.items()})
    assert len(per_node) == 2                          # shaped rate measured on both nodes
    for node, rs in per_node.items():
        for r in rs:
            assert abs(r - rate) / rate < 0.10, f"node {node[:12]}: {r / 1e6:.3f} Mbit/s, configured 4 Mbit/s"
    # kernel counters inside each task's namespace carried at least the payload the sink received
    for d in range(1, n):
        assert kt["devices"][str(d)]["uplink_bytes"] >= 0.95 * rx.timeline[d][-1][1]
    assert sum(v["devices"] for v in kt["nodes"].values()) == n and len(kt["nodes"]) == 2
    assert kt["ps"]["ingress_bytes"] >= 0.95 * sum(rx.timeline[d][-1][1] for d in range(n))
    assert [c["device"] for c in record["crashes"]] == [0]
    # nothing of the run left: services, overlay network, task containers on either node
    assert clean.leftovers(record) == {"services": [], "networks": [], "configs": [], "containers": {}}
    assert len(record["cleanup"]["services"]) == (2 if agents == "service" else 1)   # + the agents' service
    assert len(record["cleanup"]["networks"]) == 1
    if agents == "service":
        assert set(record["agent_byes"]) == set(record["nodes"]) and record["agent_dropped_messages"] == 0
    assert node_leftovers(swarm, rt.run_id) == {}
    assert b"sender done" in (run_dir / "logs" / "agent-0001.log").read_bytes()   # each task's output kept
    again = cleanup.clean(run_dir)["swarm"]          # `edgebed clean` afterwards: nothing more to do
    assert not any(again[k] for k in ("services", "networks", "containers", "errors")), again


def test_swarm_run_end_to_end_with_crashes(swarm, tmp_path):
    """The engine on the swarm runtime: real device agents as tasks on both nodes, the PS on this
    host, a fail-stop crash; fidelity verdict and kernel counters as on docker; nothing left."""
    from edgebed.emulator.engine import Engine
    from edgebed.emulator.runtimes.swarm import clean
    sc = parse_scenario({
        "name": "swarm-e2e", "seed": 3, "model": {"name": "mlp"},
        "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01},
        "eval": {"every": 100, "test_samples": 500},
        "workers": {"n": 4, "classes": [
            {"name": "fast", "share": 0.5, "uplink": {"rate": "1mbit"}},
            {"name": "slow", "share": 0.5, "slowdown": 2, "uplink": {"rate": "1mbit"},
             "downlink": {"rate": "50mbit"}}]},
        "failures": {"crash_probability": 0.02},
        "stop": {"updates": 100, "wall_time": "200s"},
        "runtime": {"name": "swarm", "swarm": swarm_section(swarm, max_per_node=1)}})
    res = Engine(sc, out=tmp_path).run()
    s, path = res.summary, res.path
    assert s["status"] == "complete" and s["updates"] == 100, s
    assert s["devices"]["said_hello"] == 4
    manifest = json.loads((path / "manifest.json").read_text())
    applied = manifest["applied"]
    assert manifest["runtime"] == "swarm" and applied["link_rate"] == "kernel" and applied["freeze"] == "pause"
    assert applied["link_delay"] == "app" and "application level" in applied["warning"]
    record = json.loads((path / "swarm.json").read_text())
    by_class = {}
    for d, e in record["devices"].items():
        by_class.setdefault(e["class"], set()).add(e["node"])
    assert all(len(nodes) == 2 for nodes in by_class.values()), record["devices"]   # max_per_node=1
    events = pd.read_csv(path / "events.csv")
    updates = pd.read_csv(path / "updates.csv")
    crashes = events[events.event == "crash"]
    assert s["devices"]["crashed"] == len(crashes) == len(record["crashes"]) >= 1
    for _, ev in crashes.iterrows():
        assert not ((updates["device"] == ev["device"]) & (updates["update"] > ev["update"])).any()
    kt = json.loads((path / "kernel_traffic.json").read_text())
    ps = json.loads((path / "traffic.json").read_text())
    assert set(kt["devices"]) == {str(d) for d in range(4)} and len(kt["nodes"]) == 2
    for d, t in ps["by_device"].items():
        assert kt["devices"][d]["uplink_bytes"] >= 0.95 * t["in_bytes"], (d, kt["devices"][d], t)
    assert kt["ps"]["ingress_bytes"] >= 0.95 * ps["ingress_bytes"]
    fid = s["fidelity"]
    assert fid["host_cpu"] == kt["host_cpu"] and 0 <= kt["host_cpu"]["busy_mean"] <= 1
    assert {u["class"] for u in fid["uplink"]} == {"fast", "slow"}
    for u in fid["uplink"]:
        assert u["configured_mbit"] == 1.0 and 0 < u["peak_mbit_min"] and u["peak_mbit_max"] <= 1.15, u
    assert clean.leftovers(record) == {"services": [], "networks": [], "configs": [], "containers": {}}
    assert len(record["cleanup"]["services"]) == 2


def test_service_agents_release_frozen_tasks_when_the_engine_dies_and_clean_runs(swarm):
    """agents: service, the engine gone without its bye (killed), one frozen task per node: `edgebed
    clean` removes the services and nothing of the run stays on either node — the node agents, the
    paused tasks (each agent removes its node's frozen tasks when Swarm stops it), the network, though
    the engine was given no engine endpoint but the manager's (clean-up reaches the worker only
    through Swarm)."""
    import docker
    from edgebed.emulator.runtimes.docker import images
    from edgebed.emulator.runtimes.swarm import clean
    from edgebed.emulator.runtimes.swarm.runtime import SwarmRuntime
    worker = docker.DockerClient(base_url=swarm["WORKER"], timeout=60)
    try:
        images.resolve(None, worker)           # the offline image on the worker (else imported through `nodes`)
    finally:
        worker.close()
    sc = parse_scenario({"name": "swarmkill", "workers": {"n": 2}, "stop": {"updates": 10},
                         "runtime": {"name": "swarm", "swarm": {"manager": swarm["MANAGER"], "max_per_node": 1,
                                                                "agents": "service", "node_socket": NODE_SOCKET}}})

    class TestRuntime(SwarmRuntime):
        def agent_command(self, spec):
            return [self.image.python, "-c", "import time; time.sleep(120)"]
    run_dir = Path(tempfile.mkdtemp(prefix="edgebed-swarmkill-"))
    rt = TestRuntime(sc, run_dir)
    assert rt.check() == []
    rt.ps_bind()
    handles = rt.start([AgentSpec(d, "default", "") for d in range(2)])
    try:
        assert {rt.record["devices"][str(d)]["node"] for d in range(2)} == set(rt.hub.hello)    # one per node
        assert len(rt.hub.hello) == 2 and list(rt.record["nodes"]) == [rt.record["manager"]["node_id"]]
        for h in handles:
            h.freeze()
        assert [h.poll() for h in handles] == [None, None]
        rt._save()
        rt.hub.close()                          # the engine dies: no bye, no clean-up of its own
        rt.hub = None
        t0 = time.monotonic()
        report = cleanup.clean(run_dir)["swarm"]
        took = time.monotonic() - t0
        assert len(report["services"]) == 2 and not report["errors"], report
        deadline = time.monotonic() + 30
        while node_leftovers(swarm, rt.run_id) and time.monotonic() < deadline:
            time.sleep(0.5)
        print(f"edgebed clean {took:.1f} s; frozen tasks gone after {time.monotonic() - t0:.1f} s")
        assert node_leftovers(swarm, rt.run_id) == {}
        assert clean.leftovers(rt.record) == {"services": [], "networks": [], "configs": [], "containers": {}}
    finally:
        if rt.hub is not None:
            rt.cleanup()
