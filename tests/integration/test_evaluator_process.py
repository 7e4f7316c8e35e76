"""The evaluator process: a failure at start (data it can't read) reaches the engine with its cause."""
from __future__ import annotations

import time

import pytest

from edgebed.ps.evaluator import ProcessEvaluator
from edgebed.scenario import parse_scenario


@pytest.mark.timeout(60)
def test_an_evaluator_that_cannot_read_its_data_says_why(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for f in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
              "t10k-labels-idx1-ubyte"):
        (data / f).write_bytes(b"not an IDX file")
    sc = parse_scenario({"name": "ev", "dataset": {"name": "fashion-mnist", "source": "path", "path": str(data)},
                         "model": {"name": "mlp"}, "workers": {"n": 1}, "stop": {"updates": 10}})
    ev = ProcessEvaluator(sc.to_dict())
    try:
        deadline = time.monotonic() + 45
        while ev.alive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ev.alive
        ev.results()
        assert ev.error is not None and ev.error.startswith("DatasetError: ") and "not an IDX file" in ev.error
    finally:
        ev.close(wait=False)


@pytest.mark.timeout(60)
def test_a_ctrl_c_noted_while_the_evaluator_starts_leaves_no_evaluator_behind(monkeypatch):
    """A Ctrl-C that arrives while the evaluator is being started is raised right after the start; the
    half-made evaluator must not outlive it. Left running, the engine's exit unlinks its queues'
    semaphores while the child is still unpickling them, and the child prints a FileNotFoundError
    traceback to the user's terminal (seen in test_group_signals' start-up case)."""
    import contextlib
    import multiprocessing as mp

    from edgebed import procs

    @contextlib.contextmanager
    def ctrl_c_noted():   # what signals_deferred does with a SIGINT that arrived inside its block
        yield
        raise KeyboardInterrupt

    monkeypatch.setattr(procs, "signals_deferred", ctrl_c_noted)
    sc = parse_scenario({"name": "ev", "model": {"name": "mlp"}, "workers": {"n": 1}, "stop": {"updates": 10}})
    with pytest.raises(KeyboardInterrupt):
        ProcessEvaluator(sc.to_dict())
    assert [p for p in mp.active_children() if p.name == "edgebed-evaluator"] == []
