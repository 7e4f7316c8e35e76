"""Evaluation rows are collected from two threads (the PS thread after a snapshot, the engine thread
every tick): they must reach the evals table in order, and the stop/dense hook must not run under
the collector's lock (it takes ps.lock, which the PS thread holds while collecting)."""
from __future__ import annotations

import threading

import pytest

from edgebed.ps.evaluator import Collector


class SlowHandOff:
    """An evaluator whose results() returns its next row only after a second thread has had the
    chance to collect the row after it — the interleaving that used to reorder rows."""

    def __init__(self):
        self.rows = [{"update": 100, "accuracy": 0.5}, {"update": 200, "accuracy": 0.6}]
        self.first_taken = threading.Event()
        self.lock = threading.Lock()

    def results(self):
        with self.lock:
            row = self.rows.pop(0) if self.rows else None
        if row is None:
            return []
        if row["update"] == 100:
            self.first_taken.set()
            threading.Event().wait(0.3)   # the other thread collects row 200 meanwhile, if it can
        return [row]


@pytest.mark.timeout(10)
def test_rows_from_two_collecting_threads_stay_in_update_order():
    ev, recorded = SlowHandOff(), []
    col = Collector(ev, recorded.append, lambda row: None)
    a = threading.Thread(target=col.collect)
    a.start()
    ev.first_taken.wait(5)
    b = threading.Thread(target=col.collect)
    b.start()
    a.join(5), b.join(5)
    assert [r["update"] for r in recorded] == [100, 200]
    assert [r["update"] for r in col.rows] == [100, 200]


@pytest.mark.timeout(10)
def test_the_row_hook_runs_outside_the_collectors_lock():
    ps_lock = threading.RLock()
    seen = []

    class Ready:
        def results(self):
            return [{"update": 1, "accuracy": 0.9}]

    def hook(row):   # like ps.note_accuracy / request_stop: takes ps.lock
        with ps_lock:
            seen.append(row["update"])

    col = Collector(Ready(), lambda row: None, hook)
    # The engine thread holds ps.lock while another thread (think: the PS thread) collects: with
    # the hook under the collector's lock this pair would deadlock, as engine and PS threads did.
    with ps_lock:
        t = threading.Thread(target=col.collect)
        t.start()
        t.join(0.5)
        free = col._lock.acquire(timeout=2)   # the collector's lock is free meanwhile
        if free:
            col._lock.release()
    t.join(5)
    assert free and not t.is_alive() and seen == [1]
    col.collect(notify=False)
    assert seen == [1] and len(col.rows) == 2
