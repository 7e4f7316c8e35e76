"""RunLoop: one run from its first agent to its summary — the only emulator run loop, every runtime's.

Its collaborators are the PS (protocol state), the runtime (agents and clock), the run writer (tables),
the evaluator's collector, the fidelity watchdog and the stop signals. ``run`` starts the agents, ticks
the runtime, collects evaluations, enforces stop conditions, notices ended and silent agents, shows
progress and flushes the run directory; whatever ends the run, the teardown and ``summary.json`` follow.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pandas as pd
from .. import numerics as numerics_mod
from ..console import RunStatus, stop_fraction, warn
from ..models import initial_theta
from ..workload import use_path
from ..ps.evaluator import Collector
from ..ps.rules import RULES
from ..ps.server import Hooks, ParameterServer, PSConfig
from ..rundir import RunWriter, read_json, read_table, write_json_atomic
from ..scenario import Scenario, class_assignment
from ..target import to_target
from .cleanup import ended_by_clean
from .runtimes import AgentSpec
from .stopping import RUNNING, STOPPING, Interrupted, StopSignals
from .startup import StartUp
from .timing_setup import agent_timing
from . import trust
from .watchdog import CHECK_EVERY, FidelityWatchdog
from .welcome import welcome_config


TICK = 0.25           # seconds between run-loop iterations
FLUSH_EVERY = 2.0     # seconds between run-directory flushes
DRAIN_GRACE = 10.0    # seconds agents get to end on their own after the stop


@dataclass
class RunResult:
    path: Path
    summary: dict


class RunLoop:
    """One run of a prepared run directory on a checked runtime (``Engine`` prepares both).

    ``scenario`` is the scenario as written (stop conditions, target, classes: what the summary and the
    progress line speak of); ``run_sc`` the one executed (dilated on real-time runtimes: limits and links
    in real seconds). ``timing`` and ``numerics`` are what the manifest records; ``resume`` restarts
    from the run directory's checkpoint."""

    def __init__(self, scenario: Scenario, run_sc: Scenario, path: Path, runtime, *, timing: dict,
                 numerics: dict, signals: StopSignals, progress: Callable, phase: Callable[[str], None],
                 resume: bool = False):
        self.sc, self.run_sc, self.path, self.runtime = scenario, run_sc, path, runtime
        self.timing, self.numerics, self.signals = timing, numerics, signals
        self.progress, self.phase, self.resume = progress, phase, resume
        self.writer = RunWriter(path)
        names = [c.name for c in run_sc.workers.classes]
        assignment = class_assignment(run_sc)
        self.class_names = names
        self.class_of = lambda d: names[assignment[d]]  # noqa: E731
        self.handles: dict[int, object] = {}   # device → the runtime's agent handle
        self.pending_freeze: set[int] = set()  # crashed before its handle existed
        self.seen_exit: set[int] = set()
        self.exit_codes: dict[int, int] = {}   # device → exit code, in the order the loop saw them
        self.lost: set[int] = set()
        self.live = self.watchdog = self.transport = self.ps = None
        self.not_finite_seen = False   # an evaluation's loss was NaN/Inf (its event is recorded)
        self.startup = StartUp()   # when the first hello came (agent start-up) and what the wall time counts from

    # -- set-up ----------------------------------------------------------------------------------
    def _build(self) -> None:
        """The evaluator, the watchdog and the PS (restored from the checkpoint on a resume)."""
        sc, runtime = self.run_sc, self.runtime
        self.phase(f"initial model {sc.model.name}; starting the evaluator (loads the test set)")
        if sc.output.tensorboard:   # live curves: every flushed batch also goes to TensorBoard
            from .tensorboard import TensorBoardSink
            self.live = TensorBoardSink(self.path / "tensorboard", self._classes(), self.class_names)
            self.writer.listeners.append(self.live)
        use_path(sc.model.path)   # a user's model module: here, and in every process started after
        theta, layers = initial_theta(sc.model, sc.seed, buffers=sc.statistics_in_theta() > 0)
        self.variances = tuple((L.offset, L.size) for L in layers if L.kind == "buffer"
                               and L.name.endswith("running_var"))
        rule = RULES[sc.algorithm.name](theta, sc.algorithm.lr)
        self.applied = runtime.applied()
        self.clock = clock = runtime.clock
        self.evaluator = runtime.make_evaluator(sc.to_dict())
        self.collector = Collector(self.evaluator, lambda row: self.writer.append("evals", row), self.on_eval)
        self.evals = self.collector.rows
        if not clock.virtual and self.timing["expected"]:
            self.watchdog = FidelityWatchdog(self.timing["expected"], self._classes(), sc.timing.tolerance,
                                             self.timing["dilation"])
        self.ps = ps = self._make_ps(theta, rule)
        ps.config.checkpoint_every = sc.checkpoint.every
        if not clock.virtual:   # dilated: the tables' virtual_time is emulated time, wall / k
            clock.dilation = self.timing["dilation"]
        self.started_unix, self.bind, self.attempt = time.time(), runtime.ps_bind(), 0
        if self.resume:
            self._restore()
        if sc.checkpoint.every:
            ps.hooks.checkpoint = self.save_checkpoint

    def _make_ps(self, theta, rule) -> ParameterServer:
        sc, applied = self.run_sc, self.applied
        timing_of = agent_timing(sc, self.timing, self.runtime)
        hooks = Hooks(record=self.record, freeze=self.freeze, snapshot=self.snapshot, clock=self.clock.now)
        return ParameterServer(PSConfig(
            n_devices=sc.workers.n, class_of=self.class_of,
            welcome=lambda d: welcome_config(sc, d, rule.compressor, applied,
                                             timing_of(d) if timing_of else None),
            stop_updates=sc.stop.updates, eval_every=sc.eval.every,
            eval_dense=(tuple(d.near), d.within, d.every) if (d := sc.eval.dense) else None,
            crash_probability=sc.failures.crash_probability, crash_at=sc.crash_schedule(), seed=sc.seed,
            lost_after=sc.failures.lost_after / 2,   # /2: before the devices' reply timeout
            on_divergence=sc.security.on_divergence, stall_s=sc.security.stall_timeout,
            downlink=sc.compression.downlink(), statistics=sc.statistics_in_theta(),
            variances=self.variances, clip=(r := sc.security.robust) and r.clip,
            clip_window=r.window if r else 64), theta, rule, hooks)

    def _restore(self) -> None:
        """Resume: load the checkpoint into the PS, end the old agents, record the gap; sets the run's
        start (Unix time), the endpoint to bind and the attempt number of the new agents."""
        from ..ps import checkpoint
        path, ps = self.path, self.ps
        ckpt = checkpoint.load(path / "checkpoint")
        checkpoint.restore(ps, ckpt)
        started = ckpt.meta["extra"].get("started_unix", ckpt.meta["written_unix"])
        self.clock.t0 = time.monotonic() - (time.time() - started)   # wall time keeps counting from the run's start
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
        self.evals.extend(e for e in read_table(path, "evals").to_dict("records") if e["update"] <= ckpt.version)
        self.started_unix, self.bind, self.attempt = started, ep.get("bind", "tcp://127.0.0.1:0"), attempt

    # -- the PS's and the evaluator's hooks (PS thread) ---------------------------------------------
    def on_eval(self, row: dict) -> None:
        """The one place the target accuracy stops a run (an inline evaluator's row is ready right after
        its snapshot, so its stop falls on that very update)."""
        if trust.not_finite(row):   # Θ computes no model: an event, and the run is failed (trust.py)
            self._not_finite(row)
            return
        self.ps.note_accuracy(row["accuracy"])
        target = self.run_sc.stop.target_accuracy
        if target is not None and row["accuracy"] >= target:
            self.ps.request_stop(f"reached target accuracy {target:.2%} at update {row['update']}")

    def _not_finite(self, row: dict) -> None:
        ps = self.ps
        if not self.not_finite_seen:
            ps.event(-1, "eval-not-finite", trust.not_finite_detail(row))
        self.not_finite_seen = True
        with ps.lock:
            if ps.failure is None:
                ps.failure = trust.not_finite_reason([row])
        ps.request_stop(ps.failure)

    def snapshot(self, version, theta, info) -> None:
        self.evaluator.submit(version, theta, info)
        self.collector.collect()

    def freeze(self, d: int) -> None:
        """A fail-stop crash the PS drew: the device's agent stops contributing (now, or once started)."""
        if self.watchdog is not None:
            self.watchdog.crashed(d)
        h = self.handles.get(d)
        if h is None:
            self.pending_freeze.add(d)
        else:
            h.freeze()

    def record(self, table: str, row: dict) -> None:
        self.writer.append(table, row)
        if self.watchdog is not None and table == "updates":
            self.watchdog.observe(row)

    def save_checkpoint(self, ps) -> None:
        """Rows up to this update are on disk before the checkpoint."""
        from ..ps import checkpoint
        self.writer.flush()
        checkpoint.save(ps, self.path / "checkpoint", extra={"started_unix": self.started_unix})

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> RunResult:
        self._build()
        ps, signals = self.ps, self.signals
        status, reason, error = "incomplete", "", None
        t_start = time.monotonic()
        try:
            self._start_agents()
            self._loop(t_start)
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
            summary = self._finish(status, reason, time.monotonic() - t_start)
        if error is not None:
            raise error
        return RunResult(self.path, summary)

    def agent_env(self, d: int) -> dict:
        env = {"EDGEBED_ATTEMPT": str(self.attempt), **numerics_mod.environment(self.run_sc.numerics)}
        if self.run_sc.security.curve:
            from ..wire import auth
            env[auth.ENV_KEY] = str(auth.device_key_path(self.path, d).resolve())
        return env

    def _start_agents(self) -> None:
        sc, runtime, ps, path = self.run_sc, self.runtime, self.ps, self.path
        self.transport = transport = runtime.transport(ps, self.bind, path if sc.security.curve else None)
        endpoint = runtime.agent_endpoint(transport.endpoint) if transport.endpoint else ""
        if endpoint:   # a resumed PS binds the same endpoint, so devices that outlive the engine can reconnect
            write_json_atomic(path / "endpoint.json", {"bind": transport.endpoint, "agents": endpoint,
                                                       "attempt": self.attempt})
        specs = [AgentSpec(d, self.class_of(d), endpoint, env=self.agent_env(d)) for d in range(sc.workers.n)]
        self.phase(f"starting {len(specs)} agents on runtime {runtime.name}")
        for h in runtime.start(specs):
            self.handles[h.device] = h
        for d in sorted(self.pending_freeze):
            self.handles[d].freeze()
        ps.event(-1, "start", f"{len(self.handles)} agents on runtime {runtime.name}")
        for warning in (self.applied.get("warning"), self.numerics.get("problem")):
            if warning:   # e.g. no netem, no portable numerics: said once, in events and manifest
                ps.event(-1, "warning", warning)
                warn(warning)
        # stop.wall_time counts from here: runtime start-up (Spark's JVM, containers) is not run time.
        self.phase(f"{len(self.handles)} agents started; running (waiting for the first updates)")
        clock = self.clock
        clock.running()
        if clock.virtual:   # every device says hello at time 0
            self.startup.heard(0.0, sc.stop.wall_time, clock, ps)
        else:   # stop.wall_time counts from the first hello (self._heard), agents' start-up is no run time
            self.startup.wait(sc.stop.first_hello_within, sc.stop.wall_time, clock, ps)

    def _loop(self, t_start: float) -> None:
        """Tick until the PS has stopped; a signal now only asks the loop to stop, at the top of a tick."""
        ps, signals = self.ps, self.signals
        last_flush = last_watch = last_traffic = time.monotonic()
        signals.reassert()
        signals.phase = RUNNING
        while ps.stopped is None:
            if signals.requested:
                raise KeyboardInterrupt
            if self.watchdog is not None and time.monotonic() - last_watch >= CHECK_EVERY:
                last_watch = time.monotonic()
                self._watch()
            self._tick()
            if self.startup.first_hello_s is None and ps.device_count():
                self.startup.heard(self.clock.elapsed(), self.run_sc.stop.wall_time, self.clock, ps)
            elapsed = time.monotonic() - t_start
            alive = self._notice_ended()
            self.progress(self._line(elapsed, alive), False)
            if time.monotonic() - last_flush >= FLUSH_EVERY:
                self.writer.flush()
                # per-device counters: with many devices a write costs seconds, so less often
                if time.monotonic() - last_traffic >= FLUSH_EVERY * max(1.0, self.run_sc.workers.n / 2_000):
                    write_json_atomic(self.path / "traffic.json", ps.meter.to_dict())
                    last_traffic = time.monotonic()
                last_flush = time.monotonic()

    def _watch(self) -> None:
        for warning in self.watchdog.check():   # during the run, not only in the verdict
            self.ps.event(-1, "warning", warning)
            warn(warning)

    def _tick(self) -> None:
        """Drive the runtime one tick; a dead serve loop or evaluator ends the run."""
        self.runtime.drive(self.ps, TICK)
        if not self.transport.alive:
            raise RuntimeError(f"PS serve loop died: {self.transport.error!r}")
        if not self.evaluator.alive:
            self.collector.collect()   # its last rows, and why it ended
            why = getattr(self.evaluator, "error", None)
            raise RuntimeError(f"the evaluator failed ({why})" if why else
                               "the evaluator process died (its traceback is on stderr)"
                               "; no accuracy can be recorded, so the run is stopped")
        self.collector.collect()
        self.clock.check()

    def _notice_ended(self) -> int:
        """Record agents that exited and devices gone silent; stop when none is left. → devices alive."""
        ps, lost_after = self.ps, self.run_sc.failures.lost_after
        for d, h in self.handles.items():
            code = h.poll()
            if code is not None and d not in self.seen_exit:
                self.seen_exit.add(d)
                self.exit_codes[d] = code
                ps.event(d, "exit", f"code={code}")
        # Silence is measured in wall time: meaningless for devices on a virtual clock.
        for d in (ps.silent_devices(lost_after) if not self.clock.virtual else ()):
            if d not in self.lost:
                self.lost.add(d)
                ps.event(d, "lost", f"silent for more than {lost_after:.0f} s")
        gone = self.seen_exit | ps.frozen_devices() | self.lost
        if self.handles and len(gone) >= len(self.handles):
            ps.request_stop("no live device left")
        return len(self.handles) - len(gone)

    # -- the end -----------------------------------------------------------------------------------
    def _finish(self, status: str, reason: str, elapsed: float) -> dict:
        """Teardown, the final status and summary.json (always written, whatever ended the run)."""
        ps, path, runtime = self.ps, self.path, self.runtime
        self._teardown(wait_eval=(status == "complete"), hurry=lambda: self.signals.hurry)
        codes = self.exit_codes
        if status == "complete" and self.handles and len(codes) == len(self.handles) \
                and all(c != 0 for c in codes.values()):   # the run ended because no device was left
            status, reason = "failed", _first_agent_error(path, codes, ps.version, trust.blame(trust.harm(ps)))
        if status == "complete" and (why := self.startup.no_result(ps.device_count(), ps.version)):
            status, reason = "failed", why   # no device joined, or none of their updates applied
        bad = [e for e in self.evals if trust.not_finite(e)]
        if bad and status == "complete":   # the final evaluation too (it notifies no one)
            status, reason = "failed", trust.not_finite_reason(bad)
        if cleaned := ended_by_clean(path):   # its agents were killed under it: not complete
            status, reason = "incomplete", cleaned
        summary = self._summary(status, reason, elapsed)
        summary["startup"] = self.startup.to_dict()
        summary["fidelity"] = self._fidelity()
        if (crashes := self._crashes()) is not None:
            summary["crashes"] = crashes
        summary["harm"] = trust.harm(ps)
        if getattr(runtime, "leaked", None):   # what the teardown could not remove (warned already)
            summary["leftovers"] = runtime.leaked
        write_json_atomic(path / "traffic.json", ps.meter.to_dict())
        write_json_atomic(path / "summary.json", summary)
        if self.live is not None:
            self.live.close()
        self.progress(self._line(elapsed, 0), True)
        return summary

    def _teardown(self, wait_eval: bool, hurry: Callable[[], bool] = lambda: False) -> None:
        runtime, handles, ps = self.runtime, self.handles, self.ps
        try:
            # Agents that got Stop end on their own (the runtime keeps driving them); frozen ones never
            # will, nor will those recorded lost (silent past lost_after: stopped from outside, hung);
            # a second Ctrl-C (``hurry``) ends them at once.
            deadline = time.monotonic() + DRAIN_GRACE
            with ps.lock:   # and those that never said hello get no Stop either
                unheard = ps.frozen_devices() | self.lost | (set(handles) - set(ps.devices))
            while time.monotonic() < deadline and not hurry() and any(
                    h.poll() is None for d, h in handles.items() if d not in unheard):
                runtime.drive(ps, 0.05)
            for h in handles.values():
                if h.poll() is None:
                    h.terminate()
            for h in handles.values():
                if h.wait(2) is None:
                    h.kill()
        finally:
            if self.transport is not None:
                self.transport.stop()
            if wait_eval and ps.version > 0 and ps.last_snapshot != ps.version:
                ps.snapshot()   # the final Θ is always evaluated
            self.collector.collect(self.evaluator.close(wait=wait_eval), notify=False)   # the run has ended
            bad = [e for e in self.evals if trust.not_finite(e)]
            if bad and not self.not_finite_seen:
                ps.event(-1, "eval-not-finite", trust.not_finite_detail(bad[0]))
            self.writer.flush()
            self.writer.export_csv()
            runtime.cleanup()

    def _summary(self, status: str, reason: str, elapsed: float) -> dict:
        ps, evals = self.ps, self.evals
        accs = [e["accuracy"] for e in sorted(evals, key=lambda e: e["update"])]
        frozen = sorted(ps.frozen_devices())
        target = self.sc.stop.target_accuracy
        hit = to_target(pd.DataFrame(evals), target)
        return {
            "status": status, "reason": reason, "runtime": self.runtime.name,
            "updates": ps.version, "wall_time_s": round(elapsed, 3),
            "updates_per_s": round(ps.version / elapsed, 2) if elapsed > 0 else None,
            "final_accuracy": accs[-1] if accs else None, "best_accuracy": max(accs) if accs else None,
            "target_accuracy": target, "updates_to_target": hit.update if hit else None,
            "ingress_bytes_to_target": hit.ingress_bytes if hit else None,
            "ingress_bytes": ps.meter.ingress_bytes, "egress_bytes": ps.meter.egress_bytes,
            "push_bytes": ps.meter.push_bytes, "rejected_messages": ps.meter.rejected,
            **({"statistics_bytes": ps.meter.statistics_bytes} if ps.meter.statistics_bytes else {}),
            "rule": ps.rule.stats(),
            "errors": ps.errors,
            "devices": {"total": self.sc.workers.n, "started": len(self.handles), "said_hello": ps.device_count(),
                        "crashed": len(frozen), "lost": len(self.lost),
                        "alive_at_end": ps.device_count() - len(frozen) - len(self.lost)},
        }

    def _crashes(self) -> Optional[dict]:
        """summary.json's ``crashes``, per speed class: devices ``failures.crash`` scheduled to crash
        (``intended``; None for the probability form, which states no number) and devices that
        crashed (``realised``: a ``crash`` row in the events table). None when no crash was asked for."""
        sched, p = self.ps.config.crash_at, self.sc.failures.crash_probability
        if sched is None and not p:
            return None
        events = read_table(self.path, "events")
        realised = dict.fromkeys((c.name for c in self.sc.workers.classes), 0)
        for d in sorted(set(events.loc[events["event"] == "crash", "device"].astype(int))):
            realised[self.class_of(d)] += 1
        return {"form": "failures.crash" if sched is not None else "failures.crash_probability",
                "unit": sched.unit if sched is not None else None,
                "intended": dict(sched.intended) if sched is not None else None, "realised": realised}

    def _fidelity(self) -> dict:
        """summary.json's ``fidelity``: realized against configured and expected (emulator/fidelity.py).
        A failure here is recorded in the section, never at the cost of the summary."""
        from .fidelity import run_fidelity
        try:
            timing = {**self.timing, "watchdog_warnings": self.watchdog.warnings if self.watchdog else None}
            out = run_fidelity(read_table(self.path, "updates"),
                                [c.model_dump(mode="json") for c in self.sc.workers.classes],
                                self._classes(self.sc.workers.n), self.runtime.fidelity(),
                                timing=timing, events=read_table(self.path, "events"))
            if self.sc.dynamics.parts():
                out["dynamics"] = dyn = self._dynamics_fidelity()
                if "verdict" in out:   # its expected rates assume devices always there, on fixed links
                    out["verdict"] = {**out["verdict"], "kind": "not judged", "faithful": None,
                                      "summary": "rates not judged (the expected rates assume devices always "
                                      f"online on fixed links); dynamics: {dyn['verdict']['summary']}"}
            return out
        except Exception as err:
            return {"error": f"{type(err).__name__}: {err}"}

    def _dynamics_fidelity(self) -> dict:
        """fidelity.dynamics (emulator/dynamics_fidelity.py): availability and timed events."""
        from .dynamics_fidelity import dynamics_fidelity
        events = read_table(self.path, "events")
        dyn = self.sc.dynamics
        # the run's end in emulated seconds: the stop's virtual time (sim, dilated runs), else wall time
        stop = events[events["event"] == "stop"]
        col = "virtual_time" if events["virtual_time"].notna().any() else "wall_time"
        t_end = float(stop[col].iloc[0]) if len(stop) else float(events[col].max())
        clock = self.clock
        if not clock.virtual and clock.t_running is not None:
            # real-time runtimes time their changes (applied_s=) from the agents' start, not the set-up
            t_end -= (clock.t_running - clock.t0) / (clock.dilation or 1.0)
        trace = None
        if dyn.trace is not None:
            from ..traces import read_trace
            trace = read_trace(dyn.trace.path, self.sc.workers.n)
        return dynamics_fidelity(events, dyn, self._classes(self.sc.workers.n), t_end, trace,
                                 self.sc.timing.tolerance)

    def _line(self, elapsed: float, alive: int) -> RunStatus:
        """The progress callback's argument (see console.RunStatus; ``str()`` of it is one line)."""
        ps, evals = self.ps, self.evals
        virtual = ps.hooks.clock()[1]
        clock = virtual if virtual == virtual else elapsed
        return RunStatus(ps.version, ps.version / elapsed if elapsed > 0 else 0.0,
                         evals[-1]["accuracy"] if evals else None, len(evals), ps.meter.ingress_bytes,
                         alive, elapsed, virtual, stop_fraction(self.sc.stop, ps.version, clock),
                         self.sc.stop.updates)

    def _classes(self, n: Optional[int] = None) -> dict[int, str]:
        """device → speed-class name, for the first ``n`` devices (default: every device executed)."""
        return {d: self.class_of(d) for d in range(self.run_sc.workers.n if n is None else n)}


def _first_agent_error(path: Path, exit_codes: dict[int, int], updates: int = 0, blame: str = "") -> str:
    """Reason of a run that ended because every device exited with an error: ``blame`` (the device that
    moved Θ most: trust.blame), then the first one to exit and its last log line."""
    d, code = next(iter(exit_codes.items()))
    log = path / "logs" / f"agent-{d:04d}.log"
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    last = lines[-1].strip() if lines else "(no log)"
    when = "before any update was applied" if updates == 0 else f"after {updates} updates"
    blamed = f"; {blame}" if blame and updates else ""
    return (f"every device failed {when}{blamed}; first to exit: device {d}, with code "
            f"{code}: {last} (full log: {log})")
