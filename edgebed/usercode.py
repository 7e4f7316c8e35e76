"""User code a scenario names by import path (``package.module:attr``): what may be named, and a deadline.

A scenario file is code: ``model.name`` and ``dataset.options.factory`` import the user's module and
call what they name with the scenario's arguments, at ``edgebed validate`` already. Both loaders
(``workload.resolve``, ``data/factory.py``) ask this module first, so that a name can only reach a
callable that builds a model or a data set: a target from Python's standard library or its builtins
(``os:system``, ``subprocess:run``, ``builtins:eval``, also when re-exported by another module) is
refused before its module is imported or it is called, decided by where its module comes from (a
built-in or frozen module, a file of the interpreter's standard library directory, or a name in
``sys.stdlib_module_names``), and a target that is not callable is refused with what it must be.
This is a guard against naming the wrong thing, not a sandbox: the user's own modules, and installed
packages, run with the user's rights.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import os
import signal
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Callable, Optional


class UserCodeError(ValueError):
    """A scenario's import path names something that is no factory, or its code failed; the message
    names the scenario key, the target and what to do."""


def _stdlib_dirs() -> tuple[Path, ...]:
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix, "installed_base": sys.base_prefix,
            "installed_platbase": sys.base_exec_prefix}
    return tuple({Path(sysconfig.get_path(k, vars=base)).resolve() for k in ("stdlib", "platstdlib")})


_STDLIB_DIRS = _stdlib_dirs()


def in_stdlib_dir(path: str) -> bool:
    p = Path(path).resolve()
    if {"site-packages", "dist-packages"} & set(p.parts):   # installed packages, wherever they live
        return False
    return any(p.is_relative_to(d) for d in _STDLIB_DIRS)


@functools.lru_cache(maxsize=512)   # where a module comes from does not change while a process runs
def is_stdlib_module(name: str) -> bool:
    """Whether module ``name`` is Python's own: built in, frozen, a file under the interpreter's
    standard-library directory (site-packages excluded), or, where no file says, a name in
    ``sys.stdlib_module_names``. Decided without importing it (a module not imported yet is found by
    its top-level package's spec, which imports nothing)."""
    top = name.partition(".")[0]
    if top in sys.builtin_module_names or name in sys.builtin_module_names:
        return True
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
    origin = getattr(spec, "origin", None)
    path = getattr(module, "__file__", None) or (origin if origin not in ("built-in", "frozen") else None)
    if origin in ("built-in", "frozen"):
        return True
    if path is None:
        return top in sys.stdlib_module_names
    return in_stdlib_dir(path)


def _defined_in(obj) -> tuple[Optional[str], str]:
    """(module, qualified name) of what calling ``obj`` runs: a function's or class's own, through
    ``functools.partial`` and bound methods; an instance's class's."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.ismethod(obj):
        obj = obj.__func__
    if not (inspect.isroutine(obj) or inspect.isclass(obj)):
        obj = type(obj)
    module = getattr(obj, "__module__", None)
    if module is None and inspect.isbuiltin(obj):   # a C method: its owner says
        owner = getattr(obj, "__self__", None)
        module = owner.__name__ if inspect.ismodule(owner) else type(owner).__module__
    return module, getattr(obj, "__qualname__", None) or type(obj).__name__


def _stdlib_refusal(key: str, target: str, named: str, module: str, what: str) -> UserCodeError:
    source = "" if named == f"module {module}" else f" (module {module})"
    return UserCodeError(
        f"{key}: {target!r} names {named}, from Python's standard library{source}, not a factory "
        f"that builds {what}: {key} must name a function or class of your own module or of an installed "
        "package; edgebed refuses standard-library targets without importing or calling them, since the "
        "scenario would call them with its arguments (docs/security.md, User code)")


def check_module(module: str, key: str, target: str, what: str) -> None:
    """Refuse, before it is imported, a target whose module is Python's own (``os:system``)."""
    if is_stdlib_module(module):
        raise _stdlib_refusal(key, target, f"module {module}", module, what)


def check_target(obj, key: str, target: str, what: str, must: str, accept: Callable[[object], bool] = lambda o: False) -> None:
    """Refuse ``obj`` (what ``target`` resolved to) unless ``accept(obj)`` or it is a callable defined
    outside the standard library. ``what``: "a model"; ``must``: what the callable must return."""
    if accept(obj):
        return
    if not callable(obj):
        shown = repr(obj)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        kind = type(obj).__name__
        raise UserCodeError(f"{key}: {target!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind} ({shown}), not a "
                            f"callable: {key} "
                            f"must name a function or class that builds {what} ({must})")
    module, named = _defined_in(obj)
    if module is not None and is_stdlib_module(module):
        raise _stdlib_refusal(key, target, f"{module}.{named}", module, what)


# -- a deadline on user code at validate --------------------------------------------------------

BUILD_TIMEOUT_ENV = "EDGEBED_BUILD_TIMEOUT"
BUILD_TIMEOUT = 60.0   # seconds: importing a model's module and building it on the meta device


def build_timeout() -> float:
    """Seconds ``edgebed validate`` gives a model's import and builds (``EDGEBED_BUILD_TIMEOUT``; 0: none)."""
    raw = os.environ.get(BUILD_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return BUILD_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise UserCodeError(f"{BUILD_TIMEOUT_ENV}={raw!r}: give seconds, a number >= 0 (0: no limit); "
                            f"the default is {BUILD_TIMEOUT:g}")
    return value


class _Expired(BaseException):
    """Raised into user code when its time is up: a BaseException, so its ``except Exception`` can't
    swallow it."""


@contextlib.contextmanager
def deadline(seconds: float, what: str, advice: str):
    """Run the block under a deadline of ``seconds`` (SIGALRM; nothing is started, no thread is left):
    past it, ``UserCodeError("{what} did not finish within … s; {advice}")``. Code that never returns
    to the interpreter (a native call that blocks without checking signals) is not interrupted. Only in
    the main thread (elsewhere, and for ``seconds`` 0, the block runs without one). A timer set before
    (pytest-timeout's) keeps its own moment and handler."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    t0 = time.monotonic()
    state = {"handed": False}
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, 0)
    outer = signal.getsignal(signal.SIGALRM)

    def expire(signum, frame):
        if time.monotonic() - t0 >= seconds - 1e-3:
            raise _Expired
        state["handed"] = True            # the outer timer's moment came first: its handler's turn
        signal.signal(signal.SIGALRM, outer)
        if callable(outer):
            outer(signum, frame)

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, outer_delay) if outer_delay else seconds)
    try:
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)   # an expiry just before this still counts
    except _Expired:
        raise UserCodeError(f"{what} did not finish within {seconds:g} s; {advice}") from None
    finally:
        signal.signal(signal.SIGALRM, outer)
        if outer_delay and not state["handed"]:
            left = outer_delay - (time.monotonic() - t0)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), outer_interval)
