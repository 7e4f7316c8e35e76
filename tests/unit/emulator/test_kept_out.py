"""Devices the connection cap kept out count in the fidelity verdicts (issue 51, point 2): a churn run in
which restarted devices could not rejoin for 26.6 s ended with "online fraction per class as expected"."""
from __future__ import annotations

import pandas as pd

from edgebed.emulator.dynamics_fidelity import dynamics_fidelity
from edgebed.emulator.fidelity import run_fidelity
from edgebed.emulator.kept_out import kept_out
from edgebed.scenario import parse_scenario

SC = parse_scenario({"name": "d", "workers": {"n": 2}, "stop": {"updates": 10}, "runtime": {"name": "local"},
                     "dynamics": {"availability": {"classes": {"default": {"online": "20s", "offline": "2s"}}}}})
CLASSES = {0: "default", 1: "default"}


def _events(refused: bool) -> pd.DataFrame:
    """Two devices join at 0.5 s; device 1 goes offline at 10 s and is started again at 12 s; its hello
    comes at 12.3 s — or, while stalled connections hold the cap, at 38.6 s."""
    rows = [(0.0, -1, "start", "2 agents"), (0.5, 0, "hello", "attempt=0"), (0.5, 1, "hello", "attempt=0"),
            (10.0, 1, "offline", "scheduled_s=10 applied_s=10"), (12.0, 1, "online", "scheduled_s=12 applied_s=12")]
    if refused:
        rows += [(12.4, -1, "refused-at-cap", "refused=1 total=1 cap=20 in_use=20"),
                 (13.4, -1, "refused-at-cap", "refused=3 total=4 cap=20 in_use=20"), (38.6, 1, "hello", "attempt=1")]
    else:
        rows += [(12.3, 1, "hello", "attempt=1")]
    rows += [(40.0, -1, "stop", "wall time 40 s reached")]
    t, d, e, x = zip(*rows)
    return pd.DataFrame({"wall_time": t, "virtual_time": t, "device": d, "event": e, "detail": x})


def test_kept_out_counts_the_devices_waiting_to_join_while_the_cap_refused():
    assert kept_out(_events(False), [0, 1]) is None
    k = kept_out(_events(True), [0, 1])
    assert (k["connections_refused"], k["devices"]) == (4, 1)
    assert abs(k["by_device"][1] - (38.6 - 12.0)) < 1e-6   # from its restart (a refusal 0.4 s later) to its hello


def test_the_dynamics_verdict_is_not_faithful_when_the_cap_kept_devices_out():
    honest = dynamics_fidelity(_events(False), SC.dynamics, CLASSES, 40.0)
    assert honest["verdict"]["faithful"], honest["verdict"]
    v = dynamics_fidelity(_events(True), SC.dynamics, CLASSES, 40.0)["verdict"]
    assert not v["faithful"] and "1 device kept out" in v["summary"], v
    assert "as expected" not in v["summary"]


def test_run_fidelity_records_the_devices_kept_out():
    updates = pd.DataFrame(columns=["device", "speed_class", "wall_time", "virtual_time", "staleness", "bytes_in"])
    classes = [c.model_dump(mode="json") for c in SC.workers.classes]
    out = run_fidelity(updates, classes, CLASSES, events=_events(True))
    assert out["kept_out"]["devices"] == 1 and out["kept_out"]["connections_refused"] == 4
