"""Spark runtime: device agents as the tasks of one barrier stage; the PS stays on the driver.

The training set becomes an RDD partitioned across the stage's tasks (task t holds the shards of its
devices), so each agent trains on the partition Spark placed on its executor — nothing is shipped per
agent from the driver. A barrier stage schedules all tasks at once or not at all, which is what an
asynchronous run needs; it also restarts *every* task when one fails, so an agent never fails its
task: errors become exit codes, and a fail-stop crash (the PS answers a push with ``freeze``) ends
that agent quietly (``freeze="protocol"``). Links are not shaped in Spark mode: agents reach the PS
over the cluster's network as it is, and the manifest says so.

Exit codes reach the driver when the stage ends (Spark returns task results together), so every
handle's ``poll()`` is None until then. Terminating or killing any handle cancels the whole stage:
a barrier stage can't lose one task.
"""
from __future__ import annotations

import math
import signal
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Callable, Literal, Optional, Union
from urllib.parse import urlsplit

import numpy as np
import pyspark  # noqa: F401  (the registry offers this runtime only when pyspark imports)
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .session import (SparkRun, SparkSetupError, check_gpu_request, master_problem, numerics_conf, open_session, parse_master,
                             task_slots)
from ..base import AgentHandle, AgentSpec, Capabilities, Runtime
from .barrier import BarrierStage, SparkAgentHandle

SAMPLES_PER_RECORD = 256    # training samples per RDD record (fewer, larger records pickle faster)


class SparkSpec(BaseModel):
    """``runtime.spark`` in a scenario."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    master: str = Field("local[2]", description="local[N], local-cluster[W,C,M], spark://…, k8s://…")
    agents_per_task: int = Field(1, ge=1, description="agents per barrier task; tasks = ceil(n / this)")
    gpus_per_task: float = Field(0.0, ge=0, description="spark.task.resource.gpu.amount (0: CPU)")
    gpu_discovery_script: Optional[str] = Field(None, description="default: nvidia-smi script in the run dir")
    driver_host: Optional[str] = Field(None, description="address executors reach the PS at "
                                       "(default 127.0.0.1 for local masters, this host otherwise)")
    log_level: Literal["ERROR", "WARN", "INFO", "DEBUG"] = "WARN"
    ui: bool = False
    slot_timeout: float = Field(60.0, gt=0, description="seconds to wait for executors to offer the slots")
    conf: dict[str, Union[str, int, float, bool]] = Field(default_factory=dict,
                                                          description="extra Spark configuration")

    @field_validator("master")
    @classmethod
    def _master(cls, v: str) -> str:
        problem = master_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    def spark_conf(self) -> dict[str, str]:
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in self.conf.items()}


def task_plan(n_devices: int, agents_per_task: int) -> list[list[int]]:
    """Devices of each barrier task: contiguous blocks of ``agents_per_task`` (the last may be short)."""
    return [list(range(t, min(t + agents_per_task, n_devices)))
            for t in range(0, n_devices, agents_per_task)]


def shard_records(x: np.ndarray, y: np.ndarray, shards: list[np.ndarray], plan: list[list[int]],
                  per_record: int = SAMPLES_PER_RECORD):
    """RDD records ``(task, (device, sample_indices, x, y))`` in chunks of ``per_record`` samples."""
    for t, devices in enumerate(plan):
        for d in devices:
            idx = shards[d]
            for lo in range(0, len(idx), per_record):
                part = idx[lo:lo + per_record]
                yield t, (d, part.astype(np.int64), np.ascontiguousarray(x[part]), np.ascontiguousarray(y[part]))


def _assemble(records, devices: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per device of this task: (sample indices, x, y) in the original shard order."""
    parts: dict[int, list] = {d: [] for d in devices}
    for _, (d, idx, x, y) in records:
        parts.setdefault(d, []).append((idx, x, y))
    out = {}
    for d, chunks in parts.items():
        if not chunks:
            # no rows: the sample shape is unknown here and irrelevant (the Trainer refuses an empty shard)
            out[d] = (np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int64))
            continue
        idx = np.concatenate([c[0] for c in chunks])
        order = np.argsort(idx, kind="stable")
        out[d] = (idx[order], np.concatenate([c[1] for c in chunks])[order],
                  np.concatenate([c[2] for c in chunks])[order])
    return out


def _run_agent(ps_address: str, device: int, attempt: int, data, torch_device: str) -> int:
    from ....device_agent.agent import run_agent   # lazily: torch is imported on the executor only
    # A fail-stop crash ends this agent quietly: it never sends again, and its task ends without a
    # failure, which would make Spark restart every agent of the barrier stage.
    return run_agent(ps_address, device, attempt, data=data, freezer=lambda: None, torch_device=torch_device)


@dataclass(frozen=True)
class TaskConfig:
    """What each barrier task needs; pickled with the task (no data: that comes from the RDD)."""
    ps_address: str
    plan: list[list[int]]
    env: dict[int, dict[str, str]]     # per device; all agents of one task share one process
    gpus_requested: bool
    agent_fn: Callable[..., int]


def barrier_task(cfg: TaskConfig):
    """The function each barrier task runs: start its agents on its partition, return exit codes.

    Returns rows ``(device, exit_code, error_or_empty, torch_device, n_samples)``; it never raises
    for an agent's error (see the module docstring)."""
    def run(records):
        import os

        from pyspark import BarrierTaskContext
        ctx = BarrierTaskContext.get()
        t = ctx.partitionId()
        devices = cfg.plan[t]
        torch_devices = {d: "cpu" for d in devices}
        rows: dict[int, tuple] = {}
        try:
            shards = _assemble(records, devices)
            # Task attempt (a retried barrier stage runs all tasks again); the PS sees it in hello.
            attempt = ctx.attemptNumber()
            gpu = ctx.resources().get("gpu")
            addresses = list(gpu.addresses) if gpu is not None else []
            if cfg.gpus_requested and not addresses:
                print(f"edgebed: barrier task {t} got no GPU from Spark (resources {dict(ctx.resources())}); "
                      f"its agents {devices} train on the CPU", file=sys.stderr, flush=True)
            torch_devices = {d: f"cuda:{addresses[i % len(addresses)]}" if addresses else "cpu"
                             for i, d in enumerate(devices)}
            for d in devices:
                os.environ.update(cfg.env.get(d, {}))
            if len(devices) == 1:
                os.environ["EDGEBED_TORCH_DEVICE"] = torch_devices[devices[0]]
        except BaseException as err:  # noqa: BLE001 — reported as exit codes, after the barrier
            traceback.print_exc(file=sys.stderr)
            rows = {d: (d, 1, f"task set-up: {type(err).__name__}: {err}", torch_devices[d], 0) for d in devices}

        def one(d: int) -> None:
            idx, x, y = shards[d]
            try:
                if len(y) == 0:
                    raise RuntimeError(f"device {d}: its partition holds no training samples")
                code = int(cfg.agent_fn(cfg.ps_address, d, attempt, (x, y), torch_devices[d]))
                rows[d] = (d, code, "", torch_devices[d], len(y))
            except BaseException as err:  # noqa: BLE001 — an error must not fail the barrier stage
                traceback.print_exc(file=sys.stderr)
                rows[d] = (d, 1, f"{type(err).__name__}: {err}", torch_devices[d], len(y))

        # All agents start together, as the devices of one fleet. Every task reaches this line, even
        # after a set-up error: a task that skipped it would leave the others waiting for ever.
        ctx.barrier()
        if rows:
            return [rows[d] for d in devices]
        threads = [threading.Thread(target=one, args=(d,), name=f"agent-{d}", daemon=True) for d in devices]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return [rows[d] for d in devices]
    return run


class SparkRuntime(Runtime):
    name = "spark"
    capabilities = Capabilities(link_rate="none", link_delay="none", link_jitter="none", link_loss="none",
                                cpu_quota=False, freeze="protocol", cuda=True)
    Spec = SparkSpec

    def __init__(self, scenario, run_dir, agent_fn: Optional[Callable[..., int]] = None):
        super().__init__(scenario, run_dir)   # a bad runtime.spark section → ScenarioError there
        self.agent_fn = agent_fn or _run_agent
        self.master = parse_master(self.spec.master)
        self.plan = task_plan(scenario.workers.n, self.spec.agents_per_task)
        self.session: Optional[SparkRun] = None
        self._owns_session = False
        self.stage: Optional[BarrierStage] = None
        self.handles: list[SparkAgentHandle] = []

    @property
    def tasks(self) -> int:
        return len(self.plan)

    def check(self) -> list[str]:
        problems = super().check()
        try:
            check_gpu_request(self.master, self.spec.gpus_per_task)
        except SparkSetupError as err:
            problems.append(str(err))
        if self.scenario.device == "cuda" and self.spec.gpus_per_task <= 0:
            problems.append("device: cuda on runtime spark: Spark hands each task its GPU; set "
                            "runtime.spark.gpus_per_task (e.g. 1)")
        slots = task_slots(self.master)
        if slots is not None and self.tasks > slots:
            problems.append(
                f"runtime.spark: {self.tasks} barrier tasks (workers.n={self.scenario.workers.n}, agents_per_task="
                f"{self.spec.agents_per_task}) but master {self.master.url!r} offers {slots} task slots; raise "
                f"agents_per_task to at least {math.ceil(self.scenario.workers.n / slots)} or give the master more cores")
        return problems

    def applied(self) -> dict:
        out = super().applied()
        out["network_shaping"] = ("not applied in Spark mode: agents reach the PS over the cluster's network "
                                  "as it is (link profiles are refused)")
        out["spark"] = {"master": self.spec.master, "tasks": self.tasks,
                        "agents_per_task": self.spec.agents_per_task, "gpus_per_task": self.spec.gpus_per_task,
                        "barrier": True, "data": "RDD partitioned by barrier task"}
        return out

    # -- where the PS listens --------------------------------------------------------------------
    def _driver_host(self) -> str:
        if self.spec.driver_host:
            return self.spec.driver_host
        if self.master.is_local:
            return "127.0.0.1"
        return socket.gethostbyname(socket.gethostname())

    def ps_bind(self) -> str:
        return "tcp://127.0.0.1:0" if self.master.is_local and not self.spec.driver_host else "tcp://0.0.0.0:0"

    def agent_endpoint(self, bound: str) -> str:
        port = urlsplit(bound).port
        return f"tcp://{self._driver_host()}:{port}"

    # -- life cycle --------------------------------------------------------------------------------
    def _session(self) -> SparkRun:
        """The run's Spark session; an already running SparkContext on the same master is reused
        (and left running at cleanup), e.g. a notebook's or a test suite's."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        from .session import wait_for_slots
        active = SparkContext._active_spark_context
        if active is not None:
            if active.master != self.spec.master:
                raise SparkSetupError(f"runtime.spark.master={self.spec.master!r} but this process already runs "
                                      f"a SparkContext for {active.master!r}; stop it or use that master")
            slots = wait_for_slots(active, self.master, self.tasks, self.spec.slot_timeout)
            return SparkRun(SparkSession(active), self.master, {}, slots)
        self._owns_session = True
        return open_session(self.spec.master, tasks=self.tasks, app_name=f"edgebed-{self.scenario.name}",
                            run_dir=self.run_dir, gpus_per_task=self.spec.gpus_per_task,
                            discovery_script=self.spec.gpu_discovery_script, log_level=self.spec.log_level,
                            ui=self.spec.ui, conf={**numerics_conf(self.scenario.numerics), **self.spec.spark_conf()},
                            local_ip=self.spec.driver_host, slot_timeout=self.spec.slot_timeout)

    def training_rdd(self, sc):
        """The scenario's training shards as an RDD with one partition per barrier task."""
        from ....data import Partition, load_dataset
        sc_ = self.scenario
        ds = load_dataset(sc_.dataset, sc_.seed)
        shards = Partition.for_spec(ds.train_y, sc_.workers.n, sc_.dataset, sc_.seed, ds.users)
        records = list(shard_records(ds.train_x, ds.train_y, shards, self.plan))
        return (sc.parallelize(records, max(1, min(self.tasks, len(records))))
                .partitionBy(self.tasks, _identity))

    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        devices = [s.device for s in specs]
        if sorted(devices) != list(range(self.scenario.workers.n)):
            raise SparkSetupError(f"the Spark runtime starts all {self.scenario.workers.n} devices in one "
                                  f"barrier stage; got specs for {len(devices)} devices")
        addresses = {s.ps_address for s in specs}
        if len(addresses) != 1:
            raise SparkSetupError(f"all agents of a barrier stage talk to one PS, got {sorted(addresses)}")
        self.session = self._session()
        sc = self.session.sc
        env = {s.device: s.environment() for s in specs}
        cfg = TaskConfig(addresses.pop(), self.plan, env, self.spec.gpus_per_task > 0, self.agent_fn)
        self.stage = BarrierStage(sc, self.training_rdd(sc), barrier_task(cfg),
                                  f"edgebed {self.scenario.name}: {len(specs)} agents in {self.tasks} tasks").start()
        by_device = {d: SparkAgentHandle(d, self.stage) for d in devices}
        self.handles = [by_device[s.device] for s in specs]
        return list(self.handles)

    def cleanup(self) -> None:
        """Cancel the stage if it still runs and stop the session this runtime started (idempotent)."""
        try:
            if self.stage is not None and not self.stage.done.is_set():
                self.stage.cancel(signal.SIGKILL)
                self.stage.join(30)
        finally:
            if self.session is not None and self._owns_session:
                self.session.stop()
            self.session = None


def _identity(key: int) -> int:
    return key
