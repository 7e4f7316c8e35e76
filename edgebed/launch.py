"""Start runs and studies from Python: ``edgebed.run`` (what the CLI's ``run`` calls too) and
``edgebed.run_study`` (``edgebed.study`` is the package of studies, so the verb names the function).

    >>> import edgebed
    >>> asgd = edgebed.run("scenarios/quickstart.yaml", overrides={"algorithm.name": "asgd"})
    >>> asgd.status, asgd.summary["ingress_bytes"]
    ('complete', 10234567)
    >>> s = edgebed.run_study("scenarios/studies/compression-smoke.yaml", jobs=2)
    >>> s.targets(0.9)          # per cell: seeds that reached 90 %, ingress to it, ratio vs baseline

A run writes the same run directory as ``edgebed run`` and returns what ``edgebed.load_run`` reads
back from it. Interrupting it (Ctrl-C on the console, the stop button of a notebook: both a
KeyboardInterrupt) ends it as the CLI does — the run is closed, its records written, marked
``incomplete`` — and then raises :class:`RunInterrupted`, a KeyboardInterrupt that carries the run,
so a loop over seeds stops too. A study resumes: cells × seeds already complete are not run again.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

import pandas as pd

from .api import ReportError, RunData, load_run
from .scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = ["run", "run_study", "StudyData", "RunInterrupted", "start_run"]

Overrides = Union[Mapping[str, Any], Iterable[str], None]


class RunInterrupted(KeyboardInterrupt):
    """The user interrupted a run started from Python; ``run`` is what was recorded (an
    ``incomplete`` run's RunData; None when the start itself was cut short before its directory)."""

    def __init__(self, run: Optional[RunData]):
        super().__init__(f"interrupted: {run.path if run else 'during set-up'}")
        self.run = run


def _overrides(overrides: Overrides) -> tuple[str, ...]:
    """``{"algorithm.c": 0.01}`` or ``["algorithm.c=0.01"]`` → the ``--set`` strings."""
    if overrides is None:
        return ()
    if isinstance(overrides, str):
        raise ScenarioError(f"overrides={overrides!r}: give a mapping {{key: value}} or a list of "
                            "'key=value' strings, not one string")
    if isinstance(overrides, Mapping):
        return tuple(f"{k}={_text(v)}" for k, v in overrides.items())
    return tuple(str(o) for o in overrides)


def _text(value: Any) -> str:
    """A Python value as ``--set`` reads it (YAML): booleans lower case, None as null, lists as YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple, dict)):
        import json
        return json.dumps(value)   # JSON is YAML
    return str(value)


def scenario_of(scenario: Union[str, Path, Mapping, Scenario], overrides: Overrides = None) -> tuple[Scenario, str]:
    """(validated scenario, where it came from) for a path, a mapping as in a YAML file, or a Scenario."""
    sets = _overrides(overrides)
    if isinstance(scenario, Scenario):
        if sets:
            return parse_scenario(scenario.to_dict(), "<Scenario>", sets, via="overrides"), "<Scenario>"
        return scenario, "<Scenario>"
    if isinstance(scenario, Mapping):
        return parse_scenario(dict(scenario), "<dict>", sets, via="overrides"), "<dict>"
    return load_scenario(scenario, sets, via="overrides"), str(scenario)


def start_run(sc: Scenario, out: Union[str, Path], progress, source: str, resume: Optional[str] = None,
              command_line: bool = False):
    """Run ``sc`` with the engine; returns its ``RunResult``. A run that failed inside the run loop is
    recorded in its summary.json before the engine re-raises: that recorded failure is returned like
    any other run. ``command_line``: the caller exits right after, so presses after an interrupted run
    are only answered (never cut its last lines short)."""
    from .emulator.engine import Engine, RunResult
    from .rundir import read_json
    engine = Engine(sc, out, progress, source=source, resume=resume)
    engine.answer_after_interrupt = command_line
    try:
        return engine.run()
    except KeyboardInterrupt as stop:
        stop.run_dir = engine.run_dir   # what the interrupted start left (None: cut short before it)
        raise
    except Exception:
        path = engine.run_dir
        if path is None or not (path / "summary.json").is_file():
            raise
        summary = read_json(path, "summary.json")
        if summary.get("status") == "failed" and "devices" in summary:
            from .console import log
            log.debug("traceback:", exc_info=True)
            return RunResult(path, summary)
        raise


def interrupted(summary: Mapping) -> bool:
    """Whether a run's summary says the user stopped it (Ctrl-C, SIGTERM)."""
    return str(summary.get("reason", "")).startswith("interrupted")


def run(scenario: Union[str, Path, Mapping, Scenario], overrides: Overrides = None, out: Union[str, Path] = "runs",
        progress: bool = True, resume: Union[str, Path, None] = None) -> RunData:
    """Run one scenario — a YAML file's path, a mapping as in such a file, or a ``Scenario`` — with
    ``overrides`` (``{"algorithm.c": 0.01}`` or ``["algorithm.c=0.01"]``, as ``--set``) and return the
    run as ``load_run`` reads it. ``resume``: a run directory to go on with (give no scenario).
    ``progress``: show progress on stderr, as the console does (a notebook shows it under the cell).

    Raises ``ScenarioError`` for a scenario that is not valid (nothing started), ``RunInterrupted`` when
    interrupted (after the run is closed and recorded). A run that failed returns with status
    ``failed`` and its reason in ``summary["reason"]``."""
    from .console import RunProgress
    if resume is not None:
        if overrides:
            raise ScenarioError("resume takes the scenario from the run directory; give no overrides")
        source = str(Path(resume) / "scenario.yaml")
        sc = load_scenario(source)
    else:
        sc, source = scenario_of(scenario, overrides)
    from .advice import advice
    from .console import log
    for w in advice(sc):
        log.warning(f"{source}: {w}")
    # a terminal gets the console's live bar; a notebook's cell output a line every 10 s and at the end
    shown = RunProgress(sys.stderr, quiet=not progress, every=10.0, each_eval=False)
    try:
        result = start_run(sc, out, shown, source, resume=str(resume) if resume is not None else None)
    except KeyboardInterrupt as stop:
        raise RunInterrupted(_recorded(getattr(stop, "run_dir", None))) from None
    finally:
        shown.close()
    data = load_run(result.path)
    if interrupted(result.summary):
        raise RunInterrupted(data)
    return data


def _recorded(path: Optional[Path]) -> Optional[RunData]:
    """The run directory an interrupted start left, as ``load_run`` reads it (None: there is none, or
    the start was cut short before it had a status to read)."""
    if path is None:
        return None
    try:
        return load_run(path)
    except ReportError:
        return None


@dataclass(frozen=True)
class StudyData:
    """A study's directory (``<out>/<study name>``) and its status after a run: ``complete``,
    ``skipped`` (already complete before), ``failed``, ``incomplete``, ``total`` and ``cells``."""
    path: Path
    status: dict

    def runs(self) -> pd.DataFrame:
        """One row per complete cell × seed: cell, label, seed and the run's numbers (as the study
        report's runs.csv), at the study's own targets."""
        return self._tables(None)[0]

    def targets(self, target: Optional[float] = None, window: Optional[int] = None) -> pd.DataFrame:
        """Per cell at ``target`` (default the study's): seeds that reached it, updates and PS ingress
        to it (mean, min, max over the seeds), bytes per update, and the ratio of the baseline cell's
        ingress to this cell's with its two factors and its range over seed pairs."""
        from .analysis.targets import target_table
        per_run, t, baseline_of = self._tables(target, window)
        return target_table(per_run, t, baseline_of) if not per_run.empty else pd.DataFrame()

    def report(self, out: Union[str, Path, None] = None, target=None):
        """Write the study report (plots, tables, HTML) as ``edgebed study report`` does; returns it."""
        from .study.report import write_study_report
        return write_study_report(self.path, Path(out) if out else None, target=target)

    def _tables(self, target: Optional[float], window: Optional[int] = None):
        from .study.report import _combine, cell_table
        status, runs, labels, _notes, baseline_of, reference_of = _combine([self.path])
        t = float(target if target is not None else status.get("target") or 0.97)
        w = int(window if window is not None else status.get("smoothing") or 1)
        targets = tuple(sorted(set(status.get("targets") or []) | {t}))
        _, _, per_run = cell_table(runs, labels, t, baseline_of, reference_of, targets, w)
        return per_run, t, baseline_of


def run_study(study_file: Union[str, Path], out: Union[str, Path] = "studies-out", overrides: Overrides = None,
          seeds: Optional[int] = None, cells: Optional[Iterable[str]] = None, executor: Any = "local",
          jobs: int = 1, results: Union[str, Path, None] = None, retries: int = 2,
          progress: bool = True, **executor_options) -> StudyData:
    """Run a study file's cells × seeds not yet complete (it resumes) and return its directory and
    status. ``executor``: ``"local"`` (``jobs`` processes), ``"ray"`` or ``"slurm"`` with their options
    as keywords (``address``, ``resources``, ``partition``, ``time_min``, ``folder``,
    ``array_parallelism``: ``study.executors.make_executor``), or an executor object. ``seeds``: only
    the first that many; ``cells``: only these cell labels or ids. Interrupting it records what ran
    and raises KeyboardInterrupt; running it again goes on where it stopped."""
    from .console import RunProgress
    from .study.executors import make_executor
    from .study.runner import load_study, run_study as _run_study
    st = load_study(study_file, _overrides(overrides))
    if seeds is not None:
        st = st.first_seeds(seeds)
    if cells:
        st = st.select(tuple(cells))
    sdir = Path(out) / st.spec.name
    ex = make_executor(executor, workers=jobs, folder=executor_options.pop("folder", sdir / "slurm"),
                       **executor_options) if isinstance(executor, str) else executor
    shown = RunProgress(sys.stderr, quiet=not progress, every=10.0, each_eval=False)
    try:
        status = _run_study(st, out, progress=shown, results=Path(results) if results else None,
                           executor=ex, retries=retries)
    finally:
        shown.close()
        if isinstance(executor, str):
            ex.shutdown(wait=False, cancel_futures=True)
    return StudyData(sdir, status)
