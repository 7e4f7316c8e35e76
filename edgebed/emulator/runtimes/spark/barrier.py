"""The barrier stage that runs a run's agents as Spark tasks, and the Popen-like handle of one agent in it."""
from __future__ import annotations

import signal
import threading
import time
import uuid
from typing import Optional

from ..base import AgentHandle


class BarrierStage:
    """One barrier stage running in a background thread, cancellable through its job group."""

    def __init__(self, sc, rdd, fn, description: str = "edgebed agents"):
        self.sc, self.rdd, self.fn = sc, rdd, fn
        self.group = f"edgebed-{uuid.uuid4().hex[:12]}"
        self.description = description
        self.results: dict[int, tuple] = {}
        self.error: Optional[BaseException] = None
        self.cancel_signal: Optional[int] = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=self.group, daemon=True)

    def start(self) -> "BarrierStage":
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            # Job groups are per thread (pyspark pins Python threads to JVM threads).
            self.sc.setJobGroup(self.group, self.description, interruptOnCancel=True)
            if self.cancel_signal is None:
                for row in self.rdd.barrier().mapPartitions(self.fn).collect():
                    self.results[row[0]] = row
        except BaseException as err:  # noqa: BLE001 — reported through the handles
            self.error = err
        finally:
            self.done.set()

    def cancel(self, sig: int = signal.SIGKILL) -> None:
        if self.cancel_signal is None:
            self.cancel_signal = sig
        if not self.done.is_set():
            self.sc.cancelJobGroup(self.group)

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for the stage to end; a cancelled stage is cancelled again until it does (the job
        may not have been submitted yet the first time)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done.is_set():
            step = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            if self.done.wait(step):
                break
            if deadline is not None and time.monotonic() >= deadline:
                return False
            if self.cancel_signal is not None:
                self.sc.cancelJobGroup(self.group)
        return True

    def exit_code(self, device: int) -> Optional[int]:
        """Popen-style: the agent's code; -signal if the stage was cancelled first; 1 if it failed."""
        if not self.done.is_set():
            return None
        if device in self.results:
            return int(self.results[device][1])
        if self.cancel_signal is not None:
            return -int(self.cancel_signal)
        return 1


class SparkAgentHandle(AgentHandle):
    """One agent inside a barrier task (mirrors Popen; see the module docstring for the limits)."""

    def __init__(self, device: int, stage: BarrierStage):
        self.device = device
        self.stage = stage
        self.frozen = False

    def poll(self) -> Optional[int]:
        return self.stage.exit_code(self.device)

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        self.stage.join(timeout)
        return self.poll()

    @property
    def error(self) -> str:
        """The agent's error message ('' when it ended normally or has not ended)."""
        row = self.stage.results.get(self.device)
        if row is not None:
            return row[2]
        return repr(self.stage.error) if self.stage.error is not None and self.stage.cancel_signal is None else ""

    @property
    def torch_device(self) -> Optional[str]:
        row = self.stage.results.get(self.device)
        return row[3] if row is not None else None

    def send_signal(self, sig: int) -> None:
        if sig == signal.SIGSTOP:
            self.freeze()
        elif sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
            self.stage.cancel(sig)    # the whole stage: a barrier stage can't lose one task
        else:
            raise ValueError(f"the Spark runtime can't deliver signal {sig} to one agent")

    def kill(self) -> None:
        self.stage.cancel(signal.SIGKILL)
        self.stage.join(30)

    def freeze(self) -> None:
        # Enforced by the protocol: the PS answered the push with freeze=True and the agent stopped.
        self.frozen = True
