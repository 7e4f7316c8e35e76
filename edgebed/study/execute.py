"""The study driver's loop: cell × seed tasks through an executor, outcomes into the study directory.

Written once for every executor (``study/executors``): the driver decides what is already complete
(on its own filesystem), submits the rest, records each outcome as it comes back — writing returned
compact results into the study directory itself, so workers need no shared storage for results —
retries a task whose worker was lost up to ``retries`` times, and keeps the live view
(``progress.json``, ``study/progress.py``) current. Ctrl-C cancels what is outstanding; every result
that came back is already whole on disk (each is written beside its place, then renamed).
"""
from __future__ import annotations

import sys
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, CancelledError, wait
from pathlib import Path
from typing import Callable, Optional

from .executors.base import StudyExecutor, WorkerLost
from .executors.task import CellOutcome, CellTask, run_task, write_returned
from .progress import Board, render
from .storage import cell_dir, complete_run, recorded_path, status_entry

VIEW_EVERY_S = 60.0      # the whole view in the log, for executors whose cells don't print live
INTERRUPT_GRACE_S = 30.0  # after Ctrl-C: how long cells that end as interrupted runs may take to say so


class _EveryMinute:
    """Progress for a cell run in a worker process: live lines once a minute (several cells share one
    terminal, so no carriage-return line). Not the final line: the driver says how each run ended, with
    its worker, once (``finish``)."""

    def __init__(self, period_s: float = 60.0):
        self.period_s, self.last = period_s, 0.0

    def __call__(self, line: str, final: bool) -> None:
        now = time.monotonic()
        if not final and now - self.last >= self.period_s:
            self.last = now
            print(line, file=sys.stderr, flush=True)


def drive(study, sdir: Path, todo: list, heads: list[str], run_cell, executor: StudyExecutor,
          entries: list[dict], save: Callable[[], None], show: Callable[[str, bool], None],
          results: Optional[Path], retries: int) -> bool:
    """Run ``todo`` ((cell, seed) pairs) through ``executor``; fills ``entries`` (study order) and
    calls ``save`` after each outcome. Returns whether the user interrupted the study."""
    board = Board(study.spec.name, executor.describe(), executor.workers, sdir)
    slots: list[Optional[dict]] = [None] * len(todo)
    tasks: dict[int, CellTask] = {}
    pending: deque[int] = deque()
    in_process = executor.in_process
    live = show if in_process else (_EveryMinute() if executor.shares_filesystem else None)

    def publish() -> None:
        entries[:] = [e for e in slots if e is not None]
        save()

    for i, ((cell, seed), head) in enumerate(zip(todo, heads)):
        board.add((cell.id, seed), cell.label)
        sc = study.scenario(cell, seed)
        done = complete_run(sdir, results, cell, seed, sc)
        if done is not None:
            slots[i] = status_entry(study, cell, seed, status="skipped", run=recorded_path(done, sdir))
            board.update((cell.id, seed), state="skipped")
            show(f"{head}: already complete ({done.name}), skipped", True)
            continue
        parent = cell_dir(sdir, cell, seed)
        tasks[i] = CellTask((cell.id, seed), head, sc, run_cell,
                            str(parent) if executor.shares_filesystem else None)
        pending.append(i)
    publish()
    board.save()
    if tasks:
        runtimes = ", ".join(dict.fromkeys(t.scenario.runtime.name for t in tasks.values()))
        show(f"running {len(tasks)} cell × seed runs: runtime {runtimes}; executor {executor.describe()}", True)

    outstanding: dict = {}
    attempts = [0] * len(todo)
    interrupted = False
    last_view = time.monotonic()

    def key(i: int) -> tuple[str, int]:
        return todo[i][0].id, todo[i][1]

    def submit_more() -> None:
        with executor.batch():
            while pending and (executor.window is None or len(outstanding) < executor.window):
                i = pending.popleft()
                attempts[i] += 1
                if in_process:    # runs inside submit: show it as running while it does
                    board.update(key(i), state="running", worker="this process", started=time.time(),
                                 attempts=attempts[i])
                    board.save()
                else:
                    board.update(key(i), state="queued" if attempts[i] == 1 else "retry", attempts=attempts[i])
                outstanding[executor.submit(run_task, tasks[i], live)] = i

    def finish(i: int, outcome: CellOutcome) -> None:
        nonlocal interrupted
        cell, seed = todo[i]
        slots[i] = _record(study, sdir, cell, seed, outcome, attempts[i])
        board.update(key(i), state=slots[i]["status"], wall_time_s=outcome.wall_time_s,
                     worker=outcome.worker, error=outcome.error)
        if not in_process:
            show(f"{heads[i]}: {outcome.status} in {outcome.wall_time_s:.1f} s on {outcome.worker}"
                 + (f" — {outcome.error}" if outcome.error else ""), True)
        interrupted |= outcome.interrupted
        publish()

    def collect(fut, i: int) -> None:
        try:
            outcome = fut.result()
        except KeyboardInterrupt:   # the worker was interrupted outside the cell (between tasks)
            finish(i, CellOutcome(key(i), "incomplete", "interrupted by the user", 0.0, "-"))
        except WorkerLost as err:
            if attempts[i] <= retries and not interrupted:
                pending.appendleft(i)
                board.update(key(i), state="retry", worker=None, started=None, error=str(err))
                show(f"{heads[i]}: {err}; running it again ({attempts[i]}/{retries} retries)", True)
            else:
                why = "interrupted by the user" if interrupted else \
                    f"worker lost {attempts[i]} time{'s' * (attempts[i] > 1)}; last: {err}"
                finish(i, CellOutcome(key(i), "incomplete" if interrupted else "failed", why, 0.0, "-"))
        except CancelledError:   # never started: as if still queued
            pending.append(i)
        except Exception as err:  # noqa: BLE001 — the task itself could not run (pickling, import)
            finish(i, CellOutcome(key(i), "failed", f"worker: {type(err).__name__}: {err}", 0.0, "-"))
        else:
            finish(i, outcome)

    try:
        submit_more()
        while outstanding and not interrupted:
            finished, _ = wait(list(outstanding), timeout=1.0, return_when=FIRST_COMPLETED)
            for fut in finished:
                collect(fut, outstanding.pop(fut))
            moved = bool(finished)
            for fut, i in outstanding.items():
                where = executor.where(fut)
                t = board.tasks[key(i)]
                if where and (t["state"] != "running" or t["worker"] != where):
                    board.update(key(i), state="running", worker=where, started=time.time())
                    moved = True
            board.save(force=moved)
            if not in_process and time.monotonic() - last_view >= VIEW_EVERY_S:
                last_view = time.monotonic()
                for line in render(board.snapshot()):
                    show(line, True)
            if not interrupted:
                submit_more()
    except KeyboardInterrupt:
        interrupted = True
    try:
        if interrupted and outstanding:
            show(f"interrupted: stopping {len(outstanding)} outstanding cell × seed runs", True)
            executor.interrupt(list(outstanding))
            finished, _ = wait(list(outstanding), timeout=INTERRUPT_GRACE_S)
            for fut in finished:
                collect(fut, outstanding.pop(fut))
    except KeyboardInterrupt:     # a second Ctrl-C: stop waiting for them
        pass
    finally:
        queued = set(pending)
        for i in tasks:                   # not recorded: never started, or never came back
            if slots[i] is None:
                cell, seed = todo[i]
                state, why = ("not run", "interrupted before it started") if i in queued else \
                    ("incomplete", "interrupted by the user")
                slots[i] = status_entry(study, cell, seed, status=state, error=why, attempts=attempts[i])
                board.update(key(i), state=state, error=why)
        publish()
        board.finish()
    return interrupted


def _record(study, sdir: Path, cell, seed: int, outcome: CellOutcome, attempts: int) -> dict:
    """The status.json entry of an outcome; a returned compact result is written into the study dir."""
    parent = cell_dir(sdir, cell, seed)
    run = write_returned(outcome, parent) or (Path(outcome.run) if outcome.run else None)
    if outcome.traceback:
        parent.mkdir(parents=True, exist_ok=True)
        (parent / "error.txt").write_text(outcome.traceback)
    entry = status_entry(study, cell, seed, status=outcome.status, error=outcome.error,
                   run=recorded_path(run, sdir) if run is not None else None, wall_time_s=outcome.wall_time_s,
                   worker=outcome.worker, attempts=attempts)
    if entry["status"] == "complete":
        entry["error"] = None
    return entry
