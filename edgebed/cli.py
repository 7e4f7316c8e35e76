"""Command line: ``edgebed validate | run | runs | report | clean | new | study | image | compose | export``.

Results (tables, summaries, ``--json``) go to stdout; everything else is logged to stderr through
``edgebed.console`` (``-q`` warnings only, ``-v`` debug). Exit codes: 0 ok, 1 a run or study that
did not complete, 2 bad input, 130 interrupted (Ctrl-C), 141 stdout closed (``| head``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional

from . import __version__
from .console import log, setup_logging
from .units import plural


def _out(text: str) -> None:
    """A result line on stdout (the only output a pipe should see)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _scenario(args):
    from .scenario import load_scenario
    return load_scenario(args.scenario, tuple(args.set or ()))


def _is_study(path: Path) -> bool:
    """A study file has ``base:`` (its base scenario) at the top level; a scenario never does."""
    from .scenario import ScenarioError, read_yaml
    try:
        data = read_yaml(path)
    except ScenarioError:
        return False
    return isinstance(data, dict) and "base" in data


def _validate_one(path: Path, overrides: tuple) -> dict:
    """{"file", "kind", "ok", "errors", "warnings", "describes"} for one scenario or study file."""
    from .advice import advice
    from .scenario import ScenarioError, load_scenario
    out = {"file": str(path), "kind": "scenario", "ok": False, "errors": [], "warnings": [], "describes": ""}
    try:
        if path.name.endswith(".tuned.yaml"):
            return _validate_tuned(path, overrides, out)
        if _is_study(path):
            from .study.runner import load_study
            out["kind"] = "study"
            study = load_study(path, overrides)
            seeds = len(study.spec.seed_list)
            out["describes"] = (f"study {study.spec.name}: {plural(len(study.cells), 'cell')} × "
                                f"{plural(seeds, 'seed')} = {plural(len(study.cells) * seeds, 'run')}")
            scenarios = [study.scenario(c, study.spec.seed_list[0]) for c in study.cells]
        else:
            sc = load_scenario(path, overrides)
            out["describes"] = (f"{sc.workers.n} devices in {len(sc.workers.classes)} class(es), "
                                f"{sc.algorithm.name} ({sc.algorithm.describe()}), model {sc.model.name}, "
                                f"runtime {sc.runtime.name}")
            scenarios = [sc]
    except ScenarioError as err:
        out["errors"] = str(err).splitlines()
        return out
    from .emulator.preview import class_preview, empty_classes
    from .emulator.runtimes import get_runtime
    for sc in scenarios:
        prefix = f"{sc.name}: " if out["kind"] == "study" else ""
        runtime = None
        try:
            from .data import missing
            from .emulator.capacity import problems as capacity_problems
            # the data is there (a typo in its path is named as one, before a loader reads it); then
            # the model takes the data (before anything runs it)
            problems = missing(sc.dataset) or _workload_problems(sc, out)
            if not problems:
                runtime = get_runtime(sc.runtime.name)(sc, Path("/nonexistent"))
                problems = runtime.check()
                problems += [] if problems else capacity_problems(sc)   # samples for the partition; memory (sim)
        except (ScenarioError, ValueError, RuntimeError) as err:
            problems = [str(err)]
        out["errors"] += [f"{path}: {prefix}{p}" for p in problems]
        out["warnings"] += [f"{path}: {prefix}{w}" for w in [*empty_classes(sc), *advice(sc)]
                            if f"{path}: {prefix}{w}" not in out["warnings"]]
        if out["kind"] == "scenario" and runtime is not None and not problems:
            try:
                out["classes"], out["expected"] = class_preview(sc, runtime)
            except Exception as err:  # noqa: BLE001 — the preview is a help, never a reason to refuse
                out["classes"], out["expected"] = class_preview_counts(sc), f"not computed ({err})"
    out["ok"] = not out["errors"]
    return out


def _data_input(sc, got: tuple | None) -> tuple[tuple, int]:
    """(one sample's shape, the number of classes) of the scenario's data set: ``got``, what
    ``data.input_of`` read from it (IDX: 28×28 grey images in 10 classes); None (a download not cached
    yet): what the model expects."""
    from .workload import resolve
    if got is None:
        w = resolve(sc.model)
        return w.input_shape, w.num_classes
    return got


def _workload_problems(sc, out: dict) -> list[str]:
    """The model imported and built on the meta device against the data's shape and classes; its
    parameter count and per-step FLOPs join ``out["describes"]``."""
    from .data import input_of
    from .usercode import BUILD_TIMEOUT_ENV, build_timeout, deadline
    from .workload import input_problems, num_params, step_flops, use_path
    use_path(sc.model.path)
    got = input_of(sc.dataset)   # the data set's files: read before the model's deadline starts
    # the user's module is imported and its factory runs here, on the meta device: at once (usercode.deadline)
    with deadline(build_timeout(), f"model.name: model {sc.model.name!r} (its import, build on the meta "
                  "device and one step's FLOP count at validate)",
                  f"make its factory fast (no downloads, no training when it is built) or raise the "
                  f"limit: {BUILD_TIMEOUT_ENV}=<seconds> edgebed validate …"):
        shape, classes = _data_input(sc, got)
        problems = input_problems(sc.model, shape, classes, where="model.name")
        if not problems:
            from .models import workload_state_problems
            problems = workload_state_problems(sc.model, shape, where="model.name")
        if not problems and out["kind"] == "scenario":
            b = sc.algorithm.batch_size
            out["describes"] += (f"; model: {num_params(sc.model):,} parameters, "
                                 f"{step_flops(sc.model, b, shape) / 1e6:.1f} MFLOP per step (batch {b})")
            from .models import statistics_size
            if statistics_size(sc.model):
                out["describes"] += (f", {statistics_size(sc.model):,} running statistics "
                                     f"(model.buffers: {sc.buffer_policy()})")
    return problems


def class_preview_counts(sc) -> list[dict]:
    from .emulator.preview import crash_columns
    from .scenario import class_assignment
    assign = class_assignment(sc)
    return crash_columns(sc, [{"class": c.name, "devices": assign.count(i)} for i, c in enumerate(sc.workers.classes)])


def _validate_tuned(path: Path, overrides: tuple, out: dict) -> dict:
    """A ``<study>.tuned.yaml`` is no scenario: it is ``study tune``'s output, checked against its
    study (``<study>.yaml`` beside it), which is how ``study run`` reads it."""
    from .study.runner import load_study
    out["kind"] = "tuning output"
    study_path = path.with_name(path.name.removesuffix(".tuned.yaml") + ".yaml")
    if not study_path.is_file():
        out["errors"] = [f"{path}: this is the α chosen by `edgebed study tune` for the study "
                         f"{study_path.name}, which is not there; put it beside its study file"]
        return out
    study = load_study(study_path, overrides)   # reads and checks this file (runner.read_tuned)
    if study.tuned is None:
        out["errors"] = [f"{path}: {study_path.name} has no tuning: section, so nothing reads this file; "
                         "delete it or add tuning: to the study"]
        return out
    untuned = [c.label for c in study.cells if c.label not in study.tuned]
    grid = set(study.spec.tuning.lr)
    off = {k: v for k, v in study.tuned.items() if v not in grid}
    if off:
        out["warnings"] = [f"{path}: α {off} not in the study's tuning grid {sorted(grid)}: chosen by hand "
                           "or from an older grid? `edgebed study tune` rewrites it"]
    out["describes"] = (f"α for {len(study.tuned)} of the {len(study.cells)} cells of study {study.spec.name}"
                        + (f" (not tuned yet: {', '.join(untuned)})" if untuned else ""))
    out["ok"] = True
    return out


def cmd_validate(args) -> int:
    results = [_validate_one(Path(f), tuple(args.set or ())) for f in args.scenario]
    if args.json:
        _out(json.dumps(results, indent=2))
    else:
        for r in results:
            for e in r["errors"]:
                log.error(e)
            for w in r["warnings"]:
                log.warning(w)
            if r["ok"]:
                _out(f"{r['file']}: ok — {r['describes']}")
                if r.get("classes"):
                    from .emulator.preview import preview_lines
                    _out("\n".join(preview_lines(r["classes"], r.get("expected"))))
    return 0 if all(r["ok"] for r in results) else 2


def cmd_run(args) -> int:
    from .advice import advice
    from .console import RunProgress
    from .scenario import load_scenario
    if args.resume:   # the run directory holds the resolved scenario; nothing may change on resume
        if args.scenario or args.set:
            log.error("--resume takes the scenario from the run directory; give no scenario or --set")
            return 2
        args.scenario = Path(args.resume) / "scenario.yaml"
        from .scenario import load_resolved
        sc = load_resolved(args.scenario)
    elif not args.scenario:
        log.error("give a scenario file, or --resume <run-dir>")
        return 2
    else:
        sc = load_scenario(args.scenario, tuple(args.set or ()))
    for w in advice(sc):
        log.warning(f"{args.scenario}: {w}")
    log.info(f"edgebed: running {sc.name} — {sc.workers.n} devices, {sc.algorithm.name}, "
             f"runtime {sc.runtime.name}; writing to {args.out}/")
    progress = RunProgress(sys.stderr, quiet=args.quiet or args.json)
    if not (args.quiet or args.json):
        log.info("loading the engine (torch, the model, the runtime)…")
    from .launch import interrupted as _interrupted, start_run   # what edgebed.run calls too
    try:
        res = start_run(sc, args.out, progress, str(args.scenario), resume=args.resume, command_line=True)
    except KeyboardInterrupt as stop:   # during set-up: the run's summary line all the same
        progress.close()
        return _setup_interrupted(getattr(stop, "run_dir", None), args)
    finally:
        progress.close()
    s = res.summary
    interrupted = _interrupted(s)
    # The run is closed, whatever ended it: a late signal must not cut its summary's printing short,
    # nor turn a complete run's exit code into a signal's.
    _ignore_interrupts("Ctrl-C again: already stopping — the run is closed and its records are written; "
                       "printing its summary" if interrupted else
                       "Ctrl-C after the run ended — its records are written; printing its summary")
    if args.json:
        _out(json.dumps({"run_dir": str(res.path), **s}, indent=2, default=str))
    else:
        from .units import fmt_bytes
        acc = f"{s['final_accuracy']:.2%}" if s["final_accuracy"] is not None else "n/a"
        best = f"{s['best_accuracy']:.2%}" if s["best_accuracy"] is not None else "n/a"
        lines = [f"{s['status']}: {s['reason']}",
                 f"  updates {s['updates']:,} in {s['wall_time_s']:.1f} s ({s['updates_per_s']} upd/s)",
                 f"  test accuracy final {acc}, best {best}",
                 f"  PS ingress {fmt_bytes(s['ingress_bytes'])} (pushes {fmt_bytes(s['push_bytes'])}), "
                 f"egress {fmt_bytes(s['egress_bytes'])}",
                 f"  devices: {s['devices']['said_hello']} joined, {s['devices']['crashed']} crashed, "
                 f"{s['devices']['lost']} lost",
                 f"  run directory: {res.path}",
                 f"  report: edgebed report {res.path}"]
        if s.get("leftovers"):   # the docker teardown left objects behind (warned during the run too)
            lines.insert(5, "  NOT cleaned up: " + "; ".join(f"{k} {', '.join(v)}" for k, v in s["leftovers"].items())
                         + f" — run `edgebed clean {res.path}`")
        if args.quiet:
            lines = [lines[0], lines[-2]]
        elif verdict := (s.get("fidelity") or {}).get("verdict"):
            lines.insert(5, f"  fidelity: {verdict['summary']}")
        _out("\n".join(lines))
    if interrupted:
        return 130
    return 0 if s["status"] == "complete" else 1


def _setup_interrupted(path: Optional[Path], args) -> int:
    """What ``edgebed run`` prints when Ctrl-C / SIGTERM ended the run during set-up: the summary
    line any interrupted run ends with (``incomplete: interrupted …``), and where it is; exit 130."""
    from .rundir import read_json
    _ignore_interrupts("Ctrl-C again: already stopping — the run is closed and its records are written")
    s = read_json(path, "summary.json") if path is not None and (path / "summary.json").is_file() else {}
    s = {"status": s.get("status", "incomplete"), "updates": s.get("updates", 0),
         "reason": s.get("reason") or "interrupted by the user (Ctrl-C / SIGTERM) during set-up, before "
         "the run directory was made: nothing was written"}
    if args.json:
        _out(json.dumps({"run_dir": str(path) if path else None, **s}, indent=2, default=str))
    else:
        _out("\n".join([f"{s['status']}: {s['reason']}", f"  updates {s['updates']:,}"]
                       + ([f"  run directory: {path}"] if path else [])))
    return 130


def cmd_runs(args) -> int:
    from .analysis.listing import strict_records
    from .api import list_runs
    from .units import fmt_bytes
    where = args.dirs or ["runs"]
    df = list_runs(where, sort=args.sort, status=args.status, algorithm=args.algorithm, match=args.match)
    if args.reverse:
        df = df.iloc[::-1]
    if args.json:
        _out(json.dumps(strict_records(df), indent=2, allow_nan=False))
        return 0
    if df.empty:
        log.info(f"no runs in {', '.join(map(str, where))}" + (" matching the filters" if (
            args.status or args.algorithm or args.match) else ""))
        return 0

    def num(fmt):
        return lambda v: "—" if v is None or v != v else fmt(v)
    shown = df.assign(
        final_accuracy=df["final_accuracy"].map(num(lambda a: f"{100 * a:.2f} %")),
        updates=df["updates"].map(num(lambda u: f"{int(u):,}")),
        ingress_bytes=df["ingress_bytes"].map(num(lambda b: fmt_bytes(int(b)))),
        c=df["c"].map(num(lambda c: f"{c:g}")), devices=df["devices"].map(num(lambda n: f"{int(n)}")),
        started=df["started"].map(num(lambda t: str(t)[:16].replace("T", " "))),
        wall_time_s=df["wall_time_s"].map(num(_duration)))
    cols = {"run": "run", "status": "status", "algorithm": "algorithm", "c": "c", "devices": "n",
            "runtime": "runtime", "updates": "updates", "final_accuracy": "final acc",
            "ingress_bytes": "PS ingress", "started": "started", "wall_time_s": "duration"}
    _out(_table(shown[list(cols)].rename(columns=cols), left=("run", "status", "algorithm", "runtime", "started")))
    return 0


def _table(df, left=()) -> str:
    """A plain text table: the ``left`` columns aligned left, the others (numbers) right."""
    rows = [list(df.columns)] + [[str(v) for v in r] for r in df.itertuples(index=False)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(df.columns))]
    return "\n".join("  ".join(v.ljust(w) if c in left else v.rjust(w)
                               for v, w, c in zip(r, widths, df.columns)).rstrip() for r in rows)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60}:{s % 60:02d}" if s < 3600 else f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _targets(values) -> "list[float] | None":
    """``--target 0.9 --target 0.97`` or ``--target 0.9,0.97``: the fractions, or None (default)."""
    if not values:
        return None
    out = []
    for v in values:
        for part in str(v).replace(" ", "").split(","):
            try:
                out.append(float(part.rstrip("%")) / (100 if part.endswith("%") else 1))
            except ValueError:
                from .analysis.runs import ReportError
                raise ReportError(f"--target {v!r}: not a number; give a fraction such as 0.97, "
                                  "or several: --target 0.9 --target 0.97") from None
    return out


def cmd_report(args) -> int:
    from .analysis.report import write_report
    res = write_report([Path(r) for r in args.runs], Path(args.out) if args.out else None,
                       target=_targets(args.target), baseline=args.baseline,
                       formats=tuple(args.format or ()), window=args.smooth)
    return _show_report(args, res, res.as_json())


def _show_report(args, res, as_json: dict) -> int:
    """A written report: ``as_json`` with --json (strict JSON: null, never NaN), else its table
    (unless -q) and the files written."""
    if args.json:
        _out(json.dumps(as_json, indent=2, default=str, allow_nan=False))
        return 0
    if not args.quiet:
        _out(res.table_markdown)
    log.info("written:\n  " + "\n  ".join(str(p) for p in res.files))
    return 0


def cmd_clean(args) -> int:
    from .emulator.cleanup import clean, clean_all, describe, describe_all
    if args.all == bool(args.run):
        log.error("give a run directory, or --all (not both)")
        return 2
    if args.all:
        _out(describe_all(clean_all(args.runs or ["runs"], run_id_prefix=args.prefix)))
        return 0
    _out(describe(clean(Path(args.run))))
    return 0


def cmd_study_run(args) -> int:
    from .study.runner import load_study, run_study
    study = load_study(args.study, tuple(args.set or ()))   # errors before the engine (torch) loads
    if args.seeds is not None:
        study = study.first_seeds(args.seeds)
    if args.cells:
        study = study.select(tuple(args.cells))
    from .console import RunProgress
    runs = len(study.selected) * len(study.run_seeds)
    of = f" (of {len(study.cells)})" if len(study.selected) < len(study.cells) else ""
    log.info(f"edgebed: study {study.spec.name} — {plural(len(study.selected), 'cell')}{of} × "
             f"{plural(len(study.run_seeds), 'seed')} = {plural(runs, 'run')}; writing to {Path(args.out) / study.spec.name}/")
    results = Path(args.results) if args.results else None
    executor = _executor(args, Path(args.out) / study.spec.name)
    progress = RunProgress(sys.stderr, quiet=args.quiet or args.json)
    try:
        status = run_study(study, args.out, progress=progress, results=results, executor=executor,
                           retries=args.retries)
    finally:
        progress.close()
        executor.shutdown(wait=False, cancel_futures=True)
    if args.json:
        _out(json.dumps(status, indent=2, default=str))
        return 0 if status["failed"] + status["incomplete"] == 0 else 1
    _out(f"{status['complete']} ran, {status['skipped']} already complete, {status['failed']} failed, "
          f"{status['incomplete']} incomplete (of {status['total']})\n"
          f"  report: edgebed study report {Path(args.out) / study.spec.name}")
    return 0 if status["failed"] + status["incomplete"] == 0 else 1


def cmd_study_tune(args) -> int:
    from .study.runner import load_study, run_study
    from .study.tuning import choose, complete_runs, score_table, tuning_study, write_tuning
    study = load_study(args.study, tuple(args.set or ()))
    if args.cells:
        study = study.select(tuple(args.cells))
    ts = tuning_study(study)
    results = Path(args.results) if args.results else None
    if not args.select_only:
        from .console import RunProgress
        log.info(f"edgebed: tuning {study.spec.name} — {len(ts.selected)} cell × α points × "
                 f"{plural(len(ts.spec.seed_list), 'seed')}; writing to {Path(args.out) / ts.spec.name}/")
        executor = _executor(args, Path(args.out) / ts.spec.name)
        progress = RunProgress(sys.stderr, quiet=args.quiet)
        try:
            run_study(ts, args.out, progress=progress, results=results, executor=executor,
                      retries=args.retries)
        finally:
            progress.close()
            executor.shutdown(wait=False, cancel_futures=True)
    table = score_table(study, complete_runs(study, Path(args.out), results))
    chosen, missing = choose(study, table)
    csv, tuned = write_tuning(study, table, chosen, missing)
    for label, lr in chosen.items():
        _out(f"  {label}: α = {lr:g}")
    if missing:
        _out(f"  not complete yet (rerun the same command to resume): {', '.join(missing)}")
    log.info(f"written:\n  {csv}\n  {tuned}")
    return 0 if not missing else 1


def _executor(args, sdir: Path):
    """The executor ``--executor`` names, with the options of its engine."""
    from .study.executors import Resources, make_executor
    if args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: give at least 1 (cells run at once)")
    if args.retries < 0:
        raise ValueError(f"--retries {args.retries}: give 0 or more")
    return make_executor(args.executor, workers=args.jobs, address=args.address,
                         resources=Resources(cpus=args.cpus_per_task, gpus=args.gpus_per_task),
                         partition=args.partition, time_min=args.time,
                         folder=Path(args.slurm_folder) if args.slurm_folder else sdir / "slurm",
                         array_parallelism=args.array_parallelism)


def _made_with(r) -> None:
    """``--set`` of the verbs that look for runs already made: they match the runs' resolved scenario."""
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="the --set the runs were made with")


def _executor_args(r) -> None:
    g = r.add_argument_group("where cells run (docs/studies-on-clusters.md)")
    g.add_argument("--executor", choices=["local", "ray", "slurm"], default="local",
                   help="local: this machine, --jobs processes (default); ray: one Ray task per cell × "
                        "seed on a Ray cluster (--address); slurm: one SLURM job array through submitit")
    g.add_argument("--jobs", type=int, default=1, metavar="J",
                   help="local: run J cells at once, each in its own process (default 1); give each fewer "
                        "torch threads, e.g. --set runtime.sim.threads=1")
    g.add_argument("--retries", type=int, default=2, metavar="N",
                   help="run a cell × seed again up to N times when its worker dies (default 2)")
    g = r.add_argument_group("what each cell × seed asks for (ray, slurm)")
    g.add_argument("--cpus-per-task", type=int, default=1, metavar="C",
                   help="CPUs (default 1: a sim cell trains on one thread)")
    g.add_argument("--gpus-per-task", type=float, default=0, metavar="G", help="GPUs (default 0)")
    g = r.add_argument_group("ray")
    g.add_argument("--address", metavar="ADDR", help="the cluster, e.g. auto, HEAD:6379 or "
                   "ray://HEAD:10001 (default: start a private Ray on this machine)")
    g = r.add_argument_group("slurm (through submitit)")
    g.add_argument("--partition", metavar="NAME", help="the partition (default: the cluster's)")
    g.add_argument("--time", type=int, default=120, metavar="MIN",
                   help="time limit of each cell × seed job in minutes (default 120)")
    g.add_argument("--array-parallelism", type=int, default=256, metavar="K",
                   help="at most K jobs of the array at once (default 256)")
    g.add_argument("--slurm-folder", metavar="DIR", help="submitit's job files (pickled tasks and results, "
                   "logs); must be on storage the compute nodes see (default <out>/<study>/slurm)")


def cmd_study_import(args) -> int:
    from .study.runner import load_study
    from .study.results import import_runs
    study = load_study(args.study, tuple(args.set or ()))
    if args.tuning:
        from .study.tuning import tuning_study
        study = tuning_study(study)
    into = Path(args.into) if args.into else Path("benchmarks/results/studies") / study.spec.name
    status = import_runs(study, Path(args.source), into, lambda line, final: log.info(line))
    _out(f"{status['imported']} runs compacted into {into}; {status['complete']} of {status['total']} "
         f"cell × seed runs there are complete")
    for s in status["not_taken"]:
        _out(f"  not taken (not complete, or made from another scenario): {s}")
    return 0


def cmd_study_status(args) -> int:
    from .study.runner import load_study
    from .study.results import progress
    study = load_study(args.study, tuple(args.set or ()))
    out = Path(args.out or STUDY_OUT)   # where `study run` writes by default
    results = Path(args.results) if args.results else _default_results(study)
    st = progress(study, results if results.is_dir() or args.results else None, out)
    st["looked_in"] = {"runs": str(out / study.spec.name), "runs_found": (out / study.spec.name).is_dir(),
                       "results": str(results), "results_found": results.is_dir()}
    from .study import progress as live
    snap = live.read(out / study.spec.name)
    st["live"] = snap
    if args.json:
        _out(json.dumps(st, indent=2))
        return 0

    def lines(rows: list[dict], seeds: list[int]) -> list[str]:
        width = max((len(r["label"]) for r in rows), default=0)
        return [f"  {r['label']:<{width}}  " + " ".join(f"{s}{'✓' if s in r['complete'] else '·'}" for s in seeds)
                + (f"  ({r['note']})" if r.get("note") else "") for r in rows]
    text = [f"study {st['study']} ({st['file']}): {st['complete']} of {st['total']} runs complete"
            + (f" in {st['results']}" if st["results"] else "")]
    if "tuning" in st:
        t = st["tuning"]
        text.append(f"tuning grid: {t['complete']} of {t['total']} runs"
                    + (f"; α not chosen yet for {', '.join(t['untuned'])}" if t["untuned"] else "; α chosen for every cell"))
    text += lines(st["cells"], study.spec.seed_list)
    text.append("  (per cell, each seed: ✓ complete, · not yet; `1✓` = seed 1's run is complete)")
    seen = st["looked_in"]
    text.append(f"looked in: {seen['runs']}/ ({'run directories' if seen['runs_found'] else 'not there'}), "
                f"{seen['results']}/ ({'compact results' if seen['results_found'] else 'not there'})"
                + ("" if seen["runs_found"] or args.out else "; runs written elsewhere? give --out <the study run's --out>"))
    if snap:   # the view of the driver that runs (or last ran) this study: the same as its console
        text += ["", f"last driver ({out / study.spec.name / live.NAME}):", *live.render(snap), ""]
    if st.get("numerics"):
        text.append(f"numerics: {st['numerics']['text']}")
    if st["missing_core_hours"]:
        text.append(f"{st['total'] - st['complete']} runs to go: about {st['missing_core_hours']:g} core-hours at the "
                    f"median {st['median_run_s']:,.0f} s of the runs complete here (wall time, one run per core)")
    if st["resume"]:
        extra = f" --out {args.out}" if args.out and args.out != STUDY_OUT else ""
        text += ["resume (add --jobs 2 --set runtime.sim.threads=1 on an idle 2-core host):",
                 *[f"  {c}{extra}" for c in st["resume"]]]
    _out("\n".join(text))
    return 0


STUDY_OUT = "studies-out"   # `study run --out`'s default: `study status` looks there too


def _default_results(study) -> Path:
    """``benchmarks/results/studies/<name>`` in the working directory, else in the project the study
    file belongs to (the nearest folder above it that has one) — where `study run --results` and
    `study import` write it when run from the project's root."""
    rel = Path("benchmarks/results/studies") / study.spec.name
    if rel.is_dir():
        return rel
    for parent in Path(study.path).resolve().parents:
        if (parent / rel).is_dir():
            return parent / rel
    return rel


def cmd_study_report(args) -> int:
    from .study.report import write_study_report
    res = write_study_report([Path(d) for d in args.study_dir], Path(args.out) if args.out else None,
                             _targets(args.target), window=args.smooth)
    return _show_report(args, res, res.as_json())


def _study_parser(sub) -> None:
    p = sub.add_parser("study", help="run a study (grid of scenarios × seeds) and report it")
    verbs = p.add_subparsers(dest="study_cmd", required=True)
    r = verbs.add_parser("run", help="run every cell × seed not yet complete (resumes)")
    r.add_argument("study", help="study YAML file (see scenarios/studies/)")
    r.add_argument("--out", default=STUDY_OUT, help="parent of the study directory (default studies-out/)")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a scenario key in every cell, e.g. --set eval.every=500 (repeatable)")
    r.add_argument("--seeds", type=int, metavar="K", help="run only the study's first K seeds")
    r.add_argument("--cells", action="append", metavar="GLOB",
                   help="run only the cells whose label or id matches, e.g. --cells '*train_samples=8000' "
                        "(repeatable; a later run without it resumes the rest)")
    _executor_args(r)
    r.add_argument("--results", metavar="DIR", help="committed results directory, e.g. "
                   "benchmarks/results/studies/<name>: skip the runs compacted there, compact each new one")
    r.set_defaults(func=cmd_study_run)
    r = verbs.add_parser("tune", help="run the study's tuning grid (resumes) and choose α per cell")
    r.add_argument("study", help="study YAML file with a `tuning:` section")
    r.add_argument("--out", default="studies-out", help="parent of the tuning study directory")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="as for study run")
    r.add_argument("--cells", action="append", metavar="GLOB", help="tune only these cells")
    _executor_args(r)
    r.add_argument("--results", metavar="DIR", help="committed results directory of the tuning "
                   "runs, e.g. benchmarks/results/studies/<name>-tuning")
    r.add_argument("--select-only", action="store_true",
                   help="run nothing: score the runs there are and write the table and choice")
    r.set_defaults(func=cmd_study_tune)
    r = verbs.add_parser("import", help="compact a study directory's complete runs into a results directory")
    r.add_argument("study", help="the study YAML file to import runs for")
    r.add_argument("source", help="a study directory (<out>/<study name>/) or a committed results "
                   "directory, of this study or another: runs of the same resolved scenario (the "
                   "name aside) and cell id are taken")
    r.add_argument("--into", help="results directory (default benchmarks/results/studies/<name>, "
                   "<name>-tuning with --tuning)")
    r.add_argument("--tuning", action="store_true", help="import runs of the study's tuning grid "
                   "(the cells of `study tune`), e.g. from another study's <name>-tuning results")
    _made_with(r)
    r.set_defaults(func=cmd_study_import)
    r = verbs.add_parser("status", help="which cell × seed runs are complete, and the commands that resume the rest")
    r.add_argument("study", help="study YAML file")
    r.add_argument("--results", metavar="DIR", help="committed results directory (default "
                   "benchmarks/results/studies/<name>; the tuning grid's: DIR-tuning)")
    r.add_argument("--out", metavar="DIR", help="count run directories under DIR/<name>/ (default studies-out, "
                   "as `study run`); the live view of a running driver is read from there too")
    _made_with(r)
    r.set_defaults(func=cmd_study_status)
    r = verbs.add_parser("report", help="band plots, per-cell table (md + CSV) and one HTML page")
    r.add_argument("study_dir", nargs="+", help="the study directory (<out>/<study name>/) or a "
                   "committed results directory; several: side by side (e.g. two protocols)")
    r.add_argument("--out", help="output directory (default <study dir>/report)")
    r.add_argument("--target", action="append", metavar="ACC",
                   help="target test accuracy as a fraction, instead of the study's (e.g. 0.94); "
                        "repeatable, or a list: 0.9,0.94")
    r.add_argument("--smooth", type=int, metavar="K",
                   help="moving average over K evaluations for the targets (default: the study's smoothing)")
    r.set_defaults(func=cmd_study_report)


def cmd_image_build(args) -> int:
    from .emulator.runtimes.docker import images
    info = images.build(args.mode, force=args.force)
    _out(info.message)
    return 0


def cmd_compose_export(args) -> int:
    from .emulator.runtimes.docker.compose import export_compose, run_hint
    path = export_compose(_scenario(args), args.out, offline=args.offline)
    _out(f"written {path}\n{run_hint(path.parent)}")
    if args.offline:   # the override names the offline image: without it compose would build the Dockerfile
        from .emulator.runtimes.docker import images
        try:
            _out(images.build("offline").message)
        except Exception as err:   # no engine here now: the project is written; say what to do
            _out(f"the offline image could not be made now ({err}); run `edgebed image build` on this host "
                 "before compose up, else compose builds build/Dockerfile, which needs a registry")
    return 0


def cmd_export_k8s(args) -> int:
    from .emulator.runtimes import kubernetes
    written = kubernetes.export(_scenario(args), args.out, **({"image": args.image} if args.image else {}))
    _out(f"written {len(written)} manifest files to {args.out} (untested on a live cluster; see "
         f"docs/kubernetes-export.md)\nbuild and push the image, then: kubectl apply -k {args.out}")
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
    e.add_argument("--offline", action="store_true",
                   help="also write docker-compose.override.yml: this host's offline image + read-only mounts "
                   "(and import that image here if it is missing)")
    e.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key")
    e.set_defaults(func=cmd_compose_export)
    p = sub.add_parser("export", help="export a scenario for another orchestrator")
    verbs2 = p.add_subparsers(dest="export_cmd", required=True)
    k = verbs2.add_parser("k8s", help="write Kubernetes manifests: PS Deployment + Service, a StatefulSet per "
                          "speed class with a NET_ADMIN init container shaping each pod's link")
    k.add_argument("scenario", help="scenario YAML file")
    k.add_argument("-o", "--out", required=True, help="output directory")
    k.add_argument("--image", default=None, help="agent image in your registry (default: edgebed/agent:<version>)")
    k.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario key")
    k.set_defaults(func=cmd_export_k8s)
    s = verbs.add_parser("serve", help="(inside a compose project) run the PS for compose-started agents")
    s.add_argument("scenario", help="scenario YAML file")
    s.add_argument("--bind", default="tcp://0.0.0.0:5555", help="ZeroMQ endpoint the PS binds")
    s.add_argument("--out", default="/edgebed/runs", help="parent of the run directory")
    s.set_defaults(func=lambda args: __import__("edgebed.emulator.runtimes.docker.compose", fromlist=["serve"]).serve(
        args.scenario, args.bind, args.out))


def cmd_new(args) -> int:
    from .scaffold import new_project
    files = new_project(args.name)
    if args.json:
        _out(json.dumps({"directory": str(Path(args.name)), "files": [str(f) for f in files]}))
        return 0
    for f in files:
        _out(f"  {f}")
    d = Path(args.name)
    log.info(f"next: cd {d} && edgebed validate scenario.yaml study.yaml && edgebed run scenario.yaml "
             f"(then edgebed report runs/{d.name}-*)")
    return 0


def _common(p: argparse.ArgumentParser, top: bool = False) -> None:
    """-q / -v / --json, accepted before or after the verb (the verb's copy keeps the top's value)."""
    d = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only, no progress", **d)
    p.add_argument("-v", "--verbose", action="count", help="more detail (debug lines)", **({"default": 0} if top else d))
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout", **d)


def _subparsers(p: argparse.ArgumentParser):
    for action in p._actions:   # argparse has no public walk over sub-commands
        if isinstance(action, argparse._SubParsersAction):
            for sp in dict.fromkeys(action.choices.values()):
                yield sp
                yield from _subparsers(sp)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="edgebed", description="Emulation testbed for asynchronous "
                                 "distributed deep learning on edge devices.",
                                 epilog="Start with: edgebed run scenarios/quickstart.yaml")
    ap.add_argument("--version", action="version", version=f"edgebed {__version__}")
    _common(ap, top=True)
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")

    def scenario_args(p, optional: bool = False):
        p.add_argument("scenario", nargs="?" if optional else None, help="scenario YAML file (see scenarios/)")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a scenario key, e.g. --set algorithm.c=0.1 (repeatable)")

    p = sub.add_parser("validate", help="check scenario and study files and say what they describe")
    p.add_argument("scenario", nargs="+", metavar="FILE", help="scenario or study YAML files")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a scenario key, e.g. --set algorithm.c=0.1 (repeatable)")
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
    p.add_argument("--target", action="append", metavar="ACC",
                   help="target test accuracy as a fraction; repeatable (--target 0.9 --target 0.97) or a "
                        "list (0.9,0.97). Default: the highest round accuracy every run reached")
    p.add_argument("--smooth", type=int, default=1, metavar="K",
                   help="read targets and curves on the moving average over K evaluations, as a study's "
                        "smoothing: K does (default 1: the raw curve)")
    p.add_argument("--baseline", help="run directory used as the ratio baseline (default: the ASGD run)")
    p.add_argument("--format", action="append", choices=["png", "svg", "pdf"],
                   help="also write the plots in this format (repeatable; the HTML page embeds SVG)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("runs", help="list run directories (status, algorithm, n, c, updates, accuracy, "
                       "PS ingress, start, duration)")
    p.add_argument("dirs", nargs="*", metavar="DIR", help="run directories or folders searched for runs at "
                   "any depth, study folders too (default runs/)")
    p.add_argument("--sort", default="started", choices=["started", "run", "status", "updates", "accuracy",
                                                         "ingress", "duration", "devices"],
                   help="order of the rows (default started: oldest first)")
    p.add_argument("--reverse", action="store_true", help="reverse the order")
    p.add_argument("--status", choices=["complete", "incomplete", "failed", "killed", "running"],
                   help="only runs with this status")
    p.add_argument("--algorithm", metavar="NAME", help="only runs of this algorithm (e.g. adacomp)")
    p.add_argument("--match", metavar="GLOB", help="only runs whose id or scenario name matches, e.g. 'quick*'")
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser("clean", help="remove what a run left behind (processes, containers, qdiscs)")
    p.add_argument("run", nargs="?", help="run directory")
    p.add_argument("--all", action="store_true", help="every edgebed run on this host: containers and "
                   "networks labelled edgebed.run, and the run directories under --runs")
    p.add_argument("--runs", action="append", metavar="DIR",
                   help="with --all: a directory searched for run directories (repeatable; default runs/)")
    p.add_argument("--prefix", default="", metavar="RUN_ID_PREFIX",
                   help="with --all: only runs whose id (directory name) starts with this")
    p.set_defaults(func=cmd_clean)
    p = sub.add_parser("new", help="write a ready project: scenario, model, data conversion stub, study, notebook")
    p.add_argument("name", metavar="NAME", help="the new directory (its name names the project); must not exist")
    p.set_defaults(func=cmd_new)
    _study_parser(sub)
    _docker_parsers(sub)
    for p in _subparsers(ap):
        _common(p)
    return ap


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0
        setup_logging(-1 if args.quiet else min(args.verbose, 1))
        return _dispatch(args)
    except BrokenPipeError:
        # The reader went away (`| head`): say nothing more; stdout is pointed at /dev/null so the
        # interpreter's final flush can't raise again. A run's files are already complete on disk.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        _ignore_interrupts()
        sys.stderr.write("\ninterrupted\n")
        return 130
    finally:
        if _ANSWERING:   # ignored, not answered, from here: Python's exit would put back the default,
            import signal   # and a signal in the last milliseconds would end the process by it
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)


_ANSWERING = False   # a Ctrl-C ended the command: later ones are answered, then ignored at exit


def _ignore_interrupts(answer: str = "Ctrl-C again: already stopping — the run is closed and its records "
                       "are written; printing its summary") -> None:
    """Past the point where anything is left to stop: a further Ctrl-C only gets ``answer``, so the
    exit code stays what the run's end made it (130, or 0 for a run that completed) and the last lines
    are printed whole."""
    import signal
    import threading
    from .console import say
    global _ANSWERING
    if threading.current_thread() is threading.main_thread():
        _ANSWERING = True
        signal.signal(signal.SIGINT, lambda signum, frame: say(answer))


def _dispatch(args) -> int:
    from .scenario import ScenarioError
    try:
        return args.func(args)
    except ScenarioError as err:
        for line in str(err).splitlines():
            log.error(line)
        return 2
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        log.error(str(err))
        if args.verbose:
            log.debug("traceback:", exc_info=True)
        return 2


def _forget_caught_interrupt() -> None:
    """CPython remembers a KeyboardInterrupt that escaped code run from source text (``exec`` or
    ``eval`` of a string: dataclasses and namedtuples build their methods so, hundreds of times in
    torch's import) and, in a program started with ``python -m``, ends the process by SIGINT at exit
    for it — even when the program caught it and chose its exit code (Py_RunMain, Modules/main.c).
    A Ctrl-C during set-up lands in such code now and then: `python -m edgebed.cli run` printed
    "interrupted" and then died by SIGINT instead of exiting 130. Every exec of source text starts by
    clearing that memory, so an empty one forgets it."""
    exec("")


def entry() -> int:
    """The ``edgebed`` program (console script and ``python -m edgebed.cli``): ``main``, then the fork
    server and resource tracker it started end with it, not after it (procs.end_helpers). Not ``main``
    itself: tests and scripts call that in a process that goes on."""
    try:
        return main()   # an interrupt main did not catch still propagates, and ends the process by SIGINT
    finally:
        from .procs import end_helpers
        end_helpers()


if __name__ == "__main__":
    code = entry()
    _forget_caught_interrupt()
    sys.exit(code)
