"""Warnings for scenarios that validate but can't produce what the user most likely asked for.

Each check returns ``key.path: what will happen; what to do`` lines; ``edgebed validate`` and
``edgebed run`` print them as warnings (a run still starts: the setting may be intended).
"""
from __future__ import annotations

from .scenario import Scenario

# The PS refuses a push that would move an entry of Θ by more than MAX_STEP × max(1, ‖Θ₀‖∞)
# (ps.server.PSConfig.max_step): defined here, below the PS, so the warning and the PS agree.
MAX_STEP = 100.0


def advice(sc: Scenario) -> list[str]:
    """Warnings about ``sc`` (empty when nothing looks off)."""
    out = []
    every, stop = sc.eval.every, sc.stop
    if stop.updates is not None and every > stop.updates:
        out.append(f"eval.every: {every} is more than stop.updates ({stop.updates}): the model is evaluated "
                   f"only once, at the end, so there is no accuracy curve; set eval.every to at most "
                   f"{max(1, stop.updates // 10)} for 10 points")
    if stop.target_accuracy is not None and stop.updates is not None and every > stop.updates:
        out.append(f"stop.target_accuracy: no evaluation happens before update {stop.updates}, so the "
                   "target can't stop the run; lower eval.every")
    if stop.updates is not None and every <= stop.updates and stop.updates // every > 2000:
        out.append(f"eval.every: {every} means {stop.updates // every:,} evaluations of the whole test set "
                   f"in {stop.updates:,} updates; they may cost more than the training (raise eval.every)")
    if sc.failures.crash_probability > 0 and stop.updates is not None:
        expected = sc.failures.crash_probability * stop.updates
        if expected >= sc.workers.n:
            out.append(f"failures.crash_probability: {sc.failures.crash_probability:g} × stop.updates "
                       f"{stop.updates:,} = {expected:,.0f} expected crashes for {sc.workers.n} devices: the "
                       "run will likely end with no live device before stop.updates")
    lr = sc.algorithm.lr
    if not lr < MAX_STEP:   # NaN and inf too
        out.append(f"algorithm.lr: α = {lr:g} moves Θ by more than {MAX_STEP:g} per unit of gradient: such a "
                   f"run can only diverge, and the PS refuses every push that would move Θ by over "
                   f"{MAX_STEP:g} × max(1, ‖Θ₀‖∞), so no update is applied; use an α below 1 (e.g. 0.05)")
    train = sc.dataset.train_samples
    if train is not None and train // sc.workers.n < sc.algorithm.batch_size:
        out.append(f"dataset.train_samples: {train} samples over {sc.workers.n} devices is "
                   f"{train // sc.workers.n} per device, fewer than algorithm.batch_size "
                   f"({sc.algorithm.batch_size}); give more samples or fewer devices")
    return out
