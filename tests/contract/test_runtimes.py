"""Contract of Runtime: every registered runtime declares what it can do and refuses what it can't.

Starting agents is covered per runtime by the integration and system tests (local, sim, docker,
spark); here only what needs no process, container or JVM."""
import pytest

from edgebed.emulator.runtimes import RUNTIMES, get_runtime
from edgebed.emulator.runtimes.base import Capabilities, Runtime
from edgebed.scenario import ScenarioError, parse_scenario

LEVELS = {"kernel", "app", "model", "none"}


def scenario(runtime: str, **link):
    return parse_scenario({"name": "c", "workers": {"n": 2, "classes": [{"name": "a", "share": 1, "uplink": link}]},
                           "stop": {"updates": 5}, "runtime": {"name": runtime}})


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_declares_itself(name, tmp_path):
    cls = get_runtime(name)
    assert issubclass(cls, Runtime) and cls.name == name
    caps = cls.capabilities
    assert isinstance(caps, Capabilities)
    assert {caps.link_rate, caps.link_delay, caps.link_jitter, caps.link_loss} <= LEVELS
    applied = Runtime.applied(cls.__new__(cls))   # the declared part; runtimes add their details
    assert {"link_rate", "link_delay", "link_jitter", "link_loss", "cpu_quota", "freeze"} <= set(applied)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_refuses_link_properties_it_cannot_apply(name, tmp_path):
    cls = get_runtime(name)
    caps = cls.capabilities
    # The runtime's own check(): its extra probes (root, Docker engine, Spark slots) may add problems,
    # but a link property is refused exactly when the runtime declares it can't apply it.
    problems = cls(scenario(name, rate="1mbit", delay="10ms", jitter="1ms", loss="1%"), tmp_path).check()
    for prop in ("rate", "delay", "jitter", "loss"):
        refused = any(f"uplink.{prop}" in p for p in problems)
        assert refused == (getattr(caps, f"link_{prop}") == "none"), (name, prop, problems)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_refuses_curve_unless_declared(name, tmp_path):
    cls = get_runtime(name)
    sc = parse_scenario({"name": "c", "workers": {"n": 2}, "stop": {"updates": 5},
                         "runtime": {"name": name}, "security": {"curve": True}})
    refused = any(p.startswith("security.curve") for p in cls(sc, tmp_path).check())
    assert refused == (not cls.capabilities.curve)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_declares_transport_and_clock(name, tmp_path):
    runtime = get_runtime(name)(scenario(name), tmp_path)
    wall, virtual = runtime.clock.now()
    assert wall >= 0
    assert (virtual == virtual) == runtime.clock.virtual   # a virtual time only on a virtual clock
    assert callable(runtime.transport)


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_applied_reports_its_levels(name, tmp_path):
    """What goes into the manifest comes from the runtime itself (probes included, e.g. docker's qdiscs)."""
    runtime = get_runtime(name)(scenario(name), tmp_path)
    applied = runtime.applied()
    caps = runtime.capabilities
    for prop in ("link_rate", "link_delay", "link_jitter", "link_loss"):
        assert applied[prop] == getattr(caps, prop) and applied[prop] in LEVELS
    assert applied["cpu_quota"] == caps.cpu_quota and applied["freeze"] == caps.freeze


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_runtime_section_is_validated(name):
    sc = parse_scenario({"name": "c", "workers": {"n": 2}, "stop": {"updates": 5},
                         "runtime": {"name": name, name: {"no_such_option": 1}}})
    with pytest.raises(ScenarioError, match=f"runtime.{name}.no_such_option"):
        get_runtime(name)(sc, "/nonexistent")


def test_the_scenario_accepts_exactly_the_registered_runtimes():
    """The scenario (below the emulator) spells the runtime names, the registry maps them to classes:
    a name in one and not the other would be a runtime nobody can choose or one that can't start."""
    from typing import get_args

    from edgebed.scenario import RuntimeSpec
    assert set(get_args(RuntimeSpec.model_fields["name"].annotation)) == set(RUNTIMES)
