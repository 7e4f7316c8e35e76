"""The device trace format: CSV and JSON read to the same points, written back unchanged, and rows
that can't be used refused with the file and line."""
from __future__ import annotations

import pytest

from edgebed.traces import TraceError, TracePoint, read_trace, write_trace
from edgebed.traces.format import online_windows

CSV = """device,time_s,online,slowdown,ms_per_sample,uplink_kbit_s,downlink_kbit_s
1,5,0,,,,
0,0,1,,0.2,8000,40000
1,9,1,,,,
0,10,,,0.8,2000,
"""


def test_csv_and_json_read_to_the_same_points_and_round_trip(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    trace = read_trace(path)
    assert trace[0] == [TracePoint(0, True, None, 0.2, 8000, 40000), TracePoint(10, None, None, 0.8, 2000, None)]
    assert [p.online for p in trace[1]] == [False, True]
    for name in ("back.csv", "back.json"):
        assert read_trace(write_trace(trace, tmp_path / name)) == trace


def test_online_windows():
    pts = [TracePoint(5, False), TracePoint(9, True), TracePoint(12, None, 2.0)]
    assert online_windows(pts, 30) == [(0, 5), (9, 30)]
    assert online_windows([TracePoint(0, False), TracePoint(3, True)], 10) == [(3, 10)]


@pytest.mark.parametrize("row, says", [
    ("0,1,2,,,,", "online='2' must be 1/0"),
    ("0,1,,0.5,,,", "slowdown=0.5 must be ≥ 1"),
    ("0,1,,2,3,,", "slowdown or ms_per_sample, not both"),
    ("x,1,,,,,", "device='x' is not a device id"),
    ("0,,1,,,,", "time_s is required"),
    ("0,1,,,,-5,", "uplink_kbit_s='-5' must be a finite number > 0"),
    ("7,1,1,,,,", "device 7 is not in 0..3"),
])
def test_bad_rows_are_refused_with_the_line(tmp_path, row, says):
    path = tmp_path / "t.csv"
    path.write_text(CSV.splitlines()[0] + "\n" + row + "\n")
    with pytest.raises(TraceError, match=says) as err:
        read_trace(path, n_devices=4)
    assert "t.csv" in str(err.value)


def test_unknown_columns_and_formats_are_refused(tmp_path):
    (tmp_path / "a.csv").write_text("device,time_s,bandwidth\n0,1,5\n")
    with pytest.raises(TraceError, match="unknown column"):
        read_trace(tmp_path / "a.csv")
    (tmp_path / "b.json").write_text('{"devices": {}}')
    with pytest.raises(TraceError, match="edgebed-trace/1"):
        read_trace(tmp_path / "b.json")
