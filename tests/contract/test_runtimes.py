"""Contract of Runtime: every registered runtime declares what it can do and refuses what it can't.

Starting agents is covered per runtime by the integration and system tests (local, sim, docker,
spark); here only what needs no process, container or JVM."""
import pytest

from edgebed.emulator.runtimes import _KNOWN, get_runtime
from edgebed.emulator.runtimes.base import Capabilities, Runtime
from edgebed.scenario import ScenarioError, parse_scenario

LEVELS = {"kernel", "app", "model", "none"}


def scenario(runtime: str, **link):
    return parse_scenario({"name": "c", "workers": {"n": 2, "classes": [{"name": "a", "share": 1, "uplink": link}]},
                           "stop": {"updates": 5}, "runtime": {"name": runtime}})


@pytest.mark.parametrize("name", sorted(_KNOWN))
def test_runtime_declares_itself(name, tmp_path):
    cls = get_runtime(name)
    assert issubclass(cls, Runtime) and cls.name == name
    caps = cls.capabilities
    assert isinstance(caps, Capabilities)
    assert {caps.link_rate, caps.link_delay, caps.link_jitter, caps.link_loss} <= LEVELS
    applied = Runtime.applied(cls.__new__(cls))   # the declared part; runtimes add their details
    assert {"link_rate", "link_delay", "link_jitter", "link_loss", "cpu_quota", "freeze"} <= set(applied)


@pytest.mark.parametrize("name", sorted(_KNOWN))
def test_runtime_refuses_link_properties_it_cannot_apply(name, tmp_path):
    cls = get_runtime(name)
    caps = cls.capabilities
    runtime = cls.__new__(cls)   # check() reads the scenario only: no engine, container or JVM
    runtime.scenario = scenario(name, rate="1mbit", delay="10ms", jitter="1ms", loss="1%")
    runtime.run_dir = tmp_path
    problems = Runtime.check(runtime)
    for prop in ("rate", "delay", "jitter", "loss"):
        refused = any(f"uplink.{prop}" in p for p in problems)
        assert refused == (getattr(caps, f"link_{prop}") == "none"), (name, prop, problems)


@pytest.mark.parametrize("name", sorted(_KNOWN))
def test_runtime_section_is_validated(name):
    sc = parse_scenario({"name": "c", "workers": {"n": 2}, "stop": {"updates": 5},
                         "runtime": {"name": name, name: {"no_such_option": 1}}})
    with pytest.raises(ScenarioError, match=f"runtime.{name}.no_such_option"):
        get_runtime(name)(sc, "/nonexistent")
