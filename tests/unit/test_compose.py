"""Compose export: structure of the generated project and the committed example kept in sync."""
from pathlib import Path

import pytest
import yaml

from edgebed.emulator.runtimes.docker import compose
from edgebed.scenario import load_scenario, parse_scenario

pytestmark = pytest.mark.timeout(30)
ROOT = Path(__file__).resolve().parents[2]


def small():
    return parse_scenario({"name": "c", "workers": {"n": 3, "classes": [
        {"name": "fast", "share": 2 / 3, "uplink": {"rate": "2mbit"}},
        {"name": "slow", "share": 1 / 3, "slowdown": 4}]},
        "stop": {"updates": 10}, "runtime": {"name": "docker", "docker": {"memory": "512m"}}})


def test_services_limits_and_init_step(tmp_path):
    sc = small()
    path = compose.export_compose(sc, tmp_path)
    data = yaml.safe_load(path.read_text())
    assert compose.validate(data, sc) == []
    s = data["services"]
    assert set(s) == {"ps", "agent-0000", "agent-0001", "agent-0002"}
    assert s["agent-0000"]["cpus"] == 1.0 and s["agent-0002"]["cpus"] == 0.25
    assert s["agent-0000"]["mem_limit"] == "512m"
    # shaped class: tc init step with NET_ADMIN, then the agent; unshaped class: the agent directly
    assert s["agent-0000"]["command"][2:4] == ["edgebed.emulator.runtimes.docker.links", "shape"]
    assert s["agent-0000"]["command"][s["agent-0000"]["command"].index("--rate") + 1] == "2000000"
    assert s["agent-0000"]["cap_add"] == ["NET_ADMIN"]
    assert s["agent-0002"]["command"][2] == "edgebed.device_agent" and "cap_add" not in s["agent-0002"]
    assert "tcp://ps:5555" in s["agent-0001"]["command"]
    assert data["networks"]["edgebed"]["internal"] is True
    # the PS reads back exactly the scenario
    assert load_scenario(tmp_path / "scenario.yaml") == sc


def test_validate_reports_problems():
    sc = small()
    data = compose.compose_dict(sc)
    del data["services"]["agent-0001"]
    data["networks"]["edgebed"]["internal"] = False
    problems = compose.validate(data, sc)
    assert any("2 agent services" in p for p in problems) and any("internal" in p for p in problems)


def test_committed_quickstart_example_is_current(tmp_path):
    sc = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    fresh = compose.export_compose(sc, tmp_path, context="../..")
    committed = ROOT / "compose" / "quickstart" / "docker-compose.yml"
    assert yaml.safe_load(committed.read_text()) == yaml.safe_load(fresh.read_text()), \
        "regenerate: python -m edgebed.emulator.runtimes.docker.compose export scenarios/quickstart.yaml compose/quickstart"
    assert compose.validate(yaml.safe_load(committed.read_text()), sc) == []
