"""Docker clean-up: remove the containers, networks and qdiscs one run labelled and recorded.

``emulator/cleanup.py`` (``edgebed clean``) calls in here for a run's ``docker.json``; the runtime calls
``clean_docker`` at its own teardown. Only objects carrying ``edgebed.run=<run id>`` are touched.
"""
from __future__ import annotations

import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from . import engine, links

RUN_LABEL = "edgebed.run"            # = images.LABEL + ".run"
RUN_DIR_LABEL = "edgebed.run_dir"


def run_id_of(run_dir: Path) -> str:
    """Docker-safe id of a run, from its directory name (unique per run: name + timestamp)."""
    rid = re.sub(r"[^a-zA-Z0-9_.-]", "-", Path(run_dir).resolve().name).strip("-.") or "run"
    return rid[:48]


def _kill_forked_agents(record: dict) -> list[int]:
    """SIGKILL the host processes of ``agents: forked`` devices that are still alive. A pid is only
    killed if it is still inside its container's cgroup (so a reused pid is never hit); a paused
    container is thawed by its removal, which delivers the kill."""
    killed = []
    for c in record.get("containers", {}).values():
        pid, cid = c.get("agent_pid"), c.get("id")
        if not pid or not cid:
            continue
        try:
            if cid not in Path(f"/proc/{pid}/cgroup").read_text():
                continue
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (OSError, ProcessLookupError):
            continue
    return killed


NETWORK_RETRIES = (0.5, 1.0, 2.0, 4.0, 8.0)   # seconds between attempts to remove a run's network
STOPPED = ("created", "exited", "dead")     # container states with no running task to end
# Containers killed, and their exits waited for, at once. One: the engine then handles one exit (and
# releases one endpoint) at a time. With 8 at a time, 4 of 64 teardowns of 60 containers under load left
# a network whose endpoint count stayed above zero with every endpoint released (issue 36); one at a
# time, 0 of 76 in a row (benchmarks/results/docker_teardown_load.txt). It costs ~0.17 s a container (60: 10 s
# against 4.5 s). EDGEBED_KILL_PARALLEL sets another number.
KILL_PARALLEL = max(1, int(os.environ.get("EDGEBED_KILL_PARALLEL", "1")))
EXIT_WAIT = 30.0       # seconds the engine gets to report a killed container exited and release its endpoint


def _attached(network) -> set:
    """Ids of the containers ``network`` still holds an endpoint for (an endpoint without a sandbox is
    listed as ``ep-<endpoint id>``: kept, it blocks removal too)."""
    try:
        network.reload()
    except Exception:          # gone already
        return set()
    return set(network.attrs.get("Containers") or {})


def _end_containers(found: list, networks: list, wait: float = EXIT_WAIT) -> list[str]:
    """SIGKILL every container that still runs (or is paused), wait until the engine reports each
    exited, then until no network lists it: the engine releases a container's endpoint itself when it
    handles the exit, with the endpoint count and the endpoint in step. Returns errors.

    Why not disconnect first (the order before issue 36): on a container still running or exiting (an
    agent that got SIGTERM and is shutting down, slow under CPU load), ``network disconnect`` runs the
    engine's unforced endpoint delete while the container's own exit releases the same endpoint, two
    deletes of one endpoint and its count at once. Here no endpoint is touched while the engine may
    still be releasing it. (That this race is what left issue 36's network is a hypothesis: neither
    order leaked on this host; see docs/running.md.)"""
    errors = []

    def end(c):
        if c.attrs.get("State") == "paused":
            _kill_paused(c)
        try:
            c.kill()                       # 409 when it is not running: nothing to end
        except Exception:
            pass
        try:
            c.wait(timeout=wait)           # returns once the engine holds it not running
        except Exception as err:
            if "No such container" not in str(err):
                errors.append(f"container {c.id[:12]}: did not exit within {wait:.0f} s of SIGKILL ({err})")
    live = [c for c in found if c.attrs.get("State") not in STOPPED]
    with ThreadPoolExecutor(KILL_PARALLEL) as pool:
        list(pool.map(end, live))
    ids = {c.id for c in live}     # an exited one still listed won't be released by waiting
    deadline = time.monotonic() + wait
    for n in networks:
        while ids & _attached(n) and time.monotonic() < deadline:
            time.sleep(0.2)
    return errors


def _kill_paused(c) -> None:
    """End a paused container (a crashed device) as a running one ends: SIGKILL its init process from
    the host while it is frozen (pending: it runs no code of its own again), then unpause it, so it
    exits on thaw. ``docker kill`` of a paused container takes the engine's other path — kill, then
    resume an exited container, which the engine logs as an error ("resuming exited container from
    paused state … container not paused") and follows with a second exit clean-up of that container.
    This removed the engine's error path (none logged in 10 teardowns of 60 containers under load), but
    not the phantom endpoint it was suspected of: one of those 10 still left one (issue 36, open)."""
    try:
        pid = c.client.api.inspect_container(c.id)["State"]["Pid"]
        if pid:
            os.kill(pid, signal.SIGKILL)
    except Exception:   # noqa: BLE001 — gone meanwhile: docker kill below says what is left
        return
    try:
        c.unpause()
    except Exception:   # noqa: BLE001 — exited meanwhile
        pass


def clean_docker(run_id: str, client=None, record: Optional[dict] = None) -> dict:
    """Remove the containers and networks labelled ``edgebed.run=<run_id>`` and any edgebed qdisc left
    on the host-side veths listed in ``record`` (docker.json). Returns what was removed, the errors,
    and ``leaked``: what still exists afterwards (empty when the teardown is complete).

    Order matters (issue 36): every container is killed and seen exited, and its endpoint released by
    the engine's own exit handling (``_end_containers``), before anything is disconnected or removed;
    only a container that a network still lists after that is force-disconnected (it is not running
    then, so the engine takes its safe path); then the containers are removed, and the network last,
    with retries, force-deleting any endpoint it still lists by name."""
    label = f"edgebed.run={run_id}"
    report = {"containers": [], "networks": [], "qdiscs": [], "errors": []}
    if client is None:
        client = engine.client()
    report["agents"] = _kill_forked_agents(record or {})
    networks = client.networks.list(filters={"label": label})
    found = client.containers.list(all=True, sparse=True, filters={"label": label})
    report["errors"] += _end_containers(found, networks)
    still = set().union(*(_attached(n) for n in networks)) if networks else set()
    # Which containers a network still listed once every one had exited and the wait was over: these take
    # the force-disconnect path below. Kept in the report because that path is the one left suspect for a
    # phantom endpoint (issue 36): a leak with this list empty rules it out.
    report["force_disconnected"] = sorted(c[:12] for c in still)

    def remove(c):
        for n in networks if c.id in still else ():   # exited, yet still listed: the safe, stopped path
            try:
                n.disconnect(c.id, force=True)
            except Exception:    # not attached, already gone: removal below says what matters
                pass
        try:
            c.remove(force=True)
            return c.id[:12], None
        except Exception as err:
            return None, None if "No such container" in str(err) else f"container {c.id[:12]}: {err}"
    with ThreadPoolExecutor(4) as pool:      # removals are independent; dockerd serialises what it must
        for removed, error in pool.map(remove, found):
            if removed:
                report["containers"].append(removed)
            if error:
                report["errors"].append(error)
    names = {c.get("name") for c in (record or {}).get("containers", {}).values() if c.get("name")}
    names |= {(c.attrs.get("Names") or [""])[0].lstrip("/") for c in found} - {""}
    for n in networks:
        error = _remove_network(client, n, names)
        if error is None:
            report["networks"].append(n.name)
        else:
            report["errors"].append(f"network {n.name}: {error}")
    # Qdiscs inside a container's namespace and on its veth vanish with the container; this catches
    # a veth that outlived a failed removal.
    for c in (record or {}).get("containers", {}).values():
        for q in c.get("qdiscs", []):
            if q.get("where") != "host veth":
                continue
            try:
                idx = links.ifindex(q["ifname"])
            except Exception:
                continue
            if links.unshape(idx):
                report["qdiscs"].append(q["ifname"])
    if ifb := ((record or {}).get("ps_link") or {}).get("ifb"):   # the PS link's ingress ifb (pslink.py)
        try:
            with links.iproute() as ipr:
                if ipr.link_lookup(ifname=ifb):
                    ipr.link("del", ifname=ifb)
                    report["qdiscs"].append(ifb)
        except Exception as err:  # noqa: BLE001 — said in the report, the rest of the teardown goes on
            report["errors"].append(f"ifb {ifb}: {err}")
    report["phantom"] = [n.name for n in networks if n.name not in report["networks"] and not _attached(n)]
    try:
        report["leaked"] = {k: v for k, v in leftovers(run_id, client).items() if v}
    except Exception as err:
        report["errors"].append(f"could not check what is left: {err}")
    return report


def _remove_network(client, network, names: set, delays=None) -> Optional[str]:
    """Remove ``network``, retrying with backoff; before each retry, force-disconnect every endpoint it
    still lists and every recorded container name (stale endpoints). None once removed, else the
    engine's last error."""
    error = None
    for delay in (0.0, *(NETWORK_RETRIES if delays is None else delays)):
        time.sleep(delay)
        try:
            network.remove()
            return None
        except Exception as err:
            if "not found" in str(err).lower() or "No such network" in str(err):
                return None
            error = str(err)
        try:
            network.reload()
            attached = {v.get("Name") or k for k, v in (network.attrs.get("Containers") or {}).items()}
        except Exception:
            attached = set()
        for name in sorted(attached | names):
            try:
                client.api.disconnect_container_from_network(name, network.id, force=True)
            except Exception:   # most are gone already: the engine says so, nothing to do
                pass
    return error


def leak_advice(run_dir, leaked: dict, run_id: Optional[str] = None, phantom: bool = False) -> str:
    """What to tell a user whose run left docker objects behind. ``run_dir`` None (``clean --all`` found
    labelled objects whose run directory is gone): the retry names the run id instead. ``phantom``: a
    network that refuses removal while listing no endpoint (the engine counts one that no longer
    exists; nothing but an engine restart clears that count)."""
    what = "; ".join(f"{k}: {', '.join(v)}" for k, v in leaked.items() if v)
    retry = f"edgebed clean {run_dir}" if run_dir else f"edgebed clean --all --prefix {run_id or '<run id>'}"
    why = ("the engine still counts an endpoint on it that no longer exists (nothing is attached and "
           "nothing can be force-disconnected); no API call clears that count: restart the Docker engine "
           "when no other work uses it" if phantom else
           f"run `{retry}` to retry; if the network still reports active endpoints, restart the Docker "
           "engine when no other work uses it, which clears its stale endpoints")
    return f"docker teardown left {what} (each leaked network holds a /20 of the engine's address pool). {why}"


def leftovers(run_id: str, client=None) -> dict:
    """What of run ``run_id`` still exists: container ids, network names (both empty when clean)."""
    label = f"edgebed.run={run_id}"
    if client is None:
        client = engine.client(timeout=60)
    return {"containers": [c.id[:12] for c in client.containers.list(all=True, sparse=True,
                                                                      filters={"label": label})],
            "networks": [n.name for n in client.networks.list(filters={"label": label})]}


def labelled_runs(client, run_id_prefix: str = "") -> dict[str, Optional[Path]]:
    """Run ids (starting with ``run_id_prefix``) that own a container or network on this engine, each
    with the run directory its containers' labels name (None if no container names one)."""
    labelled: dict[str, Optional[Path]] = {}
    for c in client.containers.list(all=True, sparse=True, filters={"label": RUN_LABEL}):
        labels = c.attrs.get("Labels") or {}
        rid = labels.get(RUN_LABEL, "")
        if rid.startswith(run_id_prefix):
            labelled.setdefault(rid, Path(labels[RUN_DIR_LABEL]) if labels.get(RUN_DIR_LABEL) else None)
    for n in client.networks.list(filters={"label": RUN_LABEL}):
        rid = (n.attrs.get("Labels") or {}).get(RUN_LABEL, "")
        if rid.startswith(run_id_prefix):
            labelled.setdefault(rid, None)
    return labelled
