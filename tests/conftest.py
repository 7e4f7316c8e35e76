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
numerics.apply("portable")   # now, before any test: MKL reads its pins at its first call (numerics._start_mkl)

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


# `make test` runs every test not marked `measures` on all cores at once (pytest-xdist), then the
# `measures` tests (rates, quotas, shaping, pacing) alone. On all cores each integration and system
# module is kept whole on one worker, in file order: its module and class fixtures (a live run, a
# Spark session) are made once and its tests keep their order (the hostile-peer modules end their
# live run last). The modules that drive the docker engine or the swarm, and the contract tests of
# the engine-backed handles, make one group, "engines", so no two of them use the engine at once.
# Other tests go wherever a worker is free. (xdist's own `xdist_group` mark does nothing under pytest
# 9 — xdist 3.8.0 renames `item._nodeid`, which pytest 9 no longer reads — so the groups are made
# here, by path, through xdist's scheduler hook.)
ENGINE_MODULES = {"test_clean_all", "test_docker_compose", "test_docker_engine", "test_docker_images",
                  "test_docker_runtime", "test_docker_teardown_scale", "test_swarm_runtime",
                  "test_agent_handles"}
_WHOLE = {"integration", "system"}


def group_of(nodeid: str) -> str:
    """The unit of work a worker takes whole: "engines", a module's path, or the test itself."""
    path = Path(nodeid.split("::", 1)[0])
    if path.stem in ENGINE_MODULES:
        return "engines"
    return str(path) if path.parent.name in _WHOLE else nodeid


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log) if config.getvalue("dist") == "loadgroup" else None
