"""StartUp: when a run's first device said hello, what its wall-time limit counts from, and whether the
run produced anything at all.

Agents start slowly under load (containers: seconds to minutes before the first hello), and a run that
counted ``stop.wall_time`` from the agents' start could end "complete" with no device ever connected
(issue 51, point 3). On real-time runtimes the limit therefore counts from the first hello, and
``stop.first_hello_within`` bounds the wait for it; on the virtual clock every device says hello at
time 0, so nothing changes there. A run in which no device said hello, or no update was applied, is
not complete: ``no_result`` says why, and the engine ends it ``failed`` (exit 1). Times are seconds of
the runtime's clock from the agents' start (``clock.elapsed()``), measured at the run loop's tick
(0.25 s).
"""
from __future__ import annotations

from typing import Optional


class StartUp:
    def __init__(self):
        self.first_hello_s: Optional[float] = None   # s from the agents' start to the first hello
        self.waited_s: Optional[float] = None        # first_hello_within, where the run waited for one
        self.gave_up = False                         # no hello within waited_s: the run was stopped
        self.wall_time_from = "no wall-time limit"

    def wait(self, within: float, wall_time: Optional[float], clock, ps) -> None:
        """Real-time runtimes, at the agents' start: stop the run if no device says hello ``within`` s."""
        self.waited_s = within
        if wall_time is not None:
            self.wall_time_from = "the first hello, which never came"

        def give_up():
            self.gave_up = True
            ps.request_stop(f"no device said hello within {within:g} s of the agents' start")
        clock.alarm(within, give_up)

    def heard(self, at: float, wall_time: Optional[float], clock, ps) -> None:
        """The first hello came ``at`` s after the agents' start: the wall-time limit starts now."""
        self.first_hello_s = at
        if wall_time is None:
            if self.waited_s is not None:   # no limit; the wait for a hello is over
                clock.alarm(float("inf"), lambda: None)
            return
        if clock.virtual:
            self.wall_time_from = "the agents' start (virtual time: every device says hello at 0)"
            clock.alarm(wall_time, lambda: ps.request_stop(f"wall time {wall_time:.0f} s reached (virtual time)"))
            return
        self.wall_time_from = f"the first hello, {at:.2f} s after the agents' start"
        clock.alarm(at + wall_time, lambda: ps.request_stop(
            f"wall time {wall_time:.0f} s reached (counted from the first hello, {at:.1f} s after the agents' start)"))

    def no_result(self, said_hello: int, updates: int) -> Optional[str]:
        """Why a run that stopped on its own produced nothing (None: it did produce updates)."""
        if said_hello == 0:
            took = (f"agent start-up took more than {self.waited_s:g} s (stop.first_hello_within; raise it "
                    "on a loaded host)" if self.gave_up else "the run stopped before any agent connected")
            within = f"{self.waited_s:g} s" if self.gave_up else "the run"
            return f"no device said hello within {within}; {took}; no update was applied"
        if updates == 0:
            when = (f"; the first hello came {self.first_hello_s:.1f} s after the agents' start"
                    if self.first_hello_s else "")
            return (f"no update was applied: {said_hello} device{'s' if said_hello != 1 else ''} said hello"
                    f"{when}, and the run stopped before any push (its limit: {self.wall_time_from})")
        return None

    def to_dict(self) -> dict:
        """summary.json's ``startup``."""
        return {"first_hello_s": None if self.first_hello_s is None else round(self.first_hello_s, 3),
                "first_hello_within_s": self.waited_s, "wall_time_from": self.wall_time_from}
