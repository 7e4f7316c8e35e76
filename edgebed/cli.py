"""Command line: ``edgebed validate | run | report | clean`` (and the verbs other modules add)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _scenario(args):
    from .scenario import load_scenario
    return load_scenario(args.scenario, tuple(args.set or ()))


def cmd_validate(args) -> int:
    sc = _scenario(args)
    from .emulator.runtimes import get_runtime
    runtime = get_runtime(sc.runtime.name)(sc, Path("/nonexistent"))
    problems = runtime.check()
    if problems:
        for p in problems:
            print(f"{args.scenario}: {p}", file=sys.stderr)
        return 2
    print(f"{args.scenario}: ok — {sc.workers.n} devices in {len(sc.workers.classes)} class(es), "
          f"{sc.algorithm.name} ({sc.algorithm.describe()}), "
          f"model {sc.model.name}, runtime {sc.runtime.name}")
    return 0


def cmd_run(args) -> int:
    from .emulator.engine import Engine, terminal_progress
    if args.resume:   # the run directory holds the resolved scenario; nothing may change on resume
        if args.scenario or args.set:
            print("error: --resume takes the scenario from the run directory; give no scenario or --set",
                  file=sys.stderr)
            return 2
        from .scenario import load_scenario
        args.scenario = Path(args.resume) / "scenario.yaml"
        sc = load_scenario(args.scenario)
    elif not args.scenario:
        print("error: give a scenario file, or --resume <run-dir>", file=sys.stderr)
        return 2
    else:
        sc = _scenario(args)
    print(f"edgebed: running {sc.name} — {sc.workers.n} devices, {sc.algorithm.name}, "
          f"runtime {sc.runtime.name}; writing to {args.out}/", file=sys.stderr)
    res = Engine(sc, args.out, terminal_progress(), source=str(args.scenario), resume=args.resume).run()
    s = res.summary
    acc = f"{s['final_accuracy']:.2%}" if s["final_accuracy"] is not None else "n/a"
    best = f"{s['best_accuracy']:.2%}" if s["best_accuracy"] is not None else "n/a"
    from .units import fmt_bytes
    print(f"\n{s['status']}: {s['reason']}\n"
          f"  updates {s['updates']} in {s['wall_time_s']:.1f} s ({s['updates_per_s']} upd/s)\n"
          f"  test accuracy final {acc}, best {best}\n"
          f"  PS ingress {fmt_bytes(s['ingress_bytes'])} (pushes {fmt_bytes(s['push_bytes'])}), "
          f"egress {fmt_bytes(s['egress_bytes'])}\n"
          f"  devices: {s['devices']['said_hello']} joined, {s['devices']['crashed']} crashed, "
          f"{s['devices']['lost']} lost\n"
          f"  run directory: {res.path}\n"
          f"  report: edgebed report {res.path}")
    return 0 if s["status"] == "complete" else 1


def cmd_report(args) -> int:
    from .analysis.report import write_report
    res = write_report([Path(r) for r in args.runs], Path(args.out) if args.out else None,
                       target=args.target, baseline=args.baseline)
    print(res.table_markdown)
    print("\nwritten:", *[str(p) for p in res.files], sep="\n  ")
    return 0


def cmd_clean(args) -> int:
    from .emulator.cleanup import clean, describe
    print(describe(clean(Path(args.run))))
    return 0


def cmd_study_run(args) -> int:
    from .emulator.study import load_study, run_study
    study = load_study(args.study, tuple(args.set or ()))   # errors before the engine (torch) loads
    if args.seeds is not None:
        study = study.first_seeds(args.seeds)
    if args.cells:
        study = study.select(tuple(args.cells))
    from .emulator.engine import terminal_progress
    runs = len(study.selected) * len(study.spec.seed_list)
    of = f" (of {len(study.cells)})" if len(study.selected) < len(study.cells) else ""
    print(f"edgebed: study {study.spec.name} — {len(study.selected)} cells{of} × {len(study.spec.seed_list)} "
          f"seeds = {runs} runs; writing to {Path(args.out) / study.spec.name}/", file=sys.stderr)
    results = Path(args.results) if args.results else None
    status = run_study(study, args.out, progress=terminal_progress(sys.stderr), jobs=args.jobs,
                       results=results)
    print(f"\n{status['complete']} ran, {status['skipped']} already complete, {status['failed']} failed, "
          f"{status['incomplete']} incomplete (of {status['total']})\n"
          f"  report: edgebed study report {Path(args.out) / study.spec.name}")
    return 0 if status["failed"] + status["incomplete"] == 0 else 1


def cmd_study_tune(args) -> int:
    from .emulator.study import load_study, run_study
    from .emulator.tuning import choose, complete_runs, score_table, tuning_study, write_tuning
    study = load_study(args.study, tuple(args.set or ()))
    if args.cells:
        study = study.select(tuple(args.cells))
    ts = tuning_study(study)
    results = Path(args.results) if args.results else None
    if not args.select_only:
        from .emulator.engine import terminal_progress
        print(f"edgebed: tuning {study.spec.name} — {len(ts.selected)} cell × α points × "
              f"{len(ts.spec.seed_list)} seeds; writing to {Path(args.out) / ts.spec.name}/", file=sys.stderr)
        run_study(ts, args.out, progress=terminal_progress(sys.stderr), jobs=args.jobs, results=results)
    table = score_table(study, complete_runs(study, Path(args.out), results))
    chosen, missing = choose(study, table)
    csv, tuned = write_tuning(study, table, chosen, missing)
    for label, lr in chosen.items():
        print(f"  {label}: α = {lr:g}")
    if missing:
        print(f"  not complete yet (rerun the same command to resume): {', '.join(missing)}")
    print(f"\nwritten:\n  {csv}\n  {tuned}")
    return 0 if not missing else 1


def cmd_study_import(args) -> int:
    from .emulator.study import load_study
    from .emulator.study_results import import_runs
    study = load_study(args.study, tuple(args.set or ()))
    into = Path(args.into) if args.into else Path("benchmarks/results/studies") / study.spec.name
    status = import_runs(study, Path(args.source), into, lambda line, final: print(line))
    print(f"{status['imported']} runs compacted into {into}; {status['complete']} of {status['total']} "
          f"cell × seed runs there are complete")
    for s in status["not_taken"]:
        print(f"  not taken (not complete, or made from another scenario): {s}")
    return 0


def cmd_study_report(args) -> int:
    from .analysis.study import write_study_report
    res = write_study_report([Path(d) for d in args.study_dir], Path(args.out) if args.out else None,
                             args.target)
    print(res.table_markdown)
    print("\nwritten:", *[str(p) for p in res.files], sep="\n  ")
    return 0


def _study_parser(sub) -> None:
    p = sub.add_parser("study", help="run a study (grid of scenarios × seeds) and report it")
    verbs = p.add_subparsers(dest="study_cmd", required=True)
    r = verbs.add_parser("run", help="run every cell × seed not yet complete (resumes)")
    r.add_argument("study", help="study YAML file (see scenarios/studies/)")
    r.add_argument("--out", default="studies-out", help="parent of the study directory (default studies-out/)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a scenario key in every cell, e.g. --set eval.every=500 (repeatable)")
    r.add_argument("--seeds", type=int, metavar="K", help="run only the study's first K seeds")
    r.add_argument("--cells", action="append", metavar="GLOB",
                   help="run only the cells whose label or id matches, e.g. --cells '*train_samples=8000' "
                        "(repeatable; a later run without it resumes the rest)")
    r.add_argument("--jobs", type=int, default=1, metavar="J",
                   help="run J cells at once, each in its own process (default 1); give each fewer "
                        "torch threads, e.g. --set runtime.sim.threads=1")
    r.add_argument("--results", metavar="DIR", help="committed results directory, e.g. "
                   "benchmarks/results/studies/<name>: skip the runs compacted there, compact each new one")
    r.set_defaults(func=cmd_study_run)
    r = verbs.add_parser("tune", help="run the study's tuning grid (resumes) and choose α per cell")
    r.add_argument("study", help="study YAML file with a `tuning:` section")
    r.add_argument("--out", default="studies-out", help="parent of the tuning study directory")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="as for study run")
    r.add_argument("--cells", action="append", metavar="GLOB", help="tune only these cells")
    r.add_argument("--jobs", type=int, default=1, metavar="J", help="runs at once (default 1)")
    r.add_argument("--results", metavar="DIR", help="committed results directory of the tuning "
                   "runs, e.g. benchmarks/results/studies/<name>-tuning")
    r.add_argument("--select-only", action="store_true",
                   help="run nothing: score the runs there are and write the table and choice")
    r.set_defaults(func=cmd_study_tune)
    r = verbs.add_parser("import", help="compact a study directory's complete runs into a results directory")
    r.add_argument("study", help="the study YAML file the runs were made from")
    r.add_argument("source", help="the study directory (<out>/<study name>/)")
    r.add_argument("--into", help="results directory (default benchmarks/results/studies/<name>)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="the --set the runs were made with")
    r.set_defaults(func=cmd_study_import)
    r = verbs.add_parser("report", help="band plots, per-cell table (md + CSV) and one HTML page")
    r.add_argument("study_dir", nargs="+", help="the study directory (<out>/<study name>/) or a "
                   "committed results directory; several: side by side (e.g. two protocols)")
    r.add_argument("--out", help="output directory (default <study dir>/report)")
    r.add_argument("--target", type=float, metavar="ACC",
                   help="target test accuracy as a fraction, instead of the study's (e.g. 0.94)")
    r.set_defaults(func=cmd_study_report)


def cmd_image_build(args) -> int:
    from .emulator import images
    info = images.build(args.mode, force=args.force)
    print(info.message)
    return 0


def cmd_compose_export(args) -> int:
    from .emulator.compose import export_compose
    path = export_compose(_scenario(args), args.out, offline=args.offline)
    print(f"written {path}; run it with: docker compose -f {path} up")
    return 0


def _docker_parsers(sub) -> None:
    p = sub.add_parser("image", help="agent container images")
    verbs = p.add_subparsers(dest="image_cmd", required=True)
    b = verbs.add_parser("build", help="build the agent image: offline (no registry) or from the Dockerfile")
    b.add_argument("--mode", choices=["auto", "offline", "dockerfile"], default="auto",
                   help="auto = offline image; dockerfile needs a registry for python:3.11-slim")
    b.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    b.set_defaults(func=cmd_image_build)
    p = sub.add_parser("compose", help="docker compose projects")
    verbs = p.add_subparsers(dest="compose_cmd", required=True)
    e = verbs.add_parser("export", help="write a docker compose project that runs a scenario")
    e.add_argument("scenario", help="scenario YAML file")
    e.add_argument("out", help="output directory")
    e.add_argument("--offline", action="store_true", help="use the offline image + host mounts")
    e.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key")
    e.set_defaults(func=cmd_compose_export)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="edgebed", description="Emulation testbed for asynchronous "
                                 "distributed deep learning on edge devices.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def scenario_args(p, optional: bool = False):
        p.add_argument("scenario", nargs="?" if optional else None, help="scenario YAML file (see scenarios/)")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a scenario key, e.g. --set algorithm.c=0.1 (repeatable)")

    p = sub.add_parser("validate", help="check a scenario file and say what it describes")
    scenario_args(p)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("run", help="run a scenario; writes runs/<name>-<time>/")
    scenario_args(p, optional=True)
    p.add_argument("--resume", metavar="RUN_DIR", help="restart a killed run from its PS checkpoint "
                   "(needs checkpoint.every > 0), in the same run directory")
    p.add_argument("--out", default="runs", help="parent directory of the run directory (default runs/)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("report", help="plots and tables for one or more run directories")
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--out", help="output directory (default: <run>/report or reports/compare-<time>)")
    p.add_argument("--target", type=float, default=0.97, help="target test accuracy (default 0.97)")
    p.add_argument("--baseline", help="run directory used as the ratio baseline (default: the ASGD run)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("clean", help="remove what a run left behind (processes, containers, qdiscs)")
    p.add_argument("run", help="run directory")
    p.set_defaults(func=cmd_clean)
    _study_parser(sub)
    _docker_parsers(sub)
    for extend in _EXTENSIONS:
        extend(sub)
    return ap


# Modules with their own verbs (image, compose, study) append a function(subparsers) here.
_EXTENSIONS: list = []


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .scenario import ScenarioError
    try:
        return args.func(args)
    except ScenarioError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
