"""Signals to the run's whole process group — what a terminal's Ctrl-C, a batch system's SIGTERM or a
closing terminal multiplexer's SIGHUP send: every child (evaluator, fork server, agents) outlives them
long enough for the engine to end the run ``incomplete``, exit 130, with one line and no traceback;
and a run that completed stays complete, exit 0, whatever arrives after."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from edgebed.rundir import read_json
from tests.integration.runproc import end_run, run_dir, small_run, start_run, update_parts, wait_for

SCENARIO = small_run("grp", local=True, stop="{updates: %s, wall_time: 90s}")


def _group(proc, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _summary(tmp):
    run = run_dir(tmp, "grp")
    return read_json(run, "summary.json") if run is not None else {}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_group_signal_mid_run_ends_the_run_incomplete_130(tmp_path, sig):
    proc = start_run(tmp_path, SCENARIO % 100000)
    try:
        wait_for(lambda: update_parts(run_dir(tmp_path, "grp")) >= 1, 120, "the first updates", proc)
        _group(proc, sig)
        out, _ = proc.communicate(timeout=90)
    finally:
        end_run(proc, run_dir(tmp_path, "grp"))
    s = _summary(tmp_path)
    assert (proc.returncode, s.get("status")) == (130, "incomplete"), (s.get("reason"), out[-3000:])
    assert "evaluator" not in s.get("reason", ""), s.get("reason")
    assert "Traceback" not in out, out[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_to_the_group_during_agent_start_up_is_one_line_no_traceback(tmp_path):
    """The terminal's Ctrl-C reaches the fork server too, while it imports torch (issue #41, 3):
    pressed at several moments of start-up, from the run directory's creation to the first agents."""
    outcomes = []
    for k, delay in enumerate((0.0, 0.7, 2.0)):
        tmp = tmp_path / f"m{k}"
        tmp.mkdir()
        proc = start_run(tmp, SCENARIO % 100000)
        try:
            wait_for(lambda: run_dir(tmp, "grp") is not None, 120, "the run directory", proc)
            time.sleep(delay)
            _group(proc, signal.SIGINT)
            out, _ = proc.communicate(timeout=90)
        finally:
            end_run(proc, run_dir(tmp, "grp"))
        outcomes.append((delay, proc.returncode, _summary(tmp).get("status")))
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, (delay, out[-4000:])
        assert proc.returncode == 130, (delay, out[-3000:])
        assert _summary(tmp).get("status") == "incomplete", (delay, out[-3000:])
        assert sum("Ctrl-C: stopping" in line for line in out.splitlines()) == 1, out[-3000:]
    print("\n(delay s, exit code, status):", outcomes)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ctrl_c_after_the_run_completed_leaves_it_complete_exit_0(tmp_path):
    """Presses that land once summary.json says complete (the run is over, its summary printing):
    the run is reported complete and the command exits 0."""
    proc = start_run(tmp_path, SCENARIO % 150)
    pressed = 0
    try:
        wait_for(lambda: _summary(tmp_path).get("status") in ("complete", "failed", "incomplete"),
                 150, "the run's end", proc)
        while proc.poll() is None:
            _group(proc, signal.SIGINT)
            pressed += 1
            time.sleep(0.01)
        out, _ = proc.communicate(timeout=60)
    finally:
        end_run(proc, run_dir(tmp_path, "grp"))
    assert pressed >= 1, "the run exited before a press landed; nothing was tested"
    assert _summary(tmp_path).get("status") == "complete", out[-3000:]
    assert proc.returncode == 0, (pressed, out[-3000:])



def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()   # state, ppid, pgrp, session, ...; [19]: start time


def _descendants(root: int, known: dict) -> None:
    """Add the live descendants of ``root`` to ``known`` (pid → (start time, command)): children that
    left the run's session (agents, the fork server) included."""
    kids: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                kids.setdefault(int(_stat(int(p))[1]), []).append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    todo = [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            try:
                with open(f"/proc/{k}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:100]
                known.setdefault(k, (_stat(k)[19], cmd))
            except (OSError, IndexError):
                continue
            todo.append(k)


def _still_alive(known: dict) -> list[str]:
    out = []
    for pid, (start, cmd) in known.items():
        try:
            st = _stat(pid)
        except (OSError, IndexError):
            continue
        if st[19] == start and st[0] not in ("Z", "X"):   # the same process, not a reused pid
            out.append(f"{pid} {cmd}")
    return out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_no_process_of_the_run_is_alive_two_seconds_after_a_group_sighup(tmp_path):
    """Issue 51, point 13: after a group SIGHUP one process was still alive 2 s later (the fork server
    or the resource tracker, which ended on their own only after the command had exited: 0.5 s here,
    over 2 s on a loaded host). Every process the run started, those that left its session too, is gone
    when the command exits."""
    proc = start_run(tmp_path, SCENARIO % 100000)
    known: dict = {}
    try:
        wait_for(lambda: _descendants(proc.pid, known) or update_parts(run_dir(tmp_path, "grp")) >= 1, 120,
                 "the first updates", proc)
        for _ in range(5):
            _descendants(proc.pid, known)
            time.sleep(0.1)
        reader = threading.Thread(target=proc.stdout.read, daemon=True)   # the output, to its end
        reader.start()
        _group(proc, signal.SIGHUP)
        proc.wait(timeout=90)   # the command's exit (its output may stay open in what outlives it)
        at_exit = _still_alive(known)
        time.sleep(2.0)
        later = _still_alive(known)
    finally:
        end_run(proc, run_dir(tmp_path, "grp"))
    assert proc.returncode == 130
    assert len(known) >= 4, known   # the evaluator, the fork server and agents were seen
    assert at_exit == [] and later == [], (at_exit, later)   # the command ends with its processes
