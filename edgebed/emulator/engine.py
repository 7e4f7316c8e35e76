"""Engine: turns a Scenario into a run — PS, evaluator, agents on a runtime — and records it.

The engine does the set-up: it refuses what can't run before a run directory exists, resolves the
timing model, checks the runtime and writes the manifest; ``RunLoop`` (``emulator/runloop.py``) then
runs it, the only emulator run loop, shared by every runtime. Ctrl-C/SIGTERM end the run cleanly and
mark it incomplete.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from .. import __version__, numerics
from ..ps.aggregate import PUSH_PATH
from ..rundir import host_facts, new_run_dir, read_json, write_json_atomic
from ..scenario import Scenario, ScenarioError, dump_scenario
from ..console import Phase, warn
from ..workload import use_path
from .runtimes import get_runtime
from .cleanup import ended_by_clean
from .runloop import RunLoop, RunResult
from .stopping import STOPPING, Interrupted, StopSignals
from .timing_setup import resolve_timing


class Engine:
    def __init__(self, scenario: Scenario, out: str | Path = "runs",
                 progress: Optional[Callable[[str, bool], None]] = None, source: str = "",
                 resume: Optional[str | Path] = None):
        self.sc = scenario
        self._t0 = time.monotonic()   # start-up phases are shown with the seconds since this
        self.answer_after_interrupt = False   # the CLI sets it (stopping.StopSignals.restore)
        self.out = Path(out)
        self.resume = Path(resume) if resume else None   # run directory to restart from its checkpoint
        self.progress = progress or (lambda line, final: None)
        self.source = source
        self._setup_path: Optional[Path] = None   # the run directory, as soon as it exists

    # -- set-up --------------------------------------------------------------------------------
    def _prepare(self):
        sc = self.sc
        use_path(sc.model.path)   # a user's model module: importable here and in every process started after
        if not self.resume:   # what can't run is refused before anything starts or a run directory exists
            from ..data import missing
            from .capacity import problems as capacity_problems
            problems = missing(sc.dataset) or capacity_problems(sc)
            if problems:
                raise ScenarioError("\n".join(f"{self.source or sc.name}: {p}" for p in problems))
        # before anything here runs a torch operation (timing calibration, Θ's initialisation)
        self.numerics = numerics.enter(sc.numerics)
        runtime_cls = get_runtime(sc.runtime.name)
        path = self._setup_path = self.resume or new_run_dir(self.out, sc.name)
        self.progress(Phase(f"run directory: {path}"), False)
        self._phase("checking the runtime and the dataset; timing model")
        try:
            runtime = self._timed_runtime(runtime_cls, path)
            problems = runtime.check()
            from ..data import missing
            problems += missing(sc.dataset)
            if sc.output.tensorboard:
                from .tensorboard import missing as tb_missing
                problems += [p for p in (tb_missing(),) if p]
        except Exception:
            _remove_empty(path)
            raise
        if self.resume:
            if problems:
                raise ScenarioError("\n".join(f"{path}: {p}" for p in problems))
            manifest = read_json(path, "manifest.json")
            before = (manifest.get("numerics") or {}).get("id")
            if before != self.numerics["id"]:
                warn(f"resumed with numerics {numerics.describe(self.numerics)}, recorded with "
                     f"{numerics.describe(manifest.get('numerics'))}: the rows before and after this resume "
                     "are not bit-for-bit comparable with one uninterrupted run")
                write_json_atomic(path / "manifest.json", {
                    **manifest, "numerics_resumed": [*manifest.get("numerics_resumed", []), self.numerics]})
            write_json_atomic(path / "summary.json", {"status": "running", "resumed": True, "engine": _me()})
            return path, runtime
        if problems:
            _remove_empty(path)
            raise ScenarioError("\n".join(f"{self.source or sc.name}: {p}" for p in problems))
        dump_scenario(sc, path / "scenario.yaml")
        write_json_atomic(path / "manifest.json", {
            "edgebed": __version__, "scenario": sc.name, "seed": sc.seed, "source": self.source,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runtime": sc.runtime.name,
            "applied": runtime.applied(), "host": host_facts(PUSH_PATH), "numerics": self.numerics,
            "timing": {k: v for k, v in self.timing.items() if k != "expected"},
            "traffic_counted": "PS payload bytes (header + array frames), per message, in ps/traffic.py",
            "partition": _partition_summary(sc),
        })
        write_json_atomic(path / "summary.json", {"status": "running", "engine": _me()})
        return path, runtime

    def _timed_runtime(self, runtime_cls, path: Path):
        """The runtime for this run on the scenario it executes (``emulator/timing_setup.py``); sets
        ``self.timing`` (what the manifest records) and ``self.run_sc`` (the executed scenario)."""
        runtime, self.timing = resolve_timing(self.sc, runtime_cls, path, self.source)
        self.run_sc = runtime.scenario
        return runtime

    @property
    def run_dir(self) -> Optional[Path]:
        """The run directory, once set-up has created it (also after ``run`` raised)."""
        return self._setup_path

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        # Ctrl-C/SIGTERM are the engine's from here on (stopping.py): during set-up the first one cuts
        # the start short and marks the run incomplete; later, none can cut the run's records short.
        self._signals = StopSignals(lambda: self._setup_path).install()
        path = runtime = None
        try:
            try:
                path, runtime = self._prepare()
            except Exception:
                # The interrupt raised into set-up can come out as another exception: a library that
                # wraps what its callbacks raise turns it into its own error (pydantic's serializers:
                # "Error calling function `write`: KeyboardInterrupt"). It is still the user's interrupt.
                if not self._signals.raised:
                    raise
                raise KeyboardInterrupt from None
            return RunLoop(self.sc, self.run_sc, path, runtime, timing=self.timing, numerics=self.numerics,
                           signals=self._signals, progress=self.progress, phase=self._phase,
                           resume=bool(self.resume)).run()
        except (KeyboardInterrupt, Interrupted):
            self._signals.phase = STOPPING
            # Also when set-up was interrupted before it wrote summary.json: no run dir without a status.
            path = path or self._setup_path
            if path is not None and path.is_dir() and \
                    read_json(path, "summary.json").get("status") in ("running", None):
                if runtime is not None:
                    runtime.cleanup()
                write_json_atomic(path / "summary.json", {
                    "status": "incomplete", "updates": 0, "reason": ended_by_clean(path) or
                    "interrupted by the user (Ctrl-C / SIGTERM) during set-up"})
                self._signals.answered()   # after the console's "Ctrl-C: stopping …", never before it
                warn(f"interrupted during set-up, before any update: {path} is marked incomplete")
            raise KeyboardInterrupt from None
        finally:   # a command-line caller keeps answering signals until it exits, whatever ended the run:
            self._signals.restore(answering=self.answer_after_interrupt)   # none may cut its last lines

    def _phase(self, text: str) -> None:
        """A start-up step, shown as it begins (console.Phase): no silent start-up."""
        self.progress(Phase(f"[{time.monotonic() - self._t0:5.1f} s] {text}"), False)


def _me() -> dict:
    """This engine process, as summary.json records it while running (``rundir.run_status``)."""
    import os
    from ..procs import identity
    return identity(os.getpid())


def _remove_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _partition_summary(sc) -> Optional[dict]:
    """Each device's sample count and label histogram (``data.partition_summary``) for the manifest;
    None where it can't be known before the run (see there)."""
    from ..data import DatasetError, partition_summary
    try:
        return partition_summary(sc.dataset, sc.workers.n, sc.seed)
    except DatasetError:
        return None      # the run's own checks report an unreadable data set
