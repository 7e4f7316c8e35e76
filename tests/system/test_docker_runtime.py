"""Docker runtime with real containers: shaped uplinks, freezing, CPU quotas, teardown.

The containers here run small stdlib programs instead of the device agent (the runtime's
``agent_command`` hook), so each property is measured on its own: bytes over the kernel-shaped link,
silence of a paused container, compute rate under a CPU quota. The agent itself runs in
test_docker_engine.py.
"""
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

import pytest

from edgebed.emulator import cleanup
from edgebed.emulator.runtimes.docker import clean as docker_clean
from edgebed.emulator.runtimes.docker import links
from edgebed.emulator.runtimes.base import AgentSpec
from edgebed.scenario import parse_scenario
from tests.capabilities import require, require_docker, require_root

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.timeout(180)]
GEN = str(Path(__file__).with_name("trafficgen.py"))

BUSY = """
import sys, time
end = time.monotonic() + float(sys.argv[1]); n = 0; marks = []
nxt = time.monotonic() + 1
while time.monotonic() < end:
    for _ in range(2000):
        n += 1
    if time.monotonic() >= nxt:
        marks.append(n); nxt += 1
print(" ".join(map(str, marks)), flush=True)
"""


def scenario(classes, n):
    return parse_scenario({"name": "dockertest", "workers": {"n": n, "classes": classes},
                           "stop": {"updates": 10}, "runtime": {"name": "docker", "docker": {"quota_after": "start"}}})


class Receiver:
    """TCP sink on the bridge gateway; per device a timeline of (monotonic time, cumulative bytes)."""

    def __init__(self, host: str, n: int):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(n)
        self.port = self.sock.getsockname()[1]
        self.timeline: dict[int, list] = {}
        self.threads = [threading.Thread(target=self._accept, args=(n,), daemon=True)]
        self.threads[0].start()

    def _accept(self, n):
        for _ in range(n):
            conn, _ = self.sock.accept()
            t = threading.Thread(target=self._read, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _read(self, conn):
        # Times are the kernel's receive timestamps (SO_TIMESTAMPNS, realtime clock → monotonic), so
        # reader threads that a busy host schedules late do not shift them.
        conn.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)
        offset = time.time() - time.monotonic()
        head, line, total, device = b"", None, 0, None
        while True:
            data, anc, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(16))
            if not data:
                break
            if device is None:
                head += data
                if b"\n" not in head:
                    continue
                dev, data = head.split(b"\n", 1)
                device = int(dev)
                line = self.timeline.setdefault(device, [])
            stamp = next((struct.unpack("qq", raw[:16]) for lvl, kind, raw in anc
                          if lvl == socket.SOL_SOCKET and len(raw) >= 16), None)
            now = stamp[0] + stamp[1] * 1e-9 - offset if stamp else time.monotonic()
            total += len(data)
            line.append((now, total))
        conn.close()

    def bytes_between(self, device, t0, t1) -> int:
        pts = self.timeline.get(device, [])
        def at(t):
            b = 0
            for ts, tot in pts:
                if ts > t:
                    break
                b = tot
            return b
        return at(t1) - at(t0)

    def goodput(self, device) -> float:
        """Payload bits/s from the first to the last byte received (kernel receive times). The runtime
        gates each container until its qdiscs are in place, so every byte crossed the shaped link."""
        pts = self.timeline[device]
        return pts[-1][1] * 8 / (pts[-1][0] - pts[0][0])

    def close(self):
        self.sock.close()


@pytest.fixture
def make_runtime():
    require_docker()
    require_root()
    from edgebed.emulator.runtimes.docker.runtime import DockerRuntime
    made = []

    def make(sc, command):
        run_dir = Path(tempfile.mkdtemp(prefix="edgebed-dockertest-"))

        class TestRuntime(DockerRuntime):
            def agent_command(self, spec):
                return command(self, spec)
        rt = TestRuntime(sc, run_dir)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.cleanup()
        # teardown leaves nothing of the run behind: containers, network, host-side qdiscs
        assert docker_clean.leftovers(rt.run_id) == {"containers": [], "networks": []}
        for c in rt.record["containers"].values():
            for q in c.get("qdiscs", []):
                if q["where"] == "host veth":
                    with pytest.raises(links.LinkError):
                        links.ifindex(q["ifname"])


def sender(seconds):
    def command(rt, spec):
        host, port = spec.env["SINK"].rsplit(":", 1)
        code = (f"import socket, time\n"
                f"s = socket.create_connection(({host!r}, {port}), timeout=30)\n"
                f"s.sendall(b'{spec.device}\\n')\n"
                f"chunk = b'x' * 65536; end = time.monotonic() + {seconds}\n"
                f"while time.monotonic() < end: s.send(chunk)\n"
                f"s.close()\n")
        return [rt.image.python, "-c", code]
    return command


@pytest.mark.measures
def test_uplink_goodput_of_8_containers_within_10_percent_of_1mbit(make_runtime):
    n, rate = 8, 1e6
    sc = scenario([{"name": "edge", "share": 1, "uplink": {"rate": "1mbit"}, "downlink": {"rate": "10mbit"}}], n)
    rt = make_runtime(sc, sender(8.0))
    rt.ps_bind()
    rx = Receiver(rt.gateway, n)
    try:
        handles = rt.start([AgentSpec(d, "edge", "", env={"SINK": f"{rt.gateway}:{rx.port}"}) for d in range(n)])
        for c in rt.record["containers"].values():
            assert c["uplink"]["rate"] == "kernel" and [q["kind"] for q in c["qdiscs"]] == ["tbf", "tbf"]
        deadline = time.monotonic() + 60
        while any(h.poll() is None for h in handles) and time.monotonic() < deadline:
            rt.sample_counters()
            time.sleep(0.2)
        assert [h.poll() for h in handles] == [0] * n
        time.sleep(0.5)
        rates = {d: rx.goodput(d) for d in range(n)}
    finally:
        rx.close()
    print("uplink goodput Mbit/s:", {d: round(r / 1e6, 3) for d, r in rates.items()})
    for d, r in rates.items():
        assert abs(r - rate) / rate < 0.10, f"device {d}: {r / 1e6:.3f} Mbit/s, configured 1 Mbit/s"
    # kernel counters: the veth carried at least the payload (plus headers)
    kt = rt.kernel_traffic()
    for d in range(n):
        payload = rx.timeline[d][-1][1]
        assert kt["devices"][str(d)]["uplink_bytes"] >= payload * 0.95
    assert kt["classes"]["edge"]["devices"] == n


def test_paused_container_stops_contributing(make_runtime):
    sc = scenario([{"name": "edge", "share": 1, "uplink": {"rate": "4mbit"}}], 2)
    rt = make_runtime(sc, sender(12.0))
    rt.ps_bind()
    rx = Receiver(rt.gateway, 2)
    try:
        handles = rt.start([AgentSpec(d, "edge", "", env={"SINK": f"{rt.gateway}:{rx.port}"}) for d in range(2)])
        deadline = time.monotonic() + 30
        while len(rx.timeline) < 2 or any(not rx.timeline[d] for d in range(2)):
            assert time.monotonic() < deadline, "senders did not connect"
            time.sleep(0.1)
        time.sleep(1.0)
        rt.sample_counters(force=True)
        handles[0].freeze()
        t_freeze = time.monotonic()
        assert handles[0].poll() is None            # a frozen agent is still "running"
        # The kernel still delivers what the frozen process had already handed to its socket and
        # qdisc (the bytes in flight a crash loses); wait until that drained, then expect silence.
        t_quiet = t_freeze
        while time.monotonic() - t_quiet < 1.0:
            assert time.monotonic() - t_freeze < 15, "frozen device kept sending"
            time.sleep(0.2)
            last = rx.timeline[0][-1][0]
            t_quiet = max(t_quiet, last)
        in_flight = rx.bytes_between(0, t_freeze, t_quiet + 0.01)
        rt.sample_counters(force=True)
        before = dict(rt._counters[0])
        time.sleep(1.5)
        rt.sample_counters(force=True)
        t_end = time.monotonic()
        print(f"bytes delivered after the freeze (in flight): {in_flight}, drained after "
              f"{t_quiet - t_freeze:.2f} s")
        # bounded by the socket send buffer + qdisc queue, not a live sender
        wmem_max = 4 * 1024 * 1024                            # Linux's default tcp_wmem maximum
        assert in_flight <= wmem_max + links.tbf_limit(4e6, 0.1)
        assert rx.bytes_between(0, t_quiet + 0.01, t_end) == 0
        # on the wire only the frozen netns's kernel may still answer (ARP: 42-byte frames)
        assert rt._counters[0]["uplink_bytes"] - before["uplink_bytes"] < 500
        assert rx.bytes_between(1, t_freeze, t_end) > 0        # the other device kept sending
        handles[0].terminate()                     # must not thaw it: it is killed
        assert handles[0].wait(10) == 137
        assert handles[1].wait(20) == 0
    finally:
        rx.close()


def _cpu_usage_ns(container_id: str) -> int:
    """CPU time the container's cgroup used (cgroup v1 cpuacct or v2 cpu.stat)."""
    for path in (f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage",
                 f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}/cpuacct.usage"):
        if Path(path).exists():
            return int(Path(path).read_text())
    for path in Path("/sys/fs/cgroup").glob(f"**/*{container_id}*/cpu.stat"):
        for line in path.read_text().splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) * 1000
    raise FileNotFoundError(f"no CPU accounting found for container {container_id[:12]}")


@pytest.mark.measures
def test_cpu_quota_classes_order_compute_rates(make_runtime):
    classes = [{"name": "fast", "share": 1 / 3, "slowdown": 1}, {"name": "medium", "share": 1 / 3, "slowdown": 2},
               {"name": "slow", "share": 1 / 3, "slowdown": 4}]
    sc = parse_scenario({"name": "quota", "workers": {"n": 3, "classes": classes}, "stop": {"updates": 10},
                         "runtime": {"name": "docker", "docker": {"quota_after": "start", "base_cpus": 0.6}}})
    seconds = 6

    def busy(rt, spec):
        return [rt.image.python, "-c", BUSY, str(seconds)]
    rt = make_runtime(sc, busy)
    rt.ps_bind()
    names = ["fast", "medium", "slow"]
    handles = rt.start([AgentSpec(d, names[d], "") for d in range(3)])
    quotas = [0.6, 0.3, 0.15]
    assert [rt.record["containers"][str(d)]["cpus"] for d in range(3)] == quotas
    t0 = time.monotonic()
    use0 = [_cpu_usage_ns(h.container.id) for h in handles]
    time.sleep(4.0)
    used = [(_cpu_usage_ns(h.container.id) - u) / 1e9 / (time.monotonic() - t0) for h, u in zip(handles, use0)]
    for h in handles:
        assert h.wait(60) == 0
    rates = []
    for h in handles:
        marks = [int(x) for x in h.container.logs().split()]
        rates.append((marks[-1] - marks[1]) / (len(marks) - 2))     # iterations/s after the first second
    print("CPU used (cores):", [round(u, 3) for u in used], "quotas:", quotas,
          "| iterations/s:", [round(r) for r in rates],
          "| realized fast/medium, fast/slow:", round(rates[0] / rates[1], 2), round(rates[0] / rates[2], 2))
    # the quota is a ceiling the kernel enforces whatever else runs on the host
    for u, q in zip(used, quotas):
        assert u <= q * 1.15
    # the ordering can only show when the host leaves the fast class its quota; other processes
    # saturating both cores starve all three below their quotas alike (CI's host is otherwise idle)
    require(used[0] >= 0.5 * quotas[0], "a host CPU not saturated by other processes",
            f"fast container got {used[0]:.2f} of its {quotas[0]} cores; load {Path('/proc/loadavg').read_text().split()[0]}")
    assert rates[0] > rates[1] > rates[2]
    assert rates[0] / rates[2] > 2.0


def test_clean_removes_exactly_the_recorded_run(make_runtime):
    """An engine that died without teardown: `edgebed clean <run-dir>` removes its objects only."""
    import docker
    sc = scenario([{"name": "edge", "share": 1, "uplink": {"rate": "1mbit"}}], 2)

    def sleeper(rt, spec):
        return [rt.image.python, "-c", "import time; time.sleep(120)"]
    rt = make_runtime(sc, sleeper)
    other = make_runtime(sc, sleeper)
    rt.ps_bind()
    other.ps_bind()
    handles = rt.start([AgentSpec(d, "edge", "") for d in range(2)])
    other.start([AgentSpec(0, "edge", "")])
    handles[1].freeze()                              # a frozen container is removed too
    report = cleanup.clean(rt.run_dir)
    assert len(report["docker"]["containers"]) == 2 and len(report["docker"]["networks"]) == 1
    assert docker_clean.leftovers(rt.run_id) == {"containers": [], "networks": []}
    left = docker_clean.leftovers(other.run_id)
    assert len(left["containers"]) == 1 and len(left["networks"]) == 1
    assert "removed 2 containers, 1 networks" in cleanup.describe(report)
    client = docker.from_env()
    assert client.containers.get(left["containers"][0]).status == "running"


def test_forked_agent_joins_netns_and_cgroups_of_its_container(make_runtime):
    """``agents: forked``: a host process that entered its container is shaped, throttled by the
    container's CPU quota, frozen by docker pause, and killed by `edgebed clean` after an engine crash."""
    import os
    import signal

    from edgebed.emulator.runtimes.docker import nsjoin
    from edgebed.emulator.runtimes.docker.handles import ForkedAgentHandle
    sc = parse_scenario({"name": "forked", "workers": {"n": 2, "classes": [
        {"name": "edge", "share": 1, "uplink": {"rate": "1mbit"}}]}, "stop": {"updates": 10},
        "runtime": {"name": "docker", "docker": {"agents": "forked", "quota_after": "start",
                                                  "base_cpus": 0.2}}})
    rt = make_runtime(sc, None)
    pids = []

    def fork_busy(specs, handles):          # stands in for the agent: enter, then spin
        for spec, h in zip(specs, handles):
            pid = os.fork()
            if pid == 0:
                try:
                    nsjoin.enter(**h.join)
                    while True:
                        pass
                finally:
                    os._exit(1)
            pids.append(pid)
            rt.record["containers"][str(spec.device)]["agent_pid"] = pid
        rt._save()
    rt._fork_agents = fork_busy
    rt.ps_bind()
    try:
        handles = rt.start([AgentSpec(d, "edge", "") for d in range(2)])
        assert all(isinstance(h, ForkedAgentHandle) for h in handles)
        holder = rt.record["containers"]["0"]["pid"]
        time.sleep(0.5)
        assert nsjoin.netns_inode(pids[0]) == nsjoin.netns_inode(holder) != nsjoin.netns_inode()
        assert rt.record["containers"]["0"]["cpus"] == 0.2
        # the container's CPU accounting now includes the host process, capped by the quota
        t0, u0 = time.monotonic(), _cpu_usage_ns(handles[0].container.id)
        time.sleep(3.0)
        used = (_cpu_usage_ns(handles[0].container.id) - u0) / 1e9 / (time.monotonic() - t0)
        assert 0.05 < used <= 0.2 * 1.15, used
        handles[0].freeze()                                   # docker pause freezes it
        time.sleep(0.3)
        state = Path(f"/proc/{pids[0]}/status").read_text().split("State:")[1].split()[0]
        assert state == "D", state                            # frozen by the cgroup freezer
        # an engine that died: `edgebed clean <run-dir>` kills the recorded host processes too
        report = cleanup.clean(rt.run_dir)
        assert sorted(report["docker"]["agents"]) == sorted(pids)
        for pid in pids:
            assert os.waitpid(pid, 0)[1] & 0x7f == signal.SIGKILL
        pids.clear()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)


class _EventLog:
    """The PS's ``event`` and ``devices`` as the docker runtime's drive uses them."""
    devices: dict = {}

    def __init__(self):
        self.rows = []

    def event(self, device, event, detail=""):
        self.rows.append((device, event, detail))


def _goodput_phases(make_runtime, sc, n: int, during: tuple | dict, after: tuple):
    """Run ``sc``'s ``n`` traffic senders on docker with its dynamics driven live; per phase ("before"
    from half a second after each sender's first byte — containers start late on a loaded host — to
    5 s, ``during`` (one span, or a span per device) and ``after``) the goodput in bit/s each device got
    through, and the event rows."""
    rt = make_runtime(sc, sender(11.5))
    assert not [p for p in rt.check() if "dynamics" in p]
    rt.ps_bind()
    rx = Receiver(rt.gateway, n)
    log = _EventLog()
    try:
        handles = rt.start([AgentSpec(d, "edge", "", env={"SINK": f"{rt.gateway}:{rx.port}"}) for d in range(n)])
        rt.clock.running()
        t0 = rt.clock.t_running
        deadline = time.monotonic() + 60
        while any(h.poll() is None for h in handles) and time.monotonic() < deadline:
            rt.drive(log, 0.05)
        time.sleep(0.5)
        first = {d: rx.timeline[d][0][0] - t0 for d in range(n)}
        spans = {"before": lambda d: (first[d] + 0.5, 5.0), "after": lambda d: after,
                 "during": lambda d: during[d] if isinstance(during, dict) else during}
        assert all(first[d] < 3.5 for d in range(n)), first
        phases = {name: {d: rx.bytes_between(d, t0 + span(d)[0], t0 + span(d)[1]) * 8 / (span(d)[1] - span(d)[0])
                         for d in range(n)} for name, span in spans.items()}
    finally:
        rx.close()
    print("goodput Mbit/s per phase:", {k: {d: round(r / 1e6, 3) for d, r in v.items()} for k, v in phases.items()})
    return phases, [(ev, detail) for _, ev, detail in log.rows]


@pytest.mark.measures
def test_timed_link_event_and_partition_change_the_links_live_and_heal(make_runtime):
    """dynamics.events on docker, in one run of three senders on 4 mbit uplinks: device 1's uplink drops
    to 1 mbit from 5 s for 3 s (the tbf's rate changed in place in the container's namespace), then
    returns; device 0's eth0 is down from 5 s to 7 s — nothing of it reaches the receiver — and it sends
    at its shaped rate again after (TCP retransmitted across it); device 2, in neither event, never
    changes. Goodput measured per phase at the receiver. (Two runs before, one per event: 26 s.)"""
    n = 3
    sc = parse_scenario({"name": "dockerlive", "workers": {"n": n, "classes": [
        {"name": "edge", "share": 1, "uplink": {"rate": "4mbit"}, "downlink": {"rate": "10mbit"}}]},
        "stop": {"updates": 10}, "runtime": {"name": "docker", "docker": {"quota_after": "start"}},
        "dynamics": {"events": [{"at": "5s", "duration": "3s", "kind": "link", "devices": [1],
                                 "direction": "uplink", "set": {"rate": "1mbit"}},
                                {"at": "5s", "duration": "2s", "kind": "partition", "devices": [0]}]}})
    phases, rows = _goodput_phases(make_runtime, sc, n, during={0: (5.3, 7.0), 1: (5.6, 8.0), 2: (5.3, 8.0)},
                                   after=(9.0, 11.0))
    print("events:", rows)
    assert phases["during"][0] < 0.05 * 4e6                       # cut off
    assert abs(phases["during"][1] - 1e6) / 1e6 < 0.15            # slowed
    assert abs(phases["during"][2] - 4e6) / 4e6 < 0.15            # untouched
    for d in range(n):
        assert abs(phases["before"][d] - 4e6) / 4e6 < 0.15
        assert abs(phases["after"][d] - 4e6) / 4e6 < 0.15
    scheduled = {"net-link": 5.0, "net-link-end": 8.0, "partition": 5.0, "partition-end": 7.0}
    assert sorted(ev for ev, _ in rows) == sorted(scheduled), rows
    for ev, detail in rows:
        applied = float(detail.split("applied_s=")[1].split()[0])
        assert 0 <= applied - scheduled[ev] < 0.1 * scheduled[ev], (ev, applied)   # within 10 % of its time
        assert ("devices=1" if ev.startswith("net-link") else "devices=0") in detail.split(), (ev, detail)


@pytest.mark.measures
def test_a_restarted_container_is_shaped_again(make_runtime):
    """A container restart gives the device a new namespace and veth (its qdiscs are gone with the
    old ones); restart_device installs them again before the agent runs: the restarted sender's
    goodput is at its class's 1 mbit again, not at the bridge's line rate."""
    sc = scenario([{"name": "edge", "share": 1, "uplink": {"rate": "1mbit"}, "downlink": {"rate": "10mbit"}}], 1)
    rt = make_runtime(sc, sender(4.0))
    rt.ps_bind()
    rx = Receiver(rt.gateway, 2)   # the first start's connection, then the restarted one's
    try:
        spec = AgentSpec(0, "edge", "", env={"SINK": f"{rt.gateway}:{rx.port}"})
        (h,) = rt.start([spec])
        assert h.wait(30) == 0
        time.sleep(0.5)
        first = rx.goodput(0)
        rx.timeline.clear()            # (its reader is done: the sender closed the connection)
        old = dict(rt.record["containers"]["0"])
        pid = rt.restart_device(spec)
        new = rt.record["containers"]["0"]
        assert pid != old["pid"] and new["restarts"] == 1
        assert [q["kind"] for q in new["qdiscs"]] == ["tbf", "tbf"] and new["uplink"]["rate"] == "kernel"
        assert links.root_qdisc(new["eth0"], netns=pid) == "tbf"
        assert h.wait(30) == 0
        time.sleep(0.5)
        again = rx.goodput(0)
    finally:
        rx.close()
    print(f"goodput Mbit/s: first start {first / 1e6:.3f}, after the restart {again / 1e6:.3f}")
    for r in (first, again):
        assert abs(r - 1e6) / 1e6 < 0.10
