"""Links: kernel shaping of a device's access link with pyroute2 (tbf for rate, netem when present).

A device's uplink is shaped on egress of the container's ``eth0`` inside its network namespace, its
downlink on egress of the host-side veth peer; both are plain root qdiscs with handle ``1:``. Whatever
the kernel cannot do (this kernel has no netem) is reported per property as ``"app"`` so the runtime
hands it to the agent's application-level link instead. Interface byte counters are read here too.
No ``tc`` or ``ip`` binary is run: everything goes through netlink.
"""
from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional, Union

from ....timing import tbf_burst  # one definition: the expected timing (edgebed/timing.py) models the burst

LINK_PROPS = ("rate", "delay", "jitter", "loss")
ROOT_HANDLE = 0x10000          # "1:" — root qdisc installed by edgebed
NETEM_CHILD_HANDLE = 0x20000   # "2:" — tbf below netem when both are used
TC_H_ROOT = 0xFFFFFFFF
# Smallest tbf queue in bytes. Measured here, 8 containers at 1 mbit on a loaded 2-core host:
# 64 KiB → goodput 0.86–0.97 Mbit/s (TSO bursts overflow the queue, TCP stalls on local drops);
# 256 KiB → 0.958–0.961 Mbit/s, i.e. the 1448/1514 payload share of the rate. It is about 2 s of
# queue at 1 mbit: a buffered edge uplink; only the device's own messages queue in it.
LIMIT_MIN = 256 * 1024

NetnsRef = Union[None, str, int]   # None: the host's namespace; "/proc/PID/ns/net", a name, or a pid


class LinkError(RuntimeError):
    """A qdisc or interface operation failed; the message names the interface and namespace."""


_CLONE_NEWNET = 0x40000000
NEW_NETNS = "new"     # iproute(NEW_NETNS): a private, anonymous namespace that lives as long as the socket


def _netns_path(netns: NetnsRef) -> Optional[str]:
    if netns is None or netns == NEW_NETNS:
        return netns
    if isinstance(netns, int):
        return f"/proc/{netns}/ns/net"
    return netns if "/" in netns else f"/run/netns/{netns}"


def _netlink_socket_in(netns: str) -> int:
    """A NETLINK_ROUTE socket bound to another network namespace; returns its fd.

    Made by a short-lived thread that enters the namespace (setns/unshare act on the calling thread
    only) and comes back. pyroute2's own ``IPRoute(netns=...)`` forks a helper and ends it with
    SIGTERM; a fork inherits the engine's Python SIGTERM handler, and a child that catches it runs on
    in a copy of the engine. No fork here."""
    import ctypes
    import socket
    import threading
    libc = ctypes.CDLL(None, use_errno=True)
    out: dict = {}

    def run():
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            if netns == NEW_NETNS:
                rc = libc.unshare(_CLONE_NEWNET)
            else:
                fd = os.open(netns, os.O_RDONLY)
                try:
                    rc = libc.setns(fd, _CLONE_NEWNET)
                finally:
                    os.close(fd)
            if rc != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"cannot enter network namespace {netns}: {os.strerror(err)}")
            try:
                out["fd"] = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0).detach()
            finally:
                if libc.setns(own, _CLONE_NEWNET) != 0:
                    out["stuck"] = True   # this thread stays elsewhere; it ends right away anyway
        except BaseException as err:
            out["err"] = err
        finally:
            os.close(own)

    t = threading.Thread(target=run, name="edgebed-netns")
    t.start()
    t.join()
    if "err" in out:
        raise out["err"]
    return out["fd"]


def open_iproute(netns: NetnsRef = None):
    """An ``IPRoute`` socket bound to ``netns`` for as long as the caller keeps it (close() it). It
    holds the namespace alive, so counters stay readable after the namespace's last process ended."""
    from pyroute2 import IPRoute
    path = _netns_path(netns)
    if path is None:
        return IPRoute()
    try:
        fd = _netlink_socket_in(path)
    except FileNotFoundError as err:
        raise LinkError(f"network namespace {path} does not exist (container gone?)") from err
    return IPRoute(fileno=fd)


@contextmanager
def iproute(netns: NetnsRef = None) -> Iterator["object"]:
    """An ``IPRoute`` socket in the host namespace or in ``netns`` (a pid, a path such as
    ``/proc/PID/ns/net``, a name under /run/netns, or NEW_NETNS)."""
    ipr = open_iproute(netns)
    try:
        yield ipr
    finally:
        ipr.close()


def ifindex(ifname: str, netns: NetnsRef = None) -> int:
    with iproute(netns) as ipr:
        found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise LinkError(f"no interface {ifname!r} in namespace {netns or 'host'}")
    return found[0]


# --- what the kernel can do ---------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def kernel_qdiscs() -> dict[str, bool]:
    """Which qdisc kinds this kernel accepts: {"tbf": .., "htb": .., "netem": ..}.

    Probed once per process by adding each kind to ``lo`` of a private network namespace that
    vanishes with the probe's socket (needs root); without root every kind reports False, so callers
    fall back to application level."""
    result = {"tbf": False, "htb": False, "netem": False}
    if os.geteuid() != 0:
        return result
    try:
        with iproute(NEW_NETNS) as ipr:
            lo = ipr.link_lookup(ifname="lo")[0]
            probes = {
                "tbf": dict(rate=_rate_arg(1e6), burst=16000, latency="100ms"),
                "htb": dict(default=1),
                "netem": dict(delay=1000),
            }
            for kind, kw in probes.items():
                try:
                    ipr.tc("add", kind, lo, handle=ROOT_HANDLE, **kw)
                    result[kind] = True
                    ipr.tc("del", index=lo, handle=ROOT_HANDLE, parent=TC_H_ROOT)
                except Exception:  # NetlinkError ENOENT: the kernel lacks this qdisc
                    pass
    except (ImportError, OSError):
        pass
    return result


def levels(profile, qdiscs: Optional[dict] = None) -> dict[str, str]:
    """Level at which each property of a ``LinkProfile`` would be applied: kernel | app | none.

    "none" means the property is not asked for (rate unset, delay/jitter/loss zero)."""
    q = kernel_qdiscs() if qdiscs is None else qdiscs
    out = {}
    asked = {"rate": profile.rate is not None, "delay": profile.delay > 0,
             "jitter": profile.jitter > 0, "loss": profile.loss > 0}
    for prop, wanted in asked.items():
        if not wanted:
            out[prop] = "none"
        elif prop == "rate":
            out[prop] = "kernel" if q.get("tbf") else "app"
        else:
            out[prop] = "kernel" if q.get("netem") else "app"
    return out


# --- shaping ------------------------------------------------------------------------------------

def _rate_arg(rate_bps: float) -> str:
    return f"{max(int(rate_bps), 8)}bit"


def tbf_limit(rate_bps: float, latency: float) -> int:
    """Queue length in bytes: ``latency`` seconds at the rate, at least LIMIT_MIN, plus the burst."""
    return int(max(rate_bps / 8 * latency, LIMIT_MIN) + tbf_burst(rate_bps))




@dataclass(frozen=True)
class Shaped:
    """What ``shape`` installed on one interface: property → "kernel" | "app" | "none"."""
    ifindex: int
    netns: Optional[str]
    qdisc: Optional[str]          # kind of the root qdisc installed, None if nothing was installed
    levels: dict


def shape(index: int, profile, netns: NetnsRef = None, latency: float = 0.1) -> Shaped:
    """Shape egress of ``index`` with what this kernel offers (see ``shape_with``)."""
    return shape_with(index, profile, None, netns, latency)


def shape_with(index: int, profile, qdiscs: Optional[dict], netns: NetnsRef = None,
               latency: float = 0.1) -> Shaped:
    """Shape egress of interface ``index`` (in ``netns``) to ``profile`` (an edgebed LinkProfile).

    Rate → tbf (queue: ``latency`` seconds at that rate, at least LIMIT_MIN bytes); delay/jitter/loss → netem when the
    kernel has it (tbf as netem's child then), else left to the application ("app"). Replaces any root
    qdisc edgebed installed before. Returns what was applied at which level."""
    lv = levels(profile, qdiscs)
    want_netem = any(lv[p] == "kernel" for p in ("delay", "jitter", "loss"))
    want_tbf = lv["rate"] == "kernel"
    ns = _netns_path(netns)
    if not (want_netem or want_tbf):
        return Shaped(index, ns, None, lv)
    unshape(index, netns)
    try:
        with iproute(netns) as ipr:
            tbf = dict(rate=_rate_arg(profile.rate), burst=tbf_burst(profile.rate),
                       limit=tbf_limit(profile.rate, latency)) if want_tbf else None
            if want_netem:
                ipr.tc("add", "netem", index, handle=ROOT_HANDLE,
                       delay=int(profile.delay * 1e6), jitter=int(profile.jitter * 1e6),
                       loss=profile.loss * 100)
                if tbf:
                    ipr.tc("add", "tbf", index, handle=NETEM_CHILD_HANDLE, parent=ROOT_HANDLE + 1, **tbf)
                kind = "netem+tbf" if tbf else "netem"
            else:
                ipr.tc("add", "tbf", index, handle=ROOT_HANDLE, **tbf)
                kind = "tbf"
    except Exception as err:
        raise LinkError(f"could not shape interface #{index} in namespace {ns or 'host'}: {err}") from err
    return Shaped(index, ns, kind, lv)


INGRESS_HANDLE = 0xFFFF0000   # "ffff:" — the ingress qdisc
IFB_NAME = "ifb-down"          # where a container's ingress is redirected to be shaped


def shape_ingress(index: int, rate: float, netns: NetnsRef = None, latency: float = 0.1,
                  ifb: str = IFB_NAME) -> str:
    """Shape what arrives on interface ``index`` to ``rate`` bits/s from inside its own namespace: an
    ingress qdisc redirects every packet to a new ifb device whose egress holds a tbf. This is how a
    container shapes its own downlink (the host-side veth, which the Docker runtime shapes instead,
    is out of its reach). Needs CAP_NET_ADMIN and the ifb module. Returns the ifb device's name."""
    try:
        with iproute(netns) as ipr:
            ipr.link("add", ifname=ifb, kind="ifb")
            ifb_index = ipr.link_lookup(ifname=ifb)[0]
            ipr.link("set", index=ifb_index, state="up")
            ipr.tc("add", "tbf", ifb_index, handle=ROOT_HANDLE, rate=_rate_arg(rate), burst=tbf_burst(rate),
                   limit=tbf_limit(rate, latency))
            ipr.tc("add", "ingress", index, INGRESS_HANDLE)
            # u32 matching every packet (mask 0 at offset 0); protocol ETH_P_ALL
            ipr.tc("add-filter", "u32", index, parent=INGRESS_HANDLE, protocol=0x0003, prio=1,
                   keys=["0x0/0x0+0"], target=ROOT_HANDLE,
                   action=[{"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb_index}])
    except Exception as err:
        raise LinkError(f"could not shape ingress of interface #{index} in namespace "
                        f"{_netns_path(netns) or 'host'} through {ifb}: {err} (needs CAP_NET_ADMIN and "
                        "the ifb kernel module: modprobe ifb)") from err
    return ifb


def unshape(index: int, netns: NetnsRef = None) -> bool:
    """Remove the root qdisc edgebed installed (handle 1:) on ``index``; True if one was removed.

    Deletes by handle/parent without a kind: pyroute2 0.9.7's ``tc("del", "tbf", ...)`` raises
    KeyError 'rate'. An interface that is gone (its container removed) counts as already clean."""
    try:
        with iproute(netns) as ipr:
            if root_qdisc(index, netns=None, _ipr=ipr) is None:
                return False
            ipr.tc("del", index=index, handle=ROOT_HANDLE, parent=TC_H_ROOT)
            return True
    except (OSError, LinkError):
        return False
    except Exception as err:
        if _is_gone(err):
            return False
        raise


def root_qdisc(index: int, netns: NetnsRef = None, _ipr=None) -> Optional[str]:
    """Kind of the edgebed root qdisc (handle 1:) on ``index``, or None."""
    def look(ipr):
        for q in ipr.get_qdiscs(index):
            if q["handle"] == ROOT_HANDLE and q["parent"] == TC_H_ROOT:
                return q.get_attr("TCA_KIND")
        return None
    if _ipr is not None:
        return look(_ipr)
    with iproute(netns) as ipr:
        return look(ipr)


def _is_gone(err: Exception) -> bool:
    code = getattr(err, "code", None)
    return code in (19, 2, 22)    # ENODEV, ENOENT, EINVAL (interface vanished mid-call)


# --- interfaces and counters --------------------------------------------------------------------

def counters(index: int, netns: NetnsRef = None) -> dict[str, int]:
    """Kernel byte/packet counters of one interface (cumulative since it was created).

    rx/tx are seen from that interface: a container's eth0 tx_bytes is the device's uplink on the wire
    (payload + TCP/IP/Ethernet headers)."""
    with iproute(netns) as ipr:
        msgs = ipr.link("get", index=index)
    st = msgs[0].get_attr("IFLA_STATS64") or msgs[0].get_attr("IFLA_STATS")
    return {k: int(st[k]) for k in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "tx_dropped")}


def veth_peer(pid: int, ifname: str = "eth0") -> tuple[int, int, str]:
    """For the process ``pid`` (a container's init): (ifindex of its ``ifname``, ifindex and name of
    the host-side veth peer). The peer index comes from IFLA_LINK and is cross-checked (the host link
    must be a veth whose own IFLA_LINK points back), since an index alone may name another namespace's
    interface."""
    with iproute(pid) as ipr:
        found = ipr.link("get", ifname=ifname)
    inner = found[0]["index"]
    peer = found[0].get_attr("IFLA_LINK")
    if not peer:
        raise LinkError(f"{ifname} of pid {pid} is not a veth (no IFLA_LINK)")
    with iproute(None) as ipr:
        try:
            host = ipr.link("get", index=peer)[0]
        except Exception as err:
            raise LinkError(f"host-side peer #{peer} of pid {pid}'s {ifname} not found: {err}") from err
    info = host.get_attr("IFLA_LINKINFO")
    kind = info.get_attr("IFLA_INFO_KIND") if info else None
    if kind != "veth" or host.get_attr("IFLA_LINK") != inner:
        raise LinkError(f"host-side peer of pid {pid}'s {ifname} not found: host #{peer} is "
                        f"{host.get_attr('IFLA_IFNAME')} ({kind}), not its veth peer")
    return inner, peer, host.get_attr("IFLA_IFNAME")


def bridge_ifname(network_id: str) -> str:
    """Linux name of the bridge Docker creates for a user-defined network (``br-`` + 12 hex)."""
    return "br-" + network_id[:12]


# --- command line: the init step of a compose service ----------------------------------------------

def main(argv=None) -> int:
    """``python -m edgebed.emulator.runtimes.docker.links shape --dev eth0 [--rate BITS_PER_S] [--down-rate BITS_PER_S] -- CMD``

    Shapes egress (``--rate``, the uplink) and ingress (``--down-rate``, the downlink, through an ifb
    device) of ``--dev`` in the caller's own namespace (needs CAP_NET_ADMIN), then execs CMD. Used as
    the first step of a compose agent service; delay/jitter/loss stay with the agent."""
    import argparse
    import sys
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m edgebed.emulator.runtimes.docker.links")
    ap.add_argument("action", choices=["shape"])
    ap.add_argument("--dev", default="eth0")
    ap.add_argument("--rate", type=float, help="uplink (egress) bits/s")
    ap.add_argument("--down-rate", type=float, help="downlink (ingress) bits/s")
    args = ap.parse_args(own)
    from ....scenario import LinkProfile
    # Inside a container there is no way to probe (that needs a fresh namespace): tbf is assumed,
    # and the rest is the agent's.
    if args.rate:
        shaped = shape_with(ifindex(args.dev), LinkProfile(rate=args.rate), {"tbf": True, "htb": True, "netem": False})
        print(f"edgebed: {args.dev} egress shaped: {shaped.qdisc} rate={args.rate:.0f} bit/s", flush=True)
    if args.down_rate:
        ifb = shape_ingress(ifindex(args.dev), args.down_rate)
        print(f"edgebed: {args.dev} ingress shaped: tbf on {ifb} rate={args.down_rate:.0f} bit/s", flush=True)
    if cmd:
        os.execvp(cmd[0], cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
