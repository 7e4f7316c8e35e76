"""Spark session for a run: master parsing, configuration, slot check, GPU resources, quiet logs.

``open_session`` turns a master (``local[N]``, ``local-cluster[W,C,M]``, ``spark://…``, ``k8s://…``)
and what the barrier stage needs (tasks, GPUs per task) into a started ``SparkSession`` whose JVM
writes its console output and logs to ``run_dir/spark.log`` instead of the terminal, and checks up
front that the cluster offers as many task slots as the barrier stage has tasks (Spark itself would
only fail after a long retry loop). ``SparkRun.stop`` ends the context and the JVM it launched.

Pitfalls measured on this kind of machine, handled here:
- the driver must advertise a loopback address (``SPARK_LOCAL_IP=127.0.0.1``) for local masters;
- python workers run ``python3`` from ``PATH`` unless ``PYSPARK_PYTHON`` names the interpreter, so a
  venv's packages would be missing on executors;
- a per-task GPU request in plain ``local[N]`` makes a barrier stage wait forever without an error:
  refused here; ``local-cluster`` with worker GPU resources works.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..base import RuntimeError_

SPARK_LOG = "spark.log"
EXECUTOR_LOGS = "spark-executors"
LIGHT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"     # local-cluster executor logs, moved here at stop
LOCAL_KINDS = ("local", "local-cluster")

# Spark's example discovery script (examples/src/main/scripts/getGpusResources.sh), written into the
# run directory when the scenario names none.
NVIDIA_DISCOVERY = """#!/usr/bin/env bash
# Spark GPU discovery: prints {"name": "gpu", "addresses": ["0", ...]} from nvidia-smi.
ADDRS=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed -e ':a' -e 'N' -e'$!ba' -e 's/\\n/","/g')
echo {\\"name\\": \\"gpu\\", \\"addresses\\":[\\"$ADDRS\\"]}
"""


class SparkSetupError(RuntimeError_):
    """The Spark part of a scenario can't work: says which setting, which numbers and what to do."""


@dataclass(frozen=True)
class Master:
    """A parsed master URL. ``cores`` is the total task CPUs a local master offers (None: unknown)."""
    url: str
    kind: str                       # local | local-cluster | standalone | k8s | yarn
    workers: Optional[int] = None   # local-cluster: W
    cores_per_worker: Optional[int] = None
    memory_mb: Optional[int] = None

    @property
    def cores(self) -> Optional[int]:
        if self.kind == "local" or self.kind == "local-cluster":
            return (self.workers or 1) * (self.cores_per_worker or 1)
        return None

    @property
    def is_local(self) -> bool:
        return self.kind in LOCAL_KINDS


MASTER_FORMS = ("local[N], local-cluster[W,C,M] (W worker JVMs with C cores and M MiB each), "
                "spark://host:7077, k8s://https://host:443 or yarn")


def _parse(url: str) -> Master | str:
    u = url.strip()
    if u == "local":
        return Master(u, "local", 1, 1)
    m = re.fullmatch(r"local\[(\*|\d+)(?:\s*,\s*\d+)?\]", u)
    if m:
        n = (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))
        return Master(u, "local", 1, n) if n >= 1 else "local[N] needs N ≥ 1"
    m = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]", u)
    if m:
        w, c, mem = (int(g) for g in m.groups())
        if w < 1 or c < 1 or mem < 1:
            return "local-cluster[W,C,M] needs W, C, M ≥ 1"
        return Master(u, "local-cluster", w, c, mem)
    for prefix, kind in (("spark://", "standalone"), ("k8s://", "k8s")):
        if u.startswith(prefix):
            return Master(u, kind)
    if u == "yarn":
        return Master(u, "yarn")
    return f"{url!r} is not a Spark master; use {MASTER_FORMS}"


def master_problem(url: str) -> Optional[str]:
    """Why ``url`` is not a usable master, or None."""
    got = _parse(url)
    return got if isinstance(got, str) else None


def parse_master(url: str) -> Master:
    """Parse a Spark master URL; raises SparkSetupError naming the accepted forms."""
    got = _parse(url)
    if isinstance(got, str):
        raise SparkSetupError(f"runtime.spark.master: {got}")
    return got


def check_gpu_request(master: Master, gpus_per_task: float) -> None:
    """Refuse GPU requests Spark can't honour on this master (raises SparkSetupError)."""
    if gpus_per_task <= 0:
        return
    if gpus_per_task > 1 and not float(gpus_per_task).is_integer():
        raise SparkSetupError(f"runtime.spark.gpus_per_task={gpus_per_task:g}: Spark accepts a fraction "
                              f"≤ 1 (several tasks share one GPU) or a whole number of GPUs")
    if master.kind == "local":
        raise SparkSetupError(
            f"runtime.spark.gpus_per_task={gpus_per_task:g} with master {master.url!r}: plain local mode "
            f"has no executors that own GPU resources, and a barrier stage whose tasks ask for a GPU then "
            f"waits forever for slots without any error (measured). Use local-cluster[W,C,M] (its workers "
            f"get spark.worker.resource.gpu.*), a real cluster, or gpus_per_task: 0 for CPU training")


def task_slots(master: Master, task_cpus: int = 1) -> Optional[int]:
    """Barrier task slots a local master offers, known without starting Spark (None: ask the cluster)."""
    if master.kind == "local":
        return (master.cores or 1) // task_cpus
    if master.kind == "local-cluster":
        return (master.workers or 1) * ((master.cores_per_worker or 1) // task_cpus)
    return None


def slot_error(master: Master, tasks: int, slots: int, waited: Optional[float] = None) -> SparkSetupError:
    after = f" after waiting {waited:.0f} s for executors" if waited is not None else ""
    return SparkSetupError(
        f"the barrier stage needs {tasks} task slots (one per task, all at once) but master "
        f"{master.url!r} offers {slots}{after}. Barrier tasks can't queue: raise runtime.spark."
        f"agents_per_task (tasks = ceil(workers.n / agents_per_task)), lower workers.n, or give the master "
        f"more cores (local[N], local-cluster[W,C,M], executor cores/instances)")


def build_conf(master: Master, *, app_name: str, gpus_per_task: float = 0.0,
               discovery_script: Optional[str] = None, ui: bool = False,
               extra: Optional[dict[str, Any]] = None) -> dict[str, str]:
    """The Spark configuration for a run (pure: no JVM). ``extra`` entries win over everything."""
    conf: dict[str, str] = {
        "spark.master": master.url,
        "spark.app.name": app_name,
        "spark.ui.enabled": str(ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        # Spark re-checks barrier slots every 15 s up to 40 times (10 min) before failing the job.
        # The slot check in open_session already waited for executors, so fail fast here.
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "10",
        # Barrier stages and dynamic allocation don't mix (Spark refuses the job).
        "spark.dynamicAllocation.enabled": "false",
        # One torch thread per agent: agents already run one per core, more threads oversubscribe them.
        "spark.executorEnv.OMP_NUM_THREADS": "1",
        "spark.executorEnv.MKL_NUM_THREADS": "1",
        "spark.executorEnv.PYTHONUNBUFFERED": "1",
    }
    if master.is_local:
        # Executors on this machine import edgebed from this checkout even when it isn't installed.
        conf["spark.executorEnv.PYTHONPATH"] = str(Path(__file__).resolve().parents[4])   # the repository
        # The JVMs only move the training partitions and task results (agents and PS are Python), so
        # C2 compilation buys nothing and costs start-up CPU on a small machine: measured here on 2
        # busy cores, local-cluster[2,1,1024] came up in 31 s instead of 79 s.
        conf["spark.driver.extraJavaOptions"] = LIGHT_JVM
        conf["spark.executor.extraJavaOptions"] = LIGHT_JVM
    if gpus_per_task > 0:
        check_gpu_request(master, gpus_per_task)
        script = discovery_script or ""
        conf["spark.task.resource.gpu.amount"] = f"{gpus_per_task:g}"
        if master.kind == "local-cluster":
            per_executor = max(1, math.ceil((master.cores_per_worker or 1) * gpus_per_task))
            conf["spark.worker.resource.gpu.amount"] = str(per_executor)
            conf["spark.worker.resource.gpu.discoveryScript"] = script
        else:
            cores = int((extra or {}).get("spark.executor.cores", 1))
            per_executor = max(1, math.ceil(cores * gpus_per_task))
        conf["spark.executor.resource.gpu.amount"] = str(per_executor)
        conf["spark.executor.resource.gpu.discoveryScript"] = script
        if master.kind == "k8s":
            conf["spark.executor.resource.gpu.vendor"] = "nvidia.com"
    conf.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (extra or {}).items()})
    return conf


def numerics_conf(profile: str) -> dict[str, str]:
    """The executors' environment for a numerics profile (``edgebed/numerics.py``): Python workers
    start with it, before torch runs there."""
    from ....numerics import environment
    return {f"spark.executorEnv.{k}": v for k, v in environment(profile).items()}


def write_discovery_script(directory: Path) -> Path:
    """Write the nvidia-smi GPU discovery script into ``directory`` (executable) and return its path."""
    path = Path(directory) / "gpu_discovery.sh"
    path.write_text(NVIDIA_DISCOVERY)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@contextlib.contextmanager
def _environ(**values: Optional[str]):
    """Set environment variables for the duration (the JVM and SparkContext read them at start)."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _quiet_pyspark_imports() -> None:
    # pyspark 4.x imports pyspark.testing.utils while converting values, which warns once that
    # pandas ≥ 3 is not fully supported. edgebed hands Spark no pandas objects; import it here
    # under a narrow filter so the warning neither reaches the terminal nor fails `-W error` tests.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"PySpark does not yet fully support pandas",
                                category=FutureWarning)
        import pyspark.testing.utils  # noqa: F401


@dataclass
class SparkRun:
    """A started Spark session plus what must be undone at the end."""
    spark: Any                                   # pyspark.sql.SparkSession
    master: Master
    conf: dict[str, str]
    slots: int
    log_path: Optional[Path] = None
    _gateway: Any = None                         # the py4j gateway we launched (None: reused)
    _log_file: Any = None
    _log_handler: Optional[logging.Handler] = None
    app_id: str = ""
    _sigint: Any = None                          # SIGINT handler before SparkContext replaced it
    _stopped: bool = field(default=False, repr=False)

    @property
    def sc(self):
        return self.spark.sparkContext

    def stop(self) -> None:
        """Stop the context and, if this run launched it, the JVM with its executors (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        from pyspark import SparkContext
        try:
            self.spark.stop()
        finally:
            if self._gateway is not None:
                _shutdown_gateway(self._gateway)
                with SparkContext._lock:
                    if SparkContext._gateway is self._gateway:
                        SparkContext._gateway = None
                        SparkContext._jvm = None
            if self._log_handler is not None:
                logging.getLogger("py4j").removeHandler(self._log_handler)
                self._log_handler.close()
            if self._log_file is not None:
                self._log_file.close()
            self._collect_executor_logs()
            if self._sigint is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, self._sigint)

    def _collect_executor_logs(self) -> None:
        # local-cluster workers write executor stdout/stderr (python workers' output included) under
        # $SPARK_HOME/work/<app id>/<executor>/; move them next to spark.log once the JVMs are gone.
        if self.master.kind != "local-cluster" or self.log_path is None or not self.app_id:
            return
        from pyspark.find_spark_home import _find_spark_home
        src = Path(_find_spark_home()) / "work" / self.app_id
        if src.is_dir():
            dest = self.log_path.parent / EXECUTOR_LOGS
            dest.mkdir(exist_ok=True)
            shutil.move(str(src), str(dest / self.app_id))


def _shutdown_gateway(gateway) -> None:
    try:
        gateway.shutdown()
    except Exception:  # the JVM may already be gone; what matters is that the process ends below
        pass
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    # The JVM exits when its stdin pipe closes (see pyspark.java_gateway).
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=15)
    except Exception:
        proc.kill()
        proc.wait(timeout=5)


def available_slots(sc) -> int:
    """Tasks the cluster can run at once right now for the default resource profile."""
    jsc = sc._jsc.sc()
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))


def wait_for_slots(sc, master: Master, tasks: int, timeout: float) -> int:
    """Wait until executors offer ``tasks`` slots; raises SparkSetupError with the numbers if not."""
    t0 = time.monotonic()
    while True:
        slots = available_slots(sc)
        if slots >= tasks:
            return slots
        waited = time.monotonic() - t0
        if waited >= timeout:
            raise slot_error(master, tasks, slots, waited)
        time.sleep(0.25)


def open_session(master_url: str, *, tasks: int, app_name: str = "edgebed",
                 run_dir: Optional[Path] = None, gpus_per_task: float = 0.0,
                 discovery_script: Optional[str] = None, log_level: str = "WARN", ui: bool = False,
                 conf: Optional[dict[str, Any]] = None, local_ip: Optional[str] = None,
                 slot_timeout: float = 60.0) -> SparkRun:
    """Start Spark for a barrier stage of ``tasks`` tasks and check that they all fit at once.

    With ``run_dir`` the JVM's console output (Spark's log4j output, executor and python worker
    stderr) and py4j's log go to ``run_dir/spark.log`` (local-cluster executors' own logs to
    ``run_dir/spark-executors/`` at stop); without it they stay on the terminal.
    ``local_ip`` defaults to 127.0.0.1 for local masters. Raises SparkSetupError before starting
    anything when the numbers can't work, and after start-up when the cluster has too few slots."""
    master = parse_master(master_url)
    if tasks < 1:
        raise SparkSetupError(f"a barrier stage needs at least one task, got {tasks}")
    check_gpu_request(master, gpus_per_task)
    known = task_slots(master)
    if known is not None and tasks > known:
        raise slot_error(master, tasks, known)
    if gpus_per_task > 0 and not discovery_script:
        if run_dir is None:
            raise SparkSetupError("gpus_per_task > 0 needs a GPU discovery script or a run directory "
                                  "to write the default nvidia-smi one into")
        discovery_script = str(write_discovery_script(Path(run_dir)))
    settings = build_conf(master, app_name=app_name, gpus_per_task=gpus_per_task,
                          discovery_script=discovery_script, ui=ui, extra=conf)

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession
    _quiet_pyspark_imports()

    if SparkContext._active_spark_context is not None:
        active = SparkContext._active_spark_context.master
        raise SparkSetupError(f"a SparkContext for {active!r} is already running in this process; "
                              f"stop it first (one SparkContext per process), or hand it to the runtime")
    spark_conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    log_path = log_file = handler = None
    if run_dir is not None:
        log_path = Path(run_dir) / SPARK_LOG
        log_file = open(log_path, "ab")
        handler = logging.FileHandler(log_path)
        handler.setLevel(logging.WARNING)
        logging.getLogger("py4j").addHandler(handler)
    if local_ip is None and master.is_local:
        local_ip = "127.0.0.1"
    gateway = None
    # SparkContext replaces the SIGINT handler of the main thread (cancel all jobs, then
    # KeyboardInterrupt); the previous one is put back at stop.
    sigint = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    try:
        with _environ(SPARK_LOCAL_IP=local_ip, PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON") or sys.executable):
            if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
                popen = {"stdout": log_file, "stderr": log_file} if log_file is not None else None
                gateway = launch_gateway(spark_conf, popen_kwargs=popen)
            sc = SparkContext(conf=spark_conf, gateway=gateway)
        sc.setLogLevel(log_level)
        spark = SparkSession(sc)
        run = SparkRun(spark, master, settings, 0, log_path, gateway, log_file, handler, sc.applicationId, sigint)
    except BaseException:
        if gateway is not None:
            _shutdown_gateway(gateway)
            SparkContext._gateway = SparkContext._jvm = None
        if handler is not None:
            logging.getLogger("py4j").removeHandler(handler)
            handler.close()
        if log_file is not None:
            log_file.close()
        raise
    try:
        run.slots = wait_for_slots(sc, master, tasks, slot_timeout)
    except BaseException:
        run.stop()
        raise
    return run
