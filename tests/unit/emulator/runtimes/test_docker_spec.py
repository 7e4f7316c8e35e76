"""Docker runtime's pure parts: CPU quota per class, run ids, spec validation (no engine needed)."""
from pathlib import Path

import pydantic
import pytest

from edgebed.emulator.runtimes.docker.clean import run_id_of
from edgebed.emulator.runtimes.docker.runtime import DockerRuntime, DockerSpec
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


def test_paced_devices_get_the_same_quota_and_keep_their_slowdown(tmp_path):
    """With timing.pacing the agent enforces the slowdown with its compute budget; a quota of
    base_cpus / slowdown on top would make every slow-class step overrun."""
    from edgebed.emulator.welcome import welcome_config
    sc = scenario({"base_cpus": 0.8}).model_copy(update={"timing": parse_scenario({
        "name": "t", "workers": {"n": 1}, "stop": {"updates": 1}, "timing": {"pacing": True}}).timing})
    rt = DockerRuntime(sc, tmp_path)
    assert rt.cpus_of("fast") == rt.cpus_of("slow") == 0.8
    paced = welcome_config(sc, 3, "top-c-per-layer", rt.applied(), {"pacing": True})
    unpaced = welcome_config(scenario(), 3, "top-c-per-layer", rt.applied())
    assert paced.speed_class["slowdown"] == 4 and unpaced.speed_class["slowdown"] == 1.0


@pytest.mark.parametrize("kind", ["no socket file", "a stale socket file"])
def test_an_engine_that_does_not_answer_is_a_clear_problem_and_leaks_no_socket(kind, tmp_path, monkeypatch):
    """The docker SDK drops the socket of a refused connect unclosed; a machine whose dockerd is down
    (a stale /var/run/docker.sock, as after a reboot) made the runtime contract tests fail on the
    ResourceWarning. Every way edgebed reaches an engine goes through one probe that closes it."""
    import gc
    import socket
    import warnings

    path = tmp_path / "docker.sock"
    if kind == "a stale socket file":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(path))            # the file stays, nothing listens: connect is refused
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    from edgebed.emulator.runtimes.docker import clean, engine
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        problems = DockerRuntime(scenario(), tmp_path).check()
        with pytest.raises(engine.EngineUnreachable, match=str(path)):
            clean.leftovers("r")
        gc.collect()
    assert any(f"the Docker engine does not answer ({path}:" in p and "make provision" in p
               for p in problems), problems
