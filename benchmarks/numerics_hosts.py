"""Which hosts give the golden tables bit for bit: this host's fingerprints and the golden check, on record.

The golden fixture (``tests/fixtures/sim_golden.json``) was recorded on one host under ``portable``.
This script runs every golden scenario on *this* host twice — once under ``portable``, once under
``native`` (each in a fresh process: a profile is fixed per process) — compares each scenario's tables
with the recorded ones, and adds this host's entry to ``benchmarks/results/numerics-hosts.json`` (one
entry per CPU model, replaced when run again on the same model). The recording host's entry comes from
the fixture itself. So the file says, per host type: its fingerprints, and whether portable gave the
recorded bits (it must) and native did not (it need not: native is repeatable on one host type only).

    .venv/bin/python -m benchmarks.numerics_hosts
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from edgebed import numerics

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "numerics-hosts.json"
FIXTURE = ROOT / "tests" / "fixtures" / "sim_golden.json"

CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from edgebed import numerics
fp = numerics.enter(sys.argv[1])
from tests.integration.test_sim_golden import FIXTURE, TABLES, run_tables
fixture = json.loads(FIXTURE.read_text())
same = {}
for name, golden in sorted(fixture.items()):
    if name.startswith("_"):
        continue
    got = run_tables({**golden["scenario"], "numerics": sys.argv[1]}, Path(sys.argv[3]) / name)
    differ = sorted(f"{t}.{c}" for t in TABLES for c in golden["columns"][t]
                    if got["columns"][t].get(c) != golden["columns"][t][c])
    same[name] = {"identical": not differ and got["rows"] == golden["rows"], "columns_differ": differ}
print(json.dumps({"fingerprint": fp, "scenarios": same}))
"""


def run_profile(profile: str) -> dict:
    """The golden scenarios under ``profile`` in a fresh process: fingerprint and per-scenario verdict."""
    env = numerics.child_env("native", {k: v for k, v in os.environ.items() if k not in numerics.PINS})
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", CHILD, profile, str(ROOT), tmp], env=env, check=True,
                             capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    recorded = json.loads(FIXTURE.read_text())["_numerics"]
    fixture = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()[:12]
    here = {p: run_profile(p) for p in numerics.PROFILES}
    cpu = here["portable"]["fingerprint"]["cpu"]
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    # Entries checked against another fixture (re-recorded on purpose since) are kept apart, as history.
    hosts = {h["cpu"]: h for h in previous.get("hosts", []) if h.get("fixture") == fixture}
    earlier = previous.get("earlier_fixtures", []) + [
        {**h, "fixture": h.get("fixture", "before 2026-11-28")} for h in previous.get("hosts", [])
        if h.get("fixture") != fixture]
    hosts[cpu] = {
        "cpu": cpu, "date": dt.date.today().isoformat(), "fixture": fixture,
        "recording_host": cpu == recorded["cpu"] and here["portable"]["fingerprint"]["id"] == recorded["id"],
        "portable": {"fingerprint": here["portable"]["fingerprint"],
                     "golden_identical": sum(s["identical"] for s in here["portable"]["scenarios"].values()),
                     "scenarios": here["portable"]["scenarios"]},
        "native": {"fingerprint": here["native"]["fingerprint"],
                   "golden_identical": sum(s["identical"] for s in here["native"]["scenarios"].values()),
                   "scenarios": here["native"]["scenarios"]},
    }
    hosts.setdefault(recorded["cpu"], {"cpu": recorded["cpu"], "recording_host": True, "fixture": fixture,
                                       "portable": {"fingerprint": recorded}})
    result = {
        "what": "golden virtual-clock tables (tests/fixtures/sim_golden.json) re-run per host and profile; "
                "golden_identical counts scenarios whose tables match the recorded bits",
        "scenarios": len(here["portable"]["scenarios"]),
        "fixture": fixture,
        "hosts": sorted(hosts.values(), key=lambda h: (not h["recording_host"], h["cpu"])),
        "earlier_fixtures": earlier,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for h in result["hosts"]:
        line = f"{h['cpu']}: portable {h['portable']['fingerprint']['reference_gradient']}"
        if "golden_identical" in h["portable"]:
            line += (f", golden {h['portable']['golden_identical']}/{result['scenarios']} identical; "
                     f"native {h['native']['fingerprint']['reference_gradient']}, "
                     f"golden {h['native']['golden_identical']}/{result['scenarios']} identical")
        else:
            line += " (recorded the fixture)"
        if h["recording_host"] and "golden_identical" in h["portable"]:
            line += " (recorded the fixture)"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
