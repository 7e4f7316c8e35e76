"""CPU quotas applied on a device's first push, and the engine tick that applies them: shared by the
container runtimes (docker, swarm).

A speed class's CPU quota is set only once the device has pushed: start-up (imports, the first pull)
runs unthrottled, so a slow class doesn't spend minutes loading torch. The engine calls ``drive``
every tick; ``apply_quotas(all_pending=True)`` throttles whoever is left (e.g. at the end of a warm-up).
"""
from __future__ import annotations

import time


class QuotaOnFirstPush:
    """Mixin for a runtime with ``handles``, ``record["warnings"]``, ``_quota_pending`` (device →
    CPUs still to apply) and ``sample_counters()``; it says how a quota is set in ``_set_quota``."""

    def _set_quota(self, handle, device: int, cpus: float) -> None:
        """Give ``handle``'s container ``cpus`` CPUs and note it in the runtime's record."""
        raise NotImplementedError

    def drive(self, ps, seconds: float) -> None:
        """Engine tick: timed link events now due (docker: ``self.live``, docker/live.py), CPU quotas of
        devices that pushed once, kernel counters."""
        end = time.monotonic() + seconds
        live = getattr(self, "live", None)
        if live is not None:
            live.tick(ps.event)
        if self._quota_pending:
            ready = [d for d in self._quota_pending if (st := ps.devices.get(d)) is not None and st.pushes >= 1]
            self.apply_quotas(ready)
        self.sample_counters()
        if live is not None and (wait := live.seconds_to_next()) is not None:
            end = min(end, time.monotonic() + wait)   # wake for a timed event, not a tick later
        left = end - time.monotonic()
        if left > 0:
            time.sleep(left)
        if live is not None:
            live.tick(ps.event)

    def apply_quotas(self, devices=(), all_pending: bool = False) -> None:
        """Set the CPU quota of ``devices`` (or of every device still unthrottled)."""
        todo = list(self._quota_pending) if all_pending else [d for d in devices if d in self._quota_pending]
        by_dev = {h.device: h for h in self.handles}
        for d in todo:
            cpus = self._quota_pending.pop(d)
            h = by_dev.get(d)
            if h is None or h.returncode is not None:
                continue
            try:
                self._set_quota(h, d, cpus)
            except Exception as err:  # noqa: BLE001 — an engine error on one device is a warning, not the run's end
                self.record["warnings"].append(f"device {d}: CPU quota not applied: {err}")
