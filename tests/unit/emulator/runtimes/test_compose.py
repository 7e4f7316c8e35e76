"""Compose export: structure of the generated project and the committed example kept in sync."""
import sys
from pathlib import Path

import pytest
import yaml

from edgebed.emulator.runtimes.docker import compose
from edgebed.scenario import load_scenario, parse_scenario

pytestmark = pytest.mark.timeout(30)
ROOT = Path(__file__).resolve().parents[4]


def small():
    return parse_scenario({"name": "c", "workers": {"n": 3, "classes": [
        {"name": "fast", "share": 2 / 3, "uplink": {"rate": "2mbit"}, "downlink": {"rate": "8mbit"}},
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
    assert s["agent-0000"]["command"][s["agent-0000"]["command"].index("--down-rate") + 1] == "8000000"
    assert s["agent-0000"]["cap_add"] == ["NET_ADMIN"]
    assert s["agent-0002"]["command"][2] == "edgebed.device_agent" and "cap_add" not in s["agent-0002"]
    assert "tcp://ps:5555" in s["agent-0001"]["command"]
    assert data["networks"]["edgebed"]["internal"] is True
    # the PS reads back exactly the scenario
    assert load_scenario(tmp_path / "scenario.yaml") == sc


def test_the_export_is_portable_nothing_from_this_host(tmp_path):
    sc = small()
    path = compose.export_compose(sc, tmp_path / "proj")
    text = path.read_text()
    for host_path in {str(ROOT), sys.prefix, sys.base_prefix, "/usr/", "/work/", "/root"}:
        assert host_path not in text, host_path
    data = yaml.safe_load(text)
    # every service builds the one image from the copied context: none tries to pull it
    assert all(s["build"] == {"context": "./build", "dockerfile": "Dockerfile"} for s in data["services"].values())
    assert len({s["image"] for s in data["services"].values()}) == 1
    build = tmp_path / "proj" / "build"
    assert (build / "Dockerfile").exists() and (build / "pyproject.toml").exists() and (build / "setup.py").exists()
    assert (build / "edgebed" / "ps" / "_fastpush.c").exists() and not list(build.rglob("*.so"))
    assert (build / "edgebed" / "device_agent" / "agent.py").exists()
    assert not list(build.rglob("__pycache__"))
    assert not (tmp_path / "proj" / "docker-compose.override.yml").exists()
    # the PS runs through the CLI verb, which exists
    from edgebed.cli import build_parser
    ps = data["services"]["ps"]["command"]
    assert ps[:3] == ["python", "-m", "edgebed.cli"]
    assert build_parser().parse_args(ps[3:]).func


def test_offline_puts_this_hosts_paths_in_the_override_only(tmp_path):
    sc = small()
    compose.export_compose(sc, tmp_path, offline=True)
    assert sys.prefix not in (tmp_path / "docker-compose.yml").read_text()
    over = yaml.safe_load((tmp_path / "docker-compose.override.yml").read_text())
    assert set(over["services"]) == {"ps", "agent-0000", "agent-0001", "agent-0002"}
    assert over["services"]["ps"]["command"][0].startswith(sys.prefix)


def test_the_printed_hint_names_a_compose_command_that_exists(tmp_path, monkeypatch):
    monkeypatch.setattr(compose, "compose_command", lambda: ["docker-compose"])
    assert "&& docker-compose up" in compose.run_hint(tmp_path)
    monkeypatch.setattr(compose, "compose_command", lambda: ["docker", "compose"])
    assert "&& docker compose up" in compose.run_hint(tmp_path)
    monkeypatch.setattr(compose, "compose_command", lambda: [])
    assert "neither is installed here" in compose.run_hint(tmp_path)


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
        "regenerate: python -c \"from edgebed.emulator.runtimes.docker import compose; from edgebed.scenario import load_scenario; compose.export_compose(load_scenario('scenarios/quickstart.yaml'), 'compose/quickstart', context='../..')\""
    assert compose.validate(yaml.safe_load(committed.read_text()), sc) == []
