"""FedScale's pickles: imported into the project's trace format through an unpickler that builds only
plain data — a pickle that names any class or function is refused without running it."""
from __future__ import annotations

import os
import pickle

import pytest

from edgebed.traces import TraceError, TracePoint
from edgebed.traces.fedscale import import_fedscale, safe_load


def _dump(tmp_path, name, obj):
    path = tmp_path / name
    path.write_bytes(pickle.dumps(obj))
    return path


def test_capacity_and_behaviour_become_devices_in_id_order(tmp_path):
    cap = _dump(tmp_path, "cap.pkl", {7: {"computation": 162.0, "communication": 5648.1},
                                      3: {"computation": 40, "communication": 20000.0},
                                      9: {"computation": 1.0, "communication": 1.0}})
    beh = _dump(tmp_path, "beh.pkl", {3: {"active": [0, 100], "inactive": [50, 150], "finish_time": 200,
                                          "duration": 100, "model": "x"},
                                      7: {"active": [10], "inactive": [20], "finish_time": 40}})
    trace = import_fedscale(cap, beh, horizon_s=400)
    assert sorted(trace) == [0, 1]   # ids 3 and 7 (9 has no behaviour)
    assert trace[0][0] == TracePoint(0.0, True, None, 40.0, 20000.0, 20000.0)
    assert [(p.time_s, p.online) for p in trace[0][1:]] == [(50, False), (100, True), (150, False),
                                                           (200, True), (250, False), (300, True), (350, False)]
    assert trace[1][0].online is False and trace[1][0].ms_per_sample == 162.0
    assert [(p.time_s, p.online) for p in trace[1][1:3]] == [(10, True), (20, False)]
    assert import_fedscale(cap, n=1) == {0: [TracePoint(0.0, None, None, 40.0, 20000.0, 20000.0)]}


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_pickle_that_names_a_callable_is_refused_unrun(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _dump(tmp_path, "evil.pkl", {1: _Evil()})
    with pytest.raises(TraceError, match="asks for .*system: only plain containers"):
        safe_load(path)
    assert not (tmp_path / "pwned").exists()


def test_malformed_entries_say_which_client(tmp_path):
    cap = _dump(tmp_path, "cap.pkl", {5: {"computation": -1, "communication": 10}})
    with pytest.raises(TraceError, match="client 5.computation: -1 is not a positive number"):
        import_fedscale(cap)
    (tmp_path / "x.pkl").write_bytes(b"not a pickle")
    with pytest.raises(TraceError, match="not a readable pickle"):
        safe_load(tmp_path / "x.pkl")
    beh = _dump(tmp_path, "beh.pkl", {1: {"active": [1, 2], "inactive": [3], "finish_time": 9}})
    with pytest.raises(TraceError, match="2 active times but 1 inactive"):
        import_fedscale(behaviour=beh)
