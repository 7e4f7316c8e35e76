"""The console: logging set-up, warning lines, and the live progress of a run (rich on a terminal).

Everything edgebed says goes through the ``edgebed`` logger (``-q`` keeps warnings and errors, ``-v``
adds debug lines). While a progress bar is live, log lines are printed above it by the same rich
console, so a warning never tears the bar. Other modules emit a warning during a run with
``console.warn("...")``. On a terminal the progress is one live line that fits its width; piped,
it is one line per event (an evaluation, the end) plus a heartbeat line every ``every`` seconds.
"""
from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass
from typing import Optional, Union

from .units import fmt_bytes

log = logging.getLogger("edgebed")
_LIVE: list = []          # the rich Console of the live progress, if one is showing


def warn(message: str) -> None:
    """Print ``warning: message`` on the console (above a live progress bar) — for use during a run."""
    log.warning(message)


class _Handler(logging.Handler):
    """``warning: ...``/``error: ...`` lines on stderr (or above the live progress bar)."""

    PREFIX = {logging.DEBUG: "debug: ", logging.WARNING: "warning: ", logging.ERROR: "error: ",
              logging.CRITICAL: "error: "}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.PREFIX.get(record.levelno, "") + record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            if _LIVE:
                _LIVE[-1].print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:  # noqa: BLE001 — logging must never end a run
            self.handleError(record)


def setup_logging(verbosity: int = 0) -> None:
    """-1 quiet (warnings and errors), 0 normal, 1 verbose (debug). Idempotent."""
    level = {-1: logging.WARNING, 0: logging.INFO}.get(verbosity, logging.DEBUG)
    log.setLevel(level)
    log.propagate = False
    if not any(isinstance(h, _Handler) for h in log.handlers):
        log.addHandler(_Handler())


@dataclass(frozen=True)
class RunStatus:
    """What the run loop knows at one moment. ``done`` is the fraction of the stop rule reached
    (the largest of updates / stop.updates and time / stop.wall_time; None when only a target
    accuracy can stop the run). ``virtual`` is emulated seconds (NaN off the virtual clock)."""
    updates: int
    rate: float                 # applied updates per wall-clock second
    accuracy: Optional[float]   # latest test accuracy in [0, 1]
    evals: int
    ingress_bytes: int
    alive: int
    elapsed: float              # wall seconds since the run started
    virtual: float = math.nan
    done: Optional[float] = None

    def __str__(self) -> str:   # the plain one-line form (logs, studies, pipes)
        acc = f"{self.accuracy:.2%}" if self.accuracy is not None else "—"
        pct = f"{100 * self.done:3.0f}% | " if self.done is not None else ""
        virt = f" | virtual {self.virtual:.1f} s" if self.virtual == self.virtual else ""
        return (f"{pct}updates {self.updates:,} | {self.rate:.1f} upd/s | acc {acc} | "
                f"ingress {fmt_bytes(self.ingress_bytes)} | alive {self.alive} | {self.elapsed:.1f} s{virt}")


def stop_fraction(stop, updates: int, seconds: float) -> Optional[float]:
    """Fraction of a ``StopSpec`` reached after ``updates`` and ``seconds`` (wall, or virtual on sim)."""
    parts = []
    if stop.updates:
        parts.append(updates / stop.updates)
    if stop.wall_time:
        parts.append(seconds / stop.wall_time)
    return min(1.0, max(parts)) if parts else None


def _fields(s: RunStatus, width: int) -> str:
    """The info text after the bar, dropping the least useful fields until it fits ``width``."""
    acc = f"acc {s.accuracy:.2%}" if s.accuracy is not None else "acc —"
    fields = [f"{s.updates:,} upd", acc, f"in {fmt_bytes(s.ingress_bytes)}",
              f"{s.rate:,.0f} upd/s", f"alive {s.alive}"]
    if s.virtual == s.virtual:
        fields.insert(1, f"virt {_clock(s.virtual)}")
    while len(fields) > 2 and len(" · ".join(fields)) > width:
        fields.pop()
    return " · ".join(fields)


def _clock(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class RunProgress:
    """The progress callback the engine calls with a ``RunStatus`` (or a plain text line, from
    studies) and ``final``. Live bar on a terminal; event lines otherwise; nothing when quiet."""

    def __init__(self, stream=None, quiet: bool = False, every: float = 30.0, force_terminal=None):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.every = every
        self.tty = self.stream.isatty() if force_terminal is None else force_terminal
        self._progress = None
        self._task = None
        self._last_line = 0.0
        self._last_evals = -1

    # -- terminal -------------------------------------------------------------------------------
    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
        console = Console(file=self.stream, force_terminal=True if self.tty else None)
        self._progress = Progress(BarColumn(bar_width=12), TaskProgressColumn(), TimeRemainingColumn(),
                                  TextColumn("{task.fields[info]}"), console=console,
                                  transient=False, refresh_per_second=4, redirect_stdout=False,
                                  redirect_stderr=False)
        self._task = self._progress.add_task("run", total=None, info="starting")
        self._progress.start()
        _LIVE.append(console)

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            if _LIVE and _LIVE[-1] is self._progress.console:
                _LIVE.pop()
            self._progress = None

    def __call__(self, status: Union[RunStatus, str], final: bool) -> None:
        if self.quiet:
            return
        if not self.tty:
            return self._line(status, final)
        if isinstance(status, str) and final:      # a study's "cell done" line: above the bar
            if self._progress is not None:
                self._progress.console.print(status, markup=False, highlight=False)
            else:
                self.stream.write(status + "\n")
                self.stream.flush()
            return
        if self._progress is None:
            self._start()
        width = max(20, self._progress.console.width - 28)   # bar 12, percentage 4, ETA 7, gaps
        if isinstance(status, str):
            self._progress.update(self._task, total=None, completed=0, info=status[:width])
            return
        total = 1000 if status.done is not None else None
        self._progress.update(self._task, total=total,
                              completed=round(1000 * status.done) if status.done is not None else 0,
                              info=_fields(status, width))
        if final:
            self._stop()

    def _line(self, status, final: bool) -> None:
        now = time.monotonic()
        new_eval = isinstance(status, RunStatus) and status.evals != self._last_evals
        if final or new_eval or now - self._last_line >= self.every:
            self.stream.write(f"{status}\n")
            self.stream.flush()
            self._last_line = now
            if isinstance(status, RunStatus):
                self._last_evals = status.evals

    def close(self) -> None:
        self._stop()
