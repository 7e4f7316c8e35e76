"""Swarm runtime's parts that need no swarm: refusals before anything starts, the slot→device gate,
CPU quotas per class, the manifest's statement of what is applied where."""
import os
import subprocess
import sys

import pytest

from edgebed.emulator.runtimes import get_runtime
from edgebed.emulator.runtimes.swarm.runtime import DEVICE, GATE, SwarmRuntime
from edgebed.scenario import ScenarioError, parse_scenario

pytestmark = pytest.mark.timeout(30)


def scenario(swarm=None):
    return parse_scenario({"name": "s", "workers": {"n": 4, "classes": [
        {"name": "fast", "share": 0.5, "uplink": {"rate": "1mbit", "delay": "10ms"}},
        {"name": "slow", "share": 0.5, "slowdown": 4}]},
        "stop": {"updates": 1}, "runtime": {"name": "swarm", "swarm": swarm or {}}})


def test_registered_and_spec_checked(tmp_path):
    assert get_runtime("swarm") is SwarmRuntime
    with pytest.raises(ScenarioError, match="runtime.swarm"):
        SwarmRuntime(scenario({"managr": "x"}), tmp_path)


def test_unreachable_manager_and_unknown_class_are_refused_with_what_to_do(tmp_path):
    rt = SwarmRuntime(scenario({"manager": f"unix://{tmp_path}/none.sock", "cpus": {"medium": 0.5},
                                "class_constraints": {"tiny": ["node.role==worker"]}}), tmp_path)
    problems = "\n".join(rt.check())
    assert "does not answer" in problems and "runtime.swarm.manager" in problems
    assert "runtime.swarm.cpus.medium: no speed class named 'medium'" in problems
    assert "runtime.swarm.class_constraints.tiny" in problems


def test_quotas_per_class_and_manifest_says_delay_is_app_level(tmp_path):
    rt = SwarmRuntime(scenario({"base_cpus": 0.8}), tmp_path)
    assert rt.cpus_of("fast") == 0.8 and rt.cpus_of("slow") == pytest.approx(0.2)
    applied = rt.applied()
    assert applied["link_delay"] == "app" and applied["freeze"] == "pause" and applied["cpu_quota"]
    assert "application level" in applied["warning"]


def test_gate_maps_slot_to_device_and_waits(tmp_path):
    """The task's first process: slot 3 of a class holding devices 5,6,7 runs as device 7, only once
    the gate file exists (here redirected to a temporary path)."""
    gate = GATE.replace("/tmp/edgebed-gate", str(tmp_path / "gate"))
    cmd = [sys.executable, "-c", gate, "5,6,7", sys.executable, "-c", f"print('device', {DEVICE!r})"]
    proc = subprocess.Popen(cmd, env={**os.environ, "EDGEBED_SLOT": "3"}, stdout=subprocess.PIPE, text=True)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.5)                       # gate closed: still waiting
    (tmp_path / "gate").touch()
    out, _ = proc.communicate(timeout=10)
    assert out.strip() == "device 7"


def test_a_registry_image_absent_from_a_node_is_left_for_the_node_to_pull(tmp_path):
    """`runtime.swarm.image` from a registry: a node that does not have it yet pulls it when Swarm
    starts the task; the runtime must not fail inspecting it first."""
    import docker

    class Images:
        def get(self, name):
            raise docker.errors.ImageNotFound(f"no such image: {name}")

    class Node:
        client = type("Client", (), {"images": Images()})()
    rt = SwarmRuntime(scenario({"image": "registry.example/edgebed/agent:1"}), tmp_path)
    info = rt._image_on(Node.client)
    assert (info.name, info.kind, info.python, info.mounts) == ("registry.example/edgebed/agent:1", "dockerfile",
                                                                "python", {})


def test_service_and_network_names_are_dns_components_whatever_the_run_directory(tmp_path):
    """Swarm refuses '_' and '.' in service and network names ("must be valid as a DNS name
    component"); a run directory's name may hold both, its labels keep them."""
    run = tmp_path / "my_run.v2-20261126-170000"
    run.mkdir()
    rt = SwarmRuntime(scenario(), run)
    assert rt.dns_id == "my-run-v2-20261126-170000"
    assert rt.run_id == "my_run.v2-20261126-170000" and rt.label.endswith("=" + rt.run_id)


def test_a_run_directory_ending_in_underscore_still_gives_valid_names(tmp_path):
    """tempfile.mkdtemp names may end in '_': the name must not then end in '-' (Swarm refuses it)."""
    run = tmp_path / "edgebed-handles-nf6o6hy_"
    run.mkdir()
    rt = SwarmRuntime(scenario(), run)
    assert rt.dns_id == "edgebed-handles-nf6o6hy"


def test_the_node_agent_stays_light():
    """One node agent runs on every node for the whole run: it must not import torch or pandas (the
    latter came in through edgebed.rundir once and doubled its memory, 68 → 141 MiB RSS)."""
    code = ("import sys, edgebed.emulator.runtimes.swarm.node_agent\n"
            "print(sorted(m for m in ('torch', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
