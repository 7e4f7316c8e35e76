"""CPU quotas on a device's first push (docker and swarm share this): who is throttled when, and an
engine error on one device recorded as a warning while the others still get theirs."""
from types import SimpleNamespace

import pytest

from edgebed.emulator.runtimes.docker.quotas import QuotaOnFirstPush
from edgebed.emulator.runtimes.docker.runtime import DockerRuntime
from edgebed.emulator.runtimes.swarm.runtime import SwarmRuntime

pytestmark = pytest.mark.timeout(30)


class Fake(QuotaOnFirstPush):
    def __init__(self, pending, broken=()):
        self._quota_pending = dict(pending)
        self.handles = [SimpleNamespace(device=d, returncode=None) for d in pending]
        self.record = {"warnings": []}
        self.applied, self.broken, self.samples = {}, set(broken), 0

    def _set_quota(self, handle, device, cpus):
        if device in self.broken:
            raise OSError("engine said no")
        self.applied[device] = cpus

    def sample_counters(self):
        self.samples += 1


def ps_with(pushes):
    return SimpleNamespace(devices={d: SimpleNamespace(pushes=n) for d, n in pushes.items()})


def test_only_devices_that_pushed_are_throttled_then_the_rest_on_demand():
    rt = Fake({0: 1.0, 1: 0.25, 2: 0.1}, broken={2})
    rt.drive(ps_with({0: 1, 1: 0}), 0.0)
    assert rt.applied == {0: 1.0} and rt.samples == 1 and set(rt._quota_pending) == {1, 2}
    rt.apply_quotas(all_pending=True)
    assert rt.applied == {0: 1.0, 1: 0.25} and not rt._quota_pending
    assert rt.record["warnings"] == ["device 2: CPU quota not applied: engine said no"]


def test_both_container_runtimes_use_it():
    assert issubclass(DockerRuntime, QuotaOnFirstPush) and issubclass(SwarmRuntime, QuotaOnFirstPush)
    assert DockerRuntime.drive is SwarmRuntime.drive is QuotaOnFirstPush.drive
