"""The console: progress that fits the terminal, event lines when piped, warnings above the bar."""
from __future__ import annotations

import io

import pytest

from edgebed import console
from edgebed.console import RunProgress, RunStatus, stop_fraction
from edgebed.scenario import StopSpec

pytestmark = pytest.mark.timeout(30)



def _status(**kw) -> RunStatus:
    base = dict(updates=1234, rate=56.7, accuracy=0.9123, evals=3, ingress_bytes=12_345_678, alive=8,
                elapsed=12.0, virtual=345.6, done=0.42)
    return RunStatus(**{**base, **kw})


def test_stop_fraction_is_the_furthest_stop_rule():
    assert stop_fraction(StopSpec(updates=1000), 250, 99.0) == 0.25
    assert stop_fraction(StopSpec(updates=1000, wall_time=100), 250, 50.0) == 0.5
    assert stop_fraction(StopSpec(target_accuracy=0.9), 250, 50.0) is None


def test_piped_progress_prints_a_line_per_evaluation_not_per_tick():
    out = io.StringIO()
    show = RunProgress(out, every=3600, force_terminal=False)
    for i in range(50):
        show(_status(updates=i, evals=i // 10), False)
    show(_status(updates=50, evals=5), True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6                       # evals 0..4 appeared, then the final line
    assert lines[-1].startswith(" 42% | updates 50 |") and "virtual 345.6 s" in lines[-1]


def test_terminal_progress_fits_80_columns_and_shows_percent_eta_and_virtual_time():
    out = io.StringIO()
    show = RunProgress(out, force_terminal=True)
    show._start()
    show._progress.console.width = 80
    show(_status(), False)
    show(_status(updates=2000, done=1.0), True)
    from rich.text import Text
    text = Text.from_ansi(out.getvalue()).plain
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert len(last) <= 80, last
    assert "100%" in last and "2,000 upd" in last and "virt 5:45" in last and "acc 91.23%" in last


def test_a_warning_during_a_run_is_a_line_above_the_bar(capsys):
    console.setup_logging(0)
    out = io.StringIO()
    show = RunProgress(out, force_terminal=True)
    show(_status(), False)
    console.warn("the host CPU is saturated")
    show(_status(done=1.0), True)
    assert "warning: the host CPU is saturated" in out.getvalue()


def test_quiet_mode_keeps_warnings_only(capsys):
    console.setup_logging(-1)
    console.log.info("chatter")
    console.warn("careful")
    err = capsys.readouterr().err
    assert "chatter" not in err and "warning: careful" in err
    console.setup_logging(0)


def _screen(out: io.StringIO) -> list[str]:
    from rich.text import Text
    return [line for line in Text.from_ansi(out.getvalue()).plain.splitlines() if line.strip()]


def test_the_bar_takes_the_width_left_and_says_of_how_many_updates():
    out = io.StringIO()
    show = RunProgress(out, force_terminal=True)
    show._start()
    show._progress.console.width = 120
    show(_status(updates=1234, total=4000, done=0.3085), False)
    show(_status(updates=4000, total=4000, done=1.0), True)
    last = _screen(out)[-1]
    assert "4,000 of 4,000 upd" in last and len(last) <= 120
    assert len(last) >= 110, last                 # the bar grew into the room the text left


def test_start_up_steps_are_lines_of_their_own_at_once_on_a_terminal_and_piped():
    for tty in (True, False):
        out = io.StringIO()
        show = RunProgress(out, every=3600, force_terminal=tty)
        if tty:
            show._start()
            show._progress.console.width = 80
        show(console.Phase("run directory: runs/q-1"), False)
        show(console.Phase("[  1.4 s] starting 24 agents on runtime local"), False)
        show(_status(done=1.0), True)
        text = "\n".join(_screen(out))
        assert "run directory: runs/q-1" in text and "[  1.4 s] starting 24 agents" in text, (tty, text)


def test_the_study_line_fits_80_columns_with_the_study_eta(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(console.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    show = RunProgress(out, force_terminal=True)
    show._start()
    show._progress.console.width = 80
    head = "[1/5] c=0.01 · train_samples=8000 · adacomp · seed 3"
    show(f"{head} | {_status(done=0.5, total=4000, updates=2000)}", False)
    clock[0] += 60.0
    show(f"{head} | {_status(done=0.5, total=4000, updates=2000)}", False)
    show(f"{head}: complete in 100.0 s", True)    # one run of 100 s: four to go
    clock[0] += 40.0
    nxt = "[2/5] c=0.01 · train_samples=8000 · asgd · seed 3"
    show(f"{nxt} | {_status(done=0.25, total=4000, updates=1000)}", False)
    show._progress.refresh()
    show.close()
    line = _screen(out)[-1]
    assert len(line) <= 80, line
    assert "run 2/5" in line and "ETA 6:15" in line, line   # 75 s left of this run + 3 runs × 100 s
