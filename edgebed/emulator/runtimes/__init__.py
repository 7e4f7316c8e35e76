"""Registry of runtimes: scenario ``runtime.name`` → class, or an install hint when unavailable.

Optional backends register only when their module imports; otherwise the hint is shown to the user.
"""
from __future__ import annotations

import importlib
from typing import NamedTuple

from ...scenario import RUNTIME_NAMES
from .base import AgentHandle, AgentSpec, Capabilities, Runtime



class RuntimeEntry(NamedTuple):
    """Where a runtime's class lives (imported on first use, so an optional backend costs nothing
    until chosen), what to install when it can't be imported, and what the checks before a run need
    to know of it without importing it."""
    module: str
    cls: str
    hint: str = ""
    devices_in_engine: bool = False   # every device runs inside the engine's process (memory: capacity.py)


_DOCKER_HINT = "Install the extras (pip install -e '.[docker]') and "
RUNTIMES: dict[str, RuntimeEntry] = {
    "local": RuntimeEntry("edgebed.emulator.runtimes.local", "LocalRuntime"),
    "sim": RuntimeEntry("edgebed.emulator.runtimes.sim", "SimRuntime", devices_in_engine=True),
    "docker": RuntimeEntry("edgebed.emulator.runtimes.docker.runtime", "DockerRuntime",
                           _DOCKER_HINT + "start a Docker engine (make provision)."),
    "compose": RuntimeEntry("edgebed.emulator.runtimes.docker.compose", "ComposeRuntime",
                            "Use `edgebed compose export` and `docker compose up`: the PS service selects "
                            "this runtime."),
    "swarm": RuntimeEntry("edgebed.emulator.runtimes.swarm.runtime", "SwarmRuntime",
                          _DOCKER_HINT + "point runtime.swarm.manager at a swarm manager's engine "
                          "(docs/runtimes-swarm.md)."),
    "spark": RuntimeEntry("edgebed.emulator.runtimes.spark.runtime", "SparkRuntime",
                          "Install the extras (pip install -e '.[spark]') and Java 17 (apt-get install "
                          "openjdk-17-jre-headless)."),
}
if set(RUNTIMES) != set(RUNTIME_NAMES):    # a runtime added in one place only: say where the other is
    raise ImportError(f"runtimes registered {sorted(RUNTIMES)} differ from scenario.RUNTIME_NAMES "
                      f"{sorted(RUNTIME_NAMES)}: add the name to both")


def get_runtime(name: str) -> type[Runtime]:
    if name not in RUNTIMES:
        raise KeyError(f"unknown runtime {name!r}; available: {', '.join(sorted(RUNTIMES))}")
    entry = RUNTIMES[name]
    try:
        return getattr(importlib.import_module(entry.module), entry.cls)
    except ImportError as err:
        raise RuntimeError(f"runtime {name!r} is not available: {err}. {entry.hint}") from None


__all__ = ["RUNTIMES", "RuntimeEntry", "get_runtime", "Runtime", "AgentHandle", "AgentSpec", "Capabilities"]
