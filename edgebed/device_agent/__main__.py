"""``python -m edgebed.device_agent --ps tcp://HOST:PORT --device N``: run one device agent."""
from __future__ import annotations

import argparse
import os
import signal
import sys


def on_sigterm(signum, frame) -> None:
    """SIGTERM ends the agent with 143 (128 + 15), as a process ended by it reads: ``sys.exit``, so
    what is queued (the Bye) still leaves — but not inside an import. There the SystemExit can come
    out of a module's initialisation as another error (exit 1: tests/contract/test_agent_handles.py
    once saw it on swarm) or abort the process (torch's, imported after the numerics profile is set:
    SIGABRT, seen here). There it ends at once (``os._exit``), with what it queued unsent: the PS sees
    a device gone silent, as after a kill."""
    f = frame
    while f is not None:
        if f.f_code.co_filename.startswith("<frozen importlib"):
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(143)
        f = f.f_back
    sys.exit(143)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="edgebed.device_agent", description=__doc__)
    ap.add_argument("--ps", required=True, help="PS endpoint, e.g. tcp://127.0.0.1:5555")
    ap.add_argument("--device", type=int, required=True, help="device id 0..n-1")
    ap.add_argument("--attempt", type=int, default=None,
                    help="session attempt number (default: EDGEBED_ATTEMPT from the environment, else 0)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a PS reply")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    # A docker agent's gate blocks SIGTERM until this handler is up (it runs as PID 1, which drops
    # unhandled signals): a SIGTERM that came meanwhile is delivered now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    from .agent import run_agent
    import zmq
    try:
        code = run_agent(args.ps, args.device, args.attempt, timeout=args.timeout)
    except KeyboardInterrupt:
        return 130
    zmq.Context.instance().term()   # delivers what is queued (the Bye) within the sockets' linger
    return code


if __name__ == "__main__":
    sys.exit(main())
