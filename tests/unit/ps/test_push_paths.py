"""The PS's short path for pushes (``ParameterServer._push``: compiled, ``_shortpath.c``, and in Python,
``_push_py``) against its general path: one random
conversation of hellos, pulls and pushes — good ones, duplicates, replays from another connection,
unknown sessions, bad payloads, float16 values, a drift that the periodic look at Θ finds, crashes,
checkpoints, a stop — played to
two servers, one with the short path and one without, gives the same replies byte for byte and the
same Θ, counters, tables, traffic counts and errors (module docstring of ps/server.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from edgebed import wire
from edgebed.crashes import CrashSchedule
from edgebed.ps import server
from edgebed.ps.rules import RULES
from edgebed.ps.server import Hooks, ParameterServer, PSConfig
from tests.capabilities import require

N = 300
DEVICES = 4


def _ps(rule: str, fast: bool, tick: list, **cfg) -> tuple[ParameterServer, dict]:
    theta = np.linspace(-1, 1, N, dtype=np.float32)
    seen = {"rows": [], "snapshots": [], "checkpoints": [], "frozen": []}

    def clock():   # the time of the message being served (``_play`` advances it): both servers read it
        return tick[0], tick[0] / 2

    def checkpoint(ps):
        seen["checkpoints"].append((ps.version, json.dumps(ps.meter.to_dict(), sort_keys=True)))

    hooks = Hooks(record=lambda table, row: seen["rows"].append((table, row)), clock=clock,
                  snapshot=lambda v, theta, info: seen["snapshots"].append((v, theta.tobytes())),
                  freeze=seen["frozen"].append, checkpoint=checkpoint)
    config = PSConfig(n_devices=DEVICES, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                      class_of=lambda d: f"c{d % 2}", seed=3, **cfg)
    ps = ParameterServer(config, theta, RULES[rule](theta, 0.05), hooks)
    ps.fast_push = fast and ps.fast_push
    return ps, seen


def _play(rule: str, cfg: dict, seed: int, monkeypatch, messages: int = 1500) -> tuple:
    """A random but reproducible mix of everything a PS meets, played to a server with the short path
    and one without, message by message; each reply compared. → (fast, its hooks' record, slow, its
    record, what the short path returned for each message it was offered)."""
    tokens = iter(range(10 ** 9))   # both servers open the same sessions: hellos reach them in turns
    monkeypatch.setattr(server.secrets, "token_hex", lambda n: "%016x" % (next(tokens) // 2))
    tick = [0.0]
    fast, fast_seen = _ps(rule, True, tick, **cfg)
    slow, slow_seen = _ps(rule, False, tick, **cfg)
    assert fast.fast_push and not slow.fast_push
    taken = []
    short = fast._push
    monkeypatch.setattr(fast, "_push", lambda *a: taken.append(short(*a)) or taken[-1])
    rng = np.random.default_rng(seed)
    sessions: dict[int, str] = {}
    seqs = dict.fromkeys(range(DEVICES), 0)
    dense = rule == "asgd"

    def send(peer, msg):
        tick[0] += 1.0
        frames = [bytes(memoryview(f)) for f in wire.encode(msg)]
        a = fast.process(peer, [memoryview(f) for f in frames])
        b = slow.process(peer, [memoryview(f) for f in frames])
        assert (a is None) == (b is None), msg
        if a is None:
            return None
        assert [bytes(memoryview(f)) for f in a] == [bytes(memoryview(f)) for f in b], (msg, wire.decode(b))
        return wire.decode(b)

    for _ in range(messages):
        d = int(rng.integers(DEVICES))
        peer = b"peer-%d" % d
        if d not in sessions or rng.random() < 0.02:
            r = send(peer, wire.Hello(d, f"c{d % 2}", 0))
            if isinstance(r, wire.Welcome):
                sessions[d] = r.session
                seqs[d] = 0
            continue
        s, kind = sessions[d], rng.random()
        if kind < 0.15:
            send(peer, wire.Pull(s))
            continue
        k = N if dense else int(rng.integers(1, 40))
        idx = None if dense else np.sort(rng.choice(N, size=k, replace=False)).astype(np.uint32)
        vals = (rng.standard_normal(k) * 0.1).astype(np.float32)
        version = int(rng.integers(max(slow.version - 5, 0), slow.version + 1))
        seq = seqs[d]
        seqs[d] += 1
        trouble = rng.random()
        if trouble < 0.03:
            seq = max(seq - 1, 0)                        # a duplicate
        elif trouble < 0.05:
            peer = b"stranger"                           # a session replayed from another connection
        elif trouble < 0.07:
            s = "0123456789abcdef"                       # a session no one opened
        elif trouble < 0.09:
            vals[0] = np.nan                             # refused: not finite
        elif trouble < 0.10:
            vals[-1] = 1e30                              # refused: beyond the bound
        elif trouble < 0.12:
            version = slow.version + 3                   # refused: from a version Θ never had
        elif trouble < 0.13 and not dense:
            idx = idx[::-1].copy()                       # refused: not increasing
        elif trouble < 0.15:
            vals = vals.astype(np.float16)               # general path: float16 values
        elif trouble < 0.16:
            vals[0] = 50.0                               # applied, a step larger than Θ's scale: a look at Θ
        elif trouble < 0.17 and not dense:
            idx, vals = idx[:0], vals[:0]                # refused: an empty push
        elif trouble < 0.25 and d == 1:
            vals *= 60                                   # device 1 drifts Θ off, step by step
        send(peer, wire.Push(s, seq, version, vals, idx, float(rng.random())))
    return fast, fast_seen, slow, slow_seen, taken


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("rule, cfg", [
    ("adacomp", {}),
    ("adacomp", {"diverge_at": 1.2, "on_divergence": "exclude"}),
    ("adacomp", {"crash_probability": 0.01, "checkpoint_every": 7, "eval_every": 5, "stop_updates": 600}),
    ("comp-asgd", {"crash_probability": 0.02, "checkpoint_every": 11}),
    ("asgd", {"eval_every": 3, "stop_updates": 400}),
    ("adacomp", {"crash_at": CrashSchedule({1: 40, 3: 90}, "updates")}),   # failures.crash, in updates
    ("asgd", {"crash_at": CrashSchedule({0: 200.0}, "s")}),                # and in (virtual) seconds
])
def test_the_short_path_gives_what_the_general_path_gives(rule, cfg, compiled, monkeypatch):
    """Compiled: the short path is ``_shortpath.c``'s; python: ``_push_py``'s."""
    if compiled:
        require(server._SHORT is not None, "the compiled short path for pushes (edgebed/ps/_shortpath.c)",
                "a C compiler at install time: `make setup` (pip install -e .) builds it; without one the "
                "PS runs ParameterServer._push_py, the same steps in Python")
        calls = []
        real = server._SHORT
        monkeypatch.setattr(server, "_SHORT", type("Counted", (), {"push": staticmethod(
            lambda *a: calls.append(1) or real.push(*a))}))
    else:
        monkeypatch.setattr(server, "_SHORT", None)
    fast, fast_seen, slow, slow_seen, taken = _play(rule, cfg, len(cfg) + len(rule), monkeypatch)
    assert not compiled or len(calls) == len(taken)
    applied = sum(1 for t in taken if t is not None)
    assert applied > 100, applied   # the short path took most pushes
    assert applied < len(taken), "and handed some back (refusals, duplicates, ...)"
    assert fast.version == slow.version > 100
    assert fast.theta.tobytes() == slow.theta.tobytes()
    if hasattr(fast.rule, "counts"):
        assert fast.rule.counts.tobytes() == slow.rule.counts.tobytes()
    assert fast.meter.to_dict() == slow.meter.to_dict()
    assert fast.errors == slow.errors
    assert fast.stopped == slow.stopped
    assert fast_seen["rows"] == slow_seen["rows"]
    assert fast_seen == slow_seen
    assert {d: vars(st) for d, st in fast.devices.items()} == {d: vars(st) for d, st in slow.devices.items()}
    if "crash_at" in cfg:   # exactly the scheduled devices crashed, once, on both paths
        assert sorted(fast_seen["frozen"]) == sorted(slow_seen["frozen"]) == sorted(cfg["crash_at"].at)
    if "diverge_at" in cfg:   # the periodic look at Θ found the drift, at the same update on both
        assert (fast.stopped or "").startswith("diverged") or any(st.excluded for st in fast.devices.values())


def test_averaging_rules_keep_the_general_path():
    """Rules that hold replies until a round closes, or answer with Sync, never take the short path."""
    for rule in ("model-averaging", "dynamic-averaging"):
        if rule in RULES:
            ps, _ = _ps(rule, True, [0.0])
            assert not ps.fast_push, rule
