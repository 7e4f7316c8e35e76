"""A crash (docker pause) on a busy host: runc's "unable to freeze" is retried, other errors are not."""
from __future__ import annotations

import pytest

from edgebed.emulator.runtimes.docker.handles import ContainerHandle

pytestmark = pytest.mark.timeout(30)
BUSY = RuntimeError("500 Server Error: Cannot pause container c: OCI runtime pause failed: unable to freeze: unknown")


class Container:
    id = "c"

    def __init__(self, errors):
        self.errors, self.pauses = list(errors), 0

    def pause(self):
        self.pauses += 1
        if self.errors:
            raise self.errors.pop(0)


def test_a_freeze_that_does_not_settle_is_tried_again_and_the_device_is_frozen():
    c = Container([BUSY, BUSY])
    h = ContainerHandle(None, 0, c)
    h.freeze()
    assert h.frozen and c.pauses == 3


def test_other_pause_errors_and_a_freeze_that_never_settles_are_raised():
    h = ContainerHandle(None, 0, Container([RuntimeError("No such container: c")]))
    with pytest.raises(RuntimeError, match="No such container"):
        h.freeze()
    assert not h.frozen
    c = Container([BUSY] * 10)
    h = ContainerHandle(None, 0, c)
    with pytest.raises(RuntimeError, match="unable to freeze"):
        h.freeze(tries=3)
    assert not h.frozen and c.pauses == 3
