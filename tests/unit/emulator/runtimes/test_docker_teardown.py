"""Docker teardown order and leak detection, against an engine double that behaves like dockerd 20.10
at scale: a container removed while still attached leaves a stale endpoint, and the network then
refuses removal ("has active endpoints") until that endpoint is force-deleted by container name."""
from __future__ import annotations

import pytest

from edgebed.emulator import cleanup
from edgebed.emulator.runtimes.docker import clean as docker_clean

pytestmark = pytest.mark.timeout(30)
RUN = "r-20260101-000000"


class Engine:
    def __init__(self, n, stubborn=False):
        self.log: list[tuple] = []
        self.attached: dict[str, set] = {"net": set()}
        self.stale: set[str] = set()
        self.containers = {f"c{d}": Container(self, f"c{d}", f"edgebed-{RUN}-{d:04d}") for d in range(n)}
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
    def __init__(self, engine, cid, name):
        self.engine, self.id, self.name = engine, cid, name
        self.attrs = {"Names": [f"/{name}"]}

    def remove(self, force=False):
        e = self.engine
        if self.name in e.attached["net"]:        # removed while attached: its endpoint goes stale
            e.attached["net"].discard(self.name)
            e.stale.add(self.name)
        del e.containers[self.id]
        e.log.append(("remove", self.name))


class Network:
    def __init__(self, engine, nid):
        self.engine, self.id, self.name = engine, nid, f"edgebed-{RUN}"
        self.attrs = {"Containers": {}}

    def disconnect(self, cid, force=False):
        c = self.engine.containers[cid]
        self.engine.attached["net"].discard(c.name)
        self.engine.log.append(("disconnect", c.name))

    def reload(self):
        pass

    def remove(self):
        e = self.engine
        if e.stubborn or e.stale or e.attached["net"]:
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


def test_each_container_is_detached_before_it_is_removed_and_the_network_goes(monkeypatch):
    monkeypatch.setattr(docker_clean, "NETWORK_RETRIES", (0.0,) * 3)
    engine = Engine(20)
    report = docker_clean.clean_docker(RUN, client=Client(engine))
    assert len(report["containers"]) == 20 and report["networks"] == [f"edgebed-{RUN}"]
    assert report["leaked"] == {} and report["errors"] == []
    for d in range(20):
        name = f"edgebed-{RUN}-{d:04d}"
        assert engine.log.index(("disconnect", name)) < engine.log.index(("remove", name))
    assert not engine.stale


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
    text = cleanup.describe({"run_dir": "runs/r", "docker": report})
    assert "docker: NOT clean" in text and "edgebed clean runs/r" in text and "restart the Docker engine" in text
