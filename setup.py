"""Only for the optional C extensions (the PS's compiled push path, edgebed/ps/_fastpush.c, its
discard of oversized messages, edgebed/ps/_discard.c, and its frame guard, edgebed/ps/_frameguard.c);
everything else is in pyproject.toml. ``optional=True``: without a C compiler the install still
succeeds and the PS uses its numpy / Python paths (same results, slower) and serves without the guard
(``edgebed.ps.aggregate.FAST``, ``edgebed.ps.discard.FAST`` and ``edgebed.ps.frameguard.FAST`` say which)."""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("edgebed.ps._fastpush", ["edgebed/ps/_fastpush.c"], optional=True,
              # No FMA contraction: θ − v·lr stays two float32 roundings, the same bits as numpy's path.
              extra_compile_args=["-O3", "-ffp-contract=off"]),
    Extension("edgebed.ps._discard", ["edgebed/ps/_discard.c"], optional=True, extra_compile_args=["-O2"]),
    Extension("edgebed.ps._frameguard", ["edgebed/ps/_frameguard.c"], optional=True, extra_compile_args=["-O2"]),
])
