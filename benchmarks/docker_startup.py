"""Agent start-up on docker under load: when the first hello came after the agents were started (issue 51.3).

Five docker-quickstart runs at load 25–35 (``--set stop.updates=300 --set stop.wall_time=60s``) ended
``complete``, exit 0, in 4 of 5 with no agent ever connected: the wall time counted from the agents'
start. It now counts from the first hello (``stop.first_hello_within`` bounds the wait) and a run with
no hello or no update ends ``failed``. This runs the same command ``--runs`` times, one after the
other, and records each run's ``summary.json["startup"]`` (``first_hello_s``: seconds from the agents'
start to the first hello, at the run loop's 0.25 s tick), its status, reason, updates, wall time and
exit code, with the host's load average before each run; ``--within 10s`` adds a run whose
``stop.first_hello_within`` is shorter than the start-up (it ends ``failed``, saying why). Writes benchmarks/results/docker_startup.json.

    .venv/bin/python benchmarks/docker_startup.py --runs 2 --within 10s
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgebed.rundir import read_json  # noqa: E402

COMMAND = ["run", str(ROOT / "scenarios" / "docker-quickstart.yaml"), "--set", "stop.updates=300",
           "--set", "stop.wall_time=60s", "--out"]   # + an absolute runs folder (a relative one fails on docker)


def one(extra: list) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="docker-startup-"))
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "edgebed.cli", *COMMAND, str(tmp / "runs"), *extra], cwd=tmp, capture_output=True, text=True,
                          timeout=900)
    took = time.monotonic() - t0
    runs = sorted((tmp / "runs").glob("docker-quickstart-*"))
    s = read_json(runs[0], "summary.json") if runs else {}
    return {"extra": " ".join(extra), "load_average_before": round(load, 1), "exit_code": proc.returncode, "status": s.get("status"),
            "reason": s.get("reason"), "updates": s.get("updates"), "wall_time_s": s.get("wall_time_s"),
            "startup": s.get("startup"), "said_hello": (s.get("devices") or {}).get("said_hello"),
            "command_seconds": round(took, 1), "output_tail": proc.stdout[-600:] if not s else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--within", default=None, help="also one run with --set stop.first_hello_within=WITHIN "
                    "(e.g. 10s: shorter than the start-up, so the run ends failed with the reason)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "docker_startup.json"))
    args = ap.parse_args()
    runs = [one([]) for _ in range(args.runs)]
    if args.within:
        runs.append(one(["--set", f"stop.first_hello_within={args.within}"]))
    result = {"what": __doc__.split("\n\n", 1)[0], "command": "edgebed " + " ".join(COMMAND[:1] + [
        "scenarios/docker-quickstart.yaml"] + COMMAND[2:] + ["<tmp>/runs"]), "cpus": os.cpu_count(), "runs": runs}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
