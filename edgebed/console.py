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
import re
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


def say(message: str) -> None:
    """Print ``message`` on stderr (above a live progress bar) whatever the verbosity: the answer to
    something the user just did (a Ctrl-C), which even ``-q`` must not swallow."""
    try:
        if _LIVE:
            _LIVE[-1].print(message, markup=False, highlight=False, soft_wrap=True)
        else:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
    except Exception:  # noqa: BLE001 — called from a signal handler: must never raise
        pass


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
    total: Optional[int] = None   # stop.updates, if the run stops at a number of updates

    def __str__(self) -> str:   # the plain one-line form (logs, studies, pipes)
        acc = f"{self.accuracy:.2%}" if self.accuracy is not None else "—"
        pct = f"{100 * self.done:3.0f}% | " if self.done is not None else ""
        virt = f" | virtual {self.virtual:.1f} s" if self.virtual == self.virtual else ""
        of = f" of {self.total:,}" if self.total else ""
        return (f"{pct}updates {self.updates:,}{of} | {self.rate:.1f} upd/s | acc {acc} | "
                f"ingress {fmt_bytes(self.ingress_bytes)} | alive {self.alive} | {self.elapsed:.1f} s{virt}")


class Phase(str):
    """A start-up step or fact the engine announces as it happens (``run directory: ...``,
    ``[  2.1 s] starting 8 agents``): a line of its own, on a terminal above the live bar."""


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
    of = f" of {s.total:,}" if s.total else ""
    fields = [f"{s.updates:,}{of} upd", acc, f"in {fmt_bytes(s.ingress_bytes)}",
              f"{s.rate:,.0f} upd/s", f"alive {s.alive}"]
    if s.virtual == s.virtual:
        fields.insert(1, f"virt {_clock(s.virtual)}")
    while len(fields) > 2 and len(" · ".join(fields)) > width:
        fields.pop()
    return " · ".join(fields)


_STUDY_HEAD = re.compile(r"^\[(\d+)/(\d+)\] (.*?)(?: \| (.*))?$")
_PCT = re.compile(r"^\s*(\d+)%$")


class _StudyClock:
    """The study-level view of the lines a study sends (``[i/N] <cell> · seed s | <run line>``, and
    ``[i/N] ...: <status> in <t> s`` when a run ends): which run, its share done, and an ETA for the
    whole study from the runs this invocation finished (or the current run's pace before any did)."""

    def __init__(self):
        self.durations: list[float] = []
        self.current: Optional[int] = None
        self.current_start = 0.0

    def line(self, text: str, final: bool, now: float) -> Optional[tuple[float, str, str]]:
        """(study fraction done, ETA text, compact info) for a study line; None for other text."""
        m = _STUDY_HEAD.match(text)
        if not m:
            return None
        i, n, label, rest = int(m[1]), int(m[2]), m[3], m[4] or ""
        if i != self.current:
            self.current, self.current_start = i, now
        if final:
            took = re.search(r": (complete|failed|incomplete|killed) in ([\d.]+) s", text)
            if took:
                self.durations.append(float(took[2]))
            return None
        fields = [f.strip() for f in rest.split(" | ")] if rest else []
        pct = next((int(p[1]) / 100 for f in fields[:1] if (p := _PCT.match(f))), None)
        ran = next((float(f[:-2]) for f in fields if re.fullmatch(r"[\d.]+ s", f)), None)
        elapsed = ran if ran is not None else now - self.current_start   # the run's own clock if it says
        if self.durations:
            per_run = sum(self.durations) / len(self.durations)
        elif pct and pct >= 0.02 and elapsed >= 1.0:
            per_run = elapsed / pct
        else:
            per_run = None
        eta = "ETA —"
        if per_run is not None:
            this_left = max(0.0, per_run * (1 - pct) if pct is not None else per_run - elapsed)
            eta = f"ETA {_clock(this_left + (n - i) * per_run)}"
        done = ((i - 1) + (pct or 0.0)) / n
        # most telling first: the run and its share done, the cell, then accuracy and updates; the
        # live line cuts from the end what does not fit
        keep = [f.replace("updates ", "upd ") for f in fields[1:] if f.startswith(("acc", "updates"))][::-1]
        first = f"run {i}/{n}" + (f" {fields[0].strip()}" if pct is not None else "")
        text = fields[0] if fields and pct is None and not keep else ""
        return done, eta, " · ".join(x for x in [first, label, *keep, text] if x)


def _EtaColumn():
    """The ETA the caller computed (``eta`` field); while there is none and nothing is measured (a
    start-up step), the seconds the step has taken so far — a live line never looks frozen."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        max_refresh = 0.5

        def render(self, task):
            eta = task.fields.get("eta", "").strip()
            if not eta and task.total is None and "since" in task.fields:
                eta = f"{_clock(time.monotonic() - task.fields['since'])}"
            return Text(f"{eta:<{RunProgress.ETA_W}}"[:RunProgress.ETA_W])
    return EtaColumn()


def _eta(s: RunStatus) -> str:
    """Time left at the run's pace so far (from the stop rule's share done), or nothing."""
    if s.done is None or s.done <= 0.005 or s.done >= 1:
        return ""
    return f"ETA {_clock(s.elapsed * (1 - s.done) / s.done)}"


def _clock(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class RunProgress:
    """The progress callback the engine calls with a ``RunStatus`` (or a plain text line, from
    studies) and ``final``. Live bar on a terminal; event lines otherwise; nothing when quiet."""

    ETA_W = 10      # "ETA 1:23:45"-ish, the ETA column's width
    MIN_BAR = 10

    def __init__(self, stream=None, quiet: bool = False, every: float = 30.0, force_terminal=None,
                 each_eval: bool = True):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.every = every
        self.each_eval = each_eval   # without a terminal: a line at every evaluation too (a log file's)
        self.tty = self.stream.isatty() if force_terminal is None else force_terminal
        self._progress = None
        self._task = None
        self._bar = None
        self._last_line = 0.0
        self._last_evals = -1
        self._study = _StudyClock()

    # -- terminal -------------------------------------------------------------------------------
    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
        console = Console(file=self.stream, force_terminal=True if self.tty else None)
        self._bar = BarColumn(bar_width=self.MIN_BAR)
        self._progress = Progress(self._bar, TaskProgressColumn(), _EtaColumn(),
                                  TextColumn("{task.fields[info]}"), console=console,
                                  transient=False, refresh_per_second=4, redirect_stdout=False,
                                  redirect_stderr=False)
        self._task = self._progress.add_task("run", total=None, info="starting", eta="")
        self._progress.start()
        _LIVE.append(console)

    def _show(self, done: Optional[float], eta: str, info: str) -> None:
        """One live line: the bar takes whatever width the text leaves (at least MIN_BAR)."""
        width = self._progress.console.width
        room = width - 4 - self.ETA_W - 4 - self.MIN_BAR     # percentage, ETA, three gaps and a margin
        info = info if len(info) <= room else info[:max(0, room - 1)] + "…"
        self._bar.bar_width = max(self.MIN_BAR, width - 4 - self.ETA_W - 4 - len(info))
        self._progress.update(self._task, total=1000 if done is not None else None,
                              completed=round(1000 * done) if done is not None else 0,
                              eta=f"{eta:<{self.ETA_W}}"[:self.ETA_W], info=info)

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
        if isinstance(status, str) and final:   # a study's "run done" line: above the bar
            self._study.line(status, final, time.monotonic())
            if self._progress is not None:
                self._progress.console.print(status, markup=False, highlight=False)
            else:
                self.stream.write(status + "\n")
                self.stream.flush()
            return
        if self._progress is None:
            self._start()
        if isinstance(status, Phase):   # a line of its own, and the (pulsing) bar says it meanwhile
            self._progress.console.print(status, markup=False, highlight=False)
            self._progress.update(self._task, since=time.monotonic())
            return self._show(None, "", status.split("] ", 1)[-1])
        if isinstance(status, str):
            study = self._study.line(status, final, time.monotonic())
            if study is not None:
                return self._show(*study)
            return self._show(None, "", status)
        width = max(20, self._progress.console.width - 4 - self.ETA_W - 4 - self.MIN_BAR)
        self._show(status.done, _eta(status), _fields(status, width))
        if final:
            self._stop()

    def _line(self, status, final: bool) -> None:
        now = time.monotonic()
        new_eval = self.each_eval and isinstance(status, RunStatus) and status.evals != self._last_evals
        if final or new_eval or isinstance(status, Phase) or now - self._last_line >= self.every:
            self.stream.write(f"{status}\n")
            self.stream.flush()
            if not final:   # a final line (a study's "running …", a run's end) starts no quiet period
                self._last_line = now
            if isinstance(status, RunStatus):
                self._last_evals = status.evals

    def close(self) -> None:
        self._stop()
