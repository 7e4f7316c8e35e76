"""Cleanup: remove what one run recorded — its containers, network and qdiscs, its agent processes.

``edgebed clean <run-dir>`` calls ``clean``. Only what the run directory names is touched (a swarm
run's services, network and task containers on every node: ``runtimes/swarm/clean.py``): processes
in ``pids.json`` (and only while PID *and* start time match the record — ``edgebed/procs.py`` — so a
reused PID or another run's fork-server child is never hit), containers and networks carrying the
label ``edgebed.run=<run id>`` recorded in ``docker.json``, and the root qdiscs edgebed put on that
run's host-side veths. Never by name pattern, never another run's objects. Safe to call repeatedly.
A run whose engine died without closing it (``summary.json`` still ``running``) is marked ``killed``.
A run that is still live (its engine runs) is ended first (``end_live_run``): a marker file tells
the engine that `clean` ended it, SIGTERM makes it stop and close its record — status ``incomplete``,
reason "ended by `edgebed clean`" — and only then is what is left removed.

``edgebed clean --all`` (``clean_all``) does the same for every run on this host: each container and
network labelled ``edgebed.run`` (optionally only run ids starting with a prefix), and each run
directory under the given roots.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Iterable, Optional

from .. import procs

CLEANED = "ended_by_clean.json"      # in a run directory: `edgebed clean` ended this run while it ran
ENGINE_GRACE = 60.0                  # seconds a live engine gets to close its run after SIGTERM


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def clean_pids(records: Iterable) -> dict:
    """SIGKILL each recorded process ({"pid", "start"}, see ``procs.identity``) that is provably still
    the one recorded (works on stopped ones too). A bare PID (older run directories) proves nothing
    and is left alone."""
    killed, skipped = [], []
    for rec in records:
        if not isinstance(rec, dict) or not procs.is_alive(rec):
            skipped.append(rec.get("pid") if isinstance(rec, dict) else rec)
            continue
        try:
            os.kill(rec["pid"], signal.SIGKILL)
            killed.append(rec["pid"])
        except ProcessLookupError:
            skipped.append(rec["pid"])
    return {"killed": killed, "not_agents_or_gone": skipped}


def mark_killed(run_dir: Path) -> Optional[str]:
    """If the run's summary still says ``running`` but its engine process is gone, say ``killed``
    (keeping the rest of the summary); returns the new status or None."""
    from ..rundir import run_status, write_json_atomic
    summary = _read_json(run_dir / "summary.json")
    if summary is None or run_status(run_dir) != "killed" or summary.get("status") != "running":
        return None
    summary.update(status="killed", reason="the engine process ended without closing the run "
                   "(killed, e.g. SIGKILL or out of memory); what was recorded until then is kept")
    write_json_atomic(run_dir / "summary.json", summary)
    return "killed"


def ended_by_clean(run_dir: Path) -> Optional[str]:
    """The reason to record if `edgebed clean` ended this run while it was live, else None."""
    marker = _read_json(Path(run_dir) / CLEANED)
    if marker is None:
        return None
    return f"ended by `edgebed clean` at {marker.get('at', '?')} while it was running"


def end_live_run(run_dir: Path, grace: float = ENGINE_GRACE) -> Optional[dict]:
    """If the run's engine still runs: record that `clean` ends it, SIGTERM the engine and wait up to
    ``grace`` s for it to close the run (SIGKILL after that, and the summary is closed here).
    Returns {"engine": pid, "closed_by": "engine" | "clean"}, or None for a run that was not live."""
    from ..rundir import write_json_atomic
    summary = _read_json(run_dir / "summary.json") or {}
    engine = summary.get("engine")
    if summary.get("status") != "running" or not isinstance(engine, dict) or not procs.is_alive(engine):
        return None
    write_json_atomic(run_dir / CLEANED, {"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "by_pid": os.getpid()})
    try:
        os.kill(engine["pid"], signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while procs.is_alive(engine) and time.monotonic() < deadline:
        time.sleep(0.1)
    closed_by = "engine"
    if procs.is_alive(engine):
        try:
            os.kill(engine["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    summary = _read_json(run_dir / "summary.json") or {}
    if summary.get("status") == "running":   # the engine could not close it: clean does
        summary.update(status="incomplete", reason=f"{ended_by_clean(run_dir)}; the engine did not close the "
                       f"run within {grace:.0f} s and was killed; what was recorded until then is kept")
        write_json_atomic(run_dir / "summary.json", summary)
        closed_by = "clean"
    return {"engine": engine["pid"], "closed_by": closed_by}


def clean(run_dir: str | Path) -> dict:
    """Remove everything the run in ``run_dir`` recorded; returns a report of what was removed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    report: dict = {"run_dir": str(run_dir)}
    live = end_live_run(run_dir)
    if live:
        report["live"] = live
    pids = _read_json(run_dir / "pids.json")
    if pids:
        report["processes"] = clean_pids(pids.get("procs", pids.get("pids", [])))
    status = mark_killed(run_dir)
    if status:
        report["status"] = status
    swarm = _read_json(run_dir / "swarm.json")
    if swarm and swarm.get("label") and swarm.get("manager"):
        from .runtimes.swarm.clean import clean_swarm
        report["swarm"] = clean_swarm(swarm)
    record = _read_json(run_dir / "docker.json")
    if record and record.get("run_id"):
        from .runtimes.docker.clean import clean_docker
        try:
            report["docker"] = clean_docker(record["run_id"], record=record)
        except Exception as err:   # engine not reachable: say so, keep what was done
            report["docker"] = {"errors": [f"Docker engine not reachable: {err}"]}
    return report


def clean_all(roots: Iterable[str | Path] = ("runs",), run_id_prefix: str = "", client=None,
              docker_objects: bool = True) -> dict:
    """Clean every edgebed run on this host: run directories under ``roots`` (searched recursively
    for ``summary.json``) and every container/network labelled ``edgebed.run``, restricted to run
    ids that start with ``run_id_prefix``. Returns {"runs": {run id: report}, "errors": [...]}."""
    from .runtimes.docker import clean as docker_clean
    out: dict = {"runs": {}, "errors": []}
    dirs: dict[str, Path] = {}
    for root in roots:
        for summary in sorted(Path(root).rglob("summary.json")) if Path(root).is_dir() else ():
            record = _read_json(summary.parent / "docker.json") or {}
            rid = record.get("run_id") or docker_clean.run_id_of(summary.parent)
            if rid.startswith(run_id_prefix):
                dirs[rid] = summary.parent
    labelled: dict[str, Optional[Path]] = {}
    if docker_objects:
        try:
            if client is None:
                from .runtimes.docker import engine
                client = engine.client()
            labelled = docker_clean.labelled_runs(client, run_id_prefix)
        except Exception as err:   # no engine: the run directories are still cleaned
            out["errors"].append(f"Docker engine not reachable: {err}")
            docker_objects = False
    for rid, run_dir in sorted(dirs.items()):
        report = clean(run_dir) if docker_objects else _clean_local(run_dir)
        out["runs"][rid] = report
        labelled.pop(rid, None)
    for rid, run_dir in sorted(labelled.items()):   # labelled objects whose run dir is elsewhere or gone
        record = _read_json(run_dir / "docker.json") if run_dir else None
        report = clean(run_dir) if run_dir and run_dir.is_dir() else {"run_dir": None, "run_id": rid}
        if "docker" not in report:
            report["docker"] = docker_clean.clean_docker(rid, client=client, record=record)
        out["runs"][rid] = report
    return out


def _clean_local(run_dir: Path) -> dict:
    report: dict = {"run_dir": str(run_dir)}
    if live := end_live_run(run_dir):
        report["live"] = live
    pids = _read_json(run_dir / "pids.json")
    if pids:
        report["processes"] = clean_pids(pids.get("procs", []))
    if mark_killed(run_dir):
        report["status"] = "killed"
    return report


def describe_all(out: dict) -> str:
    lines = [f"{rid}: " + describe(rep).replace("\n", f"\n{rid}: ") for rid, rep in out["runs"].items()]
    lines += [f"error: {e}" for e in out["errors"]]
    return "\n".join(lines) or "no edgebed run found to clean"


def describe(report: dict) -> str:
    """One human line per kind of object removed."""
    lines = []
    if live := report.get("live"):
        lines.append(f"run: was still running (engine pid {live['engine']}): ended it; its record says "
                     "incomplete, ended by `edgebed clean`" + (" (the engine did not close it in time and was "
                                                               "killed)" if live["closed_by"] == "clean" else ""))
    if report.get("status") == "killed":
        lines.append("run: marked killed (its engine process is gone, its summary still said running)")
    p = report.get("processes")
    if p is not None:
        lines.append(f"processes: killed {len(p['killed'])}, skipped {len(p['not_agents_or_gone'])} "
                     "(gone, or not provably the process the run recorded)")
    d = report.get("docker")
    if d is not None:
        lines.append(f"docker: removed {len(d.get('containers', []))} containers, "
                     f"{len(d.get('networks', []))} networks, {len(d.get('qdiscs', []))} qdiscs"
                     + (f", killed {len(d['agents'])} forked agents" if d.get("agents") else ""))
        lines += [f"docker error: {e}" for e in d.get("errors", [])]
        if d.get("leaked"):
            from .runtimes.docker.clean import leak_advice
            lines.append("docker: NOT clean — " + leak_advice(report.get("run_dir"), d["leaked"], report.get("run_id"),
                                                              phantom=bool(d.get("phantom"))))
    s = report.get("swarm")
    if s is not None:
        from .runtimes.swarm.clean import describe as describe_swarm
        lines.append(describe_swarm(s))
        lines += [f"swarm error: {e}" for e in s.get("errors", [])]
    return "\n".join(lines) or "nothing recorded to clean"
