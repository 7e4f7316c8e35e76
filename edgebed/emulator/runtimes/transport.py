"""How messages reach the PS and what time it is: the two things a runtime declares to the engine.

A runtime's ``transport`` carries device messages to ``ParameterServer.process``: ``SocketTransport``
serves the PS on a ZeroMQ ROUTER socket (``ps/serve.py``, CURVE-secured when the scenario asks) for
agents that run elsewhere; the virtual clock passes frames itself (``sim.py``'s ``InlineTransport``).
Its ``clock`` says what time it is for records and stop rules: ``WallClock`` (host time since the
agents started) or ``VirtualClock`` (emulated time, moved only by the runtime's event loop, so a time
limit falls on the same event in every run).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Optional


class WallClock:
    virtual = False

    def __init__(self):
        self.t0 = time.monotonic()        # records: wall seconds since the run was set up
        self.t_running: Optional[float] = None
        self.dilation = 1.0               # timing.dilation k: emulated time = wall / k
        self._alarm: Optional[tuple[float, Callable[[], None]]] = None

    def now(self) -> tuple[float, float]:
        """(wall s, virtual s) for the tables; virtual is NaN on an undilated wall clock, wall / k on a
        dilated one (the emulated time of a run slowed down k times)."""
        wall = time.monotonic() - self.t0
        return wall, (wall / self.dilation if self.dilation != 1.0 else math.nan)

    def running(self) -> None:
        """Agents are started: run time (``stop.wall_time``) counts from here."""
        self.t_running = time.monotonic()

    def elapsed(self) -> float:
        return 0.0 if self.t_running is None else time.monotonic() - self.t_running

    def alarm(self, seconds: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when ``elapsed()`` reaches ``seconds``."""
        self._alarm = (seconds, callback)

    def check(self) -> None:
        """Called by the engine every tick: fire the alarm if due."""
        if self._alarm is not None and self.t_running is not None and self.elapsed() >= self._alarm[0]:
            callback, self._alarm = self._alarm[1], None
            callback()


class VirtualClock(WallClock):
    """Emulated time, advanced by the runtime's event loop (``advance``); the alarm fires exactly when
    the loop is about to pass it, with the clock set to the alarm's time."""
    virtual = True

    def __init__(self):
        super().__init__()
        self.t = 0.0

    def now(self) -> tuple[float, float]:
        return time.monotonic() - self.t0, self.t

    def elapsed(self) -> float:
        return self.t

    def check(self) -> None:
        pass   # virtual time moves only in advance()

    def advance(self, t: float) -> None:
        """The event loop is about to process an event at virtual time ``t``."""
        if self._alarm is not None and t > self._alarm[0]:
            (limit, callback), self._alarm = self._alarm, None
            self.t = limit
            callback()
        self.t = max(self.t, t)


class SocketTransport:
    """The PS served on a ZeroMQ ROUTER socket; agents connect to ``endpoint``."""

    def __init__(self, ps, bind: str, curve_keys: Optional[Path] = None, n_devices: int = 0):
        import zmq
        from ...ps.fdbudget import raise_soft_limit
        from ...ps.serve import ZmqServer
        raise_soft_limit()   # the PS's connections share the engine's file table (ps/fdbudget.py)
        self.curve = None
        # The run's own ZeroMQ context: ZAP (the key authenticator or the connection gate) is bound per
        # context, so one run's handler never answers, or blocks, another's (ps/gate.py).
        self.ctx = zmq.Context()
        if curve_keys is not None:
            from ...wire import auth
            self.curve = auth.CurveServer(auth.generate(curve_keys, n_devices), context=self.ctx).start()
        self.server = ZmqServer(ps, bind, context=self.ctx,
                                configure_socket=self.curve.configure_socket if self.curve else None,
                                device_of=self.curve.device_of if self.curve else None).start()
        if self.curve is not None:   # the key authenticator also asks the socket's cap on connections
            self.curve.allowed.gate = self.server.gate
        self.endpoint = self.server.endpoint

    @property
    def alive(self) -> bool:
        return self.server.alive

    @property
    def error(self) -> Optional[BaseException]:
        return self.server.error

    def stop(self) -> None:
        self.server.stop()
        if self.curve is not None:
            self.curve.stop()
        if not self.server.alive and not self.server.gate.alive:   # no thread uses a socket of it any more
            self.ctx.destroy(linger=0)
