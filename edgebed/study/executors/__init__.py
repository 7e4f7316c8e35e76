"""Study executors by name: ``local`` always; ``ray`` and ``slurm`` when their package imports.

A plain dict, as Flower's ``supported_backends``: an engine whose package is missing is not
registered; asking for it gives the install hint instead. See ``base.py`` for the interface.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

from .base import ExecutorError, Resources, StudyExecutor, WorkerLost  # noqa: F401 (re-exported)
from .local import LocalExecutor

EXECUTORS: dict[str, type] = {"local": LocalExecutor}
INSTALL_HINTS: dict[str, str] = {}

if importlib.util.find_spec("ray") is not None:
    from .ray_executor import RayExecutor
    EXECUTORS["ray"] = RayExecutor
else:
    INSTALL_HINTS["ray"] = "pip install 'edgebed[ray]'"

if importlib.util.find_spec("submitit") is not None:
    from .slurm_executor import SlurmExecutor
    EXECUTORS["slurm"] = SlurmExecutor
else:
    INSTALL_HINTS["slurm"] = "pip install 'edgebed[slurm]'"

NAMES = ("local", "ray", "slurm")


def make_executor(name: str, *, workers: int = 1, address: Optional[str] = None,
                  resources: Resources = Resources(), partition: Optional[str] = None,
                  time_min: int = 120, folder: Optional[Path] = None,
                  array_parallelism: int = 256) -> StudyExecutor:
    """The executor called ``name`` with the options that apply to it (the others are ignored)."""
    if name not in EXECUTORS:
        if name in INSTALL_HINTS:
            raise ExecutorError(f"--executor {name}: its package is not installed here; {INSTALL_HINTS[name]}")
        raise ExecutorError(f"--executor {name}: unknown; use one of {', '.join(NAMES)}")
    cls = EXECUTORS[name]
    if name == "local":
        return cls(workers=workers)
    if name == "ray":
        return cls(address=address, resources=resources)
    if folder is None:
        raise ExecutorError("--executor slurm needs a folder for submitit's job files")
    return cls(folder=folder, partition=partition, time_min=time_min, resources=resources,
               array_parallelism=array_parallelism)
