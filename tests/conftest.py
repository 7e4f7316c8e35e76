"""Suite-wide fixtures."""
import multiprocessing.forkserver
import os
import signal

import pytest

from edgebed import numerics

# The whole suite computes under the portable numerics profile (edgebed/numerics.py), set before any
# torch operation runs in this process, so in-process runs (the golden tables) and every child
# process give the same bits on every x86-64 host with AVX2.
os.environ.update(numerics.environment("portable"))

# Started in the background by a non-interactive shell (`make test &` in a script), pytest inherits
# SIGINT ignored, and so would every run it starts: Python then installs no KeyboardInterrupt
# handler, and the tests that send a run SIGINT wait for nothing. With a handler here (not "ignore"),
# the processes the tests start get the default again, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _stop_forkserver():
    """The local runtime's fork server (torch preloaded) would otherwise outlive pytest, holding its
    stdout open — a pipe such as `pytest | tee` then never sees EOF."""
    yield
    multiprocessing.forkserver._forkserver._stop()
