"""Workers compute the virtual clock's device work ahead (emulator/runtimes/sim_pool.py) with the same bits.

For every update rule, compressor option and numerics profile the clock supports, a small run with
``runtime.sim.workers: 2`` writes the same tables, column for column, as the run in the clock's own
process. A worker that dies ends the run with an error naming it, at once; no worker outlives a run,
an interrupted one included.
"""
from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_sim_golden import TABLES, column_hashes

pytestmark = pytest.mark.slow   # every test starts worker processes that import torch (seconds each)

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "name": "workers", "seed": 11, "dataset": {"train_samples": 1200}, "model": {"name": "mlp"},
    "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
    "workers": {"n": 5, "classes": [
        {"name": "fast", "share": 0.6, "slowdown": 1, "think_time": "3ms"},
        {"name": "slow", "share": 0.4, "slowdown": 3, "think_time": {"dist": "exponential", "mean": "4ms"},
         "uplink": {"rate": "5mbit", "delay": "10ms", "jitter": "3ms", "loss": "1%"}}]},
    "failures": {"crash_probability": 0.005}, "stop": {"updates": 60},
    "eval": {"every": 30, "test_samples": 200}, "runtime": {"name": "sim", "sim": {}},
}
RESNET8 = {"name": "resnet20", "args": {"depth": 8, "width": 4, "in_channels": 1, "size": 28}}
CASES = {
    "asgd": {},
    "comp-asgd": {"algorithm": {"name": "comp-asgd", "c": 0.05}},
    "adacomp": {"algorithm": {"name": "adacomp", "c": 0.02}},
    "adacomp-ef-momentum-q8-compact": {"algorithm": {"name": "adacomp", "c": 0.02},
                                       "compression": {"error_feedback": True, "momentum": 0.9,
                                                       "quantize": "q8", "encoding": "compact"}},
    "comp-asgd-pull-delta-bf16": {"algorithm": {"name": "comp-asgd", "c": 0.05},
                                  "compression": {"pull_delta": True, "pull": "bf16", "encoding": "compact"}},
    "model-averaging": {"algorithm": {"name": "model-averaging", "local_steps": 4}, "stop": {"updates": 12}},
    "dynamic-averaging": {"algorithm": {"name": "dynamic-averaging", "local_steps": 3, "delta": 0.05},
                          "stop": {"updates": 12}},
    "easgd": {"algorithm": {"name": "easgd", "loss_threshold": 2.0}, "stop": {"updates": 20}},
    "cnn-asgd": {"model": {"name": "cnn"}, "stop": {"updates": 30}},
    "adacomp-churn": {"algorithm": {"name": "adacomp", "c": 0.02}, "stop": {"updates": 120},
                      "dynamics": {"availability": {"classes": {"slow": {
                          "online": {"dist": "exponential", "mean": "40ms"},
                          "offline": {"dist": "lognormal", "mean": "15ms"}}}}}},
    "resnet8-adacomp-batchnorm": {"model": RESNET8, "algorithm": {"name": "adacomp", "c": 0.05},
                                  "stop": {"updates": 30}},
    "resnet8-model-averaging-buffers": {"model": {**RESNET8, "buffers": "average"},
                                        "algorithm": {"name": "model-averaging", "local_steps": 2},
                                        "stop": {"updates": 6}},
}


def scenario(case: str, workers: int, numerics: str = "portable") -> dict:
    sc = copy.deepcopy(BASE)
    for key, value in CASES[case].items():
        sc[key] = {**sc.get(key, {}), **value}
    sc["numerics"] = numerics
    sc["runtime"]["sim"]["workers"] = workers
    return sc


def tables(sc: dict, out: Path) -> dict:
    from edgebed.emulator.engine import Engine
    from edgebed.rundir import read_table
    from edgebed.scenario import parse_scenario
    result = Engine(parse_scenario(copy.deepcopy(sc)), out=out).run()
    assert result.summary["status"] == "complete", result.summary["reason"]
    return {t: column_hashes(read_table(result.path, t)) for t in TABLES} | {
        "updates": result.summary["updates"], "ingress_bytes": result.summary["ingress_bytes"]}


def _children() -> set[int]:
    """PIDs of this process's children that run the worker module."""
    out = set()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"edgebed.device_agent.worker" in cmd and ppid == os.getpid():
            out.add(int(pid))
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(CASES))
def test_two_workers_write_the_tables_of_one(case, tmp_path):
    one = tables(scenario(case, 1), tmp_path / "one")
    two = tables(scenario(case, 2), tmp_path / "two")
    assert two == one
    assert not _children(), "a worker outlived its run"
    manifest = json.loads(next((tmp_path / "two").glob("*/manifest.json")).read_text())
    compute = json.dumps(manifest)
    if case.startswith(("dynamic", "easgd")):   # the device's own model: its work stays in the clock
        assert "workers unused" in compute
    else:
        assert "workers=2" in compute and "workers unused" not in compute


NATIVE = """
import json, sys, tempfile
from pathlib import Path
from tests.integration.test_sim_workers import CASES, scenario, tables
out = {}
for case in ("cnn-asgd", "model-averaging"):
    with tempfile.TemporaryDirectory() as tmp:
        out[case] = [tables(scenario(case, w, "native"), Path(tmp) / str(w)) for w in (1, 2)]
print(json.dumps(out))
"""


@pytest.mark.timeout(120)
def test_native_numerics_too():
    """The native profile (its own process: portable can't follow native kernels in one process)."""
    out = subprocess.run([sys.executable, "-c", NATIVE], cwd=ROOT, capture_output=True, text=True, timeout=110,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    for case, (one, two) in json.loads(out.stdout.strip().splitlines()[-1]).items():
        assert two == one, case


@pytest.mark.timeout(60)
def test_a_worker_that_dies_ends_the_run_with_its_name_and_leaves_no_process(tmp_path, monkeypatch):
    from edgebed.emulator.runtimes import sim_pool
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import parse_scenario
    real = sim_pool.WorkerPool.submit
    calls = []

    def submit(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 20:   # mid-run: one worker is killed as if the OOM killer took it
            os.kill(self.workers[0].proc.pid, signal.SIGKILL)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(sim_pool.WorkerPool, "submit", submit)
    sc = scenario("asgd", 2)
    sc["stop"]["updates"] = 2000
    t0 = time.monotonic()
    with pytest.raises(sim_pool.WorkerError, match=r"sim worker 0 \(pid \d+\) killed by signal SIGKILL") as err:
        Engine(parse_scenario(sc), out=tmp_path).run()
    assert time.monotonic() - t0 < 30
    assert "runtime.sim.workers: 1" in str(err.value)
    run = next(tmp_path.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and "sim worker 0" in summary["reason"]
    assert summary["updates"] < 2000
    assert not _children()


@pytest.mark.timeout(60)
def test_a_job_the_worker_refuses_names_the_device_and_the_cause(tmp_path):
    """A model drawing from torch's global random stream (dropout) would give other bits in a worker."""
    from edgebed.emulator.engine import Engine
    from edgebed.emulator.runtimes.sim_pool import WorkerError
    from edgebed.scenario import parse_scenario
    (tmp_path / "dropnet.py").write_text(
        "from torch import nn\n"
        "def net():\n    return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.Dropout(0.5), nn.Linear(32, 10))\n")
    sc = scenario("asgd", 2)
    sc["model"] = {"name": "dropnet:net", "path": str(tmp_path)}
    with pytest.raises(WorkerError, match=r"failed on device \d+'s work at version \d+:(.|\n)*global random stream"):
        Engine(parse_scenario(sc), out=tmp_path / "runs").run()
    assert not _children()


INTERRUPTED = """
import os, signal, sys, threading, time
from pathlib import Path
from edgebed.emulator.engine import Engine
from edgebed.emulator.runtimes import sim_pool
from edgebed.scenario import parse_scenario
from tests.integration.test_sim_workers import scenario
real = sim_pool.WorkerPool.__init__
def init(self, *a, **k):
    real(self, *a, **k)
    print("WORKERS", *self.pids, flush=True)
sim_pool.WorkerPool.__init__ = init
sc = scenario("cnn-asgd", 2)
sc["stop"]["updates"] = 100000
Engine(parse_scenario(sc), out=Path(sys.argv[1])).run()
"""


@pytest.mark.timeout(90)
def test_ctrl_c_leaves_no_worker(tmp_path):
    """Ctrl-C reaches the whole foreground group; the run ends, records itself, and its workers end."""
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            start_new_session=True)
    line = proc.stdout.readline()
    assert line.startswith("WORKERS"), proc.stderr.read()[-3000:]
    pids = [int(p) for p in line.split()[1:]]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob("*/updates*")):
        time.sleep(0.2)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)   # as a terminal does: the engine and (had they stayed) its workers
    proc.communicate(timeout=60)
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["status"] == "incomplete" and "interrupted" in summary["reason"]
    assert not [p for p in pids if _alive(p)], "a worker outlived the interrupted run"


@pytest.mark.timeout(90)
def test_workers_die_with_a_killed_engine(tmp_path):
    """SIGKILL leaves the engine no say: the kernel ends its workers (parent-death signal, socket EOF)."""
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()
    assert line.startswith("WORKERS"), proc.stderr.read()[-3000:]
    pids = [int(p) for p in line.split()[1:]]
    time.sleep(2.0)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "a worker outlived its killed engine"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(240)
def test_ray_actors_on_a_two_raylet_cluster_write_the_tables_of_one(tmp_path):
    """runtime.sim.executor: ray — two actors, one on each of two local raylets (one CPU each)."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster
    one = tables(scenario("cnn-asgd", 1), tmp_path / "one")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        sc = scenario("cnn-asgd", 2)
        sc["runtime"]["sim"].update(executor="ray", ray_address=cluster.address)
        two = tables(sc, tmp_path / "two")
    finally:
        cluster.shutdown()
    assert two == one
    sim = json.loads(next((tmp_path / "two").glob("*/sim.json")).read_text())
    assert sim["worker_jobs"] > 0 and len({w.split(":")[0] for w in sim["worker_where"]}) == 2


@pytest.mark.timeout(240)
def test_a_ray_actor_that_dies_ends_the_run_with_its_name(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    import ray
    from ray.cluster_utils import Cluster
    from edgebed.emulator.engine import Engine
    from edgebed.emulator.runtimes import sim_ray
    from edgebed.emulator.runtimes.sim_pool import WorkerError
    from edgebed.scenario import parse_scenario
    real = sim_ray.RayPool.submit
    calls = []

    def submit(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 20:
            ray.kill(self.actors[0], no_restart=True)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(sim_ray.RayPool, "submit", submit)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        sc = scenario("asgd", 2)
        sc["stop"]["updates"] = 2000
        sc["runtime"]["sim"].update(executor="ray", ray_address=cluster.address)
        with pytest.raises(WorkerError, match=r"sim Ray actor 0 died while computing device \d+'s work"):
            Engine(parse_scenario(sc), out=tmp_path).run()
    finally:
        cluster.shutdown()
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["status"] == "failed" and summary["updates"] < 2000
