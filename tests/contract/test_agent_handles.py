"""Contract of AgentHandle (mirrors subprocess.Popen): every handle class the engine can be given
behaves the same for poll / wait / freeze / terminate / kill.

Local processes, virtual devices and compose-started agents are real; the Spark handle runs over a
stage whose Spark job is replaced by an event (a real barrier stage needs a JVM: covered by
tests/system/test_spark_runtime.py). Docker's two handles run real device agents in real containers
of a real ``DockerRuntime`` (markers docker + root: skipped without them on a laptop, a failure in CI);
the swarm's two run a real task on the test swarm, through the engine or through its node's agent.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import edgebed.emulator.runtimes as runtimes
from edgebed.emulator.runtimes.base import AgentHandle, AgentSpec
from tests.capabilities import require_docker, require_root

# one xdist worker runs them all (make test runs this directory in parallel): the docker and swarm
# handles share one engine and one test swarm, which the first of them may still be bringing up
pytestmark = pytest.mark.timeout(60)   # on one worker with the other engine tests: tests/conftest.py


def _local(request):
    from edgebed.emulator.runtimes.local import ProcessHandle
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    return ProcessHandle(3, proc)


def _sim(request):
    from edgebed.emulator.runtimes.sim import SimHandle, _Device
    dev = _Device(3, {}, b"sim-3", None, None, np.random.default_rng(0), machine=None)
    return SimHandle(dev)


def _compose(request):
    from edgebed.emulator.runtimes.docker.compose import _ExternalHandle
    return _ExternalHandle(3)


def _spark(request):
    from edgebed.emulator.runtimes.spark.barrier import BarrierStage, SparkAgentHandle
    stage = BarrierStage.__new__(BarrierStage)   # the Spark job: cancelling it ends the stage

    class Job:
        def cancelJobGroup(self, group):
            stage.done.set()
    stage.sc, stage.group, stage.done, stage.results = Job(), "g", threading.Event(), {}
    stage.cancel_signal, stage.error = None, None
    return SparkAgentHandle(3, stage)


def _waiting_agent(request, rt, ps_host):
    """Device 3 started by the container runtime ``rt``, pointed at a port nobody listens on (on the
    host ``ps_host()`` names once the PS side is bound), so it keeps waiting for its PS."""
    request.addfinalizer(rt.cleanup)
    rt.ps_bind()
    with socket.socket() as s:
        s.bind((ps_host(), 0))
        port = s.getsockname()[1]
    [h] = rt.start([AgentSpec(3, "default", f"tcp://{ps_host()}:{port}")])
    return h


def _docker(agents: str):
    """A device agent (the real one, waiting for a PS that is not there) started by a real
    DockerRuntime: in its container, or forked into the container's namespaces and cgroups."""
    def make(request):
        require_docker()
        require_root()
        from edgebed.emulator.runtimes.docker.runtime import DockerRuntime
        from edgebed.scenario import parse_scenario
        sc = parse_scenario({"name": "handles", "workers": {"n": 4}, "stop": {"updates": 10},
                             "runtime": {"name": "docker", "docker": {"agents": agents}}})
        rt = DockerRuntime(sc, Path(tempfile.mkdtemp(prefix="edgebed-handles-")))
        return _waiting_agent(request, rt, lambda: rt.gateway)
    return make


def _swarm(agents: str):
    """A device agent as a task of a real SwarmRuntime on the two-node test swarm (.ci/swarm-up),
    with the link agents in the engine or as the global service of node agents."""
    def make(request):
        from tests.capabilities import require_swarm
        env = require_swarm()
        from edgebed.emulator.runtimes.swarm.runtime import SwarmRuntime
        from edgebed.scenario import parse_scenario
        extra = {"agents": "service", "node_socket": "/run/edgebed-swarm/node-{{.Node.ID}}.sock"} \
            if agents == "service" else {}
        sc = parse_scenario({"name": "handles", "workers": {"n": 4}, "stop": {"updates": 10},
                             "runtime": {"name": "swarm", "swarm": {"manager": env["MANAGER"],
                                                                    "nodes": [env["MANAGER"], env["WORKER"]], **extra}}})
        rt = SwarmRuntime(sc, Path(tempfile.mkdtemp(prefix="edgebed-handles-")))
        return _waiting_agent(request, rt, lambda: rt.ps_host)
    return make


# name → (factory, the handle class it makes, marks); every AgentHandle class of edgebed is here.
HANDLES = {
    "local": (_local, "ProcessHandle", ()),
    "sim": (_sim, "SimHandle", ()),
    "compose": (_compose, "_ExternalHandle", ()),
    "spark": (_spark, "SparkAgentHandle", ()),
    "docker-container": (_docker("container"), "ContainerHandle", (pytest.mark.docker, pytest.mark.root)),
    "docker-forked": (_docker("forked"), "ForkedAgentHandle", (pytest.mark.docker, pytest.mark.root)),
    "swarm": (_swarm("engine"), "SwarmTaskHandle", (pytest.mark.docker, pytest.mark.root)),
    "swarm-service": (_swarm("service"), "RemoteTaskHandle", (pytest.mark.docker, pytest.mark.root)),
}


@pytest.fixture(params=[pytest.param(name, marks=marks) for name, (_, _, marks) in sorted(HANDLES.items())])
def handle(request):
    make, cls, _ = HANDLES[request.param]
    h = make(request)
    assert type(h).__name__ == cls
    yield h
    if h.poll() is None:
        h.kill()


def _handle_classes() -> set[str]:
    """Every AgentHandle subclass defined in edgebed's runtimes (all their modules imported)."""
    for mod in pkgutil.walk_packages(runtimes.__path__, runtimes.__name__ + "."):
        try:
            importlib.import_module(mod.name)
        except ImportError:   # an optional backend's module (pyspark, docker): its handle stays listed
            pass
    seen, todo = set(), [AgentHandle]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("edgebed.") and sub.__name__ not in seen:
                if not inspect.isabstract(sub):   # a shared base (PolledHandle) is tested through its subclasses
                    seen.add(sub.__name__)
                todo.append(sub)
    return seen


def test_every_handle_class_is_under_contract():
    assert _handle_classes() == {cls for _, cls, _ in HANDLES.values()}


def _signal_of(code):
    """The signal an exit code says ended the agent: Popen's ``-n``, or ``128 + n`` (what a container
    reports, and what the agent's own SIGTERM handler exits with: device_agent/__main__.py)."""
    if code is not None and code < 0:
        return -code
    return code - 128 if code is not None and code > 128 else None


def _ended(h: AgentHandle, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while h.poll() is None and time.monotonic() < deadline:
        h.wait(0.1)
    return h.poll()


def test_running_handle_has_no_exit_code(handle):
    assert isinstance(handle, AgentHandle) and handle.device == 3
    assert handle.poll() is None
    assert handle.wait(0.05) is None


def test_frozen_agent_is_still_running_and_can_be_killed(handle):
    handle.freeze()
    assert handle.poll() is None       # fail-stop: silent, not ended
    handle.kill()
    code = _ended(handle)
    assert code is not None and code != 0


def test_terminate_ends_with_the_signal(handle):
    handle.terminate()
    code = _ended(handle)
    assert _signal_of(code) == signal.SIGTERM, code
