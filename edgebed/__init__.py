"""edgebed: an emulation testbed for asynchronous distributed deep learning on edge devices.

Public API (imported on first use, so ``import edgebed`` stays cheap for device agents):
``edgebed.run(scenario, overrides=…)`` → ``RunData``; ``edgebed.run_study(file, …)`` → ``StudyData``;
``edgebed.load_run(path)`` → ``RunData``; ``edgebed.list_runs(dirs)`` → a DataFrame of runs;
``edgebed.ingress_to_target(runs, target)`` and ``edgebed.compare(runs, baseline, target)`` →
DataFrames (PS ingress to a test accuracy, per run and per group against a baseline).
"""
__version__ = "0.1.0"
__all__ = ["run", "run_study", "load_run", "list_runs", "ingress_to_target", "compare", "RunData", "StudyData",
           "RunInterrupted", "__version__"]

_FROM = {"load_run": "api", "list_runs": "api", "RunData": "api", "ingress_to_target": "api", "compare": "api",
         "run": "launch", "run_study": "launch", "StudyData": "launch", "RunInterrupted": "launch"}


def __getattr__(name):
    if _FROM.get(name) == "api":
        from . import api
        return getattr(api, name)
    if _FROM.get(name) == "launch":
        from . import launch
        return getattr(launch, name)
    raise AttributeError(f"module 'edgebed' has no attribute {name!r}")
