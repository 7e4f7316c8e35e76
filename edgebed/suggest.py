"""Close names for a user's typo: the files beside a path that does not exist, the modules importable
where an import path was looked for. Messages only; nothing here imports or reads a user's code."""
from __future__ import annotations

import difflib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Iterable, Optional


def _close(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(choices)), n=n, cutoff=0.6)


def missing_path(path: str | os.PathLike) -> str:
    """Where ``path`` (which does not exist) was looked for — the absolute directory a relative path was
    resolved against — and the entries of its nearest existing directory whose names are close:
    ``"(looked for /home/u/proj/data/trian.npz, relative to /home/u/proj, the directory edgebed ran in;
    did you mean data/train.npz?)"``."""
    given = Path(path).expanduser()
    full = given if given.is_absolute() else Path.cwd() / given
    where = "" if given.is_absolute() else f", relative to {Path.cwd()}, the directory edgebed ran in"
    parent, missing = full.parent, full.name
    while not parent.is_dir() and parent != parent.parent:   # the first part that exists
        parent, missing = parent.parent, parent.name
    names = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []
    close = _close(missing, names)
    shown = [str(given.parent / c) if given.parent != Path(".") and parent == full.parent else c for c in close]
    hint = f"; did you mean {' or '.join(shown)}?" if shown else (f"; {parent} holds {', '.join(names[:8])}"
                                                                  + (", ..." if len(names) > 8 else "")
                                                                  if names else f"; {parent} is empty")
    return f"(looked for {full}{where}{hint})"


def importable(paths: Optional[Iterable[str]] = None) -> list[str]:
    """Top-level module and package names importable from ``paths`` (default ``sys.path``; "" is the
    working directory)."""
    dirs = [p or os.getcwd() for p in (sys.path if paths is None else paths)]
    return [m.name for m in pkgutil.iter_modules([d for d in dirs if os.path.isdir(d)])]


def module_candidates(module: str, first: Optional[str] = None) -> list[str]:
    """Importable modules whose dotted name is close to ``module`` (a typo in ``mymodle``,
    ``mynets.smal``): the top level is looked for in ``first`` (the scenario's directory or its
    ``model.path``) and then on ``sys.path``; a submodule among its package's modules."""
    head, _, rest = module.partition(".")
    local = importable([first]) if first else []
    if not rest:
        return _close(head, local) or _close(head, importable())
    try:
        import importlib.util
        spec = importlib.util.find_spec(head)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return [f"{c}.{rest}" for c in (_close(head, local) or _close(head, importable()))]
    parent, _, leaf = module.rpartition(".")
    try:
        pkg = importlib.util.find_spec(parent)
    except (ImportError, ValueError):
        return []
    subs = importable(pkg.submodule_search_locations) if pkg and pkg.submodule_search_locations else []
    return [f"{parent}.{c}" for c in _close(leaf, subs)]


def import_problem(ref: str, module: str, attr: str, err: Exception, key: str = "model.name") -> str:
    """What to say when ``module:attr`` (``ref``) did not import: the close module names where the
    module itself was not found, the close attribute names where ``attr`` was not in it, the error as
    it is where the module was found but failed to import (a dependency of its own missing)."""
    not_found = isinstance(err, ModuleNotFoundError) and err.name is not None and \
        (module == err.name or module.startswith(err.name + "."))
    if not_found:
        close = module_candidates(module)
        if close:
            return (f"{key}: {ref!r}: no module named {err.name!r}; did you mean "
                    f"{' or '.join(repr(f'{c}:{attr}') for c in close)}?")
        return (f"model {ref!r}: cannot import {attr!r} from {module!r} (no module named {err.name!r} "
                f"beside the scenario, in its model.path or on sys.path, nor one with a close name); put "
                f"{module.replace('.', '/')}.py beside the scenario file, or its directory on PYTHONPATH "
                f"or in the scenario's model.path")
    if isinstance(err, AttributeError) and module in sys.modules:
        names = [n for n in dir(sys.modules[module]) if not n.startswith("_")]
        close = _close(attr, names)
        return (f"{key}: {ref!r}: {module} has no attribute {attr!r}"
                + (f"; did you mean {' or '.join(repr(f'{module}:{c}') for c in close)}?" if close else
                   f"; it has {', '.join(names[:12])}" + (", ..." if len(names) > 12 else "")))
    return (f"model {ref!r}: cannot import {attr!r} from {module!r} ({err}); put the module's "
            f"directory on PYTHONPATH or in the scenario's model.path")
