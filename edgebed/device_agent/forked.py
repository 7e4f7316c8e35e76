"""Entry point of an agent forked from the fork server (local runtime; docker ``agents: forked``).

Kept apart from the runtimes on purpose: multiprocessing imports the target's module in every child,
so this module imports nothing the fork server has not preloaded (see ``PRELOAD`` in
``emulator/runtimes/forkserver.py``).
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable, Optional

from ..procs import die_with_parent, drop_inherited_lifelines, leave_group


def agent_main(ps_address: str, device: int, log_path: str, env: dict,
               prepare: Optional[tuple[Callable[..., None], dict]] = None) -> None:
    """Entry point of a forked agent: own session, own log, one torch thread; dies with the fork
    server, which dies with the engine (its alive pipe closes), whatever ended the engine.
    ``prepare=(fn, kwargs)`` runs first, before any socket or thread (docker's forked agents enter
    their container: ``nsjoin.enter``)."""
    die_with_parent()
    drop_inherited_lifelines()
    # own session; the fork server's blocked group signals unblocked, Ctrl-C ignored; a SIGTERM that
    # came before (the engine's terminate() of a device still starting) still ends it
    leave_group(honour=(signal.SIGTERM,))
    if prepare:
        fn, kwargs = prepare
        fn(**kwargs)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.update(env)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))   # Ctrl-C stays ignored: the engine's to handle
    import zmq
    from .agent import run_agent
    code = run_agent(ps_address, device)
    zmq.Context.instance().term()   # delivers what is queued (the Bye) within the sockets' linger
    sys.exit(code)
