"""Processes edgebed starts through multiprocessing (forked agents, the evaluator) never re-import the
user's ``__main__``.

multiprocessing's spawn and forkserver children run the starting program's main module again (as
``__mp_main__``) before their target, so that objects pickled from it resolve. A script that calls
``edgebed.run`` at module level, without an ``if __name__ == "__main__":`` guard, then starts a run of
its own in every agent. edgebed's children need nothing from ``__main__`` (their targets and
arguments are edgebed's functions and plain data), so inside ``without_main`` the preparation data
multiprocessing sends them leaves the main module out, as it does for an interactive session. A
study's worker processes run what they are given: ``needs_main`` says whether that refers to
``__main__`` (a task the user defined in their script), which then still needs it.
Standard library only: the fork server preloads the modules that import this one.
"""
from __future__ import annotations

import contextlib
import threading

_MAIN_KEYS = ("init_main_from_path", "init_main_from_name")
_here = threading.local()   # per thread: another thread's own multiprocessing starts are left as they are
_installed = threading.Lock()


def _without_main(original):
    def get_preparation_data(name):
        data = original(name)
        if getattr(_here, "depth", 0):
            for key in _MAIN_KEYS:
                data.pop(key, None)
        return data
    get_preparation_data.edgebed_original = original
    return get_preparation_data


def _install() -> None:
    """Wrap ``multiprocessing.spawn.get_preparation_data`` once (popen_spawn_posix and popen_forkserver
    call it through the module, at each start); outside ``without_main`` the wrapper changes nothing."""
    from multiprocessing import spawn
    with _installed:
        if not hasattr(spawn.get_preparation_data, "edgebed_original"):
            spawn.get_preparation_data = _without_main(spawn.get_preparation_data)


@contextlib.contextmanager
def without_main():
    """Processes this thread starts inside the block (``Process.start()``, spawn or forkserver) skip
    the re-import of ``__main__``: a script's module-level code runs once, in the process that ran it."""
    _install()
    _here.depth = getattr(_here, "depth", 0) + 1
    try:
        yield
    finally:
        _here.depth -= 1


def needs_main(*objects) -> bool:
    """Whether ``objects`` pickled refer to the ``__main__`` module (a function or class defined in
    the user's script), so that a child must import it to unpickle them; True when they do not pickle
    (multiprocessing then says why, as without this check)."""
    import pickle
    try:
        return b"__main__" in pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 — any pickling failure: leave the start as multiprocessing has it
        return True
