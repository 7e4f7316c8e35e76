"""Spark runtime with a real Spark: barrier stages, data partitions, slots, GPUs, cleanup, a full run.

Spark starts in ~6–20 s here, so the local[2] tests share one session (class scope); the
local-cluster case and the cleanup case use a runtime that owns its session.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from tests.capabilities import require_spark

pytestmark = [pytest.mark.spark]

MASTER = "local[2]"


def _scenario(n: int, spark: dict, **extra):
    from edgebed.scenario import parse_scenario
    data = {"name": "spark-test", "seed": 3,
            "dataset": {"train_samples": 400, "partition": "iid"},
            "workers": {"n": n}, "stop": {"updates": 10},
            "runtime": {"name": "spark", "spark": {"master": MASTER, **spark}}}
    data.update(extra)
    return parse_scenario(data)


def _digest(row: np.ndarray) -> str:
    return hashlib.blake2b(row.tobytes(), digest_size=8).hexdigest()


# -- test agents: stand-ins for run_agent with its signature; they report over a PUSH socket ------

def report_agent(ps_address, device, attempt, data, torch_device):
    """Report which samples this agent was given, then end with exit code 10 + device."""
    import zmq as z
    x, y = data
    ctx = z.Context.instance()
    s = ctx.socket(z.PUSH)
    s.setsockopt(z.LINGER, 5000)
    s.connect(ps_address)
    s.send_json({"device": device, "attempt": attempt, "torch_device": torch_device, "pid": os.getpid(),
                 "digests": [_digest(r) for r in x], "labels": y.tolist(),
                 "omp": os.environ.get("OMP_NUM_THREADS")})
    s.close()
    return 10 + device


def report_then_hang(ps_address, device, attempt, data, torch_device):
    """Report, then never return (a stuck agent): only cancelling the stage ends it."""
    report_agent(ps_address, device, attempt, data, torch_device)
    print(f"agent {device} now hangs", file=sys.stderr, flush=True)
    while True:
        time.sleep(0.5)


def _pickle_by_value():
    # Executors can't import this test module; ship the test agents by value.
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def collector():
    """A PULL socket the test agents report to (stands in for the PS address)."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.PULL)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    def collect(count: int, handles=(), timeout: float = 120.0) -> list[dict]:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"only {len(out)} of {count} agents reported within {timeout:.0f} s"
            ended = [(h.device, h.poll(), h.error) for h in handles if h.poll() is not None]
            assert not ended or sock.poll(0), f"agents ended before reporting: {ended}"
            if sock.poll(int(min(left, 1.0) * 1000)):
                out.append(sock.recv_json())
        return out

    collect.address = f"tcp://127.0.0.1:{port}"
    yield collect
    sock.close(linger=0)


def _expected_shards(sc_):
    from edgebed.data import load_dataset, partition
    ds = load_dataset(sc_.dataset, sc_.seed)
    shards = partition(ds.train_y, sc_.workers.n, sc_.dataset.partition, sc_.seed, sc_.dataset.labels_per_worker)
    return ds, shards


def _specs(sc_, address):
    from edgebed.emulator.runtimes.base import AgentSpec
    from edgebed.scenario import class_assignment
    names = [c.name for c in sc_.workers.classes]
    return [AgentSpec(d, names[k], address) for d, k in enumerate(class_assignment(sc_))]


def _spark_children() -> list[str]:
    """java / pyspark processes descended from this test process."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    procs = {}
    for line in out.splitlines():
        pid, ppid, args = line.strip().split(None, 2)
        procs[int(pid)] = (int(ppid), args)

    def descends(pid):
        seen = set()
        while pid in procs and pid not in seen:
            seen.add(pid)
            pid = procs[pid][0]
            if pid == os.getpid():
                return True
        return False
    return [f"{p} {a[:100]}" for p, (_, a) in procs.items()
            if descends(p) and ("java" in a or "pyspark" in a)]


# -- no JVM needed ---------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_gpu_request_in_plain_local_mode_is_refused_with_reason(tmp_path):
    require_spark()
    from edgebed.emulator.runtimes.spark.runtime import SparkRuntime
    from edgebed.emulator.runtimes.spark.session import SparkSetupError, open_session
    with pytest.raises(SparkSetupError, match=r"waits forever.*local-cluster"):
        open_session("local[2]", tasks=1, gpus_per_task=1, run_dir=tmp_path)
    problems = SparkRuntime(_scenario(2, {"gpus_per_task": 1}), tmp_path).check()
    assert any("gpus_per_task=1" in p and "local-cluster" in p for p in problems), problems
    assert not (tmp_path / "spark.log").exists(), "refused before anything started"


@pytest.mark.timeout(30)
def test_too_many_tasks_for_local_slots_is_refused_up_front(tmp_path):
    require_spark()
    from edgebed.emulator.runtimes.spark.runtime import SparkRuntime
    from edgebed.emulator.runtimes.spark.session import SparkSetupError, open_session
    with pytest.raises(SparkSetupError, match=r"needs 3 task slots .* offers 2"):
        open_session("local[2]", tasks=3, run_dir=tmp_path)
    problems = SparkRuntime(_scenario(5, {"agents_per_task": 2}), tmp_path).check()
    assert any("3 barrier tasks" in p and "offers 2" in p and "agents_per_task to at least 3" in p
               for p in problems), problems


@pytest.mark.timeout(30)
def test_bad_spark_section_names_the_key(tmp_path):
    require_spark()
    from edgebed.emulator.runtimes.spark.runtime import SparkRuntime
    from edgebed.scenario import ScenarioError
    with pytest.raises(ScenarioError, match=r"runtime\.spark\.master: .*local-cluster\[W,C,M\]"):
        SparkRuntime(_scenario(2, {"master": "locl[2]"}), tmp_path)
    with pytest.raises(ScenarioError, match=r"runtime\.spark\.workers"):
        SparkRuntime(_scenario(2, {"workers": 2}), tmp_path)


def test_link_shaping_refused_and_manifest_says_not_applied(tmp_path):
    require_spark()
    from edgebed.emulator.runtimes.spark.runtime import SparkRuntime
    sc_ = _scenario(2, {}, workers={"n": 2, "classes": [{"name": "a", "share": 1, "uplink": {"rate": "1mbit"}}]})
    rt = SparkRuntime(sc_, tmp_path)
    assert any("uplink.rate" in p for p in rt.check())
    applied = rt.applied()
    assert applied["freeze"] == "protocol" and applied["link_rate"] == "none"
    assert "not applied in Spark mode" in applied["network_shaping"]


# -- one shared local[2] session ---------------------------------------------------------------------

@pytest.fixture(scope="class")
def session(tmp_path_factory):
    """A local[2] session shared by the tests of one class (stopped before the local-cluster test)."""
    require_spark()
    from edgebed.emulator.runtimes.spark.session import open_session
    _pickle_by_value()
    run = open_session(MASTER, tasks=2, run_dir=tmp_path_factory.mktemp("spark-local"))
    yield run
    run.stop()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
class TestLocalSession:

    @pytest.mark.timeout(180)
    def test_barrier_tasks_train_on_disjoint_partitions_covering_the_data(self, session, collector, tmp_path):
        from edgebed.emulator.runtimes.spark.runtime import SparkRuntime
        sc_ = _scenario(4, {"agents_per_task": 2})
        rt = SparkRuntime(sc_, tmp_path, agent_fn=report_agent)
        handles = rt.start(_specs(sc_, collector.address))
        reports = {r["device"]: r for r in collector(4, handles)}
        for h in handles:
            assert h.wait(60) == 10 + h.device, h.error
        rt.cleanup()
        assert session.sc._jsc is not None, "a session the runtime did not start stays up"

        ds, shards = _expected_shards(sc_)
        seen: set[str] = set()
        for d in range(4):
            got = reports[d]["digests"]
            want = [_digest(r) for r in ds.train_x[shards[d]]]
            assert got == want, f"device {d} trained on other samples than its shard"
            assert reports[d]["labels"] == ds.train_y[shards[d]].tolist()
            assert seen.isdisjoint(got)
            seen.update(got)
        assert len(seen) == len({_digest(r) for r in ds.train_x})          # the shards cover the data
        # agents_per_task=2: devices 0,1 share task 0's process, 2,3 task 1's; tasks run in parallel
        assert reports[0]["pid"] == reports[1]["pid"] != reports[2]["pid"] == reports[3]["pid"]
        assert {r["attempt"] for r in reports.values()} == {0}
        assert {r["torch_device"] for r in reports.values()} == {"cpu"}
        assert {r["omp"] for r in reports.values()} == {"1"}

    @pytest.mark.timeout(60)
    def test_slot_check_against_the_running_cluster(self, session):
        from edgebed.emulator.runtimes.spark.session import SparkSetupError, available_slots, wait_for_slots
        assert available_slots(session.sc) == 2
        with pytest.raises(SparkSetupError, match=r"needs 3 task slots .* offers 2 after waiting"):
            wait_for_slots(session.sc, session.master, 3, timeout=0.5)

    @pytest.mark.timeout(120)
    def test_kill_cancels_a_stuck_stage(self, session, collector, tmp_path):
        from edgebed.emulator.runtimes.spark.runtime import SparkRuntime
        sc_ = _scenario(2, {})
        rt = SparkRuntime(sc_, tmp_path, agent_fn=report_then_hang)
        handles = rt.start(_specs(sc_, collector.address))
        collector(2, handles)
        assert [h.poll() for h in handles] == [None, None]
        t0 = time.monotonic()
        handles[0].terminate()
        assert handles[1].wait(30) == -signal.SIGTERM   # the whole stage ends
        assert handles[0].poll() == -signal.SIGTERM
        assert time.monotonic() - t0 < 30
        rt.cleanup()
        # the session is still usable: the cancelled python workers were replaced
        assert session.sc.parallelize(range(10), 2).sum() == 45

    @pytest.mark.timeout(240)
    def test_engine_run_end_to_end_on_spark(self, session, tmp_path, monkeypatch):
        """The real agent loop in barrier tasks against the real PS: accuracy rises, ingress counted."""
        from edgebed.emulator.engine import Engine
        from edgebed.scenario import parse_scenario
        sc_ = parse_scenario({
            "name": "spark-e2e", "seed": 1,
            "dataset": {"train_samples": 4000},
            "model": {"name": "mlp"}, "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
            # 1,200 updates: long enough that the second barrier task's Python worker, started
            # seconds later on a loaded host, still joins (at 400, one device once did all the work)
            "workers": {"n": 2}, "stop": {"updates": 1200, "wall_time": "150s"},
            "eval": {"every": 50, "test_samples": 1000},
            "runtime": {"name": "spark", "spark": {"master": MASTER}}})
        result = Engine(sc_, out=tmp_path).run()
        s = result.summary
        assert s["status"] == "complete", s
        assert s["updates"] >= 1200
        assert s["devices"]["said_hello"] == 2
        accs = _evals(result.path)
        assert accs[-1] >= accs[0] + 0.1 and accs[-1] >= 0.8, accs
        assert s["push_bytes"] > 0 and s["ingress_bytes"] >= s["push_bytes"]
        manifest = json.loads((result.path / "manifest.json").read_text())
        assert "not applied in Spark mode" in manifest["applied"]["network_shaping"]


    @pytest.mark.timeout(240)
    def test_a_user_model_and_cifar_format_set_train_on_spark(self, session, tmp_path, monkeypatch):
        """A model module and a 3×32×32 data set from outside the repository: the executors' agents
        import the module from model.path and train on their partition of the set."""
        from edgebed.emulator.engine import Engine
        from edgebed.rundir import read_table
        from edgebed.scenario import parse_scenario
        from tests.integration.test_data_formats_run import LINEAR, write_learnable_cifar10
        monkeypatch.setattr(sys, "path", list(sys.path))
        (tmp_path / "user" / "unets").mkdir(parents=True)
        (tmp_path / "user" / "unets" / "__init__.py").write_text("")
        (tmp_path / "user" / "unets" / "lin.py").write_text(LINEAR)
        root = write_learnable_cifar10(tmp_path / "c10")
        sc_ = parse_scenario({
            "name": "spark-user", "seed": 1, "dataset": {"format": "cifar10", "path": str(root)},
            "model": {"name": "unets.lin:linear", "path": str(tmp_path / "user")},
            "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
            # A 10 ms think time holds each device to ≤ 100 updates/s, so the 1,200 updates last ≥ 6 s:
            # without it one agent ran all 400 in the second it took the other executor to say hello.
            "workers": {"n": 2, "classes": [{"name": "d", "share": 1, "think_time": "10ms"}]},
            "stop": {"updates": 1200, "wall_time": "150s"}, "eval": {"every": 300},
            "runtime": {"name": "spark", "spark": {"master": MASTER}}})
        try:
            result = Engine(sc_, out=tmp_path / "runs").run()
        finally:
            for name in [m for m in sys.modules if m.startswith("unets")]:
                del sys.modules[name]
        s = result.summary
        assert s["status"] == "complete" and s["devices"]["said_hello"] == 2, s
        updates = read_table(result.path, "updates")
        assert set(updates["entries"]) == {3072 * 10 + 10}
        assert _evals(result.path)[-1] > 0.5                      # chance 0.1

    @pytest.mark.timeout(180)
    def test_crashes_are_freezes_not_task_failures(self, session, tmp_path, monkeypatch):
        """Fail-stop in Spark: crashed agents stop contributing, the barrier stage is never retried.
        The agents push AdaComp selections with error feedback and 8-bit values in wire v2, and pull
        f16 models: the compressors run in Spark tasks as on every other runtime."""
        from edgebed.emulator.engine import Engine
        from edgebed.rundir import read_table
        from edgebed.scenario import parse_scenario
        sc_ = parse_scenario({
            "name": "spark-crash", "seed": 2, "dataset": {"train_samples": 2000},
            "model": {"name": "mlp"}, "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01},
            "compression": {"error_feedback": True, "quantize": "q8", "encoding": "compact", "pull": "f16"},
            "workers": {"n": 2}, "failures": {"crash_probability": 0.05},
            "stop": {"updates": 5000, "wall_time": "120s"}, "eval": {"every": 1000, "test_samples": 200},
            "runtime": {"name": "spark", "spark": {"master": MASTER}}})
        result = Engine(sc_, out=tmp_path).run()
        s = result.summary
        assert s["status"] == "complete" and s["devices"]["crashed"] == 2, s
        assert s["updates"] < 5000, "both agents stopped contributing"
        ev = read_table(result.path, "events")
        crash_update = ev[ev["event"] == "crash"]["update"].max()
        assert s["updates"] == crash_update, "no update was applied after the last crash"
        hellos = ev[ev["event"] == "hello"]
        assert len(hellos) == 2 and hellos["detail"].str.contains("attempt=0").all(), \
            "a barrier stage retry would have restarted the agents"
        updates = read_table(result.path, "updates")
        per_entry = (updates["bytes_in"] / updates["entries"]).median()
        assert per_entry < 4.0, per_entry        # q8: ~1 B a value + varint indices (v1: 8 B an entry)

    @pytest.mark.slow
    @pytest.mark.measures
    @pytest.mark.timeout(180)
    def test_pacing_gives_each_class_its_configured_rate_on_spark(self, session, tmp_path, monkeypatch):
        """Pacing runs in the Spark tasks as in local processes: a fast and a slow device (cycles of
        25 and 100 ms: 4:1) push at their configured rates, and the verdict says so."""
        from edgebed.emulator.engine import Engine
        from edgebed.scenario import parse_scenario
        sc_ = parse_scenario({
            "name": "spark-pacing", "seed": 4, "dataset": {"train_samples": 1000},
            "model": {"name": "mlp"}, "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01},
            "workers": {"n": 2, "classes": [
                {"name": "fast", "share": 0.5, "slowdown": 1, "think_time": "20ms"},
                {"name": "slow", "share": 0.5, "slowdown": 2, "think_time": "90ms"}]},
            "timing": {"pacing": True, "step_time": "5ms"},
            "stop": {"wall_time": "15s"}, "eval": {"every": 100000},
            "runtime": {"name": "spark", "spark": {"master": MASTER}}})
        result = Engine(sc_, out=tmp_path).run()
        s = result.summary
        assert s["status"] == "complete", s
        f = s["fidelity"]
        rows = {r["class"]: r for r in f["expected"]}
        assert rows["fast"]["expected_rate_per_device"] == pytest.approx(40.0, rel=0.01)   # 1 / (5 + 20 ms)
        assert rows["slow"]["expected_rate_per_device"] == pytest.approx(10.0, rel=0.01)   # 1 / (2·5 + 90 ms)
        for r in rows.values():
            assert r["rate_per_device"] == pytest.approx(r["expected_rate_per_device"], rel=0.2), r
            assert r["share"] == pytest.approx(r["expected_share"], rel=0.2), r
        assert f["verdict"]["faithful"], f["verdict"]["summary"]
        assert set(f["pacing"]) == {"fast", "slow"}, f["pacing"]   # both agents reported their pacing


def _evals(path) -> list[float]:
    from edgebed.rundir import read_table
    return read_table(path, "evals").sort_values("update")["accuracy"].tolist()


# -- a runtime that owns its session: local-cluster with (fake) GPUs, then cleanup -----------------

FAKE_GPUS = '#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n'


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_local_cluster_gpus_and_cleanup_stops_everything(collector, tmp_path):
    require_spark()
    from pyspark import SparkContext

    from edgebed.emulator.runtimes.spark.runtime import SparkRuntime
    _pickle_by_value()
    assert SparkContext._active_spark_context is None, "the shared local session must be stopped first"
    script = tmp_path / "fake_gpus.sh"
    script.write_text(FAKE_GPUS)
    script.chmod(0o755)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sc_ = _scenario(2, {"master": "local-cluster[2,1,1024]", "gpus_per_task": 1,
                        "gpu_discovery_script": str(script)})
    rt = SparkRuntime(sc_, run_dir, agent_fn=report_then_hang)
    assert rt.check() == []
    handles = rt.start(_specs(sc_, collector.address))
    try:
        reports = {r["device"]: r for r in collector(2, handles, timeout=150)}
        # each task ran on its own executor and got a GPU address from Spark's resource scheduler
        assert {reports[d]["torch_device"] for d in (0, 1)} <= {"cuda:0", "cuda:1"}
        assert reports[0]["pid"] != reports[1]["pid"]
        assert rt.session.conf["spark.task.resource.gpu.amount"] == "1"
        assert rt.session.conf["spark.worker.resource.gpu.discoveryScript"] == str(script)
        assert _spark_children(), "Spark runs in child processes of this test"
        app_id = rt.session.app_id
    finally:
        rt.cleanup()
    assert [h.poll() for h in handles] == [-signal.SIGKILL, -signal.SIGKILL]
    assert SparkContext._active_spark_context is None
    deadline = time.monotonic() + 20
    while _spark_children() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _spark_children() == []
    # executor output went to the run directory, not the terminal (nor pyspark's install dir)
    assert (run_dir / "spark.log").stat().st_size > 0
    logs = "".join(p.read_text() for p in (run_dir / "spark-executors").glob("app-*/*/stderr"))
    assert "agent 0 now hangs" in logs and "agent 1 now hangs" in logs
    from pyspark.find_spark_home import _find_spark_home
    assert not (Path(_find_spark_home()) / "work" / app_id).exists()
    rt.cleanup()   # idempotent
