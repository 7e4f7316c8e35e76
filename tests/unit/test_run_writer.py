"""RunWriter under concurrent flushes and bad rows: every appended row ends up on disk or is refused loudly."""
import json
import math
import threading

import pytest

from edgebed import rundir

pytestmark = pytest.mark.timeout(60)


def _update(i: int, loss=0.5) -> dict:
    return {"update": i, "wall_time": float(i), "virtual_time": math.nan, "device": i % 7,
            "speed_class": "default", "staleness": 0, "sigma_mean": math.nan, "sigma_max": math.nan,
            "entries": 10, "bytes_in": 100, "loss": loss}


def test_concurrent_append_and_flush_loses_no_row(tmp_path):
    """The engine flushes on its timer while the PS thread flushes before each checkpoint and keeps
    appending: parts must get distinct numbers and every row must be in the table exactly once."""
    w = rundir.RunWriter(tmp_path)
    threads, per_thread, errors = 4, 400, []

    def work(k: int) -> None:
        try:
            for j in range(per_thread):
                w.append("updates", _update(k * per_thread + j))
                if j % 5 == 0:
                    w.flush()
        except BaseException as err:   # noqa: BLE001 - surfaced by the assert below
            errors.append(repr(err))

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    w.flush()
    assert errors == []
    df = rundir.read_table(tmp_path, "updates")
    assert len(df) == threads * per_thread
    assert sorted(df["update"]) == list(range(threads * per_thread))


def test_a_bad_row_loses_no_other_row_and_fails_loudly(tmp_path):
    """A row that does not fit the schema (an int loss over float64's int range, a lone surrogate)
    must not take the rows flushed with it down; it is kept on disk and the flush raises."""
    w = rundir.RunWriter(tmp_path)
    for i in range(10):
        w.append("updates", _update(i))
    w.append("updates", _update(10, loss=10 ** 19 * 10 ** 10))
    w.append("events", {"wall_time": 0.0, "virtual_time": math.nan, "update": 0, "device": 1,
                        "event": "hello", "detail": "class=\ud800"})
    w.append("events", {"wall_time": 0.0, "virtual_time": math.nan, "update": 0, "device": 2,
                        "event": "hello", "detail": "class=ok"})
    with pytest.raises(rundir.RecordError, match="unwritable"):
        w.flush()
    assert len(rundir.read_table(tmp_path, "updates")) == 10
    assert list(rundir.read_table(tmp_path, "events")["device"]) == [2]
    kept = [json.loads(line) for line in (tmp_path / "updates" / "unwritable.jsonl").read_text().splitlines()]
    assert len(kept) == 1 and kept[0]["row"]["update"] == "10"
    w.append("updates", _update(11))
    w.flush()                         # the writer goes on working after a refused row
    assert len(rundir.read_table(tmp_path, "updates")) == 11


def test_a_failed_write_keeps_its_rows_for_the_next_flush(tmp_path, monkeypatch):
    w = rundir.RunWriter(tmp_path)
    for i in range(5):
        w.append("updates", _update(i))
    real = rundir.pq.write_table

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(rundir.pq, "write_table", full_disk)
    with pytest.raises(OSError):
        w.flush()
    assert w.pending() == 5
    monkeypatch.setattr(rundir.pq, "write_table", real)
    w.append("updates", _update(5))
    w.flush()
    assert list(rundir.read_table(tmp_path, "updates")["update"]) == list(range(6))
