"""Spark set-up without a JVM: master parsing, configuration, slot and GPU checks, task plan, records."""
import numpy as np
import pytest

from edgebed.emulator.runtimes.spark.session import (SparkSetupError, build_conf, check_gpu_request, master_problem,
                                            parse_master, task_slots)


@pytest.mark.parametrize("url, kind, slots", [
    ("local", "local", 1), ("local[3]", "local", 3), ("local[4, 2]", "local", 4),
    ("local-cluster[2,1,1024]", "local-cluster", 2), ("local-cluster[ 3 , 2 , 512 ]", "local-cluster", 6),
    ("spark://h:7077", "standalone", None), ("k8s://https://h:443", "k8s", None), ("yarn", "yarn", None),
])
def test_parse_master(url, kind, slots):
    m = parse_master(url)
    assert m.kind == kind
    assert task_slots(m) == slots


@pytest.mark.parametrize("url", ["locl[2]", "local[0]", "local-cluster[2,1]", "local-cluster[0,1,1]", ""])
def test_bad_master_names_the_accepted_forms(url):
    assert master_problem(url)
    with pytest.raises(SparkSetupError, match=r"runtime\.spark\.master"):
        parse_master(url)
    assert "local-cluster[W,C,M]" in master_problem("locl[2]")


def test_local_star_counts_cores():
    import os
    assert task_slots(parse_master("local[*]")) == (os.cpu_count() or 1)


def test_conf_defaults_keep_spark_quiet_and_fail_fast():
    conf = build_conf(parse_master("local[2]"), app_name="x")
    assert conf["spark.master"] == "local[2]"
    assert conf["spark.ui.enabled"] == "false" and conf["spark.ui.showConsoleProgress"] == "false"
    assert conf["spark.scheduler.barrier.maxConcurrentTasksCheck.interval"] == "1s"
    assert int(conf["spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"]) <= 10
    assert conf["spark.executorEnv.OMP_NUM_THREADS"] == "1"
    assert "spark.task.resource.gpu.amount" not in conf
    assert build_conf(parse_master("local[2]"), app_name="x", ui=True)["spark.ui.enabled"] == "true"


def test_extra_conf_wins():
    conf = build_conf(parse_master("local[2]"), app_name="x", extra={"spark.ui.enabled": True,
                                                                     "spark.task.cpus": 1})
    assert conf["spark.ui.enabled"] == "true" and conf["spark.task.cpus"] == "1"


def test_gpu_conf_local_cluster_gives_workers_and_executors_gpus():
    conf = build_conf(parse_master("local-cluster[2,2,1024]"), app_name="x", gpus_per_task=0.5,
                      discovery_script="/d.sh")
    assert conf["spark.task.resource.gpu.amount"] == "0.5"
    assert conf["spark.worker.resource.gpu.amount"] == "1"          # 2 cores × 0.5
    assert conf["spark.executor.resource.gpu.amount"] == "1"
    assert conf["spark.worker.resource.gpu.discoveryScript"] == "/d.sh"
    assert conf["spark.executor.resource.gpu.discoveryScript"] == "/d.sh"


def test_gpu_conf_cluster_uses_executor_cores_and_k8s_vendor():
    conf = build_conf(parse_master("k8s://https://h:443"), app_name="x", gpus_per_task=1, discovery_script="/d.sh",
                      extra={"spark.executor.cores": 4})
    assert conf["spark.executor.resource.gpu.amount"] == "4"
    assert conf["spark.executor.resource.gpu.vendor"] == "nvidia.com"
    assert "spark.worker.resource.gpu.amount" not in conf
    assert "spark.executorEnv.PYTHONPATH" not in conf      # remote executors must have edgebed installed


def test_gpu_in_plain_local_is_refused_with_the_reason():
    with pytest.raises(SparkSetupError, match=r"waits forever"):
        check_gpu_request(parse_master("local[2]"), 1)
    with pytest.raises(SparkSetupError, match=r"fraction"):
        check_gpu_request(parse_master("local-cluster[1,1,512]"), 1.5)
    check_gpu_request(parse_master("local[2]"), 0)
    check_gpu_request(parse_master("local-cluster[1,1,512]"), 2)


def test_task_plan_and_records_round_trip():
    pytest.importorskip("pyspark")
    from edgebed.emulator.runtimes.spark.runtime import _assemble, shard_records, task_plan
    assert task_plan(5, 2) == [[0, 1], [2, 3], [4]]
    assert task_plan(3, 1) == [[0], [1], [2]]
    x = np.arange(10 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(10, 28, 28)
    x[:, 0, 0] = np.arange(10)
    y = np.arange(10, dtype=np.uint8)
    shards = [np.array([0, 3, 6, 9]), np.array([1, 4, 7]), np.array([2, 5, 8])]
    plan = task_plan(3, 2)
    records = list(shard_records(x, y, shards, plan, per_record=2))
    assert {t for t, _ in records} == {0, 1}
    by_task = {t: [r for r in records if r[0] == t] for t in (0, 1)}
    # records arrive in any order after Spark's shuffle
    got = _assemble(list(reversed(by_task[0])), plan[0])
    for d in (0, 1):
        idx, xs, ys = got[d]
        np.testing.assert_array_equal(idx, shards[d])
        np.testing.assert_array_equal(ys, y[shards[d]])
        np.testing.assert_array_equal(xs, x[shards[d]])
    assert list(_assemble(by_task[1], plan[1])) == [2]
