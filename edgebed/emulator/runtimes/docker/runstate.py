"""What a container runtime keeps about its run, shared by the docker and swarm runtimes: the run's id
and labels, the batch container listing each handle's poll() reads, CPU quotas per speed class, host
CPU samples, and the fidelity and kernel-counter outputs built from the counter samples."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Optional

from ....rundir import write_json_atomic
from ...fidelity import PeakRate
from ..base import Capabilities
from .clean import RUN_LABEL, run_id_of
from .images import LABEL

STATUS_TTL = 0.5                        # seconds a batch container listing is reused by poll()


def cpus_for(klass, spec, paced: bool = False) -> float:
    """CPU quota of a speed class: ``cpus.<class>`` if given, else ``base_cpus / slowdown`` — or
    ``base_cpus`` when the agents pace themselves (``timing.pacing``: they enforce the slowdown).
    ``spec``: a runtime section with ``cpus`` and ``base_cpus`` (docker's, swarm's)."""
    if klass.name in spec.cpus:
        return float(spec.cpus[klass.name])
    if paced:
        return spec.base_cpus
    return spec.base_cpus / klass.slowdown


class ContainerRunState:
    """Mixin of a runtime with ``scenario``, ``spec``, ``run_dir`` and ``record``; it says how its
    run's containers are listed (``_list_status``) and sets ``counter_every``."""

    counter_every: float = 0.5          # seconds between kernel counter samples
    # Class-level default for listings; instances replace it with what this kernel can do (netem).
    capabilities = Capabilities(link_rate="kernel", link_delay="app", link_jitter="app", link_loss="app",
                                cpu_quota=True, freeze="pause")

    def _init_run_state(self, counter_every: float, kernel_delay: bool = True) -> None:
        """Call from ``__init__`` once ``run_dir`` is set. Sets the capabilities from this kernel's
        qdiscs: the rate by tbf (else at application level), delay, jitter and loss by netem where the
        kernel has it and ``kernel_delay`` (else at application level, the documented fallback)."""
        from . import links
        q = links.kernel_qdiscs()
        self.netem = bool(q["netem"])
        prop = "kernel" if self.netem and kernel_delay else "app"
        self.capabilities = Capabilities(link_rate="kernel" if q["tbf"] else "app", link_delay=prop,
                                         link_jitter=prop, link_loss=prop, cpu_quota=True, freeze="pause")
        self.counter_every = counter_every
        self.run_id = run_id_of(self.run_dir)
        self.label = f"{RUN_LABEL}={self.run_id}"
        self.labels = {LABEL: "1", RUN_LABEL: self.run_id, f"{LABEL}.run_dir": str(self.run_dir.resolve())}
        self._status: dict[str, str] = {}
        self._status_at = 0.0
        self._lock = threading.Lock()
        self._quota_pending: dict[int, float] = {}
        self._counters: dict[int, dict] = {}
        self._counter_at = 0.0
        self._uplink_peaks: dict[int, PeakRate] = {}   # device → peak uplink throughput (fidelity)
        self._cpu_busy: list[float] = []

    def cpus_of(self, class_name: str) -> float:
        klass = next(c for c in self.scenario.workers.classes if c.name == class_name)
        return cpus_for(klass, self.spec, paced=self.scenario.timing.pacing)

    # -- container states, for the handles' poll() -------------------------------------------------
    def _list_status(self) -> dict[str, str]:
        """State of each of the run's containers: id → running, paused, exited, …"""
        raise NotImplementedError

    def container_status(self, container_id: str) -> Optional[str]:
        """A container's state from the latest batch listing (at most STATUS_TTL old), None if unlisted;
        called by each ContainerHandle.poll."""
        self._refresh_status()
        return self._status.get(container_id)

    def _refresh_status(self) -> None:
        now = time.monotonic()
        if now - self._status_at < STATUS_TTL:
            return
        with self._lock:
            if now - self._status_at < STATUS_TTL:
                return
            try:
                self._status = self._list_status()
            except Exception:         # engine busy or gone: the last listing stands
                pass
            self._status_at = time.monotonic()

    # -- samples -------------------------------------------------------------------------------------
    def _sample_due(self, force: bool) -> bool:
        """True (and the host CPU sampled) when a counter sample is due: every ``counter_every`` s."""
        now = time.monotonic()
        if not force and now - self._counter_at < self.counter_every:
            return False
        self._counter_at = now
        self._sample_cpu()
        return True

    def _sample_cpu(self) -> None:
        """Host CPU busy fraction since the previous sample (from /proc/stat), for the summary."""
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return
        idle, total = fields[3] + fields[4], sum(fields[:8])
        prev = getattr(self, "_cpu_prev", None)
        self._cpu_prev = (idle, total)
        if prev and total > prev[1]:
            self._cpu_busy.append(1.0 - (idle - prev[0]) / (total - prev[1]))

    def host_cpu(self) -> dict:
        """Host CPU saturation over the run: mean and share of samples above 95 % busy."""
        b = self._cpu_busy
        if not b:
            return {}
        return {"busy_mean": round(sum(b) / len(b), 3), "saturated_share": round(sum(x > 0.95 for x in b) / len(b), 3),
                "samples": len(b)}

    def fidelity(self) -> dict:
        return {"uplink_peak_bps": {d: p.peak_bps for d, p in self._uplink_peaks.items()},
                "host_cpu": self.host_cpu()}

    def _write_kernel_traffic(self) -> None:
        """A last counter sample, then ``kernel_traffic.json``; a failure is a warning of the run."""
        try:
            self.sample_counters(force=True)
            write_json_atomic(self.run_dir / "kernel_traffic.json", self.kernel_traffic())
        except Exception as err:
            self.record["warnings"].append(f"kernel counters not read: {err}")
