"""The exported compose project validates with docker compose and runs the scenario."""
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from edgebed.emulator import compose
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


@pytest.mark.docker
@pytest.mark.root
def _ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """A failed compose command fails the test with its command line, exit code and output."""
    assert r.returncode == 0, (f"{' '.join(map(str, r.args))} exited {r.returncode}\n"
                               f"stderr:\n{r.stderr}\nstdout:\n{r.stdout}")
    return r


@pytest.mark.slow
@pytest.mark.timeout(280)
def test_compose_project_runs_the_scenario(tmp_path):
    require_docker()
    cmd = compose_cmd()
    require(bool(cmd), "docker compose or docker-compose", "apt-get install docker-compose (make provision)")
    sc = parse_scenario({"name": "compose-run", "seed": 2, "model": {"name": "mlp"},
                         "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01},
                         "workers": {"n": 4, "classes": [
                             {"name": "fast", "share": 0.5, "uplink": {"rate": "1mbit"}},
                             {"name": "slow", "share": 0.5, "slowdown": 2,
                              "uplink": {"rate": "1mbit", "delay": "20ms"}}]},
                         "stop": {"updates": 100, "wall_time": "150s"}, "eval": {"every": 100, "test_samples": 300},
                         "runtime": {"name": "docker"}})
    proj = tmp_path / "proj"
    compose.export_compose(sc, proj, offline=True)
    name = f"edgebedtest{uuid.uuid4().hex[:8]}"
    base = [*cmd, "-p", name]
    try:
        _ok(subprocess.run([*base, "up", "-d"], cwd=proj, capture_output=True, text=True, timeout=120))
        ps_id = _ok(subprocess.run([*base, "ps", "-q", "ps"], cwd=proj, capture_output=True,
                                   text=True)).stdout.strip()
        code = subprocess.run(["docker", "wait", ps_id], capture_output=True, text=True, timeout=200).stdout.strip()
        logs = subprocess.run([*base, "logs", "--no-color", "agent-0000"], cwd=proj, capture_output=True,
                              text=True).stdout
    finally:
        subprocess.run([*base, "down", "-v", "--remove-orphans"], cwd=proj, capture_output=True, timeout=120)
    assert code == "0"
    assert "eth0 egress shaped: tbf rate=1000000" in logs
    runs = list((proj / "runs").glob("compose-run-*"))
    assert len(runs) == 1
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["updates"] == 100
    assert summary["devices"]["said_hello"] == 4
