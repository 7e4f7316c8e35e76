"""Hostile soak: every category of hostile message thrown at a running `edgebed run` while honest agents train.

Starts a real run (local runtime, 4 honest agents training, checkpoint every 10 updates), then one
attacker process sends, round-robin over categories, each category on its own connection with a
bounded number of requests in flight — except ``unread-pull``, which never reads — until every
category has sent ``--per-category`` messages. Counts per category: messages sent, replies, refusals
(Error, by code), pushes applied (Ack applied). Samples the PS (engine) RSS every second. At the
end: run status, updates applied vs rows in the table, updates per honest device during the attack.
Writes benchmarks/results/hostile_soak.json and .md.

Without CURVE any peer may say hello as any device (that is what security.curve is for). The
categories that need a session therefore take the devices of 4 more honest agents that sleep between
pushes (think time 900 s; they notice at their next heartbeat and take their device back), so the
4 training devices measure what the attack costs honest work.

    .venv/bin/python benchmarks/hostile_soak.py --per-category 100000

``--transport`` runs the transport categories instead (issue 36: descriptor exhaustion, concurrent
frame floods; benchmarks/hostile_transport.py), each against runs of their own under ``ulimit -n
1024``, and writes benchmarks/results/hostile_soak-transport.json and .md.

``--trust`` runs the trust categories instead (issue 51: statistics poisoning, a stealthy poisoner;
benchmarks/hostile_trust.py) and writes benchmarks/results/hostile_soak-trust.json and .md.

``--stall`` runs the stall lock-out category (issue 51: connections stopped mid-frame holding the connection cap;
benchmarks/hostile_stall.py) and writes benchmarks/results/hostile_soak-stall.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgebed import wire  # noqa: E402
from edgebed.ps import frameguard  # noqa: E402
from edgebed.rundir import read_json, read_table  # noqa: E402
from tests.hostile_v2 import CATEGORIES as V2_CATEGORIES  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
N_HONEST = 4      # training devices 0..3; devices 4..7 sleep and lend their slots to the attacker
N_PARAMS = 199_210   # mlp 784-200-200-10
SLEEPERS = (4, 5, 6, 7)
SCENARIO = """
name: hostile-soak
seed: 9
dataset: {{train_samples: 4000, test_fraction: 0.1}}
model: {{name: mlp}}
algorithm: {{name: adacomp, lr: 0.05, c: 0.05}}
workers:
  n: {n}
  classes: [{{name: default, share: 0.5, think_time: 20ms}}, {{name: sleeper, share: 0.5, think_time: 900s}}]
stop: {{wall_time: {wall}s}}
eval: {{every: 500, test_samples: 300}}
checkpoint: {{every: 10}}
"""
WINDOW = 8   # requests in flight per category (the PS queues 16 replies per peer)


def _head(mtype: int, fields: dict, raw: bytes = b"") -> bytes:
    return wire._PREFIX.pack(b"EB", 1, mtype) + (raw or json.dumps(fields).encode())


class Attacker:
    """One connection per category; ``frames()`` makes the next hostile message."""

    def __init__(self, ctx, endpoint: str, name: str, make, needs_session: int | None = None,
                 reads: bool = True, every: float = 0.0):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if not reads:
            self.sock.setsockopt(zmq.RCVHWM, 1)
        self.sock.connect(endpoint)
        self.name, self.make, self.device, self.reads, self.every = name, make, needs_session, reads, every
        self.session, self.version, self.last_hello, self.next_send = "0" * 16, 0, 0.0, 0.0
        self.inflight = 0
        self.lost = True     # no session (yet, or the device took it back)
        self.stats = Counter()

    def want_session(self, now: float, hijacks_per_s: float) -> bool:
        return self.device is not None and self.lost and now - self.last_hello >= 1.0 / hijacks_per_s

    def take_session(self, now: float) -> None:
        """Hello as our device, pull (blocking, outside the counts' categories). Replies still in flight
        are collected first: they answer messages of the old session."""
        deadline = time.monotonic() + 5
        while self.inflight and time.monotonic() < deadline:
            if self.sock.poll(100):
                self.drain()
        self.last_hello = now
        self.sock.send_multipart(wire.encode(wire.Hello(self.device, "default", 0)))
        self.stats["session-hellos"] += 1
        if self.sock.poll(5000):
            w = wire.decode(self.sock.recv_multipart())
            if isinstance(w, wire.Welcome):
                self.session, self.lost = w.session, False
                self.sock.send_multipart(wire.encode(wire.Pull(self.session)))
                if self.sock.poll(5000):
                    m = wire.decode(self.sock.recv_multipart())
                    if isinstance(m, wire.Model):
                        self.version = m.version

    def send(self, rng) -> None:
        self.sock.send_multipart(self.make(self, rng), copy=False)
        self.stats["sent"] += 1
        self.inflight += self.reads

    def drain(self) -> None:
        while self.reads and self.inflight > 0 and self.sock.poll(0):
            reply = wire.decode(self.sock.recv_multipart())
            self.inflight -= 1
            self.stats["replies"] += 1
            if isinstance(reply, wire.Error):
                self.stats["rejected"] += 1
                self.stats[f"error:{reply.code}"] += 1
                self.lost |= reply.code == "unknown-session"
            elif isinstance(reply, wire.Ack):
                self.stats["applied" if reply.applied else "acked-not-applied"] += 1
            else:
                self.stats[f"reply:{reply.kind}"] += 1


def _push(a, values, indices=None, seq=None, version=None, loss=0.5, raw_fields=None):
    fields = {"session": a.session, "seq": a.stats["sent"] if seq is None else seq,
              "version": a.version if version is None else version, "loss": loss,
              "arrays": [["values", "<f4", [len(values)]]] + ([["indices", "<u4", [len(indices)]]]
                                                               if indices is not None else [])}
    fields.update(raw_fields or {})
    frames = [_head(5, fields), np.asarray(values, np.float32)]
    return frames + ([np.asarray(indices, np.uint32)] if indices is not None else [])


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def categories():
    """name → (make(attacker, rng), device whose session it needs or None, reads replies?)"""
    idx = np.arange(4, dtype=np.uint32)
    return {
        "random-bytes": (lambda a, r: [bytes(r.integers(0, 256, int(r.integers(0, 64)), dtype=np.uint8))
                                       for _ in range(int(r.integers(1, 4)))], None, True),
        "bad-header": (lambda a, r: [_head(int(r.integers(0, 13)), {}, raw=_pick(r, 
            [b"{", b"[1,2]", b'{"device":' + b"9" * 5000 + b"}", b"[" * 5000, b'{"a":NaN}', b"\xff\xfe"]))],
            None, True),
        "lone-surrogate": (lambda a, r: [_head(1, {"device": 1, "speed_class": "\ud800", "attempt": 0,
                                                   "arrays": []})], None, True),
        "long-string": (lambda a, r: [_head(8, {"session": "s" * 300, "reason": "x" * 5000, "arrays": []})],
                        None, True),
        "numbers-out-of-range": (lambda a, r: _push(a, [0.0] * 4, idx, raw_fields=_pick(r, [
            {"loss": 10 ** 400}, {"seq": 2 ** 63}, {"seq": -1}, {"version": 2 ** 70}, {"version": -5}])),
            4, True),
        "infinite-loss": (lambda a, r: [_push(a, [0.0] * 4, idx)[0].replace(b'"loss": 0.5', b'"loss": Infinity'),
                                        np.zeros(4, np.float32), idx], 5, True),
        "foreign-session": (lambda a, r: wire.encode(wire.Pull(_pick(r, FOREIGN) if FOREIGN else "f" * 16)),
                            None, True),
        "empty-push": (lambda a, r: _push(a, [], np.empty(0, np.uint32)), 6, True),
        "bad-payload": (lambda a, r: _pick(r, [
            _push(a, [np.nan, 0, 0, 0], idx), _push(a, [0.0] * 4, [5, 3, 2, 1]),
            _push(a, [0.0] * 4, [0, 1, 2, 10 ** 9]), _push(a, [1e30] * 4, idx), _push(a, [0.0] * 7)]), 7, True),
        "replayed-push": (lambda a, r: _push(a, [0.0] * 4, idx, seq=0), 4, True),
        "hello-burst": (lambda a, r: wire.encode(wire.Hello(int(r.integers(8, 10 ** 6)), "x", 0)), None, True),
        "unread-pull": (lambda a, r: wire.encode(wire.Pull(a.session)), 5, False),
        "many-frames": (lambda a, r: [_head(3, {"session": a.session, "arrays": []})] + [b""] * 64, None, True),
        # Issue 29: structure-aware wire v2 (tests/hostile_v2.py), each from a session of a sleeper.
        **{name: ((lambda a, r, make=make: make(r, a.session, a.version, N_PARAMS)), SLEEPERS[k % len(SLEEPERS)], True)
           for k, (name, make) in enumerate(V2_CATEGORIES.items())},
    }


FOREIGN: list[str] = []   # sessions other connections hold (filled from the session-taking categories)


def _probes(ctx, endpoint: str, pid: int) -> dict:
    """Issue 11's two memory attacks, measured alone before the soak: 4 clients (RCVHWM 1) that send
    1,500 pulls each and never read; one message of 1,000,000 empty frames."""
    rss0 = _rss(pid)
    socks = []
    for d in SLEEPERS:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVHWM, 1)
        s.connect(endpoint)
        s.send_multipart(wire.encode(wire.Hello(d, "sleeper", 0)))
        assert s.poll(10000)
        session = wire.decode(s.recv_multipart()).session
        for _ in range(1500):
            s.send_multipart(wire.encode(wire.Pull(session)))
        socks.append(s)
    time.sleep(5)
    rss1 = _rss(pid)
    q = ctx.socket(zmq.DEALER)
    q.setsockopt(zmq.LINGER, 0)
    q.connect(endpoint)
    t = time.monotonic()
    q.send_multipart([_head(3, {"session": "x", "arrays": []})] + [b""] * 1_000_000)
    if frameguard.FAST:   # cut by the PS's frame guard (ps/frameguard.py): no reply comes
        code = wire.decode(q.recv_multipart()).code if q.poll(5_000) else "no reply: cut by the frame guard"
    else:
        code = wire.decode(q.recv_multipart()).code if q.poll(120_000) else "no reply in 120 s"
    stall = time.monotonic() - t
    time.sleep(2)
    rss2 = _rss(pid)
    for s in (*socks, q):
        s.close()
    flood = _flood(ctx, endpoint, pid)
    mib = lambda b: round(b / 2 ** 20, 1)  # noqa: E731
    return {"unread_pulls": {"clients": 4, "pulls_each": 1500, "rss_before_mib": mib(rss0),
                             "rss_after_mib": mib(rss1), "growth_mib": mib(rss1 - rss0)},
            "million_frames": {"reply": code, "seconds_to_reply": round(stall, 2), "rss_after_mib": mib(rss2),
                               "growth_mib": mib(rss2 - rss1)},
            "flood": flood}


def _flood(ctx, endpoint: str, pid: int, connections: int = 150, pulls: int = 30) -> dict:
    """Issue 29's flood: ``connections`` connections say hello (as a sleeper) and send ``pulls`` pulls
    each without reading; then all close. PS RSS before, under the flood and 5 s after they closed."""
    mib = lambda b: round(b / 2 ** 20, 1)  # noqa: E731
    rss0 = _rss(pid)
    socks = []
    for k in range(connections):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVHWM, 1)
        s.connect(endpoint)
        s.send_multipart(wire.encode(wire.Hello(SLEEPERS[k % len(SLEEPERS)], "sleeper", 0)))
        socks.append(s)
    time.sleep(2)
    admitted = 0
    for k, s in enumerate(socks):   # each admitted connection in turn takes a session and pulls
        if not s.poll(0):
            continue
        s.recv_multipart()
        admitted += 1
        s.send_multipart(wire.encode(wire.Hello(SLEEPERS[k % len(SLEEPERS)], "sleeper", 0)))
        if s.poll(5000):
            reply = wire.decode(s.recv_multipart())
            for _ in range(pulls if isinstance(reply, wire.Welcome) else 0):
                s.send_multipart(wire.encode(wire.Pull(reply.session)))
    time.sleep(5)
    rss1 = _rss(pid)
    for s in socks:
        s.close()
    time.sleep(5)
    rss2 = _rss(pid)
    return {"connections": connections, "pulls_each": pulls, "admitted": admitted, "rss_before_mib": mib(rss0),
            "rss_under_flood_mib": mib(rss1), "rss_after_close_mib": mib(rss2), "growth_mib": mib(rss1 - rss0),
            "held_after_close_mib": mib(rss2 - rss0)}


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-category", type=int, default=100_000, help="hostile messages of each category")
    ap.add_argument("--hijacks-per-s", type=float, default=20.0,
                    help="at most this many hellos per s per session-taking category")
    ap.add_argument("--max-seconds", type=float, default=1500.0)
    ap.add_argument("--quiet-seconds", type=float, default=30.0, help="honest-only baseline before the attack")
    ap.add_argument("--out", default=None, help="results file (default: hostile_soak[-transport].json)")
    ap.add_argument("--transport", action="store_true", help="the transport categories only (issue 36)")
    ap.add_argument("--raw", type=int, default=1100, help="--transport: raw TCP connections to hold")
    ap.add_argument("--hold", type=float, default=15.0, help="--transport: seconds to hold them")
    ap.add_argument("--baseline", type=float, default=10.0, help="--transport: seconds of honest traffic alone")
    ap.add_argument("--trust", action="store_true", help="the trust categories only (issue 51)")
    ap.add_argument("--attack", type=float, default=30.0, help="--trust: seconds of attack (about)")
    ap.add_argument("--baseline-tree", default=None, help="--trust: also attack the edgebed of this checkout")
    ap.add_argument("--poison", action="store_true", help="the compounding-poison category alone (poison_main)")
    ap.add_argument("--poison-baseline-tree", default=None,
                    help="with --poison: also attack the edgebed of this checkout (e.g. a worktree of the commit before)")
    ap.add_argument("--stall", action="store_true", help="the stall lock-out category only (issue 51; hostile_stall.py)")
    ap.add_argument("--stallers", type=int, default=40, help="--stall: connections stopped mid-frame")
    args = ap.parse_args()
    if args.stall:
        from benchmarks import hostile_stall
        return hostile_stall.main(args)
    if args.transport:
        return _transport(args)
    if args.trust:
        return _trust(args)
    if args.poison:
        return poison_main(args)
    args.out = args.out or str(RESULTS / "hostile_soak.json")
    tmp = Path(tempfile.mkdtemp(prefix="hostile-soak-"))
    (tmp / "s.yaml").write_text(SCENARIO.format(n=N_HONEST + len(SLEEPERS),
                                                  wall=int(args.max_seconds + args.quiet_seconds) + 120))
    proc = subprocess.Popen([sys.executable, "-m", "edgebed.cli", "run", "s.yaml", "--out", "runs"], cwd=tmp,
                            stdout=open(tmp / "run.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return _soak(args, tmp, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _soak(args, tmp: Path, proc) -> int:
    t_start = time.monotonic()
    while True:
        runs = list((tmp / "runs").glob("hostile-soak-*")) if (tmp / "runs").exists() else []
        if runs and (runs[0] / "endpoint.json").exists() and list((runs[0] / "updates").glob("part-*")):
            break
        if proc.poll() is not None or time.monotonic() - t_start > 120:
            print((tmp / "run.log").read_text(), file=sys.stderr)
            return 1
        time.sleep(0.2)
    run = runs[0]
    endpoint = read_json(run, "endpoint.json")["bind"]
    quiet_from = float(read_table(run, "updates")["wall_time"].max())
    time.sleep(args.quiet_seconds)      # the baseline: honest training alone, in the same run
    before = read_table(run, "updates")
    attack_from = float(before["wall_time"].max())
    before_rate = int((before["wall_time"] > quiet_from).sum()) / max(attack_from - quiet_from, 1e-9)
    ctx = zmq.Context.instance()
    probes = _probes(ctx, endpoint, proc.pid)
    attackers = [Attacker(ctx, endpoint, name, make, dev, reads)
                 for name, (make, dev, reads) in categories().items()]
    rng = np.random.default_rng(1)
    rss, sent, t0, last_sample = [], 0, time.monotonic(), 0.0
    while time.monotonic() - t0 < args.max_seconds:
        todo = [a for a in attackers if a.stats["sent"] < args.per_category]
        if not todo:
            break
        now = time.monotonic()
        if now - last_sample >= 1.0:
            rss.append([round(now - t0, 1), _rss(proc.pid)])
            last_sample = now
        for a in todo:
            if a.want_session(now, args.hijacks_per_s):
                a.take_session(now)
                if a.session not in FOREIGN:
                    FOREIGN.append(a.session)
                    del FOREIGN[:-8]
            a.drain()
            if a.reads and a.inflight >= WINDOW:
                continue
            a.send(rng)
            sent += 1
        if all(a.inflight >= WINDOW for a in todo if a.reads):
            time.sleep(0.001)
    attack_s = time.monotonic() - t0
    deadline = time.monotonic() + 10
    while any(a.inflight for a in attackers if a.reads) and time.monotonic() < deadline:
        for a in attackers:
            a.drain()
        time.sleep(0.01)
    rss.append([round(time.monotonic() - t0, 1), _rss(proc.pid)])
    during = read_table(run, "updates")
    honest = {int(d): int(n) for d, n in during[during["wall_time"] > attack_from].groupby("device").size().items()}
    proc.send_signal(signal.SIGTERM)   # end the run: status 'incomplete' (interrupted), everything kept
    proc.wait(120)
    summary = read_json(run, "summary.json")
    updates = read_table(run, "updates")
    per = {a.name: {k: v for k, v in sorted(a.stats.items())} for a in attackers}
    result = {
        "what": "hostile messages of every category against a running `edgebed run` (local runtime, "
                f"{N_HONEST} honest agents, mlp, adacomp, checkpoint every 10 updates)",
        "host": {"cores": os.cpu_count(), "note": "2 cores shared with other jobs: rates are a lower bound"},
        "hostile_messages": sent, "attack_seconds": round(attack_s, 1),
        "messages_per_s": round(sent / attack_s, 1),
        "per_category": per,
        "probes": probes,
        "rejected_total": sum(a.stats["rejected"] for a in attackers),
        "applied_total": sum(a.stats["applied"] for a in attackers),
        "ps_rss_bytes_over_time": rss,
        "ps_rss_mib": {"first": round(rss[0][1] / 2 ** 20, 1), "max": round(max(r[1] for r in rss) / 2 ** 20, 1),
                       "last": round(rss[-1][1] / 2 ** 20, 1)},
        "honest_updates_during_attack_by_device": honest,
        "honest_updates_per_s": {"before_attack": round(before_rate, 2), "baseline_seconds": args.quiet_seconds,
                                 "during_attack": round(sum(honest.values()) / attack_s, 2)},
        "run": {"status": summary.get("status"), "reason": summary.get("reason"),
                "updates": summary.get("updates"), "rows_in_updates_table": len(updates),
                "every_update_recorded": sorted(updates["update"]) == list(range(1, summary.get("updates", 0) + 1)),
                "ps_errors": summary.get("errors"), "rejected_messages": summary.get("rejected_messages")},
    }
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=2) + "\n")
    _markdown(result, out.with_suffix(".md"))
    print(json.dumps({k: result[k] for k in ("hostile_messages", "attack_seconds", "rejected_total", "applied_total",
                                             "ps_rss_mib", "honest_updates_during_attack_by_device", "run")},
                     indent=2))
    return 0


def _host() -> str:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return f"{os.cpu_count()} × {model}, load average {os.getloadavg()[0]:.1f} at the start"


def _transport(args) -> int:
    from benchmarks import hostile_transport
    host = _host()
    result = {"what": "Transport attacks (issue 36) on a running `edgebed run` under ulimit -n 1024 (local runtime, "
                      "4 honest agents, mlp, adacomp, checkpoint every 10 updates); each run ended by SIGTERM "
                      "(status incomplete) after its attack.", "host": host, **hostile_transport.transport(args)}
    return _write(result, host, Path(args.out or RESULTS / "hostile_soak-transport.json"), hostile_transport.markdown)


def _trust(args) -> int:
    from benchmarks import hostile_trust
    host = _host()
    result = {"what": "Trust attacks (issue 51) on running `edgebed run`s (local runtime) from a session taken "
                      "over from a sleeping device, after a baseline of honest training, until the run's wall "
                      "time ends it.", "command": "benchmarks/hostile_soak.py " + " ".join(sys.argv[1:]),
              "host": host, "categories": hostile_trust.trust(args)}
    return _write(result, host, Path(args.out or RESULTS / "hostile_soak-trust.json"), hostile_trust.markdown)


def _write(result: dict, host: str, out: Path, markdown) -> int:
    """A category's result as OUT (.json) and its .md (printed), the host's load at the end added."""
    result["host"] = f"{host}; {os.getloadavg()[0]:.1f} at the end"
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(out.with_suffix(".md").read_text())
    return 0


def _markdown(r: dict, path: Path) -> None:
    lines = [f"# Hostile soak ({r['hostile_messages']:,} messages in {r['attack_seconds']} s)", "",
             r["what"] + ".", "",
             "| category | sent | replies | rejected | applied | error codes |", "|---|---:|---:|---:|---:|---|"]
    for name, s in r["per_category"].items():
        codes = ", ".join(f"{k[6:]} {v}" for k, v in s.items() if k.startswith("error:"))
        lines.append(f"| {name} | {s.get('sent', 0):,} | {s.get('replies', 0):,} | {s.get('rejected', 0):,} | "
                     f"{s.get('applied', 0):,} | {codes} |")
    u, f = r["probes"]["unread_pulls"], r["probes"]["million_frames"]
    lines += ["", f"Before the soak: 4 clients that never read sent 1,500 pulls each: PS RSS {u['rss_before_mib']} → "
              f"{u['rss_after_mib']} MiB (+{u['growth_mib']} MiB). One message of 1,000,000 empty frames: "
              f"answered `{f['reply']}` after {f['seconds_to_reply']} s, RSS {f['growth_mib']:+} MiB."]
    fl = r["probes"].get("flood")
    if fl:
        lines += ["", f"Flood: {fl['connections']} connections said hello and sent {fl['pulls_each']} pulls each "
                  f"without reading ({fl['admitted']} admitted by the PS's connection cap): PS RSS "
                  f"{fl['rss_before_mib']} → {fl['rss_under_flood_mib']} MiB (+{fl['growth_mib']} MiB), "
                  f"{fl['rss_after_close_mib']} MiB 5 s after they closed."]
    m = r["ps_rss_mib"]
    lines += ["", f"PS RSS: {m['first']} MiB at the start of the attack, max {m['max']} MiB, {m['last']} MiB at the end.",
              f"Honest updates during the attack, per device: {r['honest_updates_during_attack_by_device']} "
              f"({r['honest_updates_per_s']['during_attack']} updates/s; "
              f"{r['honest_updates_per_s']['before_attack']} updates/s in the "
              f"{r['honest_updates_per_s']['baseline_seconds']:g} s before the attack, same run).",
              f"Run: {r['run']['status']} ({r['run']['reason']}); {r['run']['updates']} updates, "
              f"{r['run']['rows_in_updates_table']} rows in the table; every update recorded: "
              f"{r['run']['every_update_recorded']}."]
    path.write_text("\n".join(lines) + "\n")



# -- compounding poison (issue #36, 3) ------------------------------------------------------------------
POISON_SCENARIO = """
name: poison-soak
seed: 9
dataset: {{train_samples: 4000, test_fraction: 0.1}}
model: {{name: mlp}}
algorithm: {{name: adacomp, lr: 0.05, c: 0.05}}
runtime: {{name: local}}
security: {{on_divergence: {mode}}}
workers:
  n: 5
  classes: [{{name: default, share: 0.8, think_time: 20ms}}, {{name: sleeper, share: 0.2, think_time: 900s}}]
stop: {{wall_time: {wall}s}}
eval: {{every: 100, test_samples: 500}}
"""


def _poison_attack(endpoint: str, seconds: float, lr: float) -> dict:
    """Device 4's slot, hijacked (no CURVE): pull, then push 0.9 × the bound docs/security.md gave
    before issue #36 (100 × max(1, ‖Θ‖∞) / α) into the last output bias; a refused push halves the
    factor (a poisoner probing for the bound). → counts and the largest ‖Θ‖∞ it pulled."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    stats, session, seq, factor, worst = Counter(), None, 0, 0.9, 0.0
    t0, first_stop = time.monotonic(), None

    def ask(msg):
        sock.send_multipart(wire.encode(msg))
        return wire.decode(sock.recv_multipart()) if sock.poll(5000) else None

    while time.monotonic() - t0 < seconds:
        if session is None:
            w = ask(wire.Hello(4, "sleeper", 0))
            if isinstance(w, wire.Error):
                stats[f"hello-error:{w.code}"] += 1
                time.sleep(0.2)
                continue
            if isinstance(w, wire.Stop):
                first_stop = first_stop or time.monotonic() - t0
                break
            session = w.session if isinstance(w, wire.Welcome) else None
            continue
        m = ask(wire.Pull(session))
        if not isinstance(m, wire.Model):
            stats[f"pull:{getattr(m, 'code', None) or getattr(m, 'kind', m)}"] += 1
            if isinstance(m, wire.Stop):
                first_stop = first_stop or time.monotonic() - t0
                break
            session = None if isinstance(m, wire.Error) and m.code == "unknown-session" else session
            time.sleep(0.05)
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            scale = float(np.max(np.abs(m.params)))
        worst = max(worst, scale) if np.isfinite(scale) else float("inf")
        value = min(factor * 100 * max(1.0, scale) / lr, 3e38)
        r = ask(wire.Push(session, seq, m.version, np.array([value], np.float32),
                          np.array([N_PARAMS - 1], np.uint32), 0.5))
        seq += 1
        if isinstance(r, wire.Ack):
            stats["applied" if r.applied else "not-applied"] += 1
        elif isinstance(r, wire.Error):
            stats[f"refused:{r.code}"] += 1
            factor /= 2 if r.code == "bad-payload" else 1
        elif isinstance(r, wire.Stop):
            first_stop = first_stop or time.monotonic() - t0
            break
    sock.close()
    return {"pushes": dict(stats), "largest_theta_inf_pulled": worst,
            "attack_ended_by_stop_after_s": None if first_stop is None else round(first_stop, 2)}


def _poison_once(mode: str, tree: str | None, seconds: float, quiet: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="poison-soak-"))
    (tmp / "s.yaml").write_text(POISON_SCENARIO.format(mode=mode, wall=int(quiet + seconds) + 90).replace(
        "security: {on_divergence: fail}\n", "" if tree else "security: {on_divergence: fail}\n"))
    env = {**os.environ, **({"PYTHONPATH": tree} if tree else {})}
    proc = subprocess.Popen([sys.executable, "-m", "edgebed.cli", "run", "s.yaml", "--out", "runs"], cwd=tmp,
                            env=env, stdout=open(tmp / "run.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        t_start = time.monotonic()
        while True:
            runs = list((tmp / "runs").glob("poison-soak-*")) if (tmp / "runs").exists() else []
            if runs and (runs[0] / "endpoint.json").exists() and list((runs[0] / "evals").glob("part-*")):
                break
            if proc.poll() is not None or time.monotonic() - t_start > 180:
                raise RuntimeError((tmp / "run.log").read_text()[-3000:])
            time.sleep(0.2)
        run = runs[0]
        time.sleep(quiet)
        before = read_table(run, "updates")
        evals_before = read_table(run, "evals")
        attack_from = float(before["wall_time"].max())
        t0 = time.monotonic()
        attack = _poison_attack(read_json(run, "endpoint.json")["bind"], seconds, 0.05)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))   # honest work goes on (or not) for the rest
        attack_s = time.monotonic() - t0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    updates, evals, summary = read_table(run, "updates"), read_table(run, "evals"), read_json(run, "summary.json")
    honest = updates[(updates["wall_time"] > attack_from) & (updates["device"] < 4)]
    quiet_rows = before[(before["device"] < 4)]
    quiet_span = float(quiet_rows["wall_time"].max() - quiet_rows["wall_time"].min()) or 1e-9
    return {
        "code": "baseline tree " + tree if tree else "this commit", "on_divergence": None if tree else mode,
        "accuracy_before_attack": float(evals_before["accuracy"].iloc[-1]),
        "accuracy_last": float(evals["accuracy"].iloc[-1]),
        "honest_updates_per_s": {"before_attack": round(len(quiet_rows) / quiet_span, 1),
                                 "during_attack": round(len(honest) / attack_s, 1)},
        "attack_seconds": round(attack_s, 1), **attack,
        "run": {"status": summary.get("status"), "reason": str(summary.get("reason"))[:400],
                "updates": summary.get("updates"), "errors": summary.get("errors")},
    }


def poison_main(args) -> int:
    """The compounding-poison category: one hijacked device pushes just under the value bound into one
    output bias while 4 honest agents train; once against this commit with ``on_divergence`` fail and
    exclude, and (``--poison-baseline-tree``) once against an older checkout, in the same session.
    Writes benchmarks/results/hostile_soak-poison.json."""
    import platform
    seconds, quiet = 20.0, 10.0
    cases = [_poison_once("fail", args.poison_baseline_tree, seconds, quiet)] if args.poison_baseline_tree else []
    cases += [_poison_once(mode, None, seconds, quiet) for mode in ("fail", "exclude")]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    result = {"what": "compounding poison: device 4's session hijacked, 0.9 × the value bound pushed into the "
                      "last output bias each pull, 4 honest agents (local runtime, mlp, adacomp α = 0.05)",
              "host": {"cpu": cpu, "cores": os.cpu_count(), "load_1min": os.getloadavg()[0],
                       "note": "2 cores shared with other jobs: rates are a lower bound"},
              "cases": cases}
    out = RESULTS / "hostile_soak-poison.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
