"""Let a host process become part of a container: its network namespace and its cgroups.

The docker runtime's ``agents: forked`` mode keeps one container per device as the holder of the
device's network namespace (with its tbf-shaped ``eth0``) and of its cgroups (CPU quota, freezer for
``docker pause``, memory limit), while the agent process itself is forked on the host from a fork
server that has already imported torch — so torch's pages are shared copy-on-write by all agents
instead of being loaded once per container. The forked child calls :func:`enter` before it opens a
socket: from then on its traffic leaves through the container's shaped interface, the quota
throttles it and ``docker pause`` freezes it, exactly as for a process started inside the container.

What the child does *not* share with the container: the mount and PID namespaces (it sees the
host's filesystem, which the offline image bind-mounts read-only anyway, and keeps its host PID).

Needs root (CAP_SYS_ADMIN for ``setns``, write access to the cgroup hierarchies). Linux only.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

CLONE_NEWNET = 0x40000000


class JoinError(OSError):
    """Joining a container's namespace or cgroup failed; the message names which and why."""


def _cgroup_mounts() -> dict[frozenset, str]:
    """Mount point of each cgroup hierarchy, keyed by its controllers (v2: the empty set)."""
    known = {line.split()[0] for line in Path("/proc/cgroups").read_text().splitlines()[1:] if line}
    out: dict[frozenset, str] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _, opts = (post.split() + ["", "", ""])[:3]
        mountpoint = pre.split()[4]
        if fstype == "cgroup2":
            out.setdefault(frozenset(), mountpoint)
        elif fstype == "cgroup":            # v1: super options name the controllers (or name=...)
            ctrls = {o[5:] if o.startswith("name=") else o for o in opts.split(",")
                     if o.startswith("name=") or o in known}
            out.setdefault(frozenset(ctrls), mountpoint)
    return out


def cgroup_procs_files(pid: int) -> list[str]:
    """The ``cgroup.procs`` files a process must be written into to share ``pid``'s cgroups
    (every v1 hierarchy and the v2 unified one that are mounted here)."""
    mounts = _cgroup_mounts()
    files = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        key = frozenset(c.removeprefix("name=") for c in ctrls.split(",") if c)
        mnt = mounts.get(key)
        if mnt is None or path in ("", "/"):
            continue                  # hierarchy not mounted here, or the root cgroup: nothing to join
        f = Path(mnt) / path.lstrip("/") / "cgroup.procs"
        if f.exists():
            files.append(str(f))
    if not files:
        raise JoinError(f"process {pid} is in no cgroup this host can join (see /proc/{pid}/cgroup)")
    return files


def target(pid: int) -> dict:
    """What a child needs to :func:`enter` the container whose first process is ``pid``."""
    return {"netns": f"/proc/{pid}/ns/net", "cgroup_procs": cgroup_procs_files(pid), "holder_pid": pid}


def enter(netns: str, cgroup_procs: list[str], holder_pid: int | None = None) -> None:
    """Move the calling process into the given cgroups, then into the network namespace.

    Call it in a single-threaded process before creating sockets or threads: ``setns`` changes the
    calling thread only, and threads started afterwards inherit it."""
    me = str(os.getpid())
    for f in cgroup_procs:
        try:
            Path(f).write_text(me)
        except OSError as err:
            raise JoinError(f"can't join cgroup {f}: {err} (holder process {holder_pid} gone?)") from None
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fd = os.open(netns, os.O_RDONLY)
    except OSError as err:
        raise JoinError(f"can't open network namespace {netns}: {err}") from None
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise JoinError(f"setns({netns}) failed: {os.strerror(e)} (needs root)")
    finally:
        os.close(fd)


def netns_inode(pid: int | str = "self") -> int:
    """Inode of a process's network namespace (equal inodes: same namespace)."""
    return os.stat(f"/proc/{pid}/ns/net").st_ino
