"""What a scenario will run, per speed class, before it runs: devices, and the update share, rate per
device and mean staleness the timing model (``timing.expected_timing``) expects — `edgebed validate`
prints it, and warns of a class that gets no device at all."""
from __future__ import annotations

from typing import Optional

from .. import timing as tm
from ..ps.rules import RULES
from ..scenario import Scenario, class_assignment


def empty_classes(sc: Scenario) -> list[str]:
    """A warning per speed class that gets no device (its share × workers.n rounds to 0)."""
    counts = _counts(sc)
    return [f"workers.classes[{i}] {c.name!r}: 0 of the {sc.workers.n} devices (share {c.share:.0%}): "
            f"this class will not run at all; raise workers.n to at least {_needed(sc, i)} or remove the class"
            for i, c in enumerate(sc.workers.classes) if counts[i] == 0]


def _counts(sc: Scenario) -> list[int]:
    assign = class_assignment(sc)
    return [assign.count(i) for i in range(len(sc.workers.classes))]


def _needed(sc: Scenario, i: int) -> int:
    """The smallest workers.n that gives class ``i`` a device (at most a few hundred tried)."""
    for n in range(sc.workers.n + 1, sc.workers.n + 1000):
        if _counts(sc.model_copy(update={"workers": sc.workers.model_copy(update={"n": n})}))[i]:
            return n
    return sc.workers.n + 1000


def class_preview(sc: Scenario, runtime) -> tuple[list[dict], Optional[str]]:
    """(one row per class: ``class``, ``devices`` and — for rules of the one-gradient-per-pull cycle
    the timing model covers — expected ``share`` in [0, 1], ``rate_per_device`` in updates/s and
    ``staleness_mean`` in updates; what the expectation assumed, or None when there is none)."""
    rows = crash_columns(sc, [{"class": c.name, "devices": k} for c, k in zip(sc.workers.classes, _counts(sc))])
    if RULES[sc.algorithm.name].policy != "gradient":
        return rows, None
    from .timing_setup import link_model_of
    if runtime.step_time is not None:        # a runtime that models compute time itself
        step, whence = runtime.step_time, f"runtime.{runtime.name}"
    elif isinstance(sc.timing.step_time, float):
        step, whence = sc.timing.step_time, "timing.step_time"
    else:
        step, whence = tm.default_step_time(sc.model, sc.dataset), "reference machine"
    from .calibration import message_sizes
    link_model = link_model_of(runtime)
    sizes = message_sizes(sc.model, sc.algorithm.name, sc.algorithm.ratio, sc.seed)
    expected = tm.scenario_expected(sc, step, link_model, sizes)
    for row, e in zip(rows, expected):
        row.update(share=e["share"], rate_per_device=e["rate_per_device"], staleness_mean=e["staleness_mean"])
    return rows, f"expected (timing model; step {step * 1e3:.2f} ms from {whence}; links {link_model})"


def crash_columns(sc: Scenario, rows: list[dict]) -> list[dict]:
    """``rows`` (one per class) with ``crashes``: the devices ``failures.crash`` schedules to crash in
    each class (edgebed/crashes.py), when the scenario has one; the run's summary.json says how many did."""
    sched = sc.crash_schedule()
    if sched is not None:
        for r in rows:
            r["crashes"] = sched.intended.get(r["class"], 0)
    return rows


def _crash_note(rows: list[dict]) -> list[str]:
    if "crashes" not in rows[0]:
        return []
    return [f"  failures.crash schedules {sum(r['crashes'] for r in rows)} devices to crash; the run report "
            "says how many did"]


def preview_lines(rows: list[dict], note: Optional[str]) -> list[str]:
    """The per-class table as text lines (indented two spaces; fits 80 columns for short names)."""
    width = max(len("class"), *(len(r["class"]) for r in rows))
    crash = (lambda r: f"  {r['crashes']:>7}") if "crashes" in rows[0] else (lambda r: "")
    if note is None or "share" not in rows[0]:   # no expectation (another rule), or it failed
        return ([f"  {r['class']:<{width}}  {r['devices']:>4} devices" + (f", {r['crashes']} to crash" if "crashes" in r else "")
                 for r in rows] + ([f"  ({note})"] if note else []) + _crash_note(rows))
    out = [f"  {note}:", f"  {'class':<{width}}  {'devices':>7}  {'share':>7}  {'rate/device':>11}  {'staleness':>9}"
           + (f"  {'crashes':>7}" if "crashes" in rows[0] else "")]
    for r in rows:
        cells = (f"{100 * r['share']:5.1f} %", f"{r['rate_per_device']:5.2f} upd/s", f"{r['staleness_mean']:.1f}") \
            if r["devices"] else ("—", "—", "—")
        out.append(f"  {r['class']:<{width}}  {r['devices']:>7}  {cells[0]:>7}  {cells[1]:>11}  {cells[2]:>9}" + crash(r))
    return out + _crash_note(rows)
