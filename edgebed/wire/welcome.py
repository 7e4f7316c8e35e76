"""WelcomeConfig: the run configuration a device learns from the PS in ``Welcome``, typed on both ends.

On the wire it stays the JSON object ``Welcome.config`` has always carried (``to_dict`` writes it key
for key, in the same order, so its bytes — which cross the emulated link — are unchanged); the
engine builds one (``emulator/welcome.py``), the device reads one (``from_dict``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class WelcomeConfig:
    seed: int
    model: str                     # the workload: a registry key or 'module:attr' (workload.py)
    algorithm: dict                # the flat algorithm section (name, lr, batch_size, c, ...)
    compressor: str                # compression.SELECTORS key the device compresses its pushes with
    speed_class: dict              # the device's workers.classes[] entry (slowdown, think_time, ...)
    n_devices: Optional[int] = None
    device: Optional[int] = None
    dataset: Optional[dict] = None  # the dataset section (partition, labels_per_worker, ...)
    policy: Optional[dict] = None   # device_agent/policies.py: what the device does with a model
    app_link: Optional[dict] = None  # "uplink"/"downlink" → link properties the agent emulates itself
    timing: Optional[dict] = None   # pacing budget, waiting time (timing_setup.agent_timing); None: off
    compression: Optional[dict] = field(default=None)   # the compression section when not the default
    model_path: Optional[str] = None   # where the device imports a user's model module from (workload.py)

    # the JSON object's key order (timing and compression first, then as the engine always wrote them)
    _ORDER = ("timing", "compression", "seed", "n_devices", "device", "dataset", "model", "algorithm",
              "compressor", "policy", "speed_class", "app_link", "model_path")

    def to_dict(self) -> dict:
        """The JSON object sent in ``Welcome.config`` (fields left None are left out)."""
        return {k: v for k in self._ORDER if (v := getattr(self, k)) is not None}

    @classmethod
    def from_dict(cls, config: dict) -> "WelcomeConfig":
        """A received ``Welcome.config``; ValueError names what is missing or unknown."""
        if not isinstance(config, dict):
            raise ValueError(f"welcome config must be an object, got {type(config).__name__}")
        unknown = sorted(set(config) - set(cls._ORDER))
        missing = [k for k in ("seed", "model", "algorithm", "compressor", "speed_class") if k not in config]
        if unknown or missing:
            raise ValueError(f"welcome config: missing {missing}, unknown {unknown}")
        return cls(**config)
