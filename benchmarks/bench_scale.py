"""Scale benchmark: memory and update rate of the virtual-clock runtime as the population grows.

    python -m benchmarks.bench_scale [--n 200 1000 10000 50000] [--updates 3000] [--max-gb 16]
                                     [--out benchmarks/results/scale.json]
    python -m benchmarks.bench_scale --point MODEL RULE N UPDATES   (one point; prints one JSON line)

Grid: n × {mlp, cnn} × {asgd, adacomp (c = 0.01)}, each point a short run (``--updates`` updates) of
scenarios/population-10k.yaml's setting — every device draws its own 300 samples from the bundled
digits (``dataset.samples_per_device``), one speed class, unshaped links — in its own subprocess, one
at a time, niced, so one point's memory never counts in another's. Per point:

- peak RSS of the subprocess (``ru_maxrss``: PS, devices, data and evaluator all live in it), its RSS
  before the run (imports done), and ``bytes_per_device`` = (peak − before) / n;
- the update rate in steady state: applied updates per wall second between the first and the last
  update (every update then costs one gradient, one compression and one apply), and set-up seconds
  until the first update (every device says hello, pulls and computes its first gradient); the minor
  page faults per update over the same span;
- what ``edgebed validate``'s memory model (``emulator/capacity.py``) predicted for the point.

A point whose predicted memory exceeds ``--max-gb`` (the shared host's budget) is skipped and recorded
as such, with the prediction. Goals (issue 26): n = 10,000 with the CNN and AdaComp within 4 GB, n =
50,000 with the MLP within 16 GB, the rate at n = 10,000 ≥ 0.8 × the rate at n = 200.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "scale.json"
SAMPLES = 300


def scenario(model: str, rule: str, n: int, updates: int) -> dict:
    """The point's scenario: scenarios/population-10k.yaml with model, rule, n and the stop changed,
    evaluation once at the end (an evaluation is a fixed cost, not a per-device one)."""
    import yaml
    sc = yaml.safe_load((ROOT / "scenarios" / "population-10k.yaml").read_text())
    sc["name"] = f"scale-{model.replace(':', '.')}-{rule}-{n}"   # an import path names a model too
    sc["model"] = {"name": model}
    sc["algorithm"] = {**sc["algorithm"], "name": rule}
    if rule != "adacomp":
        sc["algorithm"].pop("c", None)
    sc["workers"]["n"] = n
    sc["stop"] = {"updates": updates}
    sc["eval"] = {"every": updates, "test_samples": 500}
    return sc


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_model() -> str:
    return next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "unknown")


def point(model: str, rule: str, n: int, updates: int) -> dict:
    """Run one point in this process; returns its measurements."""
    from edgebed.emulator.capacity import sim_memory
    from edgebed.emulator.engine import Engine
    from edgebed.rundir import read_table
    from edgebed.scenario import parse_scenario
    from edgebed import rundir
    sc = parse_scenario(scenario(model, rule, n, updates))
    predicted = sim_memory(sc)
    before = _rss_bytes()
    cpu = []   # process CPU seconds at each applied update: a rate a busy shared host inflates little
    faults = []   # minor page faults so far, at each applied update
    append = rundir.RunWriter.append

    def timed_append(self, table, row):
        if table == "updates":
            cpu.append(time.process_time())
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        return append(self, table, row)
    rundir.RunWriter.append = timed_append
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            res = Engine(sc, out=tmp).run()
        finally:
            rundir.RunWriter.append = append
        wall = time.perf_counter() - t0
        up = read_table(res.path, "updates")
        sim = json.loads((res.path / "sim.json").read_text())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if len(up) < 2:
        raise SystemExit(f"{model} {rule} n={n}: {len(up)} updates: {res.summary['status']}: {res.summary['reason']}")
    first, last = up["wall_time"].iloc[0], up["wall_time"].iloc[-1]
    return {"model": model, "rule": rule, "n": n, "updates": int(len(up)), "status": res.summary["status"],
            "wall_s": round(wall, 2), "setup_s": round(float(first), 2),
            "updates_per_s": round((len(up) - 1) / float(last - first), 1) if last > first else None,
            "updates_per_cpu_s": round((len(cpu) - 1) / (cpu[-1] - cpu[0]), 1) if len(cpu) > 1 else None,
            "setup_cpu_s": round(cpu[0] - c0, 2) if cpu else None,
            "minor_faults_per_update": round((faults[-1] - faults[0]) / (len(faults) - 1), 1) if len(faults) > 1 else None,
            "peak_rss_bytes": peak, "rss_before_bytes": before,
            "bytes_per_device": round((peak - before) / n), "predicted_bytes": predicted["total"],
            "predicted_per_device": predicted["per_device"],
            "gradients": sim["gradients"], "compute_s": sim["compute_s"],
            "staleness_mean": round(float(up["staleness"].mean()), 1),
            # the fidelity report's per-class view at this size: share of updates, devices, staleness
            "classes": [{k: c.get(k) for k in ("class", "share", "expected_share", "devices", "staleness_mean",
                                               "expected_staleness_mean")}
                        for c in (res.summary.get("fidelity") or {}).get("expected", [])],
            "devices_pushed": int(up["device"].nunique())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", nargs=4, metavar=("MODEL", "RULE", "N", "UPDATES"))
    ap.add_argument("--n", type=int, nargs="+", default=[200, 1_000, 10_000, 50_000])
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    ap.add_argument("--rules", nargs="+", default=["asgd", "adacomp"])
    ap.add_argument("--updates", type=int, default=3_000)
    ap.add_argument("--max-gb", type=float, default=16.0, help="skip points predicted to need more")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--merge", action="store_true", help="keep the out file's other points")
    ap.add_argument("--repredict", action="store_true", help="only recompute the out file's predictions "
                    "with the current memory model (emulator/capacity.py), running nothing")
    args = ap.parse_args(argv)
    if args.repredict:
        from edgebed.emulator.capacity import sim_memory
        from edgebed.scenario import parse_scenario
        out = Path(args.out)
        rec = json.loads(out.read_text())
        for p in rec["points"]:
            m = sim_memory(parse_scenario(scenario(p["model"], p["rule"], p["n"], p.get("updates", args.updates))))
            p["predicted_bytes"], p["predicted_per_device"] = m["total"], m["per_device"]
        out.write_text(json.dumps(rec, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(rec))
        return 0
    if args.point:
        model, rule, n, updates = args.point
        print(json.dumps(point(model, rule, int(n), int(updates))), flush=True)
        return 0
    from edgebed.emulator.capacity import sim_memory
    from edgebed.scenario import parse_scenario
    out = Path(args.out)
    old = json.loads(out.read_text()) if args.merge and out.exists() else {}
    points = {(p["model"], p["rule"], p["n"]): p for p in old.get("points", [])}

    def save() -> None:   # after every point: a long grid interrupted keeps what it measured
        rec = {"date": time.strftime("%Y-%m-%d %H:%M"),
               "machine": {"cores": os.cpu_count(), "cpu_model": _cpu_model(),
                           "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")},
               "scenario": "scenarios/population-10k.yaml (model, algorithm.name, workers.n, stop, eval changed)",
               "samples_per_device": SAMPLES,
               "points": sorted(points.values(), key=lambda p: (p["model"], p["rule"], p["n"]))}
        out.write_text(json.dumps(rec, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(rec))
    for model in args.models:
        for rule in args.rules:
            for n in args.n:
                predicted = sim_memory(parse_scenario(scenario(model, rule, n, args.updates)))["total"]
                if predicted > args.max_gb * 2**30:
                    points[(model, rule, n)] = {"model": model, "rule": rule, "n": n, "skipped":
                                                f"predicted {predicted / 2**30:.1f} GiB > the {args.max_gb:g} GiB "
                                                "budget of this shared host", "predicted_bytes": predicted}
                    print(f"{model} {rule} n={n}: skipped (predicted {predicted / 2**30:.1f} GiB)", flush=True)
                    save()
                    continue
                load = os.getloadavg()
                proc = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "benchmarks.bench_scale", "--point",
                                       model, rule, str(n), str(args.updates)], cwd=ROOT, capture_output=True,
                                      text=True)
                if proc.returncode:
                    sys.stderr.write(proc.stderr[-3000:])
                    raise SystemExit(f"point {model} {rule} n={n} failed")
                p = json.loads(proc.stdout.strip().splitlines()[-1])
                p["load_average_start"] = load
                points[(model, rule, n)] = p
                save()
                print(f"{model} {rule} n={n}: peak {p['peak_rss_bytes'] / 2**30:.2f} GiB, "
                      f"{p['bytes_per_device']:,} B/device, {p['updates_per_s']} upd/s, set-up {p['setup_s']} s",
                      flush=True)
    print(f"written {out} and {out.with_suffix('.md')}")
    return 0


def markdown(rec: dict) -> str:
    lines = [f"Scale benchmark ({rec['date']}, {rec['machine'].get('cpu_model', 'CPU model not recorded')}, "
             f"{rec['machine']['cores']} cores, "
             f"{rec['machine']['memory_bytes'] / 2**30:.0f} GiB shared): `python -m benchmarks.bench_scale`; "
             f"the virtual clock, {rec['samples_per_device']} samples per device, each point in its own process. "
             "Rates: applied updates per CPU second of the process, and per wall second, from the first to the last "
             "update; set-up: until the first update.", "",
             "| model | rule | n | updates | peak RSS GiB | bytes / device | predicted GiB | upd/CPU s | upd/s (wall) | set-up s (CPU) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for p in rec["points"]:
        if "skipped" in p:
            lines.append(f"| {p['model']} | {p['rule']} | {p['n']:,} | — | skipped: {p['skipped']} | | "
                         f"{p['predicted_bytes'] / 2**30:.1f} | | | |")
            continue
        lines.append(f"| {p['model']} | {p['rule']} | {p['n']:,} | {p['updates']:,} | {p['peak_rss_bytes'] / 2**30:.2f} "
                     f"| {p['bytes_per_device']:,} | {p['predicted_bytes'] / 2**30:.2f} | {p['updates_per_cpu_s']} "
                     f"| {p['updates_per_s']} | {p['setup_s']} ({p['setup_cpu_s']}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
