"""Availability churn on the docker runtime: devices that go offline and come back, live, from the
scenario's ``dynamics.availability.classes`` (the same draws as the virtual clock's) or a trace's
``online`` column.

A device going **offline** is its container killed (SIGKILL) and left stopped: the agent's work in
progress, the messages on its link and its socket are lost with it, as when a phone's training job is
ended, and its PS session ends (``ParameterServer.leave``), so it is not taken for a silent device.
Coming back **online** is the container started again: it gets a new network namespace and veth, its
links are shaped again (``DockerRuntime.start_again``: the qdiscs, its CPU quota stays) before its agent
passes the gate; the agent then says hello afresh and pulls Θ — the virtual clock's semantics, plus the
agent's start-up (interpreter, torch, data), measured as the time from ``online`` to its ``hello``.

A fail-stop crash is ``docker pause``; with ``dynamics.availability.recover_after`` the paused container
is, after the drawn delay, killed and started again the same way (``recover_device``: re-shaped, hello
afresh). When each change is due, and its row of the events table, is ``runtimes/live_churn.py``'s.
"""
from __future__ import annotations

import subprocess
from typing import Optional

from ..live_churn import LiveChurn, LiveRecovery, churn_changes, schedule  # noqa: F401 — docker's, re-exported


def send_queue_bytes(ss_output: str) -> int:
    """Bytes written to TCP sockets and not yet acknowledged by the peer: the Send-Q column of
    ``ss -tnH state established`` (columns Recv-Q, Send-Q, local, peer)."""
    return sum(int(line.split()[1]) for line in ss_output.splitlines() if len(line.split()) >= 4)


def unsent_uplink_bytes(pid: int) -> Optional[int]:
    """The agent's uplink bytes in flight in container ``pid``'s network namespace: what its sockets
    hold unacknowledged (in its socket buffer or its link's queue). None: not readable."""
    try:
        out = subprocess.run(["nsenter", "-t", str(pid), "-n", "ss", "-tnH", "state", "established"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return send_queue_bytes(out.stdout) if out.returncode == 0 else None


class ContainerChurn:
    """DockerRuntime's part of availability churn (mixin): what the scenario may ask, and a device's
    container going offline and coming back. Uses the runtime's ``handles``, ``record``, ``gate_dir``,
    ``_specs``, counters and ``_reshaped`` (restart_device's second half)."""

    def _churn_problems(self) -> list[str]:
        """Availability and crash recovery on docker: containers stopped and started (docker/churn.py),
        so the agent must live in its container and the rule must be a gradient rule (a round-based one
        would wait for devices that are away); a trace's columns as docker/tracelive.py can apply them."""
        out = []
        if self.spec.agents != "container" and {"availability", "recovery", "trace"} & set(self.scenario.dynamics.parts()):
            out.append("dynamics.availability / recover_after / trace on docker stop and start the devices' "
                       "containers: set runtime.docker.agents: container (forked agents are not restarted)")
        from ..live_churn import churn_problems
        from .tracelive import problems
        return out + churn_problems(self.scenario, lambda trace: problems(self.scenario, trace))

    def go_offline(self, device: int, ps) -> bool:
        """Availability churn: device ``device`` leaves — its container is killed (SIGKILL: its work in
        progress and its socket are lost) and stays stopped; its PS session ends. → done (False: the
        device had ended). A crashed device leaves too, as on the virtual clock: its paused container
        stays paused (its recovery kills it), and a recovery due while it is away starts nothing."""
        h = self.handle_of(device)
        if h is None or h.returncode is not None or h.offline:
            return False
        entry = self.record["containers"][str(device)]
        # the bytes it had sent that the PS has not got, lost with it (the virtual clock's wasted bytes:
        # there the whole message in flight; here what its socket held unacknowledged — a lower bound)
        wasted = unsent_uplink_bytes(entry["pid"])
        h.offline = True
        if not h.frozen:
            self.sample_counters(force=True)      # its veth goes with its namespace: keep what it counted
            self._counter_base[device] = dict(self._counters.get(device, {}))
            h.away = True
            try:
                h.container.kill()
            except Exception as err:  # noqa: BLE001 — it ended meanwhile: away all the same
                self.record["warnings"].append(f"device {device}: going offline: {err}")
        ps.leave(device)
        entry["offline"] = entry.get("offline", 0) + 1
        if wasted is not None:
            entry["wasted_uplink_bytes"] = entry.get("wasted_uplink_bytes", 0) + wasted
            self.record["wasted_uplink_bytes"] = self.record.get("wasted_uplink_bytes", 0) + wasted
        self.last_wasted = wasted   # read by live_churn for the offline row
        return True

    def on_frozen(self, device: int) -> None:
        """The device's container was paused (a fail-stop crash): its recovery is scheduled, if any."""
        if self.recovery is not None:
            self.recovery.crashed(device)

    def recover_device(self, device: int, ps) -> bool:
        """Crash recovery: the paused container is killed (its work in progress and socket lost), started
        again and its links shaped again (qdiscs on the new veth; its CPU quota, a container setting,
        stays); the PS lets it say hello afresh. A device the churn schedule has away stays stopped until
        it comes back (``start_again``). → done (False: the device had ended)."""
        h = self.handle_of(device)
        if h is None or not h.frozen or h.returncode is not None:
            return False
        self.sample_counters(force=True)      # its veth goes with its namespace: keep what it counted
        self._counter_base[device] = dict(self._counters.get(device, {}))
        gate = self.gate_dir / str(device)
        gate.unlink(missing_ok=True)          # the new agent waits until its links are shaped again
        h.away = True                         # stopped, yet not ended (poll() must not report an exit)
        try:
            h.container.kill()                # docker delivers SIGKILL to a paused container and thaws it
        except Exception as err:  # noqa: BLE001 — it ended meanwhile
            self.record["warnings"].append(f"device {device}: recovering: {err}")
        h.container.wait(timeout=30)
        h.frozen = False
        ps.recover(device)
        entry = self.record["containers"][str(device)]
        entry["recovered"] = entry.get("recovered", 0) + 1
        if not h.offline:
            h.container.start()
            self._reshaped(self._specs[device], h, gate)
        return True

    def start_again(self, device: int) -> bool:
        """Availability churn: device ``device`` returns — its stopped container is started, its links
        shaped again on the new veth before its agent passes the gate (which then says hello afresh). A
        device that crashed and has not recovered yet comes back crashed: its recovery starts it."""
        h = self.handle_of(device)
        if h is None or not h.offline:
            return False
        h.offline = False
        if h.frozen:
            return True
        gate = self.gate_dir / str(device)
        gate.unlink(missing_ok=True)
        h.container.wait(timeout=30)    # killed when it went offline: exited by now, or soon
        h.container.start()
        self._reshaped(self._specs[device], h, gate)
        return True

    def _with_restart_peaks(self, out: dict) -> dict:
        """``fidelity()``'s ``out``, where the peak uplink rate of a restarted device is the highest of
        its starts'; the record keeps each start's (``containers.<d>.uplink_peaks_bps``: shaped again
        after a restart, or not)."""
        for d, entry in self.record["containers"].items():
            earlier = [p for p in entry.get("uplink_peaks_bps", []) if p is not None]
            if earlier:
                now = out["uplink_peak_bps"].get(int(d), 0.0)
                out["uplink_peak_bps"][int(d)] = max(earlier + [now])
        return out

    def _note_peaks(self) -> None:
        """The last start's peak joins the earlier ones in the record of a restarted device."""
        for d, entry in self.record["containers"].items():
            if "uplink_peaks_bps" in entry and len(entry["uplink_peaks_bps"]) == entry.get("restarts", 0):
                p = self._uplink_peaks.get(int(d))
                entry["uplink_peaks_bps"].append(round(p.peak_bps) if p is not None else None)
