"""FLASH's state traces (both its raw ``state_traces.json`` and its ``cached_timers.json``) imported into
the project's trace format: a device is online while locked, on wifi and charging, the pattern repeats
every trace_end − trace_start seconds, aligned as FLASH aligns it."""
from __future__ import annotations

import json

import pytest

from edgebed.traces import TraceError, TracePoint, read_trace, write_trace
from edgebed.traces.__main__ import main
from edgebed.traces.flash import import_flash, online_spans, read_flash
from edgebed.traces.format import online_windows

# one day after FLASH's reference instant (2020-01-02 00:00:00) is 86,400 s
RAW = {
    # ready (locked + wifi + charging) from 00:01:40 (100 s) to 00:03:20 (200 s); trace 0..400 s
    "b": {"guid": "b", "model": "Redmi Note 8", "messages": "\n".join([
        "2020-01-02 00:00:00\twifi", "2020-01-02 00:00:50\tbattery_charged_on", "2020-01-02 00:01:00\t80%",
        "2020-01-02 00:01:40\tscreen_lock", "2020-01-02 00:03:20\tscreen_unlock",
        "2020-01-02 00:05:00\tscreen_off", "2020-01-02 00:06:40\t4g", ""])},
    # a line without a tab: FLASH marks the trace unusable (isSuccess false), so it is skipped
    "a": {"guid": "a", "model": "x", "messages": "2020-01-02 00:00:00 wifi\n2020-01-02 00:01:00\tscreen_lock"},
}
CACHED = {
    "g1": {"isSuccess": True, "trace_start": 1000.0, "trace_end": 1100.0, "ready_time": [[1010, 1030], [1025, 1040]]},
    "g0": {"isSuccess": False, "trace_start": None, "trace_end": None, "ready_time": []},
}


def _write(tmp_path, name, obj):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def test_raw_messages_ready_while_locked_on_wifi_and_charging(tmp_path):
    timers = read_flash(_write(tmp_path, "state_traces.json", RAW))
    assert list(timers) == ["b"]                                  # "a" unusable, as in FLASH
    assert timers["b"] == {"trace_start": 0.0, "trace_end": 400.0, "ready_time": [[100.0, 200.0]]}
    trace = import_flash(tmp_path / "state_traces.json", horizon_s=1000)
    # the 400 s pattern repeats: online 100–200, 500–600, 900–1000
    assert trace == {0: [TracePoint(0.0, False), TracePoint(100.0, True), TracePoint(200.0, False),
                         TracePoint(500.0, True), TracePoint(600.0, False), TracePoint(900.0, True)]}
    assert online_windows(trace[0], 1000) == [(100, 200), (500, 600), (900, 1000)]


def test_cached_timers_merge_overlaps_and_follow_flash_alignment(tmp_path):
    path = _write(tmp_path, "cached_timers.json", CACHED)
    # FLASH looks at trace time (t − 1000) mod 100 + 1000 at time t: t = 0 is trace time 1000, so the
    # merged ready span 1010–1040 is online at 10–40, 110–140, ...
    assert online_spans(read_flash(path)["g1"], 250) == [(10, 40), (110, 140), (210, 240)]
    trace = import_flash(path, horizon_s=250)
    assert list(trace) == [0]                                     # g0: isSuccess false, skipped
    assert online_windows(trace[0], 250) == [(10, 40), (110, 140), (210, 240)]
    # a run that starts 1,030 s after the reference instant: trace time 1030, ready until 1040
    assert online_spans(read_flash(path)["g1"], 120, offset_s=1030) == [(0, 10), (80, 110)]
    assert import_flash(path, horizon_s=120, offset_s=1030)[0][0] == TracePoint(0.0, True)


def test_cli_writes_a_trace_the_runtimes_read(tmp_path, capsys):
    src = _write(tmp_path, "state_traces.json", {**RAW, "c": RAW["b"]})
    out = tmp_path / "trace.csv"
    assert main(["flash", str(src), "--n", "1", "--horizon", "10min", "-o", str(out)]) == 0
    assert "1 devices" in capsys.readouterr().out
    assert read_trace(out, 1) == import_flash(src, n=1, horizon_s=600)


@pytest.mark.parametrize("obj, message", [
    ([1, 2], "keyed by device id"),
    ({"x": {"foo": 1}}, "neither 'messages'"),
    ({"x": {"messages": "2020-01-02 00:00:00\tairplane"}}, "line 1: unknown state 'airplane'"),
    ({"x": {"isSuccess": True, "trace_start": 0, "trace_end": 10, "ready_time": [[5, 2]]}}, "ends before"),
    ({"x": {"isSuccess": False, "ready_time": []}}, "no device FLASH could use"),
])
def test_malformed_files_are_refused_with_the_device(tmp_path, obj, message):
    with pytest.raises(TraceError, match=message):
        import_flash(_write(tmp_path, "t.json", obj))


def test_round_trip_through_the_project_format(tmp_path):
    trace = import_flash(_write(tmp_path, "c.json", CACHED), horizon_s=250)
    write_trace(trace, tmp_path / "t.json")
    assert read_trace(tmp_path / "t.json", 1) == trace
