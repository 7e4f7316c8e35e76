"""Engine: turns a Scenario into a run — PS, evaluator, agents on a runtime — and records it.

``Engine.run`` holds the only emulator run loop, shared by every runtime: it ticks the runtime,
collects evaluations, enforces stop conditions, notices ended and silent agents, shows progress and
flushes the run directory. Ctrl-C/SIGTERM end the run cleanly and mark it incomplete.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd
from .. import __version__, numerics
from ..models import initial_theta
from ..ps.aggregate import PUSH_PATH
from ..ps.evaluator import Collector
from ..algorithms import flat
from ..ps.rules import RULES
from ..ps.server import Hooks, ParameterServer, PSConfig
from ..rundir import RunWriter, host_facts, new_run_dir, read_json, read_table, write_json_atomic
from ..scenario import Scenario, ScenarioError, class_assignment, dump_scenario
from ..console import Phase, RunStatus, stop_fraction, warn
from ..target import to_target
from .runtimes import AgentSpec, get_runtime
from .cleanup import ended_by_clean
from .stopping import RUNNING, STOPPING, Interrupted, StopSignals
from .timing_setup import agent_timing, resolve_timing
from .watchdog import CHECK_EVERY, FidelityWatchdog


TICK = 0.25           # seconds between run-loop iterations
FLUSH_EVERY = 2.0     # seconds between run-directory flushes
DRAIN_GRACE = 10.0    # seconds agents get to end on their own after the stop


@dataclass
class RunResult:
    path: Path
    summary: dict


def welcome_config(sc: Scenario, device: int, compressor: str, app_link: dict,
                   timing: Optional[dict] = None) -> dict:
    """What a device learns from the PS in Welcome (see device_agent/agent.py).

    ``app_link`` is the runtime's ``applied()``: link properties at level "app" are emulated by the
    agent; where the runtime enforces slowdown with CPU quotas the agent must not sleep on top (unless
    it paces its compute: then the pacing budget is the slowdown). ``timing`` (pacing, waiting time;
    absent when off) comes from ``Engine._agent_timing``."""
    klass = sc.class_of(device)
    speed_class = klass.model_dump(mode="json")
    if app_link.get("cpu_quota") and not (timing or {}).get("pacing"):
        speed_class["slowdown"] = 1.0
    extra = {"timing": timing} if timing else {}
    # Only when set (error feedback, q8, wire encodings): the Welcome's bytes cross the emulated link, so
    # an unchanged default must not move the virtual clock's tables (tests/integration/test_sim_golden.py).
    compression = sc.compression.model_dump(mode="json")
    if compression != type(sc.compression)().model_dump(mode="json"):
        extra["compression"] = compression
    return {**extra,
        "seed": sc.seed, "n_devices": sc.workers.n, "device": device,
        # Unset newer keys stay out: the Welcome's bytes cross the emulated link (golden sim tables).
        "dataset": sc.dataset.model_dump(mode="json", exclude={k for k in ("validation_samples", "samples_per_device")
                                                               if getattr(sc.dataset, k) is None}),
        "model": sc.model.name,
        "algorithm": flat(sc.algorithm), "compressor": compressor,   # the flat form: bytes as before
        "policy": RULES[sc.algorithm.name].device_policy(sc.algorithm),   # device_agent/policies.py
        "speed_class": speed_class,
        "app_link": {d: {p: v for p, v in getattr(klass, d).model_dump(mode="json").items()
                         if app_link.get(f"link_{p}") == "app"} for d in ("uplink", "downlink")},
    }


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
        })
        write_json_atomic(path / "summary.json", {"status": "running", "engine": _me()})
        return path, runtime

    def _timed_runtime(self, runtime_cls, path: Path):
        """The runtime for this run on the scenario it executes (``emulator/timing_setup.py``); sets
        ``self.timing`` (what the manifest records) and ``self.run_sc`` (the executed scenario)."""
        runtime, self.timing = resolve_timing(self.sc, runtime_cls, path, self.source)
        self.run_sc = runtime.scenario
        return runtime

    def _agent_timing(self, runtime):
        return agent_timing(self.run_sc, self.timing, runtime)

    @property
    def run_dir(self) -> Optional[Path]:
        """The run directory, once set-up has created it (also after ``run`` raised)."""
        return self._setup_path

    # -- the run loop --------------------------------------------------------------------------
    def run(self) -> RunResult:
        # Ctrl-C/SIGTERM are the engine's from here on (stopping.py): during set-up the first one cuts
        # the start short and marks the run incomplete; later, none can cut the run's records short.
        self._signals = StopSignals(lambda: self._setup_path).install()
        path = runtime = None
        try:
            path, runtime = self._prepare()
            return self._run(path, runtime)
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
                warn(f"interrupted during set-up, before any update: {path} is marked incomplete")
            raise KeyboardInterrupt from None
        finally:   # interrupted: a command-line caller keeps answering presses until it exits
            self._signals.restore(answering=self.answer_after_interrupt and self._signals.requested is not None)

    def _run(self, path: Path, runtime) -> RunResult:
        sc = self.run_sc   # dilated on real-time runtimes: limits and links in real seconds
        writer = RunWriter(path)
        assignment = class_assignment(sc)
        names = [c.name for c in sc.workers.classes]
        class_of = lambda d: names[assignment[d]]  # noqa: E731
        self._phase(f"initial model {sc.model.name}; starting the evaluator (loads the test set)")
        live = None
        if sc.output.tensorboard:   # live curves: every flushed batch also goes to TensorBoard
            from .tensorboard import TensorBoardSink
            live = TensorBoardSink(path / "tensorboard", {d: class_of(d) for d in range(sc.workers.n)}, names)
            writer.listeners.append(live)
        theta, _ = initial_theta(sc.model.name, sc.seed)
        rule = RULES[sc.algorithm.name](theta, sc.algorithm.lr)
        applied = runtime.applied()
        clock = runtime.clock
        evaluator = runtime.make_evaluator(sc.to_dict())
        handles: dict[int, object] = {}
        pending_freeze: set[int] = set()
        ps = None

        def on_eval(row: dict) -> None:
            """The one place the target accuracy stops a run (an inline evaluator's row is ready
            right after its snapshot, so its stop falls on that very update)."""
            ps.note_accuracy(row["accuracy"])
            if sc.stop.target_accuracy is not None and row["accuracy"] >= sc.stop.target_accuracy:
                ps.request_stop(f"reached target accuracy {sc.stop.target_accuracy:.2%} "
                                f"at update {row['update']}")

        collector = Collector(evaluator, lambda row: writer.append("evals", row), on_eval)
        evals, collect = collector.rows, collector.collect

        def snapshot(version, theta, info) -> None:
            evaluator.submit(version, theta, info)
            collect()

        watchdog = None
        if not clock.virtual and self.timing["expected"]:
            watchdog = FidelityWatchdog(self.timing["expected"], {d: class_of(d) for d in range(sc.workers.n)},
                                        sc.timing.tolerance, self.timing["dilation"])

        def freeze(d: int) -> None:
            if watchdog is not None:
                watchdog.crashed(d)
            h = handles.get(d)
            if h is None:
                pending_freeze.add(d)
            else:
                h.freeze()

        def record(table: str, row: dict) -> None:
            writer.append(table, row)
            if watchdog is not None and table == "updates":
                watchdog.observe(row)
        timing_of = self._agent_timing(runtime)
        hooks = Hooks(record=record, freeze=freeze, snapshot=snapshot, clock=clock.now)
        ps = ParameterServer(PSConfig(
            n_devices=sc.workers.n, class_of=class_of,
            welcome=lambda d: welcome_config(sc, d, rule.compressor, applied,
                                             timing_of(d) if timing_of else None),
            stop_updates=sc.stop.updates, eval_every=sc.eval.every,
            eval_dense=(tuple(d.near), d.within, d.every) if (d := sc.eval.dense) else None,
            crash_probability=sc.failures.crash_probability, seed=sc.seed,
            lost_after=sc.failures.lost_after / 2,   # /2: before the devices' reply timeout
            downlink=sc.compression.downlink()), theta, rule, hooks)
        transport = None
        status, reason, error = "incomplete", "", None
        ps.config.checkpoint_every = sc.checkpoint.every
        if not clock.virtual:   # dilated: the tables' virtual_time is emulated time, wall / k
            clock.dilation = self.timing["dilation"]
        started_unix, bind, attempt = time.time(), runtime.ps_bind(), 0
        if self.resume:
            restored, started_unix, bind, attempt = self._restore(ps, path, clock)
            evals.extend(restored)
        if sc.checkpoint.every:
            from ..ps import checkpoint

            def save_checkpoint(p) -> None:   # rows up to this update are on disk before the checkpoint
                writer.flush()
                checkpoint.save(p, path / "checkpoint", extra={"started_unix": started_unix})
            ps.hooks.checkpoint = save_checkpoint
        seen_exit: set[int] = set()
        exit_codes: dict[int, int] = {}   # device → exit code, in the order the engine saw them
        lost: set[int] = set()
        signals = self._signals
        t_start = time.monotonic()
        try:
            transport = runtime.transport(ps, bind, path if sc.security.curve else None)
            endpoint = runtime.agent_endpoint(transport.endpoint) if transport.endpoint else ""
            if endpoint:   # a resumed PS binds the same endpoint, so devices that outlive the engine can reconnect
                write_json_atomic(path / "endpoint.json", {"bind": transport.endpoint, "agents": endpoint,
                                                           "attempt": attempt})

            def agent_env(d: int) -> dict:
                env = {"EDGEBED_ATTEMPT": str(attempt), **numerics.environment(sc.numerics)}
                if sc.security.curve:
                    from ..wire import auth
                    env[auth.ENV_KEY] = str(auth.device_key_path(path, d).resolve())
                return env
            specs = [AgentSpec(d, class_of(d), endpoint, env=agent_env(d)) for d in range(sc.workers.n)]
            self._phase(f"starting {len(specs)} agents on runtime {runtime.name}")
            for h in runtime.start(specs):
                handles[h.device] = h
            for d in sorted(pending_freeze):
                handles[d].freeze()
            ps.event(-1, "start", f"{len(handles)} agents on runtime {runtime.name}")
            for warning in (applied.get("warning"), self.numerics.get("problem")):
                if warning:   # e.g. no netem, no portable numerics: said once, in events and manifest
                    ps.event(-1, "warning", warning)
                    warn(warning)
            # stop.wall_time counts from here: runtime start-up (Spark's JVM, containers) is not run time.
            self._phase(f"{len(handles)} agents started; running (waiting for the first updates)")
            clock.running()
            if sc.stop.wall_time is not None:
                limit = sc.stop.wall_time
                clock.alarm(limit, lambda: ps.request_stop(
                    f"wall time {limit:.0f} s reached" + (" (virtual time)" if clock.virtual else "")))
            last_flush = last_watch = last_traffic = time.monotonic()
            signals.reassert()
            signals.phase = RUNNING   # a signal now only asks the loop to stop, at the top of a tick
            while ps.stopped is None:
                if signals.requested:
                    raise KeyboardInterrupt
                if watchdog is not None and time.monotonic() - last_watch >= CHECK_EVERY:
                    last_watch = time.monotonic()
                    for warning in watchdog.check():   # during the run, not only in the verdict
                        ps.event(-1, "warning", warning)
                        warn(warning)
                runtime.drive(ps, TICK)
                if not transport.alive:
                    raise RuntimeError(f"PS serve loop died: {transport.error!r}")
                if not evaluator.alive:
                    collect()   # its last rows, and why it ended
                    why = getattr(evaluator, "error", None)
                    raise RuntimeError(f"the evaluator failed ({why})" if why else
                                       "the evaluator process died (its traceback is on stderr)"
                                       "; no accuracy can be recorded, so the run is stopped")
                collect()
                clock.check()
                elapsed = time.monotonic() - t_start
                for d, h in handles.items():
                    code = h.poll()
                    if code is not None and d not in seen_exit:
                        seen_exit.add(d)
                        exit_codes[d] = code
                        ps.event(d, "exit", f"code={code}")
                # Silence is measured in wall time: meaningless for devices on a virtual clock.
                for d in (ps.silent_devices(sc.failures.lost_after) if not clock.virtual else ()):
                    if d not in lost:
                        lost.add(d)
                        ps.event(d, "lost", f"silent for more than {sc.failures.lost_after:.0f} s")
                frozen = ps.frozen_devices()
                if handles and len(seen_exit | frozen | lost) >= len(handles):
                    ps.request_stop("no live device left")
                self.progress(self._line(ps, evals, elapsed, len(handles) - len(seen_exit | frozen | lost)), False)
                if time.monotonic() - last_flush >= FLUSH_EVERY:
                    writer.flush()
                    # per-device counters: with many devices a write costs seconds, so less often
                    if time.monotonic() - last_traffic >= FLUSH_EVERY * max(1.0, sc.workers.n / 2_000):
                        write_json_atomic(path / "traffic.json", ps.meter.to_dict())
                        last_traffic = time.monotonic()
                    last_flush = time.monotonic()
            status, reason = ("failed", ps.failure) if ps.failure else ("complete", ps.stopped)
        except (KeyboardInterrupt, Interrupted):
            signals.phase = STOPPING
            reason = "interrupted by the user (Ctrl-C / SIGTERM)"
            ps.request_stop(reason)
            self.progress("stopping: ending the agents, writing the run directory", False)
        except BaseException as err:  # recorded, then re-raised after the run dir is closed
            status, reason, error = "failed", f"{type(err).__name__}: {err}", err
            ps.request_stop(reason)
        finally:
            signals.phase = STOPPING   # from here no signal raises: the summary is always written
            elapsed = time.monotonic() - t_start
            self._teardown(runtime, handles, transport, ps, evaluator, collector, writer,
                           wait_eval=(status == "complete"), hurry=lambda: signals.hurry)
            if status == "complete" and handles and len(exit_codes) == len(handles) \
                    and all(c != 0 for c in exit_codes.values()):   # the run ended because no device was left
                status, reason = "failed", _first_agent_error(path, exit_codes, ps.version)
            if cleaned := ended_by_clean(path):   # its agents were killed under it: not complete
                status, reason = "incomplete", cleaned
            summary = self._summary(ps, evals, handles, seen_exit, lost, status, reason, elapsed, runtime)
            summary["fidelity"] = self._fidelity(path, runtime, class_of, watchdog)
            if getattr(runtime, "leaked", None):   # what the teardown could not remove (warned already)
                summary["leftovers"] = runtime.leaked
            write_json_atomic(path / "traffic.json", ps.meter.to_dict())
            write_json_atomic(path / "summary.json", summary)
            if live is not None:
                live.close()
            self.progress(self._line(ps, evals, elapsed, 0), True)
        if error is not None:
            raise error
        return RunResult(path, summary)

    def _phase(self, text: str) -> None:
        """A start-up step, shown as it begins (console.Phase): no silent start-up."""
        self.progress(Phase(f"[{time.monotonic() - self._t0:5.1f} s] {text}"), False)

    def _restore(self, ps, path: Path, clock) -> tuple[list[dict], float, str, int]:
        """Resume: load the checkpoint into ``ps``, end the old agents, record the gap.

        Returns (evaluations up to the checkpoint, run start as Unix time, endpoint to bind, attempt
        number for the new agents)."""
        from ..ps import checkpoint
        ckpt = checkpoint.load(path / "checkpoint")
        checkpoint.restore(ps, ckpt)
        started = ckpt.meta["extra"].get("started_unix", ckpt.meta["written_unix"])
        clock.t0 = time.monotonic() - (time.time() - started)   # wall time keeps counting from the run's start
        gap = time.time() - ckpt.meta["written_unix"]
        recorded = read_table(path, "updates")["update"]
        last = int(recorded.max()) if len(recorded) else ckpt.version
        ended = 0
        pids = read_json(path, "pids.json").get("procs", [])
        if pids:   # agents of the killed engine: end them (only if still edgebed agents), start new ones
            from .cleanup import clean_pids
            ended = len(clean_pids(pids)["killed"])
        ep = read_json(path, "endpoint.json")
        attempt = int(ep.get("attempt", 0)) + 1
        repeated = f"updates {ckpt.version + 1}..{last} recorded before are repeated" if last > ckpt.version \
            else "no recorded update is repeated"
        ps.event(-1, "resume", f"PS restarted from the checkpoint at update {ckpt.version}, "
                  f"{gap:.1f} s after it was written; {repeated}; {ended} old agent processes ended, "
                  f"agents restart with attempt {attempt}")
        evals = [e for e in read_table(path, "evals").to_dict("records") if e["update"] <= ckpt.version]
        return evals, started, ep.get("bind", "tcp://127.0.0.1:0"), attempt

    def _teardown(self, runtime, handles, transport, ps, evaluator, collector, writer, wait_eval: bool,
                  hurry: Callable[[], bool] = lambda: False) -> None:
        try:
            # Agents that got Stop end on their own (the runtime keeps driving them); frozen ones never
            # will; a second Ctrl-C (``hurry``) ends them at once.
            deadline = time.monotonic() + DRAIN_GRACE
            frozen = ps.frozen_devices()
            while time.monotonic() < deadline and not hurry() and any(
                    h.poll() is None for d, h in handles.items() if d not in frozen):
                runtime.drive(ps, 0.05)
            for h in handles.values():
                if h.poll() is None:
                    h.terminate()
            for h in handles.values():
                if h.wait(2) is None:
                    h.kill()
        finally:
            if transport is not None:
                transport.stop()
            if wait_eval and ps.version > 0 and ps.last_snapshot != ps.version:
                ps.snapshot()   # the final Θ is always evaluated
            collector.collect(evaluator.close(wait=wait_eval), notify=False)   # the run has ended
            writer.flush()
            writer.export_csv()
            runtime.cleanup()

    def _summary(self, ps, evals, handles, seen_exit, lost, status, reason, elapsed, runtime) -> dict:
        accs = [e["accuracy"] for e in sorted(evals, key=lambda e: e["update"])]
        frozen = sorted(ps.frozen_devices())
        target = self.sc.stop.target_accuracy
        hit = to_target(pd.DataFrame(evals), target)
        return {
            "status": status, "reason": reason, "runtime": runtime.name,
            "updates": ps.version, "wall_time_s": round(elapsed, 3),
            "updates_per_s": round(ps.version / elapsed, 2) if elapsed > 0 else None,
            "final_accuracy": accs[-1] if accs else None, "best_accuracy": max(accs) if accs else None,
            "target_accuracy": target, "updates_to_target": hit.update if hit else None,
            "ingress_bytes_to_target": hit.ingress_bytes if hit else None,
            "ingress_bytes": ps.meter.ingress_bytes, "egress_bytes": ps.meter.egress_bytes,
            "push_bytes": ps.meter.push_bytes, "rejected_messages": ps.meter.rejected,
            "rule": ps.rule.stats(),
            "errors": ps.errors,
            "devices": {"total": self.sc.workers.n, "started": len(handles), "said_hello": ps.device_count(),
                        "crashed": len(frozen), "lost": len(lost),
                        "alive_at_end": ps.device_count() - len(frozen) - len(lost)},
        }

    def _fidelity(self, path: Path, runtime, class_of, watchdog=None) -> dict:
        """summary.json's ``fidelity``: realized against configured and expected (emulator/fidelity.py).
        A failure here is recorded in the section, never at the cost of the summary."""
        from .fidelity import run_fidelity
        try:
            timing = {**self.timing, "watchdog_warnings": watchdog.warnings if watchdog else None}
            return run_fidelity(read_table(path, "updates"),
                                [c.model_dump(mode="json") for c in self.sc.workers.classes],
                                {d: class_of(d) for d in range(self.sc.workers.n)}, runtime.fidelity(),
                                timing=timing, events=read_table(path, "events"))
        except Exception as err:
            return {"error": f"{type(err).__name__}: {err}"}

    def _line(self, ps, evals, elapsed, alive) -> RunStatus:
        """The progress callback's argument (see console.RunStatus; ``str()`` of it is one line)."""
        virtual = ps.hooks.clock()[1]
        clock = virtual if virtual == virtual else elapsed
        return RunStatus(ps.version, ps.version / elapsed if elapsed > 0 else 0.0,
                         evals[-1]["accuracy"] if evals else None, len(evals), ps.meter.ingress_bytes,
                         alive, elapsed, virtual, stop_fraction(self.sc.stop, ps.version, clock),
                         self.sc.stop.updates)


def _first_agent_error(path: Path, exit_codes: dict[int, int], updates: int = 0) -> str:
    """Reason of a run that ended because every device exited with an error: the first one's last log line."""
    d, code = next(iter(exit_codes.items()))
    log = path / "logs" / f"agent-{d:04d}.log"
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    last = lines[-1].strip() if lines else "(no log)"
    when = "before any update was applied" if updates == 0 else f"after {updates} updates"
    return (f"every device failed {when}; first: device {d} exited with code "
            f"{code}: {last} (full log: {log})")


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


def terminal_progress(stream=None, every: float = 30.0):
    """The console's progress callback (``console.RunProgress``): a live bar on a terminal, one line
    per evaluation (and every ``every`` s) otherwise. ``stream`` defaults to the sys.stderr of the call."""
    from ..console import RunProgress
    return RunProgress(stream or sys.stderr, every=every)
