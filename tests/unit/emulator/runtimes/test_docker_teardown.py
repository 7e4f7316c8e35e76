"""Docker teardown order and leak detection, against an engine double modelled on dockerd 20.10: a
container's endpoint is released by the engine when it handles the container's exit; the double
makes a ``network disconnect`` of a container that still runs or is exiting (racing that release)
leave the network's endpoint count up with no endpoint behind it ("has active endpoints", nothing to
force-delete: what issue 36 saw; that the race causes it is the hypothesis this order rules out); an
endpoint left without its container is listed and is force-deleted by name."""
from __future__ import annotations

import pytest

from edgebed.emulator import cleanup
from edgebed.emulator.runtimes.docker import clean as docker_clean

pytestmark = pytest.mark.timeout(30)
RUN = "r-20260101-000000"


class Engine:
    def __init__(self, n, stubborn=False, state="running"):
        self.log: list[tuple] = []
        self.attached: dict[str, set] = {"net": set()}
        self.stale: set[str] = set()      # endpoints whose container is gone (listed, deletable by name)
        self.phantom = 0                  # endpoint count with no endpoint: only a restart clears it
        self.containers = {f"c{d}": Container(self, f"c{d}", f"edgebed-{RUN}-{d:04d}", state) for d in range(n)}
        for c in self.containers.values():
            self.attached["net"].add(c.name)
        self.networks = {"net": Network(self, "net")}
        self.stubborn = stubborn
        self.api = self

    def disconnect_container_from_network(self, name, net_id, force=False):
        self.log.append(("force-delete endpoint", name))
        self.stale.discard(name)
        self.attached[net_id].discard(name)


class Container:
    def __init__(self, engine, cid, name, state="running"):
        self.engine, self.id, self.name, self.state = engine, cid, name, state
        self.attrs = {"Names": [f"/{name}"], "State": state}

    def kill(self, signal="SIGKILL"):
        if self.state == "exited":
            raise RuntimeError("409 Client Error: Conflict: container is not running")
        self.state = "exiting"
        self.engine.log.append(("kill", self.name))

    def wait(self, timeout=None):
        if self.state == "exiting":       # the engine handles the exit: releases the endpoint itself
            self.state = "exited"
            self.engine.attached["net"].discard(self.name)
            self.engine.log.append(("exited", self.name))
        return {"StatusCode": 137}

    def remove(self, force=False):
        e = self.engine
        if self.state != "exited":
            self.kill()
            self.wait()
        if self.name in e.attached["net"]:        # removed while still listed: its endpoint goes stale
            e.attached["net"].discard(self.name)
            e.stale.add(self.name)
        del e.containers[self.id]
        e.log.append(("remove", self.name))


class Network:
    def __init__(self, engine, nid):
        self.engine, self.id, self.name = engine, nid, f"edgebed-{RUN}"
        self.attrs = {"Containers": {}}

    def disconnect(self, cid, force=False):
        e = self.engine
        c = e.containers[cid]
        e.log.append(("disconnect", c.name, c.state))
        if c.name in e.attached["net"] and c.state != "exited":   # races the container's own release
            e.phantom += 1
        e.attached["net"].discard(c.name)

    def reload(self):
        e = self.engine
        by_name = {c.name: c.id for c in e.containers.values()}
        self.attrs = {"Containers": {by_name.get(n, f"ep-{n}"): {"Name": n}
                                     for n in e.attached["net"] | e.stale}}

    def remove(self):
        e = self.engine
        if e.stubborn or e.stale or e.attached["net"] or e.phantom:
            raise RuntimeError("error while removing network: network edgebed-r has active endpoints")
        del e.networks[self.id]
        e.log.append(("remove network", self.name))


class Lists:
    def __init__(self, engine, kind):
        self.engine, self.kind = engine, kind

    def list(self, **kw):
        return list(getattr(self.engine, self.kind).values())


class Client:
    def __init__(self, engine):
        self.engine = engine
        self.containers = Lists(engine, "containers")
        self.networks = Lists(engine, "networks")
        self.api = engine


@pytest.mark.parametrize("state", ["running", "exiting", "paused", "exited"])
def test_no_container_is_disconnected_before_the_engine_saw_it_exit_and_the_network_goes(monkeypatch, state):
    """At the end of a run the agents got SIGTERM and, under load, many are still exiting when the
    teardown starts; crashed devices are paused. Disconnecting those raced their own endpoint release
    and left the network's endpoint count up (issue 36): the teardown kills and waits first."""
    monkeypatch.setattr(docker_clean, "NETWORK_RETRIES", (0.0,) * 3)
    engine = Engine(24, state=state)
    report = docker_clean.clean_docker(RUN, client=Client(engine))
    assert report["leaked"] == {} and report["errors"] == [], report
    assert len(report["containers"]) == 24 and report["networks"] == [f"edgebed-{RUN}"]
    assert engine.phantom == 0 and not engine.stale
    assert [e for e in engine.log if e[0] == "disconnect" and e[2] != "exited"] == []
    # which took the force-disconnect path, in the report: none where the engine released each endpoint
    # at the exit it handled; all where the containers had exited before yet were still listed
    forced = sorted(e[1] for e in engine.log if e[0] == "disconnect")
    assert len(report["force_disconnected"]) == len(forced) == (24 if state == "exited" else 0), report


def test_a_stale_endpoint_is_force_deleted_by_container_name_then_the_network_removed(monkeypatch):
    monkeypatch.setattr(docker_clean, "NETWORK_RETRIES", (0.0,) * 3)
    engine = Engine(5)
    engine.stale.add(f"edgebed-{RUN}-0099")            # left by an earlier, interrupted teardown
    record = {"containers": {"99": {"name": f"edgebed-{RUN}-0099"}}}
    report = docker_clean.clean_docker(RUN, client=Client(engine), record=record)
    assert ("force-delete endpoint", f"edgebed-{RUN}-0099") in engine.log
    assert report["networks"] == [f"edgebed-{RUN}"] and report["leaked"] == {}


def test_a_network_that_stays_is_a_leak_said_with_what_to_do(monkeypatch):
    monkeypatch.setattr(docker_clean, "NETWORK_RETRIES", (0.0,) * 3)
    engine = Engine(3, stubborn=True)
    report = docker_clean.clean_docker(RUN, client=Client(engine))
    assert report["leaked"] == {"networks": [f"edgebed-{RUN}"]}
    assert any("has active endpoints" in e for e in report["errors"])
    assert report["phantom"] == [f"edgebed-{RUN}"]      # it lists no endpoint, yet refuses removal
    text = cleanup.describe({"run_dir": "runs/r", "docker": report})
    assert "docker: NOT clean" in text and "no longer exists" in text and "restart the Docker engine" in text
    text = docker_clean.leak_advice("runs/r", report["leaked"])
    assert "`edgebed clean runs/r` to retry" in text


def test_clean_all_names_a_retry_that_works_when_the_run_directory_is_gone(monkeypatch, tmp_path):
    """`edgebed clean --all` found a labelled network whose run directory no container names: the
    advice used to read "edgebed clean ?". It names the run id, and says when only a restart helps."""
    monkeypatch.setattr(docker_clean, "NETWORK_RETRIES", (0.0,))
    monkeypatch.setattr(docker_clean, "labelled_runs", lambda client, prefix="": {RUN: None})
    engine = Engine(0, stubborn=True)                 # refuses removal, lists no endpoint
    text = cleanup.describe_all(cleanup.clean_all([tmp_path], client=Client(engine)))
    assert "edgebed clean ?" not in text and "edgebed clean None" not in text
    assert f"{RUN}: docker: NOT clean" in text
    assert "counts an endpoint on it that no longer exists" in text and "restart the Docker engine" in text
    advice = docker_clean.leak_advice(None, {"networks": [f"edgebed-{RUN}"]}, RUN)   # endpoints listed
    assert f"`edgebed clean --all --prefix {RUN}`" in advice and "?" not in advice
