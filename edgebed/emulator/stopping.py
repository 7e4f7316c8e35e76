"""Interruption of a run: Ctrl-C, SIGTERM and SIGHUP (a closed terminal) are answered at once and can
never cut the run's record short.

``StopSignals`` is the engine's handler of these signals while ``Engine.run`` runs (main thread only).
It has three phases, moved forward by the engine:

* ``setup`` — the first signal raises (``KeyboardInterrupt``, or ``Interrupted`` for SIGTERM) so that
  a blocking start-up (containers, a JVM, a fork server) is cut short;
* ``running`` — the first signal only sets ``requested``; the run loop sees it within one tick and
  stops the run there, never in the middle of a flush;
* ``stopping`` — the teardown and the final records are being written.

Only the first signal ever raises. Each is answered on the console at once (a watcher thread). Every
later one (a second or third press: the natural reaction to a first press that seemed to do nothing)
sets ``hurry`` — agents are ended without their grace period — and is told what is happening, instead
of breaking into the code that writes summary.json.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Optional

from ..console import say

SETUP, RUNNING, STOPPING = "setup", "running", "stopping"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)   # SIGHUP: the terminal closed


def _name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class Interrupted(BaseException):
    """SIGTERM or SIGHUP. A BaseException so that library code catching Exception (py4j retries) can't swallow it."""


class StopSignals:
    """Owned by the engine's main thread. Python runs a signal handler in the main thread only between
    two bytecodes — seconds late while it waits in C (a fork server, an import) — so the answer to
    the user comes from a watcher thread woken by ``signal.set_wakeup_fd`` (one byte per signal, at
    once), while the handler in the main thread raises or sets ``requested``. ``hurry`` and
    ``requested`` are plain flags: each has one writer, the engine only reads them."""

    def __init__(self, where: Callable[[], Optional[str]] = lambda: None):
        self.where = where            # the run directory once it exists (for the messages)
        self.phase = SETUP
        self.requested: Optional[str] = None    # "Ctrl-C" or "SIGTERM", once one arrived (handler)
        self.hurry = False                       # a second signal arrived (watcher)
        self._raised = False
        self._answered = threading.Event()       # the first signal was answered on the console (watcher)
        self._old: dict[int, object] = {}
        self._wakeup: Optional[tuple[int, int, int]] = None   # (read end, write end, previous wakeup fd)

    def install(self) -> "StopSignals":
        if threading.current_thread() is not threading.main_thread():
            return self
        self._old = {s: signal.signal(s, self._handle) for s in SIGNALS}
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._wakeup = (r, w, signal.set_wakeup_fd(w, warn_on_full_buffer=False))
        threading.Thread(target=self._watch, args=(r,), name="edgebed-signals", daemon=True).start()
        return self

    def reassert(self) -> None:
        """Put the handler back if a library replaced it during start-up (SparkContext does, for SIGINT)."""
        for s in self._old:
            if signal.getsignal(s) != self._handle:
                signal.signal(s, self._handle)

    def restore(self, answering: bool = False) -> None:
        """Put the previous handlers back — or, with ``answering`` (a command-line caller that exits
        right after an interrupted run), a handler that only answers further presses, so no press in
        the moments before the process exits can cut its last lines short."""
        ended = ("again: already stopping — the run is closed and its records are written" if self.requested
                 else "after the run ended — its records are written; nothing to stop")
        for s, handler in self._old.items():
            signal.signal(s, (lambda signum, frame: say(f"{_name(signum)} {ended}")) if answering else handler)
        self._old = {}
        if self._wakeup is not None:
            r, w, previous = self._wakeup
            signal.set_wakeup_fd(previous)
            os.close(w)          # the watcher reads EOF and ends (it closes the read end)
            self._wakeup = None

    def answered(self, timeout: float = 1.0) -> bool:
        """Wait (at most ``timeout`` s) until the first signal is answered on the console, so what
        the engine says next comes after "Ctrl-C: stopping …" (the watcher thread says it, the main
        thread is interrupted at once). True at once when no signal arrived or none is watched."""
        if self.requested is None or self._wakeup is None:
            return True
        return self._answered.wait(timeout)

    @property
    def raised(self) -> bool:
        """Whether a signal was raised into set-up (KeyboardInterrupt or Interrupted)."""
        return self._raised

    def _handle(self, signum, frame) -> None:
        if self.requested is None:
            self.requested = _name(signum)
        if self.phase == SETUP and not self._raised:   # only ever one raise
            self._raised = True
            raise KeyboardInterrupt if signum == signal.SIGINT else Interrupted()   # SIGTERM, SIGHUP

    def _watch(self, r: int) -> None:
        count = 0
        try:
            while True:
                got = os.read(r, 64)
                if not got:
                    return
                for signum in got:
                    if signum not in SIGNALS:
                        continue
                    count += 1
                    self._answer(count, _name(signum))
        finally:
            os.close(r)

    def _answer(self, count: int, name: str) -> None:
        where = self.where()
        if count == 1:
            still = " as soon as the start-up step under way ends" if self.phase == SETUP else ""
            say(f"{name}: stopping{still} — then the agents are ended and what was recorded is written"
                + (f" to {where}" if where else "") + ". Ctrl-C again ends the agents without waiting; "
                "the run's summary is written either way.")
            self._answered.set()
            return
        self.hurry = True
        say(f"{name} again: already stopping — agents are ended now, without waiting; the run's tables and "
            "summary are being written" + (f" to {where}" if where else "") + ", please wait (to abandon "
            "them, SIGKILL the engine; `edgebed clean <run-dir>` then ends what it left).")
