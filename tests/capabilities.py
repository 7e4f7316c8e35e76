"""Capability checks for system tests: skip on a laptop without the capability, fail in CI.

A test (or fixture) calls ``require_docker()`` etc. first. When the capability is missing the test is
skipped, unless ``EDGEBED_REQUIRE_CAPS=1`` is set (CI sets it): then it fails with what is missing and
how to get it, so a green CI always means the docker, tc and Spark tests really ran.
"""
from __future__ import annotations

import functools
import os
import shutil

import pytest


def strict() -> bool:
    """True when a missing capability must fail the test instead of skipping it (CI)."""
    return os.environ.get("EDGEBED_REQUIRE_CAPS", "").strip().lower() in ("1", "true", "yes")


def require(cond: bool, what: str, hint: str = "") -> None:
    """Skip (or, with EDGEBED_REQUIRE_CAPS=1, fail) the calling test unless ``cond`` holds.

    ``what`` names the missing capability ("a running Docker engine"); ``hint`` says how to get it."""
    if cond:
        return
    msg = f"needs {what}" + (f" ({hint})" if hint else "")
    if strict():
        pytest.fail(f"EDGEBED_REQUIRE_CAPS=1 but this test {msg}", pytrace=False)
    pytest.skip(msg)


@functools.lru_cache(maxsize=None)
def _docker_problem() -> str:
    try:
        import docker  # noqa: F401
    except ImportError:
        return "the docker Python package is not installed: pip install -e '.[docker]'"
    try:
        client = docker.from_env(timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as err:  # any failure to reach the engine means: no docker here
        return f"the Docker engine does not answer ({type(err).__name__}: {err}); run `make provision`"
    return ""


def docker_available() -> bool:
    return not _docker_problem()


def require_docker() -> None:
    """A reachable Docker engine and the docker SDK."""
    problem = _docker_problem()
    require(not problem, "a running Docker engine", problem)


def require_root() -> None:
    """Root (network namespaces, tc qdiscs) and pyroute2."""
    require(os.geteuid() == 0, "root (network namespaces and tc)", "run the tests as root, e.g. in CI")
    try:
        import pyroute2  # noqa: F401
        ok = True
    except ImportError:
        ok = False
    require(ok, "pyroute2", "pip install -e '.[docker]'")


def require_spark() -> None:
    """pyspark importable and a Java runtime on PATH."""
    try:
        import pyspark  # noqa: F401
        has_pyspark = True
    except ImportError:
        has_pyspark = False
    require(has_pyspark, "pyspark", "pip install -e '.[spark]'")
    java = shutil.which("java") or (os.environ.get("JAVA_HOME") and
                                    os.path.exists(os.path.join(os.environ["JAVA_HOME"], "bin", "java")))
    require(bool(java), "a Java runtime for Spark", "apt-get install -y default-jre-headless (make provision)")


_SWARM: dict = {}


def require_swarm() -> dict:
    """The two-node test swarm (``.ci/swarm-up``: two extra engines in their own network namespaces;
    the main dockerd is never a node), brought up once per test process; returns its endpoints
    (MANAGER, WORKER, HOST_ADDR). Torn down at exit if this process brought it up, unless
    EDGEBED_SWARM_KEEP=1."""
    import atexit
    import subprocess
    from pathlib import Path
    require_docker()
    require_root()
    manager = _SWARM.get("env", {}).get("MANAGER", "")
    if manager and not Path(manager.removeprefix("unix://")).exists():
        # torn down since (another test process's exit ran .ci/swarm-down): bring it up again
        print(f"require_swarm: the test swarm's manager socket {manager} is gone; bringing it up again")
        _SWARM.pop("env")
    if "env" not in _SWARM:
        root = Path(__file__).resolve().parents[1]
        env_file = Path("/run/edgebed-swarm/env")
        was_up = env_file.exists()
        try:
            out = subprocess.run(["bash", str(root / ".ci/swarm-up")], capture_output=True, text=True, timeout=150)
            ok, why = out.returncode == 0, (out.stdout + out.stderr).strip()[-800:]
        except subprocess.TimeoutExpired:
            ok, why = False, ".ci/swarm-up took more than 150 s"
        require(ok, "a two-node test swarm (.ci/swarm-up)", why)
        _SWARM["env"] = dict(line.split("=", 1) for line in env_file.read_text().split())
        if not was_up and os.environ.get("EDGEBED_SWARM_KEEP") != "1":
            atexit.register(subprocess.run, ["bash", str(root / ".ci/swarm-down")], capture_output=True, timeout=120)
    return _SWARM["env"]
