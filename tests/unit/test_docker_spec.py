"""Docker runtime's pure parts: CPU quota per class, run ids, spec validation (no engine needed)."""
from pathlib import Path

import pydantic
import pytest

from edgebed.emulator.runtimes.docker.runtime import DockerRuntime, DockerSpec, run_id_of
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(30)


def scenario(docker=None):
    return parse_scenario({"name": "s", "workers": {"n": 4, "classes": [
        {"name": "fast", "share": 0.5}, {"name": "slow", "share": 0.5, "slowdown": 4}]},
        "stop": {"updates": 1}, "runtime": {"name": "docker", "docker": docker or {}}})


def test_cpus_derived_from_slowdown_unless_given(tmp_path):
    rt = DockerRuntime(scenario({"base_cpus": 0.8}), tmp_path)
    assert rt.cpus_of("fast") == 0.8 and rt.cpus_of("slow") == pytest.approx(0.2)
    rt = DockerRuntime(scenario({"cpus": {"slow": 0.5}}), tmp_path)
    assert rt.cpus_of("slow") == 0.5 and rt.cpus_of("fast") == 1.0


def test_capabilities_follow_the_kernel(tmp_path):
    rt = DockerRuntime(scenario(), tmp_path)
    caps = rt.capabilities
    assert caps.freeze == "pause" and caps.cpu_quota
    from edgebed.emulator.runtimes.docker import links
    netem = links.kernel_qdiscs()["netem"]
    assert caps.link_delay == caps.link_jitter == caps.link_loss == ("kernel" if netem else "app")


def test_spec_rejects_unknown_keys():
    with pytest.raises(pydantic.ValidationError):
        DockerSpec.model_validate({"imagee": "x"})


def test_run_id_is_docker_safe():
    assert run_id_of(Path("/runs/quick start-20250101-120000")) == "quick-start-20250101-120000"
    assert len(run_id_of(Path("/r/" + "x" * 100))) <= 48
