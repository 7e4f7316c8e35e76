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
