"""The Welcome's run configuration: what a device learns from the PS when it says hello, built from
the scenario the engine executes."""
from __future__ import annotations

from typing import Optional

from ..algorithms import flat
from ..ps.rules import RULES
from ..scenario import Scenario
from ..wire import WelcomeConfig


def welcome_config(sc: Scenario, device: int, compressor: str, app_link: dict,
                   timing: Optional[dict] = None) -> WelcomeConfig:
    """What a device learns from the PS in Welcome (see device_agent/agent.py).

    ``app_link`` is the runtime's ``applied()``: link properties at level "app" are emulated by the
    agent; where the runtime enforces slowdown with CPU quotas the agent must not sleep on top (unless
    it paces its compute: then the pacing budget is the slowdown). ``timing`` (pacing, waiting time;
    absent when off) comes from ``timing_setup.agent_timing``."""
    klass = sc.class_of(device)
    speed_class = klass.model_dump(mode="json")
    if app_link.get("cpu_quota") and not (timing or {}).get("pacing"):
        speed_class["slowdown"] = 1.0
    # Only when set (error feedback, q8, wire encodings): the Welcome's bytes cross the emulated link, so
    # an unchanged default must not move the virtual clock's tables (tests/integration/test_sim_golden.py).
    compression = sc.compression.model_dump(mode="json")
    if compression == type(sc.compression)().model_dump(mode="json"):
        compression = None
    return WelcomeConfig(
        seed=sc.seed, n_devices=sc.workers.n, device=device, timing=timing or None, compression=compression,
        # Unset newer keys stay out: the Welcome's bytes cross the emulated link (golden sim tables).
        dataset=sc.dataset.model_dump(mode="json", exclude=_unset_dataset_keys(sc.dataset)),
        model=sc.model.name, model_path=sc.model.path,
        algorithm=flat(sc.algorithm), compressor=compressor,   # the flat form: bytes as before
        policy=RULES[sc.algorithm.name].device_policy(sc.algorithm),   # device_agent/policies.py
        speed_class=speed_class,
        app_link={d: {p: v for p, v in getattr(klass, d).model_dump(mode="json").items()
                      if app_link.get(f"link_{p}") == "app"} for d in ("uplink", "downlink")},
    )


def _unset_dataset_keys(ds) -> set[str]:
    """Dataset keys newer than the Welcome's first form, left out while unset (None) or at their
    default (the partition keys of data/partitions.py): the Welcome's bytes stay as before."""
    default = type(ds)()
    out = {k for k in ("validation_samples", "samples_per_device") if getattr(ds, k) is None}
    return out | {k for k in ("alpha", "min_size", "sizes", "sigma", "exponent")
                  if getattr(ds, k) == getattr(default, k)}
