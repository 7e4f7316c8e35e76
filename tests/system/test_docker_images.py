"""`edgebed image build`: the offline image imports without a registry and runs the host's Python."""
import time

import pytest

from edgebed.emulator.runtimes.docker import images
from tests.capabilities import require_docker

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]


def test_offline_image_runs_agent_environment():
    require_docker()
    import docker
    client = docker.from_env()
    info = images.build("auto", client)
    assert info.kind == "offline" and info.action in ("found", "imported")
    assert "edgebed/agent:offline (offline)" in info.message
    img = client.images.get(info.name)
    assert img.labels["edgebed"] == "1" and img.labels["edgebed.image"] == "offline"
    t0 = time.monotonic()
    out = client.containers.run(info.name, [info.python, "-c", "import zmq, numpy, edgebed.device_agent; print('ok')"],
                                volumes=info.mounts, environment=info.env, network_mode="none", remove=True)
    assert out.strip() == b"ok"
    print(f"offline container start + imports: {time.monotonic() - t0:.2f} s")
    # every mount is read-only: the container cannot change the host's environment
    assert all(m["mode"] == "ro" for m in info.mounts.values())


def test_rootfs_tarball_is_tiny_and_has_merged_usr_links():
    import io
    import tarfile
    data = images.rootfs_tarball()
    assert len(data) < 64 * 1024
    names = {m.name: m for m in tarfile.open(fileobj=io.BytesIO(data))}
    assert names["lib"].issym() and names["lib"].linkname == "usr/lib"
    assert names["tmp"].mode == 0o1777
