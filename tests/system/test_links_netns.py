"""Kernel link shaping (edgebed.emulator.runtimes.docker.links) on a veth pair between two network namespaces."""
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from edgebed.emulator.runtimes.docker import links
from edgebed.scenario import LinkProfile
from tests.capabilities import require_root

pytestmark = [pytest.mark.root, pytest.mark.measures, pytest.mark.timeout(120)]   # goodputs: run alone
GEN = str(Path(__file__).with_name("trafficgen.py"))


@pytest.fixture
def veth_pair():
    """Two fresh namespaces joined by a veth pair, 10.251.x.1 ↔ 10.251.x.2 (only inside them)."""
    require_root()
    from pyroute2 import IPRoute, netns
    tag = uuid.uuid4().hex[:6]
    a, b = f"eb-test-a-{tag}", f"eb-test-b-{tag}"
    netns.create(a)
    netns.create(b)
    try:
        with IPRoute() as ipr:
            ipr.link("add", ifname=f"eba{tag}", kind="veth", peer={"ifname": f"ebb{tag}", "net_ns_fd": b})
            idx = ipr.link_lookup(ifname=f"eba{tag}")[0]
            ipr.link("set", index=idx, net_ns_fd=a)
        octet = int(tag[:2], 16)
        for ns, name, addr in ((a, f"eba{tag}", f"10.251.{octet}.1"), (b, f"ebb{tag}", f"10.251.{octet}.2")):
            with links.iproute(ns) as ipr:
                i = ipr.link_lookup(ifname=name)[0]
                ipr.addr("add", index=i, address=addr, prefixlen=30)
                ipr.link("set", index=i, state="up")
                ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        yield {"a": a, "b": b, "a_if": links.ifindex(f"eba{tag}", a), "b_if": links.ifindex(f"ebb{tag}", b),
               "b_addr": f"10.251.{octet}.2"}
    finally:
        netns.remove(a)
        netns.remove(b)


def _goodput(pair, seconds=5.0, port=5601) -> float:
    srv = subprocess.Popen([sys.executable, GEN, "server", str(port), "--netns", pair["b"]],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(srv.stdout.readline())["listening"] == port
        subprocess.run([sys.executable, GEN, "client", pair["b_addr"], str(port), str(seconds),
                        "--netns", pair["a"]], check=True, timeout=seconds + 30, stdout=subprocess.DEVNULL)
        out, _ = srv.communicate(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return json.loads(out.strip().splitlines()[-1])["rate_bps"]


def test_kernel_probe_reports_tbf_and_netem_consistently():
    require_root()
    q = links.kernel_qdiscs()
    assert q["tbf"] is True          # every kernel the testbed targets has tbf
    config = Path("/proc/config.gz")
    if config.exists():
        import gzip
        text = gzip.decompress(config.read_bytes()).decode()
        assert q["netem"] == ("CONFIG_NET_SCH_NETEM=y" in text or "CONFIG_NET_SCH_NETEM=m" in text)


@pytest.mark.parametrize("rate_mbit", [1, 4])
def test_tbf_uplink_goodput_within_10_percent(veth_pair, rate_mbit):
    rate = rate_mbit * 1e6
    shaped = links.shape(veth_pair["a_if"], LinkProfile(rate=rate), netns=veth_pair["a"])
    assert shaped.qdisc == "tbf" and shaped.levels["rate"] == "kernel"
    assert links.root_qdisc(veth_pair["a_if"], veth_pair["a"]) == "tbf"
    before = links.counters(veth_pair["a_if"], veth_pair["a"])
    measured = _goodput(veth_pair)
    after = links.counters(veth_pair["a_if"], veth_pair["a"])
    print(f"goodput {measured / 1e6:.3f} Mbit/s on a {rate_mbit} mbit tbf")
    assert abs(measured - rate) / rate < 0.10, f"goodput {measured / 1e6:.3f} Mbit/s vs {rate_mbit} Mbit/s"
    # the kernel counted at least the payload on the wire
    assert after["tx_bytes"] - before["tx_bytes"] >= measured / 8 * 4


def test_unshape_restores_full_speed_and_is_idempotent(veth_pair):
    links.shape(veth_pair["a_if"], LinkProfile(rate=1e6), netns=veth_pair["a"])
    assert links.unshape(veth_pair["a_if"], veth_pair["a"]) is True
    assert links.root_qdisc(veth_pair["a_if"], veth_pair["a"]) is None
    assert links.unshape(veth_pair["a_if"], veth_pair["a"]) is False
    assert _goodput(veth_pair, seconds=2.0, port=5602) > 20e6


def test_delay_without_netem_is_left_to_the_app(veth_pair):
    prof = LinkProfile(rate=2e6, delay=0.02, jitter=0.005, loss=0.01)
    shaped = links.shape(veth_pair["a_if"], prof, netns=veth_pair["a"])
    if links.kernel_qdiscs()["netem"]:
        assert shaped.levels["delay"] == "kernel" and shaped.qdisc == "netem+tbf"
    else:
        assert shaped.levels == {"rate": "kernel", "delay": "app", "jitter": "app", "loss": "app"}
        assert shaped.qdisc == "tbf"


def test_veth_peer_found_from_inside_namespace():
    """A process in a namespace whose eth0's peer is in the host namespace, as with a container."""
    require_root()
    from pyroute2 import IPRoute, netns
    tag = uuid.uuid4().hex[:6]
    ns, host_name = f"eb-test-c-{tag}", f"ebh{tag}"
    netns.create(ns)
    try:
        with IPRoute() as ipr:
            ipr.link("add", ifname=host_name, kind="veth", peer={"ifname": "eth0", "net_ns_fd": ns})
            host_idx = ipr.link_lookup(ifname=host_name)[0]
        with subprocess.Popen([sys.executable, "-c",
                               f"from pyroute2 import netns; netns.setns({ns!r}); "
                               "import time; print('in', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True) as proc:
            try:
                assert proc.stdout.readline().strip() == "in"
                inner, peer, name = links.veth_peer(proc.pid)
                assert (peer, name) == (host_idx, host_name)
                assert inner == links.ifindex("eth0", ns)
                # the host end is where the downlink is shaped
                links.shape(peer, LinkProfile(rate=1e6))
                assert links.root_qdisc(peer) == "tbf"
            finally:
                proc.kill()
    finally:
        netns.remove(ns)       # removes eth0 and with it the host end and its qdisc
    deadline = time.monotonic() + 10   # the kernel dismantles a namespace asynchronously
    with IPRoute() as ipr:
        while ipr.link_lookup(ifname=host_name) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ipr.link_lookup(ifname=host_name) == []


def test_veth_peer_in_another_namespace_is_refused(veth_pair):
    with subprocess.Popen([sys.executable, "-c",
                           f"from pyroute2 import netns; netns.setns({veth_pair['a']!r}); "
                           "import time; print('in', flush=True); time.sleep(30)"],
                          stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "in"
            name = _ifname(veth_pair["a"], veth_pair["a_if"])
            with pytest.raises(links.LinkError, match="not found"):
                links.veth_peer(proc.pid, ifname=name)
        finally:
            proc.kill()


def _ifname(ns, index):
    with links.iproute(ns) as ipr:
        return ipr.link("get", index=index)[0].get_attr("IFLA_IFNAME")


@pytest.mark.parametrize("rate_mbit", [2])
def test_ingress_shaping_through_ifb_limits_the_downlink(veth_pair, rate_mbit):
    """What a compose agent does to its own downlink: the receiving side shapes its ingress."""
    rate = rate_mbit * 1e6
    assert links.shape_ingress(veth_pair["b_if"], rate, netns=veth_pair["b"]) == links.IFB_NAME
    goodput = _goodput(veth_pair, port=5611)
    assert 0.85 * rate <= goodput <= 1.05 * rate, f"{goodput / 1e6:.3f} Mbit/s for {rate_mbit} Mbit/s"
