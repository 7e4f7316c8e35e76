"""The exported compose project validates with docker compose and runs the scenario."""
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from edgebed.emulator.runtimes.docker import compose, images
from edgebed.scenario import parse_scenario
from tests.capabilities import require, require_docker

ROOT = Path(__file__).resolve().parents[2]


def compose_cmd() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return []


@pytest.mark.docker
@pytest.mark.timeout(60)
def test_committed_example_passes_compose_config():
    cmd = compose_cmd()
    require(bool(cmd), "docker compose or docker-compose", "apt-get install docker-compose (make provision)")
    r = subprocess.run([*cmd, "config", "-q"], cwd=ROOT / "compose" / "quickstart", capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _run(cmd, cwd, timeout=120) -> subprocess.CompletedProcess:
    """Run a compose command; a failure says which command and what it printed."""
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-3000:]}\n{out.stdout[-1000:]}"
    return out


@pytest.mark.docker
@pytest.mark.timeout(60)
def test_a_fresh_export_passes_compose_config_without_this_hosts_files(tmp_path):
    cmd = compose_cmd()
    require(bool(cmd), "docker compose or docker-compose", "apt-get install docker-compose (make provision)")
    sc = parse_scenario({"name": "portable", "workers": {"n": 2, "classes": [
        {"name": "a", "share": 0.5, "uplink": {"rate": "1mbit"}, "downlink": {"rate": "4mbit"}},
        {"name": "b", "share": 0.5}]}, "stop": {"updates": 10}, "runtime": {"name": "docker"}})
    path = compose.export_compose(sc, tmp_path / "proj")
    cfg = _run([*cmd, "-f", path.name, "config"], cwd=path.parent).stdout
    assert "context:" in cfg and str(ROOT) not in cfg


@pytest.mark.docker
@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(280)
def test_compose_project_runs_the_scenario(tmp_path):
    """Runs the exported project here. The image from build/Dockerfile needs a registry this host
    can't reach, so the test exports with --offline: the portable docker-compose.yml plus an
    override naming this host's offline image and mounts (what a user without a registry does), and
    imports that image first, so it passes run alone on an engine that has no edgebed image."""
    require_docker()
    cmd = compose_cmd()
    require(bool(cmd), "docker compose or docker-compose", "apt-get install docker-compose (make provision)")
    sc = parse_scenario({"name": "compose-run", "seed": 2, "model": {"name": "mlp"},
                         "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01},
                         "workers": {"n": 4, "classes": [
                             {"name": "fast", "share": 0.5, "uplink": {"rate": "1mbit"},
                              "downlink": {"rate": "20mbit"}},
                             {"name": "slow", "share": 0.5, "slowdown": 2,
                              "uplink": {"rate": "1mbit", "delay": "20ms"}}]},
                         "stop": {"updates": 100, "wall_time": "150s"}, "eval": {"every": 100, "test_samples": 300},
                         "runtime": {"name": "docker"}})
    proj = tmp_path / "proj"
    compose.export_compose(sc, proj, offline=True)
    # The override names this host's offline image; on a fresh engine it does not exist yet and compose
    # would fall back to building build/Dockerfile (a registry). Make it, as `compose export --offline` does.
    images.build("offline")
    name = f"edgebedtest{uuid.uuid4().hex[:8]}"
    base = [*cmd, "-p", name]
    try:
        _run([*base, "up", "-d"], cwd=proj)
        ps_id = _run([*base, "ps", "-q", "ps"], cwd=proj).stdout.strip()
        code = subprocess.run(["docker", "wait", ps_id], capture_output=True, text=True, timeout=200).stdout.strip()
        logs = _run([*base, "logs", "--no-color", "agent-0000"], cwd=proj).stdout
        ps_logs = _run([*base, "logs", "--no-color", "ps"], cwd=proj).stdout
    finally:
        subprocess.run([*base, "down", "-v", "--remove-orphans"], cwd=proj, capture_output=True, timeout=120)
    assert code == "0", f"the PS container exited {code}; its log:\n{ps_logs[-3000:]}"
    assert "eth0 egress shaped: tbf rate=1000000" in logs, logs[-2000:]
    assert "eth0 ingress shaped: tbf on ifb-down rate=20000000" in logs, logs[-2000:]
    runs = list((proj / "runs").glob("compose-run-*"))
    assert len(runs) == 1, ps_logs[-3000:]
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["updates"] == 100
    assert summary["devices"]["said_hello"] == 4
