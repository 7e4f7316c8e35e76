"""Suite-wide fixtures."""
import multiprocessing.forkserver
import os
import signal
from pathlib import Path

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


# `make test` runs every test not marked `measures` on all cores at once (pytest-xdist, --dist
# loadgroup), then the `measures` tests (rates, quotas, shaping, pacing) alone. Under loadgroup a test
# without a group may go to any worker, so each integration and system module is kept whole on one
# worker: its module and class fixtures (a live run, a Spark session) are made once and its tests keep
# their order. The modules that drive the docker engine or the swarm share one group, "engines" (the
# contract tests' engine-backed handles are in it too), so no two of them use the engine at once.
ENGINE_MODULES = {"test_clean_all", "test_docker_compose", "test_docker_engine", "test_docker_images",
                  "test_docker_runtime", "test_docker_teardown_scale", "test_swarm_runtime"}
_WHOLE = {"integration", "system"}


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if item.get_closest_marker("xdist_group") or path.parent.name not in _WHOLE:
            continue
        group = "engines" if path.stem in ENGINE_MODULES else path.stem
        item.add_marker(pytest.mark.xdist_group(group))
