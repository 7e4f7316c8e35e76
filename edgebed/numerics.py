"""Numerics profiles: which CPU kernels compute gradients, so one scenario and seed give one set of bits.

A gradient's last bits depend on the kernels that computed it, and PyTorch picks kernels by the CPU it
finds: ATen's vector code (AVX-512, AVX2 or baseline), MKL's GEMM (one code branch per instruction set,
cache sizes read from the host) and oneDNN's JIT convolutions (blocked by the host's caches and core
count). Once one loss differs, a push header's length, its transfer time on the virtual clock and the
whole trajectory follow. Measured here: the same virtual-clock scenario gives different tables under each
of ``ATEN_CPU_CAPABILITY=default``, ``MKL_CBWR=COMPATIBLE``, ``MKL_ENABLE_INSTRUCTIONS=AVX2`` alone.

Two profiles (``numerics:`` in the scenario):

``portable`` (the default)
    ATen pinned to its AVX2 kernels; MKL in conditional numerical reproducibility mode on its
    ``COMPATIBLE`` branch (SSE2 without the approximate ``rcpps``/``rsqrtps``, fixed cache sizes, the
    one branch Intel documents as reproducible on Intel *and* non-Intel CPUs — its ``AVX2`` branch is
    not, on AMD); oneDNN off (its kernels' blocking follows the host's caches, and oneDNN promises
    bitwise repeatability on one platform only), so convolutions are ATen's im2col + MKL GEMM; one
    thread. Same bits on every x86-64 host with AVX2, Intel or AMD, for the same torch and numpy.
    Cost per CNN step: see ``benchmarks/results/numerics.json``.
``native``
    Whatever the host does fastest: no pins, oneDNN on. Repeatable on the same host type only.

Hosts that can't give the portable bits (ARM, x86-64 without AVX2, a torch build other than the one
the reference was recorded with) are told so: :func:`fingerprint` computes one reference gradient at
start and compares it with the one recorded for the torch version (``PORTABLE_REFERENCE``).

The variables must be in the environment before the process's first torch operation (ATen fixes its
kernel choice and MKL reads ``MKL_CBWR`` at their first call; ``import torch`` alone fixes neither, as
measured). :func:`apply` sets them for this process and for every child it starts afterwards (agents,
the evaluator, containers and Spark executors get them from :func:`environment`); it refuses, with what
to do, when torch already runs other kernels in this process.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from functools import lru_cache
from typing import Literal, Optional

Profile = Literal["portable", "native"]
PROFILES: tuple[str, ...] = ("portable", "native")
DEFAULT: Profile = "portable"
ENV = "EDGEBED_NUMERICS"   # tells a child process (agent, evaluator, container) its profile

# Environment of a portable process. native removes these, so a child does not inherit another run's.
PINS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "MKL_DYNAMIC": "FALSE",
    "OMP_DYNAMIC": "FALSE",
    "MKL_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "ONEDNN_MAX_CPU_ISA": "AVX2",   # oneDNN is off in portable; should an op still reach it, no AVX-512
}
PORTABLE_CAPABILITY = "AVX2"

# sha256[:16] of the reference gradients (``_reference_hash``) under ``portable``, by torch version.
# Recorded with ``python -m edgebed.numerics --record`` on an Intel Xeon (Sapphire Rapids, AVX-512)
# under portable; a host that computes another hash under portable can't reproduce portable tables.
PORTABLE_REFERENCE = {
    "2.13.0": "60d213928781eb20",
}


class NumericsError(RuntimeError):
    """The requested profile can't be put in force in this process."""


def environment(profile: str) -> dict[str, str]:
    """Variables a child process needs for ``profile``: the pins and ``ENV`` for portable, ``ENV``
    alone for native (for an environment built from scratch: a container's, a Spark executor's)."""
    _check_name(profile)
    return {**PINS, ENV: profile} if profile == "portable" else {ENV: profile}


def child_env(profile: str, base: Optional[dict] = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with ``profile``'s variables: a child's whole environment.
    For native, pins that a portable edgebed process put there are removed (a user's own settings
    stay: native runs whatever the environment says)."""
    env = dict(os.environ if base is None else base)
    if profile == "native" and env.get(ENV) == "portable":
        for key in PINS:
            env.pop(key, None)
    env.update(environment(profile))
    return env


def apply(profile: str) -> None:
    """Put ``profile`` in force in this process (and in children it starts from now on).

    Raises :class:`NumericsError` for ``portable`` when torch already runs with kernels other than
    AVX2's in this process (something ran a torch operation before the profile was applied)."""
    env = child_env(profile)
    for key in set(os.environ) - set(env):
        del os.environ[key]
    os.environ.update(env)
    import torch
    torch.backends.mkldnn.enabled = profile != "portable"
    if profile == "portable":
        torch.set_num_threads(1)
        have = torch.backends.cpu.get_cpu_capability()
        if have != PORTABLE_CAPABILITY and _host_has_avx2():
            raise NumericsError(
                f"numerics: portable needs torch's AVX2 kernels, but this process already runs {have} "
                "kernels (a torch operation ran before the profile was applied). Start the run in a new "
                "process (`edgebed run` does), or set the variables before torch starts: "
                + " ".join(f"{k}={v}" for k, v in PINS.items()))


def apply_from_env() -> str:
    """In a child process: apply the profile its parent named in ``EDGEBED_NUMERICS`` (native when
    absent); returns it."""
    profile = os.environ.get(ENV) or "native"
    apply(profile if profile in PROFILES else "native")
    return profile


def fingerprint(profile: str) -> dict:
    """What decides this process's gradient bits, and a hash of one reference gradient computed now.

    Two runs are comparable bit for bit iff their ``id`` match. ``reproducible`` says whether this host
    computes the recorded portable reference (None: no reference recorded for this torch version or
    profile native); ``problem`` says why not, for the console and the manifest."""
    import numpy as np
    import torch
    ref = _reference_hash()
    expected = PORTABLE_REFERENCE.get(torch.__version__.split("+")[0]) if profile == "portable" else None
    fp = {
        "profile": profile,
        "torch": torch.__version__, "numpy": np.__version__, "mkl": _mkl_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "onednn": bool(torch.backends.mkldnn.enabled), "threads": torch.get_num_threads(),
        "pins": {k: os.environ[k] for k in PINS if k in os.environ},
        "cpu": _cpu_model(), "machine": platform.machine(),
        "reference_gradient": ref,
        "reproducible": None if expected is None else ref == expected,
        "problem": None,
    }
    if profile == "portable":
        if not _host_has_avx2():
            fp["problem"] = (f"this host ({fp['machine']}, {fp['cpu']}) has no AVX2: its gradients differ "
                             "from portable runs on x86-64 hosts with AVX2; its tables compare only "
                             "with runs on the same host type")
        elif expected is None:
            fp["problem"] = (f"no portable reference recorded for torch {torch.__version__}: runs compare "
                             "bit for bit only with runs whose fingerprint id matches")
        elif not fp["reproducible"]:
            fp["problem"] = (f"this host computes reference gradient {ref} under portable, not the recorded "
                             f"{expected}: its tables will not match other hosts' (CPU {fp['cpu']}, "
                             f"torch {torch.__version__})")
    key = {k: fp[k] for k in ("profile", "torch", "numpy", "threads", "reference_gradient")}
    fp["id"] = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return fp


def enter(profile: str) -> dict:
    """:func:`apply` then :func:`fingerprint`: what the engine calls before it touches torch."""
    apply(profile)
    return fingerprint(profile)


def describe(fp: Optional[dict]) -> str:
    """One line for reports and status: ``portable · 1f3a… · torch 2.13.0 · AVX2``."""
    if not fp:
        return "not recorded (runs before numerics fingerprints: native numerics of their host)"
    return f"{fp['profile']} · {fp['id']} · torch {fp['torch']} · {fp['cpu_capability']}"


def of_run(path) -> Optional[dict]:
    """The fingerprint a run recorded: a run directory's ``manifest.json``, or a compact result's
    ``summary.json`` (``compact.numerics``); None for runs from before fingerprints."""
    from pathlib import Path
    for name, keys in (("manifest.json", ("numerics",)), ("summary.json", ("compact", "numerics"))):
        try:
            value = json.loads((Path(path) / name).read_text())
        except (OSError, ValueError):
            continue
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value:
            return value
    return None


def summarize(fingerprints: list) -> dict:
    """How many runs have each fingerprint: ``{"groups": {description: count}, "mixed": bool, "text"}``.
    Runs of different fingerprints (or none recorded) are not comparable bit for bit."""
    groups: dict[str, int] = {}
    for fp in fingerprints:
        groups[describe(fp)] = groups.get(describe(fp), 0) + 1
    text = "; ".join(f"{n} run{'s' * (n != 1)} {d}" for d, n in groups.items())
    mixed = len(groups) > 1
    if mixed:
        text += " — runs of different numerics are not comparable bit for bit (their statistics still are)"
    return {"groups": groups, "mixed": mixed, "text": text}


def _check_name(profile: str) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown numerics profile {profile!r}; choose one of {', '.join(PROFILES)}")


def _reference_hash() -> str:
    """sha256[:16] of the loss and gradient of one batch of 10 synthetic digits, for the MLP and the
    paper CNN at their seed-0 initial Θ: the kernels every run uses (linear, conv, pool, ReLU,
    cross-entropy, forward and backward). About 30 ms."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from .models import build_model
    from .workload import resolve
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((10, 1, 28, 28), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 10, 10))
    h = hashlib.sha256()
    for name in ("mlp", "cnn"):
        model = build_model(name, 0)
        xs = x.contiguous(memory_format=torch.channels_last) if resolve(name).channels_last else x
        loss = F.cross_entropy(model(xs), y)
        loss.backward()
        h.update(loss.detach().numpy().tobytes())
        for p in model.parameters():
            h.update(p.grad.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=None)
def _cpuinfo(key: str) -> Optional[str]:
    """The value of the first ``key`` line of /proc/cpuinfo, None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1]
    except OSError:
        pass
    return None


def _cpu_flags() -> frozenset:
    return frozenset((_cpuinfo("flags") or "").split())


def _host_has_avx2() -> bool:
    return platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma"} <= _cpu_flags()


def _cpu_model() -> str:
    model = _cpuinfo("model name")
    return model.strip() if model is not None else platform.processor() or "unknown"


def _mkl_version() -> Optional[str]:
    import torch
    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library Version" in line:
            return line.split("Version", 1)[1].split("Product")[0].strip(" -")
    return None


def main(argv=None) -> int:
    """``python -m edgebed.numerics [--profile P] [--record]``: print this host's fingerprint."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m edgebed.numerics", description=main.__doc__)
    ap.add_argument("--profile", default=DEFAULT, choices=PROFILES)
    ap.add_argument("--record", action="store_true",
                    help="print the PORTABLE_REFERENCE entry for this torch (paste it into numerics.py)")
    args = ap.parse_args(argv)
    fp = enter(args.profile)
    if args.record:
        import torch
        print(f'    "{torch.__version__.split("+")[0]}": "{fp["reference_gradient"]}",')
    else:
        print(json.dumps(fp, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
