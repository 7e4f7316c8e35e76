"""Docker agent handles (mirror subprocess.Popen): a device's container, or a forked agent inside one."""
from __future__ import annotations

import os
import signal as _signal
import time
from typing import Optional, Protocol

from ..base import PolledHandle

FREEZE_TRIES = 5     # docker pause attempts when runc reports "unable to freeze" (a busy host)


class StatusSource(Protocol):
    """What a handle asks its runtime (DockerRuntime): a container's state from a batch listing."""

    def container_status(self, container_id: str) -> Optional[str]: ...


class ContainerHandle(PolledHandle):
    """One device's container; mirrors Popen. ``poll`` reads the runtime's batch listing (at most
    ``STATUS_TTL`` old); ``wait`` asks the container itself, so it sees the exit at once."""

    def __init__(self, runtime: StatusSource, device: int, container):
        super().__init__(runtime, device)
        self.container = container
        self.away = False    # stopped on purpose (offline, recovering: docker/churn.py), yet not ended
        self.offline = False  # away by the churn schedule (availability), crashed or not

    def poll(self) -> Optional[int]:
        if self.away:
            return None
        if self.returncode is None:
            st = self.runtime.container_status(self.container.id)
            if st in ("exited", "dead") or st is None:
                self._read_exit()
        return self.returncode

    def _read_exit(self) -> None:
        try:
            self.container.reload()
            state = self.container.attrs["State"]
            if state["Status"] in ("exited", "dead"):
                self.returncode = int(state["ExitCode"])
        except Exception:            # removed under us: count as killed
            self.returncode = -9

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            self._read_exit()
            if self.returncode is not None or (end is not None and time.monotonic() >= end):
                break
            time.sleep(0.05)
        return self.returncode

    def _deliver(self, sig: int) -> None:
        try:
            self.container.kill(signal=sig)
        except Exception:
            pass                        # already gone

    def freeze(self, tries: int = FREEZE_TRIES) -> None:
        """``docker pause``. runc gives up on a cgroup freeze that does not settle in time ("unable to
        freeze", HTTP 500), which a busy host makes common: tried again, ``tries`` times in all."""
        if self.returncode is not None or self.frozen:
            return
        for attempt in range(tries):
            try:
                self.container.pause()
                break
            except Exception as err:
                if "unable to freeze" not in str(err) or attempt == tries - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
        self.frozen = True
        hook = getattr(self.runtime, "on_frozen", None)
        if hook is not None:            # docker: a recovery may follow (dynamics.availability.recover_after)
            hook(self.device)


class ForkedAgentHandle(ContainerHandle):
    """``agents: forked``: the agent is a host process (forked) inside the container's netns and
    cgroups; exit status comes from the process, freeze is still ``docker pause`` of the container."""

    def __init__(self, runtime: StatusSource, device: int, container, join: dict):
        super().__init__(runtime, device, container)
        self.join = join
        self.proc = None                # the multiprocessing.Process, once forked

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def poll(self) -> Optional[int]:
        if self.returncode is None and self.proc is not None and self.proc.exitcode is not None:
            self.returncode = self.proc.exitcode
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        if self.proc is not None and self.returncode is None:
            self.proc.join(timeout)
        return self.poll()

    def send_signal(self, sig: int) -> None:
        if self.proc is None or self.poll() is not None:
            return
        if self.frozen:
            sig = _signal.SIGKILL       # a frozen device is dead for the run (see PolledHandle)
        try:
            os.kill(self.proc.pid, int(sig))
        except ProcessLookupError:
            return
        if self.frozen:
            try:                        # a frozen task gets its SIGKILL only once thawed
                self.container.unpause()
            except Exception:
                pass
