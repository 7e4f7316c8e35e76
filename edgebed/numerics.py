"""Numerics profiles: which CPU kernels compute gradients, so one scenario and seed give one set of bits.

A gradient's last bits depend on the kernels that computed it, and PyTorch picks kernels by the CPU it
finds: ATen's vector code (AVX-512, AVX2 or baseline), MKL's GEMM (one code branch per instruction set,
cache sizes read from the host) and oneDNN's JIT convolutions (blocked by the host's caches and core
count). Once one loss differs, a push header's length, its transfer time on the virtual clock and the
whole trajectory follow. Measured here: the same virtual-clock scenario gives different tables under each
of ``ATEN_CPU_CAPABILITY=default``, ``MKL_CBWR=COMPATIBLE``, ``MKL_ENABLE_INSTRUCTIONS=AVX2`` alone.

Two profiles (``numerics:`` in the scenario):

``portable`` (the default)
    Linear and Conv2d layers computed by edgebed's own fixed-order products (``edgebed/portable_ops.py``
    over ``edgebed/_gemm.c``: each output element one sequence of fused multiply-adds in a fixed order,
    an AVX2 kernel and a scalar fallback that give the same bits, tiles fixed at compile time); ATen
    pinned to its AVX2 kernels for everything else (pooling, activations, the loss); MKL, for any
    product left to torch (layers other than these two), in conditional numerical reproducibility mode
    on its ``COMPATIBLE`` branch (SSE2, fixed cache sizes, the one branch Intel documents as
    reproducible on Intel *and* non-Intel CPUs); oneDNN off (its kernels' blocking follows the host's
    caches); one thread. Same bits on every x86-64 host with AVX2, Intel or AMD, with or without
    AVX-512, for the same torch and numpy. Cost per CNN step: see ``benchmarks/results/numerics.json``.
``native``
    Whatever the host does fastest: no pins, oneDNN on. Repeatable on the same host type only.

Hosts that can't give the portable bits (ARM, x86-64 without AVX2, a torch build other than the one
the reference was recorded with) are told so: :func:`fingerprint` computes one reference gradient at
start and compares it with the one recorded for the torch version (``PORTABLE_REFERENCE``).

torch is not the only source of host-dependent bits. numpy dispatches many kernels by the host's SIMD
level (its AVX-512 and AVX2 builds of partition and sort keep different entries among equal values;
its float64 ``exp``, ``log1p``, ``arctan`` differ in the last bit), and its ``dot`` goes through
OpenBLAS, whose kernel follows the CPU (SkylakeX and Haswell kernels sum in different orders) — all
measured on one AVX-512 host by switching the dispatch off (``NPY_DISABLE_CPU_FEATURES``,
``OPENBLAS_CORETYPE``). The numpy code on the table path uses only what is the same on every level:
selection by an exact rule (``compression.ops.topk_indices``), numpy's pairwise sums, elementwise
arithmetic, its random generators and zstd at a fixed level. :func:`fingerprint` checks that too: a
second reference, ``numpy_reference``, hashes those very operations (selection with ties and NaN
included), and the manifest records numpy's SIMD dispatch and OpenBLAS's kernel beside it.

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
from pathlib import Path
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
# Recorded with ``python -m edgebed.numerics --record`` on an AMD EPYC (Zen 4, AVX-512) under portable
# when its products became edgebed's own (before: 60d213928781eb20, MKL's COMPATIBLE branch), and the
# same with the scalar path forced (``EDGEBED_GEMM_PATH=scalar``); a host that computes another hash
# under portable can't reproduce portable tables.
PORTABLE_REFERENCE = {
    "2.13.0": "26f3fc2fc131f0e3",
}
# sha256[:16] of ``_numpy_reference_hash`` by numpy version (the same under both profiles: numpy is not
# pinned, it is kept off host-dependent kernels). Recorded with ``--record`` on an AMD EPYC (Zen 4,
# AVX-512) and checked there with numpy's AVX-512 and AVX2 dispatch switched off in turn.
NUMPY_REFERENCE = {
    "2.4.6": "a0af2fcbf6080479",
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
    from . import portable_ops
    torch.backends.mkldnn.enabled = profile != "portable"
    portable_ops.activate(profile == "portable")
    if profile == "portable":
        torch.set_num_threads(1)
        _start_mkl(torch)
        have = torch.backends.cpu.get_cpu_capability()
        if have != PORTABLE_CAPABILITY and _host_has_avx2():
            raise NumericsError(
                f"numerics: portable needs torch's AVX2 kernels, but this process already runs {have} "
                "kernels (a torch operation ran before the profile was applied). Start the run in a new "
                "process (`edgebed run` does), or set the variables before torch starts: "
                + " ".join(f"{k}={v}" for k, v in PINS.items()))


def _start_mkl(torch) -> None:
    """Make MKL read its pins now, while they are set. MKL reads ``MKL_CBWR`` once, at its first call:
    a native profile applied earlier in this process removes the pins from the environment, and a
    matrix product run then would fix MKL's branch for the rest of the process — the portable layers
    (portable_ops) never call MKL, but the virtual clock's batched gradients (vmap) run torch's own
    kernels, and their bits then depended on what had run before (test_sim_golden's batched
    scenario after a native product in the same process)."""
    global _MKL_STARTED
    if not _MKL_STARTED:
        torch.nn.functional.linear(torch.ones(4, 64), torch.ones(32, 64))
        _MKL_STARTED = True


_MKL_STARTED = False


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
    nref = _numpy_reference_hash()
    expected = PORTABLE_REFERENCE.get(torch.__version__.split("+")[0]) if profile == "portable" else None
    nexpected = NUMPY_REFERENCE.get(np.__version__)
    fp = {
        "profile": profile,
        "torch": torch.__version__, "numpy": np.__version__, "mkl": _mkl_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "onednn": bool(torch.backends.mkldnn.enabled), "threads": torch.get_num_threads(),
        "pins": {k: os.environ[k] for k in PINS if k in os.environ},
        "cpu": _cpu_model(), "machine": platform.machine(),
        "numpy_simd": _numpy_simd(), "blas": _blas_kernel(), "gemm": _gemm_path(profile),
        "reference_gradient": ref, "numpy_reference": nref,
        "reproducible": None if expected is None else (ref == expected and nref == nexpected),
        "problem": None,
    }
    if profile == "portable":
        if not _host_has_avx2():
            fp["problem"] = (f"this host ({fp['machine']}, {fp['cpu']}) has no AVX2: its gradients differ "
                             "from portable runs on x86-64 hosts with AVX2; its tables compare only "
                             "with runs on the same host type")
        elif fp["gemm"] is None:
            fp["problem"] = ("edgebed's compiled products (edgebed._gemm) are missing: portable falls back to "
                             "torch's kernels, whose bits differ from other hosts'. Install with a C compiler "
                             "(`make setup`, or `pip install -e .`) to build them")
        elif expected is None:
            fp["problem"] = (f"no portable reference recorded for torch {torch.__version__}: runs compare "
                             "bit for bit only with runs whose fingerprint id matches")
        elif ref != expected:
            fp["problem"] = (f"this host computes reference gradient {ref} under portable, not the recorded "
                             f"{expected}: its tables will not match other hosts' (CPU {fp['cpu']}, "
                             f"torch {torch.__version__})")
        elif nref != nexpected:
            fp["problem"] = (f"this host's numpy computes reference {nref}, not the recorded "
                             f"{nexpected or '(none for numpy ' + np.__version__ + ')'}: its tables will not "
                             f"match other hosts' (numpy {np.__version__}, SIMD {fp['numpy_simd']}, "
                             f"BLAS {fp['blas']})")
    key = {k: fp[k] for k in ("profile", "torch", "numpy", "threads", "reference_gradient", "numpy_reference")}
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


def _numpy_reference_hash() -> str:
    """sha256[:16] of what the numpy code on the table path computes, on fixed inputs: Comp-ASGD's and
    AdaComp's selection on a gradient with exact zeros, ties at the threshold and NaN (the case that
    once depended on numpy's SIMD level), error feedback's residual, q8 quantization, bf16 and fp16
    rounding, a sparse apply (``np.subtract.at``), numpy's pairwise sums and the averaging rules'
    distance, the random streams the devices and the virtual clock draw, zstd at the wire's level, and
    the text of floats as the tables and manifests write them. About 20 ms."""
    import numpy as np
    from .algorithms.averaging import divergence
    from .compression import ops
    from .compression.compressors import ErrorFeedback, TopCPerLayer
    from .wire.codec import bf16_bits, zstandard
    h = hashlib.sha256()

    def put(*arrays) -> None:
        for a in arrays:
            h.update(np.ascontiguousarray(a).tobytes())

    rng = np.random.default_rng(0)
    for n in (7, 100, 1_000, 25_000, 200_704):
        g = np.round(rng.standard_normal(n), 1).astype(np.float32)   # rounded: many exact ties
        g[rng.random(n) < 0.4] = 0.0                                  # blank pixels: exact zeros
        for c in (0.001, 0.01, 0.1, 0.7):
            put(ops.top_c(g, c))
        if n >= 1_000:
            bounds = [(0, n // 2), (n // 2, n // 4), (3 * n // 4, n - 3 * n // 4)]
            put(ops.top_c_per_layer(g, 0.01, bounds))
        g2 = g.copy()
        g2[rng.integers(0, n, 3)] = np.nan
        put(ops.topk_indices(g2, max(1, n // 50)), ops.topk_indices(g2, 2))
        put(np.sum(g), np.sum(g, dtype=np.float64), np.mean(g), g.max(initial=0.0))
        put(np.float64(divergence(g, g[::-1])))
        theta = rng.standard_normal(n).astype(np.float32)
        idx = ops.top_c(g, 0.05).astype(np.intp)
        np.subtract.at(theta, idx, np.float32(0.1) * g[idx])
        put(theta, bf16_bits(theta), theta.astype(np.float16))
        counts = np.array([idx.size], dtype=np.uint32)
        codes, scales = ops.quantize_q8(g[idx], counts, np.random.default_rng(1))
        put(codes, scales, ops.dequantize_q8(codes, scales, counts))
    layers = [type("L", (), {"offset": o, "size": s})() for o, s in ((0, 3_000), (3_000, 1_000))]
    ef = ErrorFeedback(TopCPerLayer(0.01, layers), momentum=0.9)
    for _ in range(3):
        sent = ef.compress(np.round(rng.standard_normal(4_000), 1).astype(np.float32))
        put(sent.indices, sent.values, ef.residual)
    r = np.random.default_rng(7)
    put(r.random(1_000, dtype=np.float32), r.standard_normal(1_000), r.exponential(1.0, 1_000),
        r.lognormal(0.0, 0.5, 1_000), r.integers(0, 10, 1_000), r.permutation(1_000), r.gamma(2.0, 1.0, 100),
        r.choice(1_000, 100, replace=False), np.argsort(r.integers(0, 10, 1_000), kind="stable"))
    if zstandard is not None:
        h.update(zstandard.ZstdCompressor(level=3).compress(np.arange(20_000, dtype=np.uint32).tobytes()))
    h.update(json.dumps([float(v) for v in rng.standard_normal(100)]).encode())
    return h.hexdigest()[:16]


def _gemm_path(profile: str) -> Optional[str]:
    """Which of edgebed's product paths runs under portable ("avx2" or "scalar": the same bits), None
    when the compiled module is missing; "torch" under native."""
    from . import portable_ops
    return portable_ops.PATH if profile == "portable" else "torch"


def _numpy_simd() -> dict:
    """numpy's SIMD dispatch on this host: the baseline it was built for and the extensions it found."""
    try:
        from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__
    except ImportError:   # numpy < 2
        return {}
    return {"baseline": list(__cpu_baseline__),
            "found": [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]}


def _blas_kernel() -> Optional[str]:
    """OpenBLAS's kernel for this CPU (its core name), as numpy's own OpenBLAS reports it; None when
    numpy uses another BLAS or the library can't be asked."""
    import ctypes
    import numpy as np
    for lib in sorted((Path(np.__file__).parent.parent / "numpy.libs").glob("libscipy_openblas*.so*")):
        try:
            dll = ctypes.CDLL(str(lib))
        except OSError:
            continue
        for prefix in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
            fn = getattr(dll, prefix, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return None


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
                    help="print the PORTABLE_REFERENCE and NUMPY_REFERENCE entries for this torch and numpy (paste them into numerics.py)")
    args = ap.parse_args(argv)
    fp = enter(args.profile)
    if args.record:
        import numpy as np
        import torch
        print(f'PORTABLE_REFERENCE:  "{torch.__version__.split("+")[0]}": "{fp["reference_gradient"]}",')
        print(f'NUMPY_REFERENCE:     "{np.__version__}": "{fp["numpy_reference"]}",')
    else:
        print(json.dumps(fp, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
