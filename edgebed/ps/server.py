"""ParameterServer: the protocol state machine — frames in, frames out; no sockets, no threads.

``process(peer, frames)`` is the single entry point for every runtime: the ZeroMQ serve loop
(``ps/serve.py``) calls it for real sockets and the virtual-clock runtime calls it directly. It is also
the single place where traffic is counted (``TrafficMeter``) and the only code that mutates Θ.

Round-based update rules (model averaging) hold some replies until their round closes: ``process``
then returns None and the PS later hands the reply to ``Hooks.send(peer, frames)``, always from within
``process`` or ``tick`` — i.e. on the thread that calls them, which the transport owns.

Threads: one thread (the transport's) calls ``process``/``tick`` while holding ``lock``; other threads
(the engine) read PS state only through the methods that take ``lock`` (``silent_devices``,
``frozen_devices``, ``device_count``) or under ``with ps.lock``. A session is bound to the peer (ZeroMQ
routing identity, hence also its CURVE key) that opened it, and its sequence numbers belong to it.

Pushes: nearly every message is a version-1 push from a device in good standing, and ``_push`` takes
those by a short path — the fields read from the canonical header without building a Push, the
checks that can refuse it made before anything changes — then ``_apply_push``, which the general
``_on_push`` ends with too. Anything else the short path meets (another message, an unknown session,
a duplicate, a refusal, a held reply) it hands to the general path untouched, so every refusal and its
wording are the general path's. The one step it may have taken first is the periodic look at Θ, which
both paths take just before the entries' check; the general path then finds it done. Both give the
same Θ, tables and counts (tests/unit/ps/test_push_paths.py). The short path is compiled
(``_shortpath.c``) where built; ``_push_py`` is its specification. ``fast_push = False`` turns it off.
"""
from __future__ import annotations

import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .. import wire
from ..advice import MAX_STEP
from .aggregate import (ENTRIES_OK, INDEX_TOO_LARGE, NOT_FINITE, NOT_INCREASING, check_entries,
                        check_entries_top, max_abs)
from . import aggregate
from .robust import NormClip
from .rules import UpdateRule
from .statistics import StatisticsBound
from .traffic import TrafficMeter


@dataclass
class PSConfig:
    n_devices: int
    welcome: Callable[[int], wire.WelcomeConfig]   # device → run configuration sent in Welcome
    class_of: Callable[[int], str]            # device → speed-class name
    stop_updates: Optional[int] = None        # I
    eval_every: int = 0                       # snapshot Θ for evaluation at every k-th update (0: never)
    eval_dense: Optional[tuple] = None        # (near accuracies, within, every): see note_accuracy
    crash_probability: float = 0.0            # fail-stop probability per applied push
    crash_at: Optional[object] = None         # crashes.CrashSchedule: failures.crash's devices and points
    seed: int = 0
    max_message_bytes: Optional[int] = None   # bytes; None: wire.message_cap(|Θ|), set by the PS
    max_step: float = MAX_STEP                # a push may move an entry of Θ by at most this × max(1, ‖Θ₀‖∞)
    diverge_at: float = MAX_STEP              # ‖Θ‖∞ over this × max(1, ‖Θ₀‖∞): the model diverged
    on_divergence: str = "fail"               # fail: the run ends failed; exclude: go on without the device
    max_abs_value: Optional[float] = None     # a fixed bound on pushed values instead of the one max_step gives
    checkpoint_every: int = 0                 # hand the PS to hooks.checkpoint at every k-th update (0: never)
    lost_after: float = 0.0                   # a round stops waiting for a device silent this long (s; 0: never)
    downlink: Optional[object] = None         # compression.downlink.ModelDownlink: compressed pulls (None: f32)
    max_peers: Optional[int] = None           # connections to the socket at a time (None: max_peers_for)
    statistics: int = 0                       # Θ's last entries that are running statistics (models.py)
    variances: tuple = ()                     # (offset, size) in Θ of each running variance among them
    clip: Optional[float] = None              # security.robust.clip: push norms ≤ this × the recent median (robust.py)
    clip_window: int = 64                     # security.robust.window: pushes the median is taken over
    stall_s: float = 30.0                     # s a peer that owes bytes may send none before it is cut (ps/frameguard.py;
    #                                           below the agents' 60 s reply time-out; security.stall_timeout)


@dataclass
class DeviceState:
    session: str
    attempt: int
    pulled: Optional[int] = None     # version j of the last pull
    peer: bytes = b""                # routing identity of the connection that said hello
    last_seq: int = -1               # highest push sequence number applied in this session
    last_seen: float = 0.0
    frozen: bool = False
    pushes: int = 0
    excluded: bool = False           # its pushes made Θ diverge: refused from then on
    moved: float = 0.0               # Σ over its applied pushes of α·‖v‖₂ (≥ ‖ΔΘ‖₂): how far it moved Θ
    refused: int = 0                 # its pushes refused (bad-payload)


@dataclass
class Hooks:
    """Callbacks into the engine; all optional. Called on the PS thread."""
    record: Callable[[str, dict], None] = lambda table, row: None
    freeze: Callable[[int], None] = lambda device: None            # runtime-level fail-stop
    snapshot: Callable[[int, np.ndarray, dict], None] = lambda version, theta, info: None
    clock: Callable[[], tuple[float, float]] = field(default=None)  # (wall s, virtual s)
    checkpoint: Callable[["ParameterServer"], None] = lambda ps: None   # e.g. ps/checkpoint.save
    # Deliver a held reply later (round-based rules); set by the transport (ZmqServer) that owns the socket.
    send: Optional[Callable[[bytes, list], None]] = None
    # Set by a transport that can tell: models sent to a peer and not yet let go of by the socket;
    # ``consumed(peer, None)``: the peer pushed an update, so it read what it was sent.
    in_flight: Callable[[bytes], int] = lambda peer: 0
    consumed: Callable[[bytes, None], None] = lambda peer, default=None: None


MAX_MODELS_IN_FLIGHT = 2   # per connection; an honest device has one (two right after an elastic join)
THETA_CHECK_EVERY = 64   # updates between two looks at ‖Θ‖∞ (≈50 µs for 200k entries: <1 µs an update)
_EXCLUDED = "this device's pushes made the model diverge: it is refused for the rest of the run"
_HOLD = object()   # a handler's answer when the rule holds the reply until its round closes
_F32, _U32 = np.dtype(np.float32), np.dtype(np.uint32)
try:   # the short path for pushes, compiled (edgebed/ps/_shortpath.c); optional, like the PS's other C parts
    from . import _shortpath as _SHORT
except ImportError:
    _SHORT = None
if _SHORT is not None and wire._HEADER is not None:
    _SHORT.setup(wire._HEADER.push_frames, aggregate, check_entries_top, np.frombuffer, _F32, _U32,
                 wire._ACK_APPLIED, THETA_CHECK_EVERY, ENTRIES_OK)
else:   # it reads headers with the compiled reading only
    _SHORT = None


def max_peers_for(config: PSConfig) -> int:
    """Connections the socket admits at a time: ``max_peers``, else two per device (an agent that
    rejoins opens a new one before the old one is gone) and 16 for tools."""
    return config.max_peers if config.max_peers is not None else 2 * config.n_devices + 16


class ParameterServer:
    def __init__(self, config: PSConfig, theta: np.ndarray, rule: UpdateRule, hooks: Hooks | None = None):
        self.config = config
        self.theta = theta
        if config.max_message_bytes is None:   # the cap follows the model (issue #38), not a constant
            config.max_message_bytes = wire.message_cap(theta.size)
        self.rule = rule
        self.hooks = hooks or Hooks()
        self.t0 = time.monotonic()
        if self.hooks.clock is None:
            self.hooks.clock = lambda: (time.monotonic() - self.t0, math.nan)
        self.version = 0
        self.devices: dict[int, DeviceState] = {}
        self.sessions: dict[str, int] = {}
        self.meter = TrafficMeter(config.class_of)
        self.stopped: Optional[str] = None   # reason, once the run is over
        self.errors: dict[str, int] = {}
        self._crash_rngs = {}
        self._crash_fired: set[int] = set()   # devices whose scheduled crash (config.crash_at) happened
        self.last_snapshot: Optional[int] = None   # version of the last Θ handed to the evaluator
        self._eval_step = config.eval_every        # eval.every, or eval.dense.every near a target
        self._held: dict[int, tuple[bytes, str]] = {}   # device → (peer, "pull" | "push") of a held reply
        self.lock = threading.RLock()     # held by the transport around process/tick; see module docstring
        self.busy_peers: set[bytes] = set()   # peers whose send queue is full (set by the transport)
        self._peer = b""                  # peer of the message being processed
        self._principal: Optional[int] = None   # its CURVE-authenticated device (None: plaintext)
        self._seen: Optional[tuple] = None      # the clock when its session was last looked up (_session)
        # message class → handler, looked up once per message (instead of getattr of a formatted name)
        self._handlers = {cls: getattr(self, f"_on_{cls.KIND}") for cls in wire.MESSAGE_TYPES.values()
                          if hasattr(self, f"_on_{cls.KIND}")}
        # The short path for pushes (``_push``): for rules that answer every push at once with an Ack
        # (no rounds to hold it for, no Sync), which is every rule but the averaging ones.
        # security.robust: pushes clipped to a multiple of the recent median norm (robust.py), on the general path
        self.robust = NormClip(config.clip, config.clip_window) if config.clip is not None else None
        self.fast_push = (type(rule).ready is UpdateRule.ready and type(rule).sync_due is UpdateRule.sync_due
                          and self.robust is None)
        self.failure: Optional[str] = None    # why the run failed, when the PS saw it (Θ diverged)
        self._admit_payload = self._admit     # bound once: wire.decode's admit hook
        self._limit = 0.0                     # bound on pushed values (see value_limit); set below
        self._limit_at = -1                   # version it was computed at
        # The scale the bound and the divergence test are anchored to: Θ's at the start, which no push
        # can move (a bound that followed ‖Θ‖∞ grew with the poison it let in: issue #36).
        self.anchor = max(1.0, self._inf_norm())
        self._window: dict[int, tuple[float, int]] = {}   # device → (largest step, pushes) since the last look
        self._sound: Optional[np.ndarray] = None   # Θ at the last look that found it sound (on_divergence: exclude)
        self._tainted = False                 # a push moved an entry by more than ``anchor`` since then
        self._window_all: dict[int, tuple[float, int]] = {}   # the windows since then
        # Running statistics Θ carries (model.buffers average): bounded apart (ps/statistics.py)
        self._stats = StatisticsBound(theta, config.statistics, config.variances, config.max_step,
                                      rule.push_sign()) \
            if config.statistics else None
        self.value_limit()

    # -- entry point -------------------------------------------------------------------------
    def process(self, peer: bytes, frames, principal: Optional[int] = None) -> Optional[list]:
        """Handle one received message; returns the reply frames (None: no reply). ``principal``: the
        device whose CURVE key the connection authenticated with (None: plaintext)."""
        if self.fast_push:
            out = self._push(peer, frames, principal)
            if out is not None:
                return out
        nbytes = wire.frames_nbytes(frames)
        self._peer, self._principal = peer, principal
        try:
            msg = wire.decode(frames, self.config.max_message_bytes, nbytes, self._admit_payload)
        except wire.WireError as err:
            self.meter.received("malformed", nbytes, None)
            return self._reject(err.code, str(err), None)
        cls = type(msg)
        if cls is wire.Hello:
            device = msg.device if isinstance(msg.device, int) and 0 <= msg.device < self.config.n_devices else None
        else:
            session = getattr(msg, "session", None)
            device = self.sessions.get(session) if session is not None else None
        self.meter.received(msg.kind, nbytes, device)
        handler = self._handlers.get(cls)
        if handler is None:
            return self._reject("unexpected", f"{msg.kind} is not a request", device)
        reply = handler(msg, nbytes)
        if reply is _HOLD:
            if self.hooks.send is None:
                raise RuntimeError(f"update rule {self.rule.name!r} holds replies until its round closes, "
                                   "but this transport set no Hooks.send to deliver them")
            self._held[device] = (peer, msg.kind)
            reply = None
        if self._held:
            self._release()
        if reply is None:
            return None
        out = wire.encode(reply)
        self.meter.sent(reply.kind, wire.frames_nbytes(out), device)
        return out

    def refuse(self, peer: bytes, code: str, message: str, nbytes: int) -> list:
        """A message the transport refused before ``process`` could see it whole (one of too many frames):
        counted as a malformed message and refused like one; → the Error reply's frames."""
        self._peer, self._principal = peer, None
        self.meter.received("malformed", nbytes, None)
        return self._reject(code, message, None)

    def unsent(self, peer: bytes, frames: list) -> None:
        """The transport could not deliver a reply (the peer isn't reading, or is gone): take it out of
        the egress counted when it was made, so egress is what was sent."""
        kind = wire.MESSAGE_TYPES[bytes(memoryview(frames[0])[3:4])[0]].KIND
        device = next((d for d, st in self.devices.items() if st.peer == peer), None)
        self.meter.unsent(kind, wire.frames_nbytes(frames), device)

    def tick(self) -> None:
        """Time-based work, on the transport's thread (ZmqServer calls it at least every 100 ms):
        after a stop, answer held requests with Stop; close rounds without members silent for more than
        ``lost_after`` s (they rejoin at their next message); send held replies that became ready."""
        if not self._held:
            return
        if self.config.lost_after > 0 and not self.stopped:
            now = self._now()[0]
            for d in sorted(self.rule.waiting_for()):
                st = self.devices.get(d)
                if d not in self._held and (st is None or now - st.last_seen > self.config.lost_after):
                    self.rule.forget(d)
                    self.event(d, "left-round", f"silent for more than {self.config.lost_after:g} s; "
                                "the round closes without it")
        self._release()

    def request_stop(self, reason: str) -> None:
        """End the run (any thread)."""
        with self.lock:
            if self.stopped is None:
                self.stopped = reason
                self.event(-1, "stop", reason)

    # -- handlers ----------------------------------------------------------------------------
    def _on_hello(self, msg: wire.Hello, nbytes):
        d = msg.device
        if not (isinstance(d, int) and 0 <= d < self.config.n_devices):
            return self._err("bad-device", f"device {d} is not in 0..{self.config.n_devices - 1}")
        if self._principal is not None and d != self._principal:
            return self._err("wrong-key", f"this connection's CURVE key is device {self._principal}'s; "
                             f"it can't say hello as device {d}")
        old = self.devices.get(d)
        if old is not None and old.excluded:
            return self._err("excluded", _EXCLUDED, d)
        if self.stopped:
            return wire.Stop(self.stopped)
        if old is not None:
            if old.frozen:
                return self._err("frozen", f"device {d} crashed (fail-stop); it may not rejoin")
            self.sessions.pop(old.session, None)
            self._held.pop(d, None)   # its old socket is gone
        if self.config.downlink is not None:
            self.config.downlink.forget(d)   # a new session starts from a full model
        session = secrets.token_hex(8)
        # Sequence numbers are per session: an agent that rejoins drops its push in flight, so nothing
        # is replayed across sessions, and no earlier session (another peer's) can block this one.
        self.devices[d] = DeviceState(session, msg.attempt, peer=self._peer, last_seen=self._now()[0],
                                      moved=old.moved if old else 0.0, refused=old.refused if old else 0)
        self.sessions[session] = d
        self.event(d, "hello", f"attempt={msg.attempt} class={msg.speed_class}")
        return wire.Welcome(session, self.config.welcome(d).to_dict())

    def _on_pull(self, msg: wire.Pull, nbytes):
        st = self._session(msg.session)
        if isinstance(st, wire.Message):
            return st
        if self.stopped:
            return wire.Stop(self.stopped)
        d = self.sessions[msg.session]
        if (d in self._held or self._peer in self.busy_peers
                or self.hooks.in_flight(self._peer) >= MAX_MODELS_IN_FLIGHT):
            # A reply is still outstanding (held by the round, or queued for a peer that isn't
            # reading): at most MAX_MODELS_IN_FLIGHT models a connection, so unread pulls cost nothing.
            return self._err("busy", "a reply to this session is still outstanding; read it first", d)
        if not self.rule.ready(d, "pull"):
            return _HOLD
        return self._model_for(d)

    def _model_for(self, d: int) -> wire.Model:
        self.devices[d].pulled = self.version
        self.rule.on_pull(d, self.version)
        if self.config.downlink is not None:
            return self.config.downlink.model(d, self.version, self.theta)
        # A private copy: a zero-copy send of the live Θ could be torn by the next apply.
        return wire.Model(self.version, self.theta.copy())

    def _count_statistics(self, indices: Optional[np.ndarray]) -> None:
        """A push's bytes of running statistics (Θ's tail, model.buffers average), 4 an entry."""
        first = self.theta.size - self.config.statistics
        n = self.config.statistics if indices is None else int((indices >= first).sum())
        self.meter.statistics(4 * n)

    def _push(self, peer: bytes, frames, principal: Optional[int]) -> Optional[list]:
        """The short path of ``process`` for a version-1 push of a device in good standing (see the
        module docstring): its Ack's frames, or None, having changed nothing (but for the periodic look
        at Θ, if it was due), for ``process`` to take the message the general way. ``_push_py``'s steps,
        compiled (``_shortpath.c``) where built and the compiled kernels are on."""
        if _SHORT is not None and aggregate._fast is not None:
            return _SHORT.push(self, peer, frames, principal)
        return self._push_py(peer, frames, principal)

    def _push_py(self, peer: bytes, frames, principal: Optional[int]) -> Optional[list]:
        """``_push`` in Python: the specification ``_shortpath.c`` follows step for step."""
        fields = wire.push_fields(frames, self.config.max_message_bytes)
        if fields is None:
            return None
        session, seq, version, values, indices, loss, nbytes = fields
        d = self.sessions.get(session)
        if d is None:
            return None
        st = self.devices[d]
        n = self.theta.size
        if (st.peer != peer or st.excluded or st.frozen or self.stopped or self._held or seq <= st.last_seq
                or not 0 < values.size or version > self.version or self.config.statistics
                or (values.size != n if indices is None else indices.size != values.size)):
            return None
        if self._limit_at + THETA_CHECK_EVERY <= self.version:   # the bound's look at Θ is due: taken
            self.value_limit()   # where the general path takes it (_check_payload), before the entries' check
        verdict, top = check_entries_top(indices, values, n, self._limit)   # and max |v|, for _note_step
        if verdict != ENTRIES_OK:
            return None
        self._peer, self._principal = peer, principal
        self.meter.received("push", nbytes, d)
        now = self._now()
        st.last_seen = now[0]
        freeze = self._apply_push(d, st, seq, version, values, indices, loss, nbytes, now, top)
        out = self._reply_frames(d, freeze)
        if self._held:
            self._release()
        self.meter.sent("ack", len(out[0]), d)
        return out

    def _on_push(self, msg: wire.Push, nbytes):
        st = self._session(msg.session)
        if isinstance(st, wire.Message):
            return st
        d = self.sessions[msg.session]
        if self.stopped:
            return wire.Stop(self.stopped)
        if msg.seq <= st.last_seq:   # a duplicate or replay: acknowledge, don't apply twice
            return wire.Ack(self.version, applied=False)
        problem = self._check_payload(msg)
        if problem is None and msg.values.size == 0 and not self.rule.empty_push_is_report:
            problem = "empty push (0 entries): nothing to apply"
        if problem:
            st.refused += 1
            return self._err("bad-payload", problem, d)
        values = msg.values
        if values.dtype is not _F32:   # float16 pushes (a float32 the wire decoded is this very dtype)
            values = values.astype(np.float32)
        freeze = self._apply_push(d, st, msg.seq, msg.version, values, msg.indices, msg.loss, nbytes, self._seen)
        if not freeze and not self.rule.ready(d, "push"):
            return _HOLD
        return self._push_reply(d, freeze)

    def _apply_push(self, d: int, st: DeviceState, seq: int, version: int, values: np.ndarray,
                    indices: Optional[np.ndarray], loss: float, nbytes: int, now: Optional[tuple] = None,
                    top: Optional[float] = None) -> bool:
        """Apply a push that passed every check, and all that follows from it: the ``updates`` row, a
        snapshot for evaluation, the stop rule, the crash draw, a checkpoint, a look at Θ after a large
        step. ``now``: the clock read when the push came in, if read; ``top``: max |value|, if known.
        → whether the device crashed (fail-stop) with it."""
        staleness = self.version - version
        if self.robust is not None:
            values, over = self.robust.apply(d, values)
            if over is not None and self.robust.clipped[d] == 1:
                self.event(d, "clipped", f"a push of {over:.3g} × the median norm of the last "
                           f"{len(self.robust.recent)} pushes, scaled to {self.robust.clip:g} × (security.robust); "
                           "its later clips are counted in summary.json's harm")
        applied = self.rule.apply(d, staleness, values, indices)
        if self._stats is not None:
            self._stats.clamp(self.theta)
        self.version += 1
        step = self._note_step(d, values, top)
        st.moved += self.rule.step_scale() * aggregate.norm2(values)   # ‖ΔΘ‖₂ at most: the harm attributed
        if self.config.statistics:
            self._count_statistics(indices)
        st.last_seq = seq
        st.pushes += 1
        self.hooks.consumed(self._peer, None)   # it computed this from the model it was sent
        self._record_update(d, values.size, loss, applied, staleness, nbytes, now)
        return self._after_apply(d, st, step)

    def _after_apply(self, d: int, st: DeviceState, step: float) -> bool:
        """The rare tail of ``_apply_push``: a snapshot for evaluation, the stop rule, the crash draw, a
        checkpoint, a look at Θ after a large step (``step``: how far the push moved an entry at most).
        ``_shortpath.c`` tests the same conditions and calls this only when one holds. → whether the
        device crashed (fail-stop) with the push."""
        if self._eval_step and self.version % self._eval_step == 0:
            self.snapshot()
        if self.config.stop_updates is not None and self.version >= self.config.stop_updates:
            self.request_stop(f"reached {self.config.stop_updates} updates")
        freeze = (self.config.crash_probability > 0 or self.config.crash_at is not None) and self._draw_crash(d)
        if freeze:
            st.frozen = True
            self.event(d, "crash", f"fail-stop after push {st.pushes}")
            self.rule.forget(d)
            self.hooks.freeze(d)
        if self.config.checkpoint_every and self.version % self.config.checkpoint_every == 0:
            self.hooks.checkpoint(self)   # after the crash draw, so the checkpoint includes it
        if step > self.anchor:   # one push moved an entry by more than Θ's own scale: look at Θ now
            self.value_limit()   # (this push is answered as applied; a device excluded now hears it next)
        return freeze

    def _record_update(self, d: int, entries: int, loss: float, applied, staleness: int, nbytes: int,
                       now: Optional[tuple] = None) -> None:
        """The ``updates`` row of the push just applied (Θ is at ``self.version`` now), at ``now`` (the
        clock's (wall, virtual) when the push came in; None: read it now)."""
        wall, virt = now if now is not None else self._now()
        self.hooks.record("updates", {
            "update": self.version, "wall_time": wall, "virtual_time": virt, "device": d,
            "speed_class": self.config.class_of(d), "staleness": staleness,
            "sigma_mean": applied.sigma_mean, "sigma_max": applied.sigma_max,
            "entries": int(entries), "bytes_in": nbytes,
            "loss": loss if loss is not None else math.nan})

    def _note_step(self, d: int, values: np.ndarray, top: Optional[float] = None) -> float:
        """How far this push moved an entry of Θ at most (|value| × the rule's step scale), kept per
        device until the next look at Θ, which blames the largest mover if Θ diverged. ``top``: max
        |value| of a push without running statistics, when the caller has it already."""
        if top is None:
            if self.config.statistics and values.size == self.theta.size:   # the weights' part of a dense push
                values = values[:values.size - self.config.statistics]
            if not values.size:
                return 0.0
            top = max_abs(values)
        step = top * self.rule.step_scale()
        largest, pushes = self._window.get(d, (0.0, 0))
        self._window[d] = (max(largest, step), pushes + 1)
        return step

    def _reply_frames(self, d: int, freeze: bool) -> list:
        """The frames of the short path's reply to a push it applied: the Ack, or what ``_push_reply``
        makes of a crash."""
        return wire.encode(self._push_reply(d, freeze)) if freeze else wire.ack_applied(self.version)

    def _push_reply(self, d: int, freeze: bool = False) -> wire.Message:
        if not freeze and self.rule.sync_due(d):
            return wire.Sync(self.version)
        return wire.Ack(self.version, applied=True, freeze=freeze)

    def _on_heartbeat(self, msg: wire.Heartbeat, nbytes):
        st = self._session(msg.session)
        return st if isinstance(st, wire.Message) else wire.Ack(self.version, applied=False)

    def _on_bye(self, msg: wire.Bye, nbytes):
        d = self.sessions.pop(msg.session, None)
        if d is not None:
            self._held.pop(d, None)
            self.rule.forget(d)
            self.event(d, "bye", msg.reason)
        return None

    # -- helpers -----------------------------------------------------------------------------
    def snapshot(self) -> None:
        """Hand a copy of Θ at exactly this version to the evaluator hook."""
        self.last_snapshot = self.version
        wall, virt = self._now()
        self.hooks.snapshot(self.version, self.theta.copy(), {
            "wall_time": wall, "virtual_time": virt,
            "ingress_bytes": self.meter.ingress_bytes, "push_bytes": self.meter.push_bytes})

    def note_accuracy(self, accuracy: float) -> None:
        """An evaluation finished: evaluate every ``eval.dense.every`` updates from now on while its
        accuracy is within ``within`` of a target, every ``eval.every`` otherwise. Called by the engine
        (any thread); on the virtual clock the evaluator is inline, so the schedule is deterministic."""
        if self.config.eval_dense is None:
            return
        near, within, every = self.config.eval_dense
        with self.lock:
            close = any(abs(accuracy - t) <= within for t in near)
            self._eval_step = every if close else self.config.eval_every

    def _check_payload(self, msg: wire.Push) -> Optional[str]:
        n = self.theta.size
        v, idx = msg.values, msg.indices
        if v.ndim != 1:
            return f"values must be 1-D, got shape {v.shape}"
        if v.dtype.kind != "f":
            return f"values must be float32 or float16, got {v.dtype}"
        if msg.version < 0 or msg.version > self.version:
            return f"push computed from version {msg.version}, but Θ is at version {self.version}"
        if idx is None:
            if v.size != n:
                return f"dense push has {v.size} values, the model has {n} parameters"
        else:
            if idx.ndim != 1 or idx.size != v.size:
                return f"{idx.size} indices for {v.size} values"
            if idx.dtype is not _U32 and idx.dtype != _U32:   # int32 could be negative, floats are no indices
                return f"indices must be uint32, got {idx.dtype}"
        limit = self._limit if self._limit_at + THETA_CHECK_EVERY > self.version else self.value_limit()
        if self._stats is not None:   # the statistics bounded apart (ps/statistics.py), then the weights
            if idx is not None and (problem := check_entries(idx, v, n, math.inf)) != ENTRIES_OK:
                return self._entries_problem(problem, idx, n)
            why = self._stats.problem(self.theta, v, idx)
            if why is not None:
                return why
            v, idx, n = self._stats.weights(v, idx)
        problem = check_entries(idx, v, n, limit)
        if problem == ENTRIES_OK:
            return None
        return self._entries_problem(problem, idx, n)

    def _entries_problem(self, problem: int, idx: Optional[np.ndarray], n: int) -> str:
        """The refusal's wording for ``check_entries``' answer ``problem`` (not ENTRIES_OK)."""
        if problem == NOT_INCREASING:
            return "indices must be strictly increasing (sorted, no duplicates)"
        if problem == INDEX_TOO_LARGE:
            return f"index {int(idx[-1])} out of range (model has {n} parameters)"
        if problem == NOT_FINITE:
            return "values contain NaN or Inf"
        # Out of bounds, without the bound: a poisoner told the exact bound pushes just under it.
        if self.config.max_abs_value is not None:
            return "values out of bounds (max_abs_value)"
        return "values out of bounds: they would move Θ by far more than its own scale (max_step)"

    def value_limit(self) -> float:
        """The bound on a push's values: ``max_step`` × ``anchor`` (max(1, ‖Θ₀‖∞), Θ's scale at the
        start) divided by how far one unit of a pushed value moves Θ (α for gradient rules, 1 for rules
        that apply deltas), so no push moves Θ by a hundred times its initial size — and no push can
        raise the bound. ``max_abs_value`` replaces it when set. Also the look at Θ, every
        THETA_CHECK_EVERY updates (and after any push that moved an entry by more than ``anchor``):
        see ``_check_theta``."""
        self._limit_at = self.version
        self._check_theta()
        if self.config.max_abs_value is not None:
            self._limit = float(self.config.max_abs_value)
        else:
            self._limit = self.config.max_step * self.anchor / max(self.rule.step_scale(), 1e-300)
        return self._limit

    def _inf_norm(self) -> float:
        """‖Θ‖∞ of the weights: running statistics Θ carries (model.buffers average) are left out, a
        variance may legitimately be far above the weights' scale (NaN/Inf there still counts)."""
        theta = self.theta[:self.theta.size - self.config.statistics]
        norm = max_abs(theta)   # NaN if Θ holds one (one compiled pass over Θ, where built)
        if self.config.statistics and not np.isfinite(self.theta[theta.size:]).all():
            return math.inf
        return norm

    def _check_theta(self) -> None:
        """Θ has diverged when it holds NaN or ±Inf, or — while still finite — when ‖Θ‖∞ exceeds
        ``diverge_at`` × ``anchor``. The device whose pushes moved Θ most since the last look is named
        and refused from then on (``excluded``); with ``on_divergence: fail`` the run stops, failed
        (``failure`` starts with "diverged:"); with ``exclude`` Θ goes back to the last sound look and
        the run goes on without that device."""
        self._scale = scale = self._inf_norm()
        window, self._window = self._window, {}
        if math.isfinite(scale) and scale <= self.config.diverge_at * self.anchor:
            # Sound: no push since the last sound look moved an entry by more than Θ's initial scale.
            self._tainted |= any(step > self.anchor for step, _ in window.values())
            if self.config.on_divergence == "exclude" and not self.stopped and not self._tainted:
                self._sound = self.theta.copy()
            if not self._tainted:
                self._window_all = {}
            for d, (step, pushes) in window.items() if self._tainted else ():
                seen = self._window_all.get(d, (0.0, 0))
                self._window_all[d] = (max(step, seen[0]), pushes + seen[1])
            return
        if self.failure is not None or self.stopped:
            return
        for d, (step, pushes) in self._window_all.items():   # since the last sound look
            mine = window.get(d, (0.0, 0))
            window[d] = (max(step, mine[0]), pushes + mine[1])
        culprit = max(window, key=lambda d: window[d][0]) if window else None
        if culprit is not None and window[culprit][0] <= self.anchor:
            # No push moved an entry by more than Θ₀'s scale: many ordinary steps diverged (α too
            # large), no device stands out, none is blamed.
            evidence_steps = f"; no device's push moved an entry by more than {window[culprit][0]:.3g}"
            culprit = None
        else:
            evidence_steps = ""
            # Named by how far its pushes moved Θ in all (Σ α·‖v‖₂, DeviceState.moved): a stealthy poisoner's
            # steps stay under Θ₀'s scale, the honest gradients it provokes at the Θ it poisoned do not.
            culprit = max(window, key=lambda d: self.devices[d].moved if d in self.devices else 0.0)
        what = ("holds NaN or ±Inf" if not math.isfinite(scale) else
                f"‖Θ‖∞ = {scale:.3g} is over {self.config.diverge_at:g} × its initial scale {self.anchor:.3g}")
        evidence = f"at update {self.version}, {what}{evidence_steps}"
        if culprit is not None:
            step, pushes = window[culprit]
            others = max((s for d, (s, _) in window.items() if d != culprit), default=0.0)
            moved = self.devices[culprit].moved if culprit in self.devices else 0.0
            rest = max((self.devices[d].moved for d in window if d != culprit and d in self.devices), default=0.0)
            evidence += (f"; device {culprit} moved it most: {pushes} pushes since the last sound look, moving an "
                         f"entry by up to {step:.3g} each (the other devices: at most {others:.3g}); Σ α·‖v‖₂ of "
                         f"its pushes {moved:.3g} (the other devices': at most {rest:.3g})")
            st = self.devices.get(culprit)
            if st is not None:
                st.excluded = True   # its session stays known, so its next message hears why
                self._held.pop(culprit, None)
                self.rule.forget(culprit)
        if self.config.on_divergence == "exclude" and culprit is not None and self._sound is not None:
            self.theta[:] = self._sound   # in place: the rule holds a reference to Θ
            self._tainted, self._window_all = False, {}
            self._scale = self._inf_norm()
            self.event(culprit, "excluded", f"diverged: {evidence}; Θ is back at the last sound look and "
                       "the run goes on without this device (security.on_divergence: exclude)")
            return
        self.failure = (f"diverged: {evidence} (α = {self.rule.lr:g}; a smaller algorithm.lr, or security.curve "
                        "against peers that push poison)")
        self.request_stop(self.failure)

    def _admit(self, cls: type, fields: dict) -> int:
        """wire.decode's hook for a v2 payload: unpacked only for a push of a session this connection
        holds (so a stranger makes the PS unpack nothing), and to at most |Θ| entries."""
        if cls is not wire.Push:
            raise wire.WireError("unexpected", f"{cls.KIND} is not a request")
        d = self.sessions.get(fields.get("session"))
        if d is None or self.devices[d].peer != self._peer:
            raise wire.WireError("unknown-session", "say hello first (session unknown or expired)")
        return self.theta.size

    def _draw_crash(self, device: int) -> bool:
        at = self.config.crash_at
        if at is not None:   # failures.crash: once, with the first push at or after its point
            if device in self._crash_fired or not at.due(device, self.version, self._now()):
                return False
            self._crash_fired.add(device)
            return True
        p = self.config.crash_probability
        if p <= 0:
            return False
        rng = self._crash_rngs.get(device)
        if rng is None:  # one stream per device: the same seed gives the same crash draws
            rng = self._crash_rngs[device] = np.random.default_rng([self.config.seed, device, 0xC4A5])
        return bool(rng.random() < p)

    def _session(self, session: str):
        d = self.sessions.get(session)
        if d is None:
            return self._err("unknown-session", "say hello first (session unknown or expired)", None)
        st = self.devices[d]
        if st.peer != self._peer:   # same answer as for a made-up session: reveals nothing
            return self._err("unknown-session", "say hello first (session unknown or expired)", None)
        self._seen = self._now()   # the clock at this message, for its row if it is an applied push
        st.last_seen = self._seen[0]
        if st.excluded and not self.stopped:   # once the run is over, it hears Stop like the others
            return self._err("excluded", _EXCLUDED, d)
        if st.frozen:
            return self._err("frozen", f"device {d} crashed (fail-stop)", d)
        return st

    def _release(self) -> None:
        """Send the held replies the rule now allows (all of them, as Stop, once the run is over)."""
        for d, (peer, request) in list(self._held.items()):
            if self.stopped:
                reply = wire.Stop(self.stopped)
            elif not self.rule.ready(d, request):
                continue
            else:
                reply = self._model_for(d) if request == "pull" else self._push_reply(d)
            del self._held[d]
            out = wire.encode(reply)
            self.meter.sent(reply.kind, wire.frames_nbytes(out), d)
            self.hooks.send(peer, out)

    def silent_devices(self, timeout: float) -> list[int]:
        """Devices not heard from for ``timeout`` seconds (wall), not yet frozen or gone. Any thread."""
        with self.lock:
            now = self._now()[0]
            return [d for d, st in self.devices.items()
                    if not st.frozen and st.session in self.sessions and now - st.last_seen > timeout]

    def recover(self, device: int) -> None:
        """A crashed device comes back (``dynamics.availability.recover_after``): it may say hello again
        and starts a new session. Any thread."""
        with self.lock:
            st = self.devices.get(device)
            if st is not None and st.frozen:
                st.frozen = False
                self.sessions.pop(st.session, None)

    def leave(self, device: int) -> None:
        """A device went offline (availability churn on a real runtime): its session ends, so it is not
        taken for a silent one, and it says hello again when it returns. Any thread."""
        with self.lock:
            st = self.devices.get(device)
            if st is not None:
                self.sessions.pop(st.session, None)
                self._held.pop(device, None)

    def frozen_devices(self) -> set[int]:
        """Devices that crashed (fail-stop). Any thread."""
        with self.lock:
            return {d for d, st in self.devices.items() if st.frozen}

    def device_count(self) -> int:
        """Devices that said hello at least once. Any thread."""
        with self.lock:
            return len(self.devices)

    def state(self) -> dict:
        """What a checkpoint keeps of the PS besides Θ and the rule's arrays, JSON-able
        (``ps/checkpoint.py``): version, stop reason, per-device sequence numbers, attempts, frozen
        flags, exclusions and push counts, the anchor of the value bound, the crash-draw streams, traffic counters and error counts."""
        with self.lock:
            return {
                "version": self.version, "stopped": self.stopped, "anchor": self.anchor,
                "devices": {str(d): {"last_seq": st.last_seq, "attempt": st.attempt, "frozen": st.frozen,
                                     "pushes": st.pushes, "excluded": st.excluded, "moved": st.moved,
                                     "refused": st.refused}
                            for d, st in self.devices.items()},
                "crash_rngs": {str(d): rng.bit_generator.state for d, rng in self._crash_rngs.items()},
                **({"crash_fired": sorted(self._crash_fired)} if self._crash_fired else {}),
                "meter": self.meter.state(), "errors": dict(self.errors),
            }

    def restore(self, state: dict, theta: np.ndarray, rule_state: dict[str, np.ndarray]) -> None:
        """Put a checkpoint (``state()``'s dict, Θ, the rule's arrays) into this freshly built PS (same
        model and rule); sessions start empty, so every device says hello again."""
        if theta.shape != self.theta.shape:
            raise ValueError(f"checkpoint has {theta.size} parameters, the model has {self.theta.size}")
        with self.lock:
            self.theta[:] = theta           # in place: the rule holds a reference to Θ
            self.version = state["version"]
            self.rule.load_state_dict(rule_state)
            self.devices = {int(d): DeviceState(session="", attempt=s["attempt"], last_seq=s["last_seq"],
                                                frozen=s["frozen"], pushes=s["pushes"],
                                                excluded=s.get("excluded", False), moved=s.get("moved", 0.0),
                                                refused=s.get("refused", 0))
                            for d, s in state["devices"].items()}
            self.anchor = float(state.get("anchor", self.anchor))   # Θ₀'s scale, not the checkpoint's
            self._sound = None
            self.sessions = {}
            for d, bits in state.get("crash_rngs", {}).items():
                rng = np.random.default_rng()
                rng.bit_generator.state = bits
                self._crash_rngs[int(d)] = rng
            self._crash_fired = set(state.get("crash_fired", ()))
            self.meter.load_state(state["meter"])
            self.errors = dict(state["errors"])

    def _now(self) -> tuple[float, float]:
        return self.hooks.clock()

    def event(self, device: int, event: str, detail: str = "") -> None:
        """Record a row of the ``events`` table: ``device`` (-1: the run as a whole), the event's kind
        and a free-text detail. Any thread: the engine records starts, warnings, exits and losses."""
        with self.lock:
            wall, virt = self._now()
            self.hooks.record("events", {"wall_time": wall, "virtual_time": virt, "update": self.version,
                                         "device": device, "event": event, "detail": detail})

    def _err(self, code: str, message: str, device: Optional[int] = None) -> wire.Error:
        """A refused message: counted per code in ``errors`` and in ``meter.rejected``."""
        self.errors[code] = self.errors.get(code, 0) + 1
        self.meter.rejected += 1
        return wire.Error(code, message)

    def _reject(self, code: str, message: str, device: Optional[int]) -> list:
        out = wire.encode(self._err(code, message, device))
        self.meter.sent("error", wire.frames_nbytes(out), device)
        return out
