"""Agent images: ``edgebed image build`` — an offline image plus host mounts, or the Dockerfile build.

Two ways to get an image that can run ``python -m edgebed.device_agent``:

* ``offline`` (default; needs no registry): ``docker import`` of a tiny rootfs (directories, the
  merged-/usr symlinks, passwd/group) labelled ``edgebed.image=offline``. At run time the host's
  ``/usr``, ``/etc/ld.so.cache``, the Python installation, the venv and the project source are
  bind-mounted read-only at their own paths (``offline_mounts``), so the container runs exactly the
  interpreter and packages of the host — nothing is copied, and start-up costs what a process costs.
* ``dockerfile``: ``docker build`` of the repository's ``Dockerfile`` (``FROM python:3.11-slim``) for
  machines that reach a registry. Never chosen automatically: pulling a base image would contact a
  registry, which offline machines must not try.
"""
from __future__ import annotations

import io
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

LABEL = "edgebed"                       # every edgebed image, container and network carries it
OFFLINE_IMAGE = "edgebed/agent:offline"
DOCKERFILE_IMAGE = "edgebed/agent:latest"
PROJECT_ROOT = Path(__file__).resolve().parents[4]   # the repository (edgebed/emulator/runtimes/docker/ is 4 deep)
_ROOTFS_VERSION = "1"                  # bump when the tarball's contents change


@dataclass
class ImageInfo:
    """An agent image and how to run the agent in it (mounts and interpreter for the offline kind)."""
    name: str
    kind: str                           # "offline" | "dockerfile"
    python: str                         # interpreter path inside the container
    mounts: dict = field(default_factory=dict)    # host path → {"bind": path, "mode": "ro"}
    env: dict = field(default_factory=dict)
    action: str = "found"               # "found" | "imported" | "built"
    seconds: float = 0.0

    @property
    def message(self) -> str:
        """One line for the user: what was done."""
        how = {"found": "already present", "imported": f"imported an empty rootfs in {self.seconds:.1f} s",
               "built": f"built from Dockerfile in {self.seconds:.1f} s"}[self.action]
        extra = (f"; runs {self.python} with {len(self.mounts)} read-only host mounts"
                 if self.kind == "offline" else "")
        return f"image {self.name} ({self.kind}): {how}{extra}"


def offline_mounts() -> dict:
    """Host paths the offline image needs, bind-mounted read-only at the same path.

    /usr holds libc and every shared library the interpreter and torch link against (Debian's
    merged /usr; /lib, /lib64, /bin are symlinks in the rootfs); the Python installation the venv
    was made from (``sys.base_prefix``), the venv (``sys.prefix``) and the project source (editable
    install) complete the environment."""
    paths = ["/usr", "/etc/ld.so.cache", sys.base_prefix, sys.prefix, str(PROJECT_ROOT)]
    out: dict = {}
    for p in paths:
        rp = str(Path(p).resolve())
        if not Path(rp).exists() or any(rp == q or rp.startswith(q.rstrip("/") + "/") for q in out):
            continue
        out[rp] = {"bind": rp, "mode": "ro"}
    return out


def user_mounts(scenario, mounted: dict) -> dict:
    """The scenario's own files a device container reads, bind-mounted read-only at their host paths:
    the model's module directory (``model.path``, which the device imports from) and the data set's
    ``path`` / ``test_path`` (a file's directory), except what ``mounted`` already covers."""
    wanted = [scenario.model.path, scenario.dataset.path if scenario.dataset.source == "path" else None,
              scenario.dataset.test_path]
    out: dict = {}
    for p in filter(None, wanted):
        rp = Path(p).expanduser().resolve()
        rp = str(rp if rp.is_dir() else rp.parent)
        covered = [*mounted, *out]
        if not Path(rp).exists() or any(rp == q or rp.startswith(q.rstrip("/") + "/") for q in covered):
            continue
        out[rp] = {"bind": rp, "mode": "ro"}
    return out


def offline_python() -> str:
    """The interpreter the container runs: the venv's, at its host path."""
    return str(Path(sys.prefix) / "bin" / "python")


def agent_env() -> dict:
    return {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "HOME": "/tmp",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(PROJECT_ROOT)}


def rootfs_tarball() -> bytes:
    """The offline image's rootfs: empty directories, merged-/usr symlinks, a root user."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_dir(name, mode=0o755):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(ti)

        def add_link(name, target):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, target, 0o777, 0
            tar.addfile(ti)

        def add_file(name, text):
            data = text.encode()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tar.addfile(ti, io.BytesIO(data))

        for d in ("usr", "etc", "proc", "sys", "dev", "root", "run", "var", "opt", "work"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_dir("var/tmp", 0o1777)
        for name, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"),
                             ("lib64", "usr/lib64")):
            add_link(name, target)
        add_file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
        add_file("etc/group", "root:x:0:\nnogroup:x:65534:\n")
        add_file("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n")
        add_file("etc/edgebed-rootfs", f"edgebed offline rootfs v{_ROOTFS_VERSION}\n")
    return buf.getvalue()


def _client(client=None):
    if client is not None:
        return client
    from . import engine
    return engine.client()


def _labels(kind: str) -> dict:
    return {LABEL: "1", f"{LABEL}.image": kind, f"{LABEL}.rootfs": _ROOTFS_VERSION}


def offline_info(action: str = "found", seconds: float = 0.0) -> ImageInfo:
    return ImageInfo(OFFLINE_IMAGE, "offline", offline_python(), offline_mounts(), agent_env(),
                     action, seconds)


def build_offline(client=None, force: bool = False) -> ImageInfo:
    """Import the offline image unless an up-to-date one exists."""
    import docker
    cli = _client(client)
    if not force:
        try:
            img = cli.images.get(OFFLINE_IMAGE)
            if (img.labels or {}).get(f"{LABEL}.rootfs") == _ROOTFS_VERSION:
                return offline_info("found")
        except docker.errors.ImageNotFound:
            pass
    t0 = time.monotonic()
    repo, tag = OFFLINE_IMAGE.split(":")
    changes = [f'LABEL {k}="{v}"' for k, v in _labels("offline").items()]
    changes.append('CMD ["/bin/false"]')
    cli.api.import_image_from_data(rootfs_tarball(), repository=repo, tag=tag, changes=changes)
    return offline_info("imported", time.monotonic() - t0)


def build_dockerfile(client=None, dockerfile: Optional[Path] = None) -> ImageInfo:
    """``docker build`` of the repository's Dockerfile (needs a registry for the base image)."""
    cli = _client(client)
    t0 = time.monotonic()
    path = str(PROJECT_ROOT)
    cli.images.build(path=path, dockerfile=str(dockerfile or "Dockerfile"), tag=DOCKERFILE_IMAGE,
                     labels=_labels("dockerfile"), rm=True)
    return ImageInfo(DOCKERFILE_IMAGE, "dockerfile", "python", {}, {"PYTHONUNBUFFERED": "1",
                     "OMP_NUM_THREADS": "1"}, "built", time.monotonic() - t0)


def build(mode: str = "auto", client=None, force: bool = False) -> ImageInfo:
    """What ``edgebed image build`` does. ``auto`` = ``offline``, which never touches a registry;
    ``dockerfile`` must be asked for explicitly."""
    if mode in ("auto", "offline"):
        return build_offline(client, force=force)
    if mode == "dockerfile":
        return build_dockerfile(client)
    raise ValueError(f"image mode {mode!r}: use auto, offline or dockerfile")


def resolve(name: Optional[str] = None, client=None) -> ImageInfo:
    """The image a run uses: ``name`` if given (offline kind detected from its label), else the
    offline image, imported on first use."""
    if name is None or name == OFFLINE_IMAGE:
        return build_offline(client)
    cli = _client(client)
    img = cli.images.get(name)
    if (img.labels or {}).get(f"{LABEL}.image") == "offline":
        info = offline_info("found")
        info.name = name
        return info
    return ImageInfo(name, "dockerfile", "python", {}, {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
