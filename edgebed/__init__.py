"""edgebed: an emulation testbed for asynchronous distributed deep learning on edge devices.

Public API (imported on first use, so ``import edgebed`` stays cheap for device agents):
``edgebed.load_run(path)`` → ``RunData``; ``edgebed.list_runs(dirs)`` → a DataFrame of runs.
"""
__version__ = "0.1.0"
__all__ = ["load_run", "list_runs", "RunData", "__version__"]


def __getattr__(name):
    if name in ("load_run", "list_runs", "RunData"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'edgebed' has no attribute {name!r}")
