"""Only for the optional C extensions (the PS's compiled push path, edgebed/ps/_fastpush.c, its
reading of push headers, edgebed/wire/_pushhead.c, its short path for pushes, edgebed/ps/_shortpath.c, its discard of oversized messages,
edgebed/ps/_discard.c, its frame guard, edgebed/ps/_frameguard.c, and the portable numerics profile's products, edgebed/_gemm.c); everything else is in pyproject.toml.
``optional=True``: without a C compiler the install still succeeds and the PS uses its numpy / Python
paths (same results, slower) and serves without the guard (``edgebed.ps.aggregate.FAST``, ``edgebed.wire._HEADER``,
``edgebed.ps.discard.FAST``, ``edgebed.ps.frameguard.FAST`` and ``edgebed.ps.server._SHORT`` say which); portable numerics then
runs torch's pinned kernels (other bits; the fingerprint's ``gemm`` says which)."""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("edgebed.ps._fastpush", ["edgebed/ps/_fastpush.c"], optional=True,
              # No FMA contraction: θ − v·lr stays two float32 roundings, the same bits as numpy's path.
              extra_compile_args=["-O3", "-ffp-contract=off"]),
    # The portable numerics profile's fixed-order products (edgebed/portable_ops.py): explicit fmaf and
    # AVX2 intrinsics only, no contraction, so the scalar and AVX2 paths round alike.
    Extension("edgebed._gemm", ["edgebed/_gemm.c"], optional=True, extra_compile_args=["-O3", "-ffp-contract=off"]),
    # The PS's reading of a canonical push header (edgebed/wire/_pushhead.c; the regex _PUSH_V1 otherwise).
    Extension("edgebed.wire._pushhead", ["edgebed/wire/_pushhead.c"], optional=True, extra_compile_args=["-O2"]),
    # The PS's short path for pushes (edgebed/ps/_shortpath.c; ParameterServer._push_py otherwise).
    Extension("edgebed.ps._shortpath", ["edgebed/ps/_shortpath.c"], optional=True, extra_compile_args=["-O2"]),
    Extension("edgebed.ps._discard", ["edgebed/ps/_discard.c"], optional=True, extra_compile_args=["-O2"]),
    Extension("edgebed.ps._frameguard", ["edgebed/ps/_frameguard.c"], optional=True, extra_compile_args=["-O2"]),
])
