"""Only for the optional C extension (the PS's compiled push path, edgebed/ps/_fastpush.c); everything
else is in pyproject.toml. ``optional=True``: without a C compiler the install still succeeds and the PS
uses its numpy path (same bits, slower; ``edgebed.ps.aggregate.FAST`` says which is in use)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "edgebed.ps._fastpush", ["edgebed/ps/_fastpush.c"], optional=True,
    # No FMA contraction: θ − v·lr stays two float32 roundings, the same bits as numpy's path.
    extra_compile_args=["-O3", "-ffp-contract=off"])])
