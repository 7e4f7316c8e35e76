"""The agents' fork server: one host process that has imported torch and the agent code, from which
every forked agent starts (the local runtime's ``start_method: forkserver``, the docker runtime's
``agents: forked``), so start-up costs a fork and torch's pages are shared copy-on-write. The local
runtime forks its evaluator there too (``ensure_server``).
"""
from __future__ import annotations

import multiprocessing as mp
from typing import Optional

from ...device_agent.forked import agent_main
from ...nomain import without_main
from ...procs import children_shielded
from .base import AgentSpec

# What the fork server imports once, so forked agents share it copy-on-write. Everything a child
# touches must be here: the target's module (device_agent.forked, which imports nothing heavy — not
# pandas, as the local runtime does through rundir) and the CLI, which multiprocessing re-imports in each
# child as its __main__. Before the target moved out of this module, each agent imported pandas and
# pyarrow itself: ~50 MiB private memory per agent.
PRELOAD = ["torch", "numpy", "zmq", "edgebed.device_agent.agent", "edgebed.device_agent.protocol",
           "edgebed.device_agent.policies", "edgebed.device_agent.trainer",
           "edgebed.device_agent.link", "edgebed.device_agent.forked",
           "edgebed.data", "edgebed.models", "edgebed.scenario", "edgebed.cli",
           "edgebed.device_agent.pacing", "edgebed.timing", "edgebed.ps.evaluator",
           "edgebed.procs", "edgebed.device_agent.cow"]   # last: freezes the GC so preloaded pages stay shared

AGENT_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def fork_agent(spec: AgentSpec, log_path: str, env: dict, prepare: Optional[tuple] = None):
    """Start one agent forked from the torch-preloaded fork server; returns the started Process.

    ``prepare=(fn, kwargs)`` runs in the child first — the docker runtime's ``agents: forked`` mode
    passes ``(nsjoin.enter, nsjoin.target(pid))`` to enter a container's network namespace and cgroups;
    ``fn``'s module joins the preload (before the last entry, which freezes the GC), so no runtime
    needs to be named here."""
    extra = [prepare[0].__module__] if prepare is not None else []
    ctx = mp.get_context("forkserver")
    p = ctx.Process(target=agent_main, name=f"edgebed-agent-{spec.device}",
                    args=(spec.ps_address, spec.device, log_path,
                          {**AGENT_ENV, **env, **spec.environment()}, prepare))
    ensure_server(extra)
    with without_main():   # the child runs agent_main, never the user's script again (nomain.py)
        p.start()
    return p


def ensure_server(extra: tuple = ()) -> None:
    """Start the fork server with ``PRELOAD`` (and ``extra`` modules) unless it runs already (a
    running one keeps what it preloaded: a process starts it once)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD[:-1], *extra, PRELOAD[-1]])
    # The fork server (and the resource tracker) start with the group signals blocked and keep them
    # so: a Ctrl-C while it imports torch printed its traceback, a group SIGTERM/SIGHUP killed it —
    # and every agent with it. Its children unblock them (device_agent.forked.agent_main).
    from multiprocessing import forkserver
    with children_shielded():
        forkserver.ensure_running()
