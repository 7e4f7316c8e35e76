"""`edgebed clean --all` removes labelled docker objects — scoped by run-id prefix to objects this test
created, because other people's live runs on this host carry the same labels."""
import subprocess
import sys
import uuid

import pytest

from edgebed.emulator.runtimes.docker import images
from tests.capabilities import require_docker

pytestmark = [pytest.mark.docker, pytest.mark.timeout(120)]


def test_clean_all_removes_labelled_containers_and_networks_of_matching_runs(tmp_path):
    require_docker()
    import docker
    client = docker.from_env(timeout=60)
    tag = f"cleanall-{uuid.uuid4().hex[:8]}"
    doomed, spared = f"{tag}-a-20250101-000000", f"keep{tag}-b-20250101-000000"   # spared doesn't match
    image = images.build("offline", client).name      # imported here when this engine has none yet
    made = []
    try:
        for rid in (doomed, spared):
            labels = {"edgebed": "1", "edgebed.run": rid, "edgebed.run_dir": str(tmp_path / rid)}
            made.append(client.networks.create(f"edgebed-{rid}", labels=labels))
            made.append(client.containers.create(image, command=["true"], name=f"edgebed-{rid}-0000",
                                                 labels=labels, network=f"edgebed-{rid}"))
        out = subprocess.run([sys.executable, "-m", "edgebed.cli", "clean", "--all", "--runs", str(tmp_path),
                              "--prefix", tag], capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr
        assert f"{doomed}: docker: removed 1 containers, 1 networks" in out.stdout, out.stdout
        assert spared not in out.stdout
        assert client.containers.list(all=True, filters={"label": f"edgebed.run={doomed}"}) == []
        assert client.networks.list(filters={"label": f"edgebed.run={doomed}"}) == []
        assert len(client.containers.list(all=True, filters={"label": f"edgebed.run={spared}"})) == 1
        assert len(client.networks.list(filters={"label": f"edgebed.run={spared}"})) == 1
    finally:   # only what this test made, by its own labels
        from edgebed.emulator.runtimes.docker.clean import clean_docker
        for rid in (doomed, spared):
            clean_docker(rid, client=client)
