"""The bounded reader's own behaviour: a limit is raised by its environment variable, a bad value of
that variable is a clear error, shared pickle objects are counted once, and the docker runtime passes
the raised limits on to its containers."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed.data import DatasetError, bounded
from edgebed.data.npz import load_npz


def test_a_legitimate_file_over_a_limit_loads_once_the_limit_is_raised(tmp_path, monkeypatch):
    p = tmp_path / "many.npz"
    np.savez(p, x=np.zeros((2, 3), np.float32), y=np.array([0, 150_000]))
    with pytest.raises(bounded.LimitError, match="EDGEBED_LIMIT_CLASSES") as got:
        load_npz(p)
    assert got.value.file == str(p) and got.value.limit == "classes"
    monkeypatch.setenv("EDGEBED_LIMIT_CLASSES", "200000")
    assert load_npz(p).num_classes == 150_001


def test_sizes_take_units_and_a_bad_value_says_which_variable(monkeypatch):
    monkeypatch.setenv("EDGEBED_LIMIT_BYTES", "2 GiB")
    assert bounded.get("bytes") == 2 << 30
    monkeypatch.setenv("EDGEBED_LIMIT_BYTES", "lots")
    with pytest.raises(DatasetError, match="EDGEBED_LIMIT_BYTES='lots'"):
        bounded.get("bytes")
    monkeypatch.setenv("EDGEBED_LIMIT_BYTES", "0")
    with pytest.raises(DatasetError, match="positive"):
        bounded.get("bytes")


def test_shared_objects_are_visited_once_and_the_node_budget_counts_objects(monkeypatch):
    a: list = [1.5]
    for _ in range(40):
        a = [a, a]
    seen = []
    bounded.walk(a, "f", seen.append)
    assert len(seen) == 42                       # 41 lists and the float, not 2^40 paths
    monkeypatch.setenv("EDGEBED_LIMIT_NODES", "10")
    with pytest.raises(bounded.LimitError, match="nodes"):
        bounded.walk(a, "f", seen.append)
    monkeypatch.setenv("EDGEBED_LIMIT_NODES", "100")
    monkeypatch.setenv("EDGEBED_LIMIT_DEPTH", "30")
    with pytest.raises(bounded.LimitError, match="depth"):
        bounded.walk(a, "f", seen.append)


def test_a_streamed_member_is_cut_at_the_byte_limit(tmp_path, monkeypatch):
    import gzip
    p = tmp_path / "big.gz"
    p.write_bytes(gzip.compress(bytes(3 << 20)))
    monkeypatch.setenv("EDGEBED_LIMIT_BYTES", "1MiB")
    with pytest.raises(bounded.LimitError, match="size after gunzip"):
        bounded.read_bytes(p)


def test_docker_containers_get_the_raised_limits(monkeypatch):
    from edgebed.emulator.runtimes.docker.compose import compose_dict
    from pathlib import Path
    from edgebed.scenario import load_scenario
    monkeypatch.setenv("EDGEBED_LIMIT_ROWS", "5000000")
    sc = load_scenario(Path(__file__).parents[3] / "scenarios" / "docker-quickstart.yaml")
    services = compose_dict(sc)["services"]
    assert all(s["environment"].get("EDGEBED_LIMIT_ROWS") == "5000000" for s in services.values())


def test_a_limit_error_survives_pickling_as_the_same_type():
    import pickle
    from edgebed.traces.format import TraceError, TraceLimitError
    err = TraceLimitError("t.csv", "rows", "rows", "are 2,000,000")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is TraceLimitError and isinstance(back, TraceError) and isinstance(back, DatasetError)
    assert str(back) == str(err) and (back.file, back.field, back.limit) == ("t.csv", "rows", "rows")
