"""User code by import path (issue #51.11, #51.13): model.name and data-set factories reach only
callables that build a model or a data set, outside the standard library, refused before anything is
called; a factory that fails says which model and which model.args key, never with a traceback; a
factory that hangs is cut off at validate."""
import os
import sys
import textwrap
import threading
import time

import pytest

from edgebed.cli import _validate_one
from edgebed.data import DatasetError
from edgebed.data.factory import load_factory
from edgebed.workload import resolve

pytestmark = pytest.mark.timeout(60)

MODULE = textwrap.dedent('''
    import functools
    import time
    from os import system            # re-exported: still the standard library's
    from torch import nn

    def takes_width(width=4):
        return nn.Sequential(nn.Flatten(), nn.Linear(784, width), nn.Linear(width, 10))

    def raises():
        raise RuntimeError("boom inside the factory")

    def gives_int():
        return 5

    def sleeps():
        try:
            time.sleep(90)
        except Exception:              # a broad except does not swallow the deadline
            pass

    def lin(in_features=784):
        return nn.Sequential(nn.Flatten(), nn.Linear(in_features, 10))

    NOT_CALLABLE = 3
    wide = functools.partial(takes_width, width=8)
    runs = functools.partial(system, "true")

    def arrays(n=4):
        import numpy as np
        return np.zeros((n, 1, 2, 2), np.float32), np.arange(n) % 2
''')

HEAD = ("name: u\ndataset: {name: mnist, source: bundled, test_fraction: 0.2}\n"
        "algorithm: {name: asgd, lr: 0.05, batch_size: 10}\nworkers: {n: 2}\nstop: {updates: 10}\n"
        "eval: {every: 10}\nruntime: {name: sim}\n")


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    name = f"usermods_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, name
    sys.modules.pop(name, None)


def _validate(tmp_path, model: str) -> dict:
    p = tmp_path / "scenario.yaml"
    p.write_text(HEAD + f"model: {model}\n")
    return _validate_one(p, ())


@pytest.mark.parametrize("target", ["os:system", "subprocess:run", "builtins:eval", "shutil:rmtree",
                                    "posix:system", "antigravity:geohash"])
def test_a_standard_library_model_is_refused_before_it_runs(tmp_path, target):
    marker = tmp_path / "PWNED"
    args = {"os:system": f"{{command: 'touch {marker}'}}", "subprocess:run": f"{{args: [touch, {marker}]}}"}
    out = _validate(tmp_path, f"{{name: '{target}', args: {args.get(target, '{}')}}}")
    assert not out["ok"] and not marker.exists()
    [error] = out["errors"]
    assert "model.name" in error and target in error and "standard library" in error
    assert "Traceback" not in error


def test_a_re_exported_or_wrapped_standard_library_callable_is_refused(user_dir):
    _, name = user_dir
    marker = user_dir[0] / "PWNED"
    for attr in ("system", "runs"):
        with pytest.raises(ValueError, match=rf"model.name: '{name}:{attr}' names posix\.system, from Python's standard library"):
            resolve({"name": f"{name}:{attr}", "args": {"command": f"touch {marker}"}}).factory()
    assert not marker.exists()
    assert resolve(f"{name}:wide").factory().__class__.__name__ == "Sequential"   # a partial of the user's own
    assert resolve({"name": "torch.nn:Linear", "args": {"in_features": 784, "out_features": 10}}).factory().out_features == 10


def test_a_data_factory_from_the_standard_library_is_refused(tmp_path, user_dir):
    marker = tmp_path / "PWNED"
    with pytest.raises(DatasetError, match="dataset.options.factory: 'os:system' .*standard library"):
        load_factory("os:system", {"command": f"touch {marker}"})
    _, name = user_dir
    with pytest.raises(DatasetError, match=f"'{name}:system' names posix.system"):
        load_factory(f"{name}:system", {"command": f"touch {marker}"})
    with pytest.raises(DatasetError, match="is an int .3., not a callable.*builds a data set"):
        load_factory(f"{name}:NOT_CALLABLE")
    assert not marker.exists()
    assert len(load_factory(f"{name}:arrays", {"n": 6})) == 6


def test_where_a_module_comes_from_decides():
    from edgebed.usercode import is_stdlib_module
    assert is_stdlib_module("os") and is_stdlib_module("posix") and is_stdlib_module("os.path")
    assert is_stdlib_module("xml.dom.minidom") and is_stdlib_module("builtins") and is_stdlib_module("_io")
    assert not is_stdlib_module("numpy") and not is_stdlib_module("torch.nn") and not is_stdlib_module("edgebed")
    assert not is_stdlib_module("tests.sized_models")


@pytest.mark.parametrize("attr, args, keys, says", [
    ("takes_width", "{depth: 3}", ["model.args.depth"], "takes no argument 'depth' (it takes width)"),
    ("raises", "{}", ["model.name"], "RuntimeError: boom inside the factory"),
    ("gives_int", "{}", ["model.name"], "returned an int (5), not a torch nn.Module"),
    ("lin", "{in_features: -5}", ["model.args.in_features"], "negative dimension -5"),
    ("NOT_CALLABLE", "{}", ["model.name"], "is an int (3), not a callable"),
])
def test_a_factory_that_fails_names_the_model_and_the_key(user_dir, attr, args, keys, says):
    tmp_path, name = user_dir
    out = _validate(tmp_path, f"{{name: '{name}:{attr}', args: {args}}}")
    assert not out["ok"]
    [error] = out["errors"]
    assert f"'{name}:{attr}'" in error and says in error, error
    assert all(f"{k}:" in error or f"{k} " in error for k in keys), error
    assert "Traceback" not in error and "\n" not in error


def test_a_zoo_model_names_the_key_it_does_not_take(tmp_path):
    out = _validate(tmp_path, "{name: resnet20, args: {in_channels: 1, size: 28, colour: 3}}")
    [error] = out["errors"]
    assert error.split(": ", 2)[1] == "model.args.colour" and "'resnet20' takes no argument 'colour'" in error


def test_a_factory_that_hangs_is_cut_off_at_validate(user_dir, monkeypatch):
    tmp_path, name = user_dir
    monkeypatch.setenv("EDGEBED_BUILD_TIMEOUT", "1")
    before = threading.active_count()
    t0 = time.monotonic()
    out = _validate(tmp_path, f"{{name: '{name}:sleeps'}}")
    took = time.monotonic() - t0
    [error] = out["errors"]
    assert took < 10, took
    assert f"model.name: model '{name}:sleeps'" in error and "did not finish within 1 s" in error
    assert "EDGEBED_BUILD_TIMEOUT" in error
    assert threading.active_count() == before     # nothing left running


def test_the_deadline_leaves_an_outer_timer_its_moment():
    """pytest-timeout's SIGALRM (or any timer set before) still fires, once, with its own handler."""
    import signal

    from edgebed.usercode import UserCodeError, deadline
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))

    def wait_fired(limit=5.0):
        end = time.monotonic() + limit
        while not fired and time.monotonic() < end:
            time.sleep(0.01)
    try:
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.4)
        with pytest.raises(UserCodeError, match="x did not finish within 0.1 s; y"):
            with deadline(0.1, "x", "y"):
                time.sleep(5)
        wait_fired()
        assert len(fired) == 1 and fired[0] - t0 >= 0.35
        fired.clear()
        signal.setitimer(signal.ITIMER_REAL, 0.1)   # the outer timer comes first: its handler runs
        with deadline(5, "x", "y"):
            wait_fired()
        assert len(fired) == 1 and signal.getitimer(signal.ITIMER_REAL)[0] == 0   # not re-armed
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_bad_build_timeout_is_explained(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEBED_BUILD_TIMEOUT", "soon")
    [error] = _validate(tmp_path, "{name: mlp}")["errors"]
    assert "EDGEBED_BUILD_TIMEOUT='soon'" in error and "seconds" in error


@pytest.mark.parametrize("body, says", [("raise RuntimeError('bad at import')\n", "raised RuntimeError: bad at import"),
                                         ("import time\ntime.sleep(90)\n", "did not finish within 1 s")])
def test_a_module_that_fails_or_hangs_as_it_is_imported_is_named(tmp_path, monkeypatch, body, says):
    name = f"badmod_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("EDGEBED_BUILD_TIMEOUT", "1")
    [error] = _validate(tmp_path, f"{{name: '{name}:net'}}")["errors"]
    assert "model.name" in error and f"{name}" in error and says in error and "Traceback" not in error, error
    sys.modules.pop(name, None)
