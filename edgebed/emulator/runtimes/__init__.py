"""Registry of runtimes: scenario ``runtime.name`` → class, or an install hint when unavailable.

Optional backends register only when their module imports; otherwise the hint is shown to the user.
"""
from __future__ import annotations

import importlib

from .base import AgentHandle, AgentSpec, Capabilities, Runtime

# name → (module, class name, install hint)
_KNOWN = {
    "local": ("edgebed.emulator.runtimes.local", "LocalRuntime", ""),
    "sim": ("edgebed.emulator.runtimes.sim", "SimRuntime", ""),
    "docker": ("edgebed.emulator.runtimes.docker.runtime", "DockerRuntime",
               "Install the extras (pip install -e '.[docker]') and start a Docker engine (make provision)."),
    "compose": ("edgebed.emulator.runtimes.docker.compose", "ComposeRuntime",
                "Use `edgebed compose export` and `docker compose up`: the PS service selects this runtime."),
    "swarm": ("edgebed.emulator.runtimes.swarm.runtime", "SwarmRuntime",
              "Install the extras (pip install -e '.[docker]') and point runtime.swarm.manager at a swarm "
              "manager's engine (docs/runtimes-swarm.md)."),
    "spark": ("edgebed.emulator.runtimes.spark.runtime", "SparkRuntime",
              "Install the extras (pip install -e '.[spark]') and Java 17 (apt-get install openjdk-17-jre-headless)."),
}


def get_runtime(name: str) -> type[Runtime]:
    if name not in _KNOWN:
        raise KeyError(f"unknown runtime {name!r}; available: {', '.join(sorted(_KNOWN))}")
    module, cls, hint = _KNOWN[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as err:
        raise RuntimeError(f"runtime {name!r} is not available: {err}. {hint}") from None


__all__ = ["get_runtime", "Runtime", "AgentHandle", "AgentSpec", "Capabilities"]
