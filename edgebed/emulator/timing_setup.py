"""Timing set-up of a run: step time (given, calibrated or the reference), time dilation (given or
calibrated), the expected timing under the runtime's link semantics, and what paced agents are told.

The engine calls ``resolve_timing`` before anything starts and ``agent_timing`` for the Welcomes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from .. import timing as tm
from .calibration import calibrate_step_time, message_sizes
from ..algorithms import ALGORITHMS
from ..scenario import Scenario, ScenarioError

MAX_LAG_CYCLES = 3    # a paced device catches up on a delay of up to this many of its cycles


def resolve_timing(sc: Scenario, runtime_cls, path: Path, source: str = "") -> tuple:
    """(the runtime built on the scenario it executes, the resolved timing). ``timing.step_time`` is
    resolved (calibrated on this host if asked) and time dilated on real-time runtimes; the timing dict
    is what the manifest records plus ``expected`` (``timing.expected_timing`` rows; None for rules
    outside the one-gradient-per-pull protocol)."""
    spec = sc.timing
    info: dict = {"pacing": spec.pacing, "tolerance": spec.tolerance, "wait": spec.wait.model_dump(mode="json")}
    real = None
    if spec.step_time == "calibrate" or spec.dilation == "auto":
        from ..data import input_of
        real = calibrate_step_time(sc.model, sc.algorithm.batch_size, sc.algorithm.name,
                                   sc.algorithm.ratio, sc.seed, data=input_of(sc.dataset))
        info["calibrated_step_s"] = round(real, 6)
    if isinstance(spec.step_time, float):
        step, info["step_time_from"] = spec.step_time, "scenario"
    elif spec.step_time == "calibrate":
        step, info["step_time_from"] = real, "calibrated on this host"
    else:
        step, info["step_time_from"] = tm.default_step_time(sc.model, sc.dataset), "reference machine (sim default)"
    if spec.step_time == "calibrate":   # the run (and the sim runtime) sees the number
        sc = type(sc).model_validate({**sc.model_dump(mode="json"),
                                      "timing": {**sc.timing.model_dump(mode="json"), "step_time": step}})
    runtime = runtime_cls(sc, path)   # a runtime class, or a factory (the compose PS service passes one)
    if runtime.step_time is not None:
        step = runtime.step_time      # a runtime's own step time (runtime.sim.step_time) wins
    info["step_time_s"] = step
    info["link_model"] = link_model_of(runtime)
    expected, sizes = None, None
    if ALGORITHMS[sc.algorithm.name].policy == "gradient":   # the one-gradient-per-pull cycle the timing models
        try:
            sizes = message_sizes(sc.model, sc.algorithm.name, sc.algorithm.ratio, sc.seed)
            expected = tm.scenario_expected(sc, step, info["link_model"], sizes, runtime.dilation)
        except Exception as err:   # the expectation is a report, never a reason not to run
            info["expected_error"] = f"{type(err).__name__}: {err}"
    k = 1.0
    if not runtime.clock.virtual:   # dilation is meaningless on a virtual clock
        if spec.dilation == "auto":
            if expected is None:
                raise ScenarioError(f"{source or sc.name}: timing.dilation: auto needs the expected timing "
                                    "of a one-gradient-per-pull rule (asgd, comp-asgd, adacomp); give a factor")
            k = tm.suggest_dilation(expected, real, step)
            info["dilation_from"] = f"calibrated: {tm.free_cores():.2f} free cores, step {real * 1e3:.2f} ms"
        else:
            k = float(spec.dilation)
        if k != 1.0 and not spec.pacing:
            raise ScenarioError(f"{source or sc.name}: timing.dilation: {spec.dilation} needs timing.pacing: true "
                                f"on runtime {runtime.name} (compute is dilated through its paced budget; "
                                "unpaced, it would run at the host's speed while everything else slows down)")
        if k != 1.0:
            runtime = runtime_cls(tm.dilate(sc, k), path)
            if sizes is not None:   # a kernel link's bucket holds bytes: its burst depends on k
                expected = tm.scenario_expected(sc, step, info["link_model"], sizes, k)
    info["dilation"] = k
    info["expected"] = expected
    return runtime, info


def agent_timing(run_sc: Scenario, info: dict, runtime) -> Optional[Callable[[int], dict]]:
    """device → the Welcome's ``timing`` (pacing budget and schedule slack in real seconds, the
    dilated waiting time), or None when neither pacing nor a waiting time is on."""
    spec = run_sc.timing
    if not (spec.pacing or tm.wait_enabled(spec.wait.model_dump())):
        return None
    k = info["dilation"]
    cycles = {r["class"]: r["cycle_s"] for r in info["expected"] or []}
    kernel = runtime.applied().get("link_rate") == "kernel"

    def of(device: int) -> dict:
        return {"pacing": spec.pacing, "step_time": info["step_time_s"] * k,
                # a device may fall a few cycles behind its schedule and catch up (a host hiccup);
                # beyond that, the time is lost (a lag)
                "max_lag": MAX_LAG_CYCLES * cycles.get(run_sc.class_of(device).name, 1.0) * k,
                "wait": spec.wait.model_dump(mode="json"), "kernel_links": kernel}
    return of


def link_model_of(runtime) -> str:
    """The link semantics (``timing.LINK_MODELS``) a runtime's links follow."""
    applied = runtime.applied()
    rate, delay = applied.get("link_rate"), applied.get("link_delay")
    if rate == "model":
        return applied.get("link_model", "network")
    if rate == "kernel":
        return "network" if delay == "kernel" else "kernel-rate"
    return "app"
