"""The Ray executor on a real Ray cluster: a head and two worker raylets on this host. A worker
raylet killed while it runs a cell → the cell runs again on the other one and the study completes,
and every cell's compact result is the one the local executor gives."""
from __future__ import annotations

import os
import threading
import time

import pytest

from edgebed.study.executors import RayExecutor, Resources
from edgebed.study.runner import load_study, run_study
from tests.capabilities import require
from tests.integration.study_cells import (assert_same_result, kill_first_running, local_reference, run_of,
                                           write_smoke_study)

# The test cluster's raylets and GCS talk over loopback only (Ray would pick the host's address):
# read by Ray when it is first imported, here before any test imports it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Ray starts its workers at nice 15: beside the suite's other worker (or the long runs of a busy host)
# the cells got 4 % of a core and the test timed out at 300 s. The raylets read this at start-up.
os.environ["RAY_worker_niceness"] = "0"


@pytest.fixture
def cluster():
    try:
        from ray.cluster_utils import Cluster
    except ImportError:
        require(False, "Ray", "pip install -e '.[ray]'")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})   # the head runs no cell
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    try:
        yield c, workers
    finally:
        import ray
        ray.shutdown()
        c.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_worker_raylet_is_retried_elsewhere_and_results_match_the_local_executor(cluster, tmp_path):
    c, workers = cluster
    # cells of 1,500 updates (seconds each, and the SLURM test's cached reference): a 300-update cell
    # could end between being seen running and its raylet's removal
    reference = local_reference(1500)
    path = write_smoke_study(tmp_path / "study", updates=1500)
    sdir = tmp_path / "out" / "exec-smoke"
    killed = {}

    def kill_raylet(t):
        # the view says "... node <first 8 hex digits of the node id>" (unique_id is a socket path
        # starting with the IP address: it matched every node)
        node = next((w for w in workers if f"node {w.node_id[:8]}" in t["worker"]), None)
        if node is None:
            return None
        c.remove_node(node, allow_graceful=False)   # at once: the cell has started and has seconds to go
        return {"cell": t["cell"], "node": node.unique_id, "after_s": time.time() - t["started"]}

    def kill_one_mid_cell():
        """Kill the raylet of the first cell seen running on a worker raylet."""
        killed.update(kill_first_running(sdir, kill_raylet))

    killer = threading.Thread(target=kill_one_mid_cell, daemon=True)
    killer.start()
    executor = RayExecutor(address=c.address, resources=Resources(cpus=1))
    lines = []
    try:
        status = run_study(load_study(path), tmp_path / "out", progress=lambda line, final: lines.append(line),
                           executor=executor, retries=2)
    finally:
        executor.shutdown(cancel_futures=True)
    killer.join(5)
    assert killed, f"no cell was seen running on a worker raylet: {lines}"
    assert (status["complete"], status["failed"]) == (2, 0), status["cells"]
    by = {e["cell"]: e for e in status["cells"]}
    assert by[killed["cell"]]["attempts"] == 2, (killed, lines)   # lost once, then ran elsewhere
    assert any("Ray lost the task" in line and "running it again" in line for line in lines), lines
    # the compact results came back through Ray and were written by the driver; they are the local ones
    for cell in ("asgd", "adacomp-c-0.01"):
        assert_same_result(run_of(sdir, cell), run_of(reference, cell))
