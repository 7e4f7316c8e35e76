"""Docker runs in a row under CPU load: does any run leave its network behind (issue 36)?

    python -m benchmarks.docker_leak_soak [--runs 20] [--load 2] [--pythonpath DIR] [--label NAME]
                                         [--set KEY=VALUE ...] [--rows-from LOG] [--out FILE]

Runs ``edgebed run scenarios/docker-quickstart.yaml`` (24 device containers, agents inside them) ``--runs``
times in a row while ``--load`` busy-loop processes keep the host's cores busy, and after each run
records its exit code and seconds, what of it is still on the engine (containers, networks carrying
its ``edgebed.run`` label), the teardown's errors and phantom networks (``docker.json`` → cleanup), the
one-minute load average, and how many of the engine's "shim disconnected" / "runc did not terminate"
lines its log gained. ``--pythonpath`` runs another checkout of the package (e.g. the code before a
fix, extracted with ``git archive``) as the baseline, labelled ``--label``. A leaked run's objects are
removed with ``edgebed clean`` and that outcome is recorded too. Results are appended, per label, to
benchmarks/results/docker_leak_soak.json. Only this benchmark's labelled objects are touched.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERD_LOG = Path(os.environ.get("EDGEBED_DOCKERD_LOG", "/var/log/edgebed-dockerd.log"))
MARKS = {"shim_disconnected": "cleaning up after shim disconnected", "runc_failed": "runc did not terminate"}


def _spin() -> None:
    while True:
        pass


def _log_counts() -> dict:
    try:
        text = DOCKERD_LOG.read_text(errors="replace")
    except OSError:
        return {}
    return {k: text.count(v) for k, v in MARKS.items()}


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def one(i: int, out_dir: Path, env: dict, sets: list[str]) -> dict:
    from edgebed.emulator.runtimes.docker import clean as docker_clean
    before = _log_counts()
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "edgebed.cli", "run", str(ROOT / "scenarios/docker-quickstart.yaml"),
           "--out", str(out_dir), "-q", *[a for s in sets for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    row: dict = {"run": i, "rc": proc.returncode, "seconds": round(time.monotonic() - t0, 1),
                 "loadavg_1m": os.getloadavg()[0]}
    after = _log_counts()
    row["dockerd_log"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    runs = sorted(out_dir.glob("docker-quickstart-*"), key=lambda p: p.stat().st_mtime)
    record = json.loads((runs[-1] / "docker.json").read_text()) if runs else {}
    rid = record.get("run_id")
    report = record.get("cleanup", {})
    row.update(run_id=rid, teardown_errors=report.get("errors"), phantom=report.get("phantom", []))
    row["left"] = docker_clean.leftovers(rid) if rid else None
    if row["left"] and any(row["left"].values()):
        clean = subprocess.run([sys.executable, "-m", "edgebed.cli", "clean", str(runs[-1])],
                               capture_output=True, text=True, env=env, timeout=300)
        row["clean_output"] = clean.stdout[-1500:]
        row["left_after_clean"] = docker_clean.leftovers(rid)
    if proc.returncode != 0:
        row["stderr"] = proc.stderr[-1500:]
    print(json.dumps(row), flush=True)
    return row


def write_entry(out: Path, label: str, code: str, planned: int, sets: list, load: int, rows: list) -> dict:
    """Append (replace, per label) one soak's entry to the results file; returns the entry."""
    leaked = [r["run"] for r in rows if r["left"] and r["left"].get("networks")]
    entry = {"label": label, "code": code, "runs_planned": planned, "runs_done": len(rows),
             "scenario": "scenarios/docker-quickstart.yaml", "set": sets, "busy_loops": load,
             "runs_leaving_a_network": leaked, "failed_runs": [r["run"] for r in rows if r["rc"] != 0],
             "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": rows}
    doc = json.loads(out.read_text()) if out.exists() else {
        "benchmark": "docker_leak_soak", "note": "shared 2-core host: other engineers' work ran too", "entries": []}
    doc["host"] = {"cpu": _cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
                   "docker": __import__("docker").from_env().version().get("Version")}
    doc["entries"] = [e for e in doc["entries"] if e["label"] != label] + [entry]
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--load", type=int, default=2, help="busy-loop processes during the runs")
    ap.add_argument("--pythonpath", help="run the package from this directory (a baseline checkout)")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--set", action="append", default=[], help="scenario override passed to edgebed run")
    ap.add_argument("--rows-from", help="record the per-run lines this script printed (a soak stopped "
                    "before --runs, e.g. at a deadline) instead of running")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/docker_leak_soak.json"))
    args = ap.parse_args()
    if args.rows_from:
        rows = [json.loads(line) for line in Path(args.rows_from).read_text().splitlines() if line.startswith("{")]
    else:
        rows = soak(args)
    entry = write_entry(Path(args.out), args.label, args.pythonpath or str(ROOT), args.runs, args.set, args.load, rows)
    print(f"{args.label}: {len(entry['runs_leaving_a_network'])} of {len(rows)} runs left a network; "
          f"written {args.out}")


def soak(args) -> list[dict]:
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    spinners = [mp.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for s in spinners:
        s.start()
    try:
        with tempfile.TemporaryDirectory(prefix="edgebed-leaksoak-") as tmp:
            return [one(i, Path(tmp), env, args.set) for i in range(1, args.runs + 1)]
    finally:
        for s in spinners:
            s.kill()


if __name__ == "__main__":
    main()
