"""PS benchmark: apply cost per update for each rule at n outstanding workers, and PS ingest throughput
against raw pyzmq loopback throughput measured in the same run.

    python -m benchmarks.bench_ps [--quick] [--rounds 9]  → benchmarks/results/ps.json and ps.md
    python -m benchmarks.bench_ps --parts FILE             → µs of process()'s parts (ps-process-parts.json)
    python -m benchmarks.bench_ps --budget FILE            → ratio to raw for a process() of fixed cost
                                                              (ps-process-budget.json)
    python -m benchmarks.bench_ps --breakdown FILE         → µs per push of each phase of process(), AdaComp
                                                              and ASGD (benchmarks/ps_breakdown.py), + .md
    python -m benchmarks.bench_ps --ingest FILE            → only the ingest runs (AdaComp, ASGD; shared, pinned)
                                                              against raw pyzmq, alternating rounds, + .md
    python -m benchmarks.bench_ps --interleaved FILE       → PS vs raw in alternating 0.5 s windows of one run;
                                                              its short path in Python; the compiled parts alone
                                                              (ps-interleaved.json, .md)
    python -m benchmarks.bench_ps --sizes FILE             → ingest per model size, 0.2 M / 1 M / 11 M
                                                              parameters, vs raw pyzmq (ps-sizes.json)
    python -m benchmarks.bench_ps --guard FILE             → ingest with the frame guard vs without
                                                              (ps/frameguard.py; ps-frameguard.json)

Apply cost = wall time of ``ParameterServer.process`` on a pre-encoded push (decode + checks + rule +
bookkeeping + record hook), with n devices each holding an outstanding pull, in a round-robin
pull/push pattern so AdaComp keeps n snapshots; also its CPU time (thread_time), which a busy host
does not inflate. Ingest = pushes/s through the real ZmqServer with clients in another process, every
device with a pull on record; also with the PS's compiled push path switched off (its numpy path) and
with a canned-Ack ``process`` that still answers hellos and counts versions; baseline ("raw pyzmq") =
the same serve loop — ``ZmqServer``'s receive path, lock, batching and send, in the same process
layout — around a ``process`` that does no work at all and returns one canned Ack, so every ratio is
a fraction of a true upper bound (it was a bare ROUTER in another process with a receive loop of its
own, which the real loop outran: the committed ps.json before issue 26 had the stub at 9,431 dense
pushes/s against 4,840 for that "raw"); all also as CPU µs per message of the serving process
(getrusage: serve + ZeroMQ I/O threads); each with the CPUs shared and pinned (server process on CPU 0, client on CPU 1:
see SERVER_CPUS). PS and raw runs alternate for
``--rounds`` rounds and the medians are compared, so a change in the host's load during the run hits
both sides (single runs here varied 2× from one minute to the next). Goals (issue 15): AdaComp
≥ 10,000 pushes/s and ≥ 80 % of raw pyzmq, dense ≥ 90 %; the load average is recorded with the run.
Also: how long one message of a million empty frames (a hostile peer) occupies the serve loop.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import resource
import statistics
import time
from typing import Optional
from pathlib import Path

import numpy as np
import zmq

from edgebed.compression import TopC, TopCPerLayer
from edgebed.models import initial_theta
from edgebed import wire
from edgebed.ps.rules import RULES
from edgebed.ps.server import Hooks, ParameterServer, PSConfig

OUT = Path(__file__).parent / "results"


def frames_bytes(msg) -> list[bytes]:
    return [bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes() for f in wire.encode(msg)]


def make_ps(rule: str, n: int, c: float = 0.01, model: str = "cnn"):
    theta, layers = initial_theta(model, 0)
    r = RULES[rule](theta, 0.01)
    ps = ParameterServer(PSConfig(n_devices=n, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "x"), theta, r, Hooks())
    return ps, layers, theta.size


def payload(rule: str, layers, size: int, rng) -> tuple[np.ndarray, np.ndarray | None]:
    g = rng.normal(size=size).astype(np.float32) * 1e-3
    if rule == "asgd":
        return g, None
    comp = TopC(0.01) if rule == "comp-asgd" else TopCPerLayer(0.01, layers)
    s = comp.compress(g)
    return s.values, s.indices


def apply_cost(rule: str, n: int, pushes: int, seed: int = 0) -> dict:
    ps, layers, size = make_ps(rule, n)
    rng = np.random.default_rng(seed)
    sessions = []
    for d in range(n):
        w = wire.decode(ps.process(b"p", frames_bytes(wire.Hello(d))))
        sessions.append(w.session)
        ps.process(b"p", frames_bytes(wire.Pull(w.session)))
    pulled = [0] * n
    pool = [payload(rule, layers, size, rng) for _ in range(16)]
    times, cpu, seqs = [], [], [0] * n
    for i in range(pushes):
        d = i % n
        v, idx = pool[i % len(pool)]
        frames = frames_bytes(wire.Push(sessions[d], seqs[d], pulled[d], v, idx))
        seqs[d] += 1
        t0, c0 = time.perf_counter(), time.thread_time()
        ps.process(b"p", frames)
        cpu.append(time.thread_time() - c0)
        times.append(time.perf_counter() - t0)
        ps.process(b"p", frames_bytes(wire.Pull(sessions[d])))   # re-pull: a fresh snapshot
        pulled[d] = ps.version
    times, cpu = times[len(times) // 10:], cpu[len(cpu) // 10:]   # drop warm-up
    return {"rule": rule, "n": n, "pushes": pushes, "mean_us": statistics.fmean(times) * 1e6,
            "median_us": statistics.median(times) * 1e6, "p90_us": float(np.percentile(times, 90) * 1e6),
            "cpu_mean_us": statistics.fmean(cpu) * 1e6}


def pull_memory(rule: str, n: int, rounds: int = 3, seed: int = 0) -> dict:
    """The PS's memory per outstanding pull: bytes allocated (tracemalloc, which numpy reports its
    arrays to) once ``n`` devices said hello and each holds a pull, after ``rounds`` × n round-robin
    pushes with a re-pull after each (a run's steady state), over the PS before the first hello; ÷ n.
    Also the peak during those pushes, ÷ n. Θ, the rule's global counters and the push pool are
    allocated before tracing starts (and one push applied, so buffers a rule makes on first use are
    too), so what is left is what each device costs."""
    import gc
    import tracemalloc
    ps, layers, size = make_ps(rule, n)
    rng = np.random.default_rng(seed)
    pool = [payload(rule, layers, size, rng) for _ in range(8)]
    ps.rule.apply(-1, 0, *pool[0])   # lazily made global buffers (ASGD's dense scratch) before tracing
    ps.rule.forget(-1)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    sessions, pulled, seqs = [], [], [0] * n
    for d in range(n):
        sessions.append(wire.decode(ps.process(b"p", frames_bytes(wire.Hello(d)))).session)
        ps.process(b"p", frames_bytes(wire.Pull(sessions[d])))
        pulled.append(ps.version)
    for i in range(rounds * n):
        d = i % n
        v, idx = pool[i % len(pool)]
        ps.process(b"p", frames_bytes(wire.Push(sessions[d], seqs[d], pulled[d], v, idx)))
        seqs[d] += 1
        ps.process(b"p", frames_bytes(wire.Pull(sessions[d])))
        pulled[d] = ps.version
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"rule": rule, "n": n, "model": "cnn", "parameters": size, "pushes": rounds * n,
            "bytes_per_pull": (current - base) / n, "peak_bytes_per_pull": (peak - base) / n}


def _one_device(rule: str):
    """A PS with one device that said hello and has a pull on record (AdaComp computes σ_k from its
    snapshot), and the push payload: (ps, session, values, indices)."""
    ps, layers, size = make_ps(rule, 1)
    session = wire.decode(ps.process(b"p", frames_bytes(wire.Hello(0)))).session
    ps.rule.on_pull(0, 0)
    v, idx = payload(rule, layers, size, np.random.default_rng(0))
    return ps, session, v, idx


def process_cpu(rule: str, pushes: int = 3000, repeats: int = 3) -> dict:
    """CPU µs (thread_time) per push of ``process`` on the ingest path: one device with a pull on
    record (AdaComp computes σ_k from its snapshot), fresh sequence numbers; the compiled push path
    and the numpy one alternating. Best of ``repeats`` runs each: CPU time is what a busy host
    inflates least, the minimum what it inflates least of all."""
    from edgebed.ps import aggregate
    ps, session, v, idx = _one_device(rule)
    frames = iter([[memoryview(f) for f in frames_bytes(wire.Push(session, i, 0, v, idx))]
                   for i in range(2 * pushes * repeats)])
    best, fast = {"compiled": math.inf, "numpy": math.inf}, aggregate._fast
    try:
        for r in range(repeats):
            for path in best:
                aggregate._fast = fast if path == "compiled" else None
                c0 = time.thread_time()
                for _ in range(pushes):
                    ps.process(b"p", next(frames))
                best[path] = min(best[path], (time.thread_time() - c0) / pushes)
    finally:
        aggregate._fast = fast
    return {"rule": rule, "pushes": pushes, "compiled_path": fast is not None,
            "cpu_us_per_push": best["compiled"] * 1e6, "numpy_cpu_us_per_push": best["numpy"] * 1e6}


def process_parts(rule: str = "adacomp", number: int = 20_000, repeats: int = 5) -> dict:
    """Where ``process``'s time goes for one push (one device, pull on record): µs per call of its
    parts timed alone, best of ``repeats`` × ``number`` (timeit), with the compiled path in use."""
    import timeit
    from edgebed.ps import aggregate
    ps, session, v, idx = _one_device(rule)
    frames = [memoryview(f) for f in frames_bytes(wire.Push(session, 1, 0, v, idx))]
    msg = wire.decode(frames)
    pushes = iter([[memoryview(f) for f in frames_bytes(wire.Push(session, i, 0, v, idx))]
                   for i in range(2, 3 + number * repeats)])
    parts = {
        "process (whole)": lambda: ps.process(b"p", next(pushes)),
        "wire.decode": lambda: wire.decode(frames, ps.config.max_message_bytes),
        "check_entries": lambda: aggregate.check_entries(msg.indices, msg.values, ps.theta.size, 1e6),
        "rule.apply": lambda: ps.rule.apply(0, 1, msg.values, msg.indices),
        "wire.encode(Ack)": lambda: wire.encode(wire.Ack(ps.version, applied=True)),
        "meter.received": lambda: ps.meter.received("push", 17_000, 0),
    }
    us = {name: min(timeit.repeat(fn, number=number, repeat=repeats)) / number * 1e6 for name, fn in parts.items()}
    return {"rule": rule, "compiled_path": aggregate.FAST, "entries": int(v.size), "us_per_call": us}


def pushing_devices(rule: str, devices: int, distinct: int):
    """A PS for ``rule`` with ``devices`` devices said hello, each with a pull on record, and a pool of
    ``distinct`` push payloads: (ps, their sessions, the pool)."""
    ps, layers, size = make_ps(rule, devices)
    sessions = []
    for d in range(devices):
        sessions.append(wire.decode(ps.process(b"p", frames_bytes(wire.Hello(d)))).session)
        ps.rule.on_pull(d, 0)
    rng = np.random.default_rng(0)
    return ps, sessions, [payload(rule, layers, size, rng) for _ in range(distinct)]


def push_batch(sessions: list, pool: list, seq: list, pushes: int) -> list:
    """``pushes`` Push messages as the serve loop receives them (frames as memoryviews), the devices of
    ``sessions`` in turn, payloads from ``pool`` in turn; ``seq`` (each device's next sequence number)
    advanced."""
    out = []
    for i in range(pushes):
        d = i % len(sessions)
        v, idx = pool[i % len(pool)]
        out.append([memoryview(f) for f in frames_bytes(wire.Push(sessions[d], seq[d], 0, v, idx))])
        seq[d] += 1
    return out


def process_spread(rule: str = "adacomp", devices: int = 8, distinct: int = 64, pushes: int = 20_000,
                   repeats: int = 3) -> dict:
    """``process`` as the ingest benchmark's serve loop sees it: ``devices`` devices with a pull on record
    each (AdaComp: one snapshot of Θ's update counters per device) pushing in turn, from a pool of
    ``distinct`` gradients, so each push selects other entries. µs per push (wall, best of ``repeats``),
    beside ``process_parts``' one device re-pushing one gradient, whose entries stay in the CPU's
    caches: the difference is what scattered reads and writes over Θ, the counters and the snapshots
    cost (AdaComp's per-parameter staleness σ_k = count_k − snapshot_k of the pushing device)."""
    ps, sessions, pool = pushing_devices(rule, devices, distinct)
    best = math.inf
    seq = [1] * devices
    for _ in range(repeats):
        msgs = push_batch(sessions, pool, seq, pushes)
        t = time.perf_counter()
        for m in msgs:
            ps.process(b"p", m)
        best = min(best, (time.perf_counter() - t) / pushes * 1e6)
    return {"rule": rule, "devices": devices, "distinct_gradients": distinct, "us_per_push": best}


def budget(costs=(0, 5, 10, 15, 20), rounds: int = 3, seconds: float = 3.0, sockets: int = 8) -> dict:
    """How cheap must ``process`` be? AdaComp-sized pushes through the serve loop with a ``process``
    that spins ``cost`` µs and answers a canned Ack, against raw pyzmq, alternating for ``rounds``."""
    out = []
    for _ in range(rounds):
        raw, _ = _raw_once("adacomp", seconds, sockets)
        row = {"raw_zmq_msgs_per_s": raw, "by_cost": []}
        for cost in costs:
            rate, cpu, _ = _serve_ps("adacomp", seconds, sockets, stub=True, busy_us=cost)
            row["by_cost"].append({"process_us": cost, "pushes_per_s": rate, "of_raw": rate / raw,
                                   "cpu_us_per_push": cpu * 1e6})
        out.append(row)
    return {"rounds": out}


def guard_ab(rounds: int = 5, seconds: float = 3.0, sockets: int = 8) -> list[dict]:
    """Ingest of the real PS with its frame guard in front (ps/frameguard.py) and without (peers straight
    to the ROUTER socket), alternating for ``rounds`` rounds, for dense (ASGD) and AdaComp pushes, the
    CPUs shared and pinned: medians and per-round ratios (guarded / unguarded)."""
    from edgebed.ps import frameguard
    fast, out = frameguard.FAST, []
    try:
        for pinned in (False, True):
            for rule in ("asgd", "adacomp"):
                runs = []
                for _ in range(rounds):
                    row = {}
                    for guarded in (True, False):
                        frameguard.FAST = guarded
                        rate, cpu, _ = _serve_ps(rule, seconds, sockets, pinned=pinned)
                        row["guarded" if guarded else "unguarded"] = {"pushes_per_s": rate, "cpu_us_per_push": cpu * 1e6}
                    row["ratio"] = row["guarded"]["pushes_per_s"] / row["unguarded"]["pushes_per_s"]
                    runs.append(row)
                med = {k: {m: statistics.median(r[k][m] for r in runs) for m in ("pushes_per_s", "cpu_us_per_push")}
                       for k in ("guarded", "unguarded")}
                out.append({"rule": rule, "pinned": pinned, "seconds_each": seconds, "client_sockets": sockets,
                            **med, "ratio_of_medians": med["guarded"]["pushes_per_s"] / med["unguarded"]["pushes_per_s"],
                            "median_ratio": statistics.median(r["ratio"] for r in runs), "rounds": runs})
                print(f"guard {rule}{' pinned' if pinned else ''}: {med['guarded']['pushes_per_s']:.0f} vs "
                      f"{med['unguarded']['pushes_per_s']:.0f} pushes/s = {out[-1]['ratio_of_medians']:.3f} "
                      f"(median of round ratios {out[-1]['median_ratio']:.3f}); CPU µs/push "
                      f"{med['guarded']['cpu_us_per_push']:.0f} vs {med['unguarded']['cpu_us_per_push']:.0f}", flush=True)
    finally:
        frameguard.FAST = fast
    return out


def _raw_once(rule: str, seconds: float, sockets: int, pinned: bool = False, model: str = "cnn") -> tuple[float, float]:
    """(msgs/s, CPU s per message of the serving process) through the serve loop with a ``process``
    that does no work (``NullPS``): the ceiling of any PS on this receive path."""
    rate, cpu, _ = _serve_ps(rule, seconds, sockets, null=True, pinned=pinned, model=model)
    return rate, cpu


class NullPS(ParameterServer):
    """A PS doing no work: every message gets the same canned Ack (nothing decoded, counted or checked).
    The serve loop around it is the one the real PS runs. A subclass, so it has whatever the serve loop
    asks of a PS (``unsent``, ``refuse``, ``event``, ``tick``, …): a hand-written stand-in once lacked
    ``unsent`` and the raw ceiling crashed in every round (``tests/integration/test_bench_ps.py``
    runs it through the serve loop)."""

    def __init__(self, entries: Optional[int] = None):
        """``entries``: the model the clients push for (its message cap); None: the MLP's."""
        theta, _ = initial_theta("mlp", 0)
        super().__init__(PSConfig(n_devices=1, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                                  class_of=lambda d: "x", max_message_bytes=wire.message_cap(entries or theta.size)),
                         theta, RULES["asgd"](theta, 0.01), Hooks())
        self.version = 0   # messages answered
        self._ack = wire.encode(wire.Ack(0))

    def process(self, peer, frames, principal=None):
        self.version += 1
        return self._ack


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pin(cpus: Optional[set]) -> None:
    """Every thread of this process (ZeroMQ's I/O threads too) onto ``cpus``; None: leave as is."""
    if cpus is None:
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:   # the thread ended meanwhile
            pass


def _client(endpoint: str, rule: str, sockets: int, seconds: float, q, handshake: bool,
            cpus: Optional[set] = None, model: str = "cnn") -> None:
    """Each DEALER is one device: hello (if the peer is a PS), then push → ack → push ... with fresh
    sequence numbers; the gradient arrays are shared, only the small header is re-encoded.
    ``cpus``: run on these only."""
    _pin(cpus)
    ctx = zmq.Context()
    theta, layers = initial_theta(model, 0)
    size = theta.size
    del theta
    v, idx = payload(rule, layers, size, np.random.default_rng(0))
    socks = [ctx.socket(zmq.DEALER) for _ in range(sockets)]
    sessions = []
    for d, s in enumerate(socks):
        s.connect(endpoint)
        if handshake:
            s.send_multipart(wire.encode(wire.Hello(d)))
            sessions.append(wire.decode(s.recv_multipart()).session)
        else:   # the same header size as a real session's
            sessions.append("0123456789abcdef")
    seq = {s: 0 for s in socks}
    index = {s: i for i, s in enumerate(socks)}
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
        s.send_multipart(wire.encode(wire.Push(sessions[index[s]], 0, 0, v, idx)), copy=False)
    done = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for s, _ in poller.poll(1000):
            s.recv_multipart()
            done += 1
            seq[s] += 1
            s.send_multipart(wire.encode(wire.Push(sessions[index[s]], seq[s], 0, v, idx)), copy=False)
    elapsed = time.perf_counter() - t0
    for s in socks:
        s.close(0)
    ctx.term()
    q.put(done / elapsed)


# ``pinned``: the serving process (PS or raw ROUTER, with its ZeroMQ I/O thread) on CPU 0, the client
# process on CPU 1 — a server with one core of its own, its devices elsewhere. Unpinned, the four busy
# threads share both cores as the scheduler places them, so the PS's CPU also slows its load generator.
SERVER_CPUS, CLIENT_CPUS = {0}, {1}


def ingest(rule: str, seconds: float, sockets: int = 8, rounds: int = 3, pinned: bool = False) -> dict:
    """PS and raw runs alternating ``rounds`` times; medians of rates and CPU per message."""
    runs = [_ingest_once(rule, seconds, sockets, pinned) for _ in range(rounds)]
    keys = ("ps_pushes_per_s", "raw_zmq_msgs_per_s", "ps_cpu_us_per_push", "raw_cpu_us_per_msg",
            "stub_pushes_per_s", "stub_cpu_us_per_push", "numpy_pushes_per_s", "numpy_cpu_us_per_push")
    med = {k: statistics.median(r[k] for r in runs) for k in keys}
    return {**runs[0], **med, "applied": sum(r["applied"] for r in runs), "seconds_each": seconds, "pinned": pinned,
            "ps_over_raw": med["ps_pushes_per_s"] / med["raw_zmq_msgs_per_s"],
            "stub_over_raw": med["stub_pushes_per_s"] / med["raw_zmq_msgs_per_s"],
            "numpy_over_raw": med["numpy_pushes_per_s"] / med["raw_zmq_msgs_per_s"],
            "rounds": [{k: r[k] for k in (*keys, "ps_over_raw", "stub_over_raw", "numpy_over_raw")} for r in runs]}


def _serve_ps(rule: str, seconds: float, sockets: int, stub: bool = False, numpy_path: bool = False,
              busy_us: float = 0.0, pinned: bool = False, null: bool = False,
              model: str = "cnn", timers: Optional[dict] = None) -> tuple[float, float, int]:
    """(pushes/s, CPU µs per push of this process, pushes applied) through the real ZmqServer.

    Every device has a pull on record (AdaComp keeps a snapshot of its counters for each, as in a
    run, so σ_k is computed per parameter), but the clients only push: the model frames of real pulls
    would drown the push path this measures. ``stub``: ``process`` answers every push with a canned
    Ack without decoding it — the serve loop and ZeroMQ alone, the ceiling of any ``process``.
    ``numpy_path``: the real PS with its compiled push path switched off (``aggregate._fast = None``),
    the numpy code it falls back to. ``busy_us`` (with ``stub``): the canned Ack after spinning that
    long on the serve thread, a ``process`` that costs exactly that much. ``null``: ``NullPS``, no
    work at all, the clients skip hello (the raw baseline). ``pinned``: see SERVER_CPUS. ``model``: the
    workload whose Θ the PS holds and the clients push for. ``timers``: (acc, clock): a timer around each
    phase of ``process`` (ps_breakdown.PHASES), around ``process`` itself and the loop's receive and
    send, their [ns, calls] added to acc's entries (``ps_breakdown.in_serve_loop``)."""
    from edgebed.ps import aggregate
    from edgebed.ps.serve import ZmqServer
    ctx = mp.get_context("spawn")
    if null:
        ps = NullPS(initial_theta(model, 0)[0].size)
    else:
        ps, layers, size = make_ps(rule, sockets, model=model)
        for d in range(sockets):
            ps.rule.on_pull(d, 0)
    if stub:
        ps.process = canned_ack(ps, busy_us)
    fast, cpus = aggregate._fast, os.sched_getaffinity(0)
    if numpy_path:
        aggregate._fast = None
    remove = None
    try:
        server = ZmqServer(ps, "tcp://127.0.0.1:0")
        if timers is not None:
            from benchmarks.ps_breakdown import _timed, install
            acc, clock = timers
            if "decode" in acc:   # the phases' timers too (the general path's)
                remove = install(ps, acc, clock)
            ps.process = _timed(ps.process, acc["process"], clock)
            server._recv = _timed(server._recv, acc["receive"], clock)
            server._send = _timed(server._send, acc["send"], clock)
        server.start()
        if pinned:
            _pin(SERVER_CPUS)
        q = ctx.Queue()
        cl = ctx.Process(target=_client, args=(server.endpoint, rule, sockets, seconds, q, not null,
                                               CLIENT_CPUS if pinned else None, model))
        cpu0 = _cpu_s()
        cl.start()
        rate = q.get()
        cl.join()
        cpu = (_cpu_s() - cpu0) / max(ps.version, 1)   # this process: serve + ZeroMQ threads, main idle
        server.stop()
    finally:
        if remove is not None:
            remove()
        aggregate._fast = fast
        if pinned:
            _pin(cpus)
    return rate, cpu, ps.version


def _ingest_once(rule: str, seconds: float, sockets: int, pinned: bool = False) -> dict:
    """Pushes/s through the real PS (serve thread in this process), the same with its numpy path, the
    same serve loop with a stub ``process``, then with a no-work ``process`` (raw); clients in a separate
    process."""
    from edgebed.ps import aggregate
    layers, size = initial_theta("cnn", 0)[1], 211_690
    ps_rate, ps_cpu, applied = _serve_ps(rule, seconds, sockets, pinned=pinned)
    numpy_rate, numpy_cpu, _ = _serve_ps(rule, seconds, sockets, numpy_path=True, pinned=pinned)
    stub_rate, stub_cpu, _ = _serve_ps(rule, seconds, sockets, stub=True, pinned=pinned)
    raw_rate, raw_cpu = _raw_once(rule, seconds, sockets, pinned)
    v, idx = payload(rule, layers, size, np.random.default_rng(0))
    nbytes = wire.frames_nbytes(wire.encode(wire.Push("0123456789abcdef", 1, 0, v, idx)))
    return {"rule": rule, "message_bytes": nbytes, "client_sockets": sockets, "applied": applied,
            "compiled_path": aggregate.FAST, "pulls_on_record": True,
            "ps_pushes_per_s": ps_rate, "raw_zmq_msgs_per_s": raw_rate, "ps_over_raw": ps_rate / raw_rate,
            "ps_cpu_us_per_push": ps_cpu * 1e6, "raw_cpu_us_per_msg": raw_cpu * 1e6,
            "numpy_pushes_per_s": numpy_rate, "numpy_over_raw": numpy_rate / raw_rate,
            "numpy_cpu_us_per_push": numpy_cpu * 1e6,
            "stub_pushes_per_s": stub_rate, "stub_over_raw": stub_rate / raw_rate, "stub_cpu_us_per_push": stub_cpu * 1e6,
            "goal_ratio": 0.9 if rule == "asgd" else 0.8}


def compiled_floor(ps: ParameterServer):
    """A ``process`` for ``interleaved`` that does only what a push's compiled parts do — the header and
    frames (``_pushhead.push_frames``), the session's device, the entry check with max |v|
    (``check_sparse_top``), the rule's kernel (AdaComp's step against the device's snapshot, or the
    SGD step), the Ack — and none of the Python between them (device state, traffic meter,
    ``updates`` row, touch log, stop/eval/crash/checkpoint checks). Not a PS (it records nothing): the
    ceiling a short path compiled whole, header to Ack, could reach on this host."""
    from edgebed.ps import _fastpush as fast
    rule, n, sessions, head = ps.rule, ps.theta.size, ps.sessions, wire._HEADER.push_frames
    cap, f4, u4 = ps.config.max_message_bytes, np.dtype("<f4"), np.dtype("<u4")
    adacomp = rule.name == "adacomp"

    def process(peer, frames, principal=None):
        fields = head(frames, cap)
        if fields is None:   # hello
            return type(ps).process(ps, peer, frames, principal)
        d = sessions.get(fields[0])
        values = np.frombuffer(frames[1], f4)
        indices = np.frombuffer(frames[2], u4) if fields[6] is not None else None
        if indices is not None:
            fast.check_sparse_top(indices, values, n, 1e30)
        else:
            fast.max_abs(values)
        if adacomp:
            fast.adacomp(rule.theta, rule.counts, rule.pulls.dense.get(d), indices, values, rule.lr, 0,
                         rule._lr_table)
        else:   # ASGD's apply: its dense or sparse step, nothing else
            rule.apply(d, 0, values, indices)
        ps.version += 1
        return wire.ack_applied(ps.version)
    return process


def interleaved(rule: str = "adacomp", seconds: float = 20.0, window: float = 0.5, sockets: int = 8,
                pinned: bool = False, model: str = "cnn", process=None, warmup: float = 1.0,
                others: Optional[dict] = None) -> dict:
    """PS against raw in alternating windows of ``window`` s within one run: one serving process (the
    real ZmqServer and PS, as ``_serve_ps``), one client process, the same connections throughout; at
    each window's start the serve loop's ``process`` is switched, under ``ps.lock`` (between two
    batches), between the real PS's and a canned Ack (``NullPS.process``: nothing decoded, no work).
    Separate runs (``ingest``) put seconds between a PS run and its raw run, and this host's speed
    drifts over seconds (per-round ratios 0.56–0.84 in the committed ps.json); here each PS window is
    set against the mean rate of the raw windows either side of it, ``window`` s away.

    ``process``: a function of the PS that gives the ``process`` of the PS windows instead of the PS's
    own (``compiled_floor``). ``others``: more kinds of window, name → such a function; then the kinds
    take turns between the raw windows (raw, ps, raw, other, raw, ps, …), for an A/B of two ``process``
    in one run. ``warmup``: s of the real PS serving the clients before the first window.
    → per kind (``by_kind``): its median ratio to raw and quartiles over its windows, messages, median
    rate, CPU µs per message of the serving process (getrusage: serve, ZeroMQ and guard threads) and of
    the serve thread alone (its own CPU clock); the PS's at the top level too; the windows themselves."""
    from edgebed.ps.serve import ZmqServer
    ps, layers, size = make_ps(rule, sockets, model=model)
    for d in range(sockets):
        ps.rule.on_pull(d, 0)
    ack, answered = wire.encode(wire.Ack(0)), [0]

    def null(peer, frames, principal=None):   # NullPS.process
        answered[0] += 1
        return ack

    def count() -> int:
        return ps.version + answered[0]

    kinds = {"ps": ps.process if process is None else process(ps)}
    kinds.update({name: make(ps) for name, make in (others or {}).items()})
    turn = list(kinds)
    cpus = os.sched_getaffinity(0)
    pairs = max(int(seconds / (2 * window)), len(turn))
    order = [k for i in range(pairs) for k in ("raw", turn[i % len(turn)])] + ["raw"]   # raw first and last
    server = ZmqServer(ps, "tcp://127.0.0.1:0").start()
    try:
        serve_clock = time.pthread_getcpuclockid(server._thread.ident)
        if pinned:
            _pin(SERVER_CPUS)
        q = mp.get_context("spawn").Queue()
        cl = mp.get_context("spawn").Process(target=_client, args=(
            server.endpoint, rule, sockets, warmup + len(order) * window + 30.0, q, True,
            CLIENT_CPUS if pinned else None, model))
        cl.start()
        deadline = time.monotonic() + 60
        while ps.version < 100 * sockets:   # the clients are up and pushing (the real PS serves them)
            if time.monotonic() > deadline or not cl.is_alive():
                raise RuntimeError("the clients never reached the PS")
            time.sleep(0.05)
        time.sleep(warmup)
        windows = []
        for kind in order:
            with ps.lock:
                ps.process = null if kind == "raw" else kinds[kind]
                start = (time.perf_counter(), _cpu_s(), time.clock_gettime(serve_clock), count())
            time.sleep(window)
            if not server.alive:
                raise RuntimeError(f"the serve loop ended in a {kind} window: {server.error!r}")
            with ps.lock:
                end = (time.perf_counter(), _cpu_s(), time.clock_gettime(serve_clock), count())
            msgs = end[3] - start[3]
            windows.append({"kind": kind, "messages": msgs, "rate": msgs / (end[0] - start[0]),
                            "cpu_us_per_msg": (end[1] - start[1]) / max(msgs, 1) * 1e6,
                            "serve_us_per_msg": (end[2] - start[2]) / max(msgs, 1) * 1e6})
        cl.kill()
        cl.join()
    finally:
        server.stop()
        if pinned:
            _pin(cpus)
    out = {"rule": rule, "pinned": pinned, "window_s": window, "windows": len(windows), "client_sockets": sockets,
           "goal_ratio": 0.9 if rule == "asgd" else 0.8, "by_kind": {}}
    for kind in ("raw", *turn):
        ws = [w for w in windows if w["kind"] == kind]
        msgs = sum(w["messages"] for w in ws)
        row = {"windows": len(ws), "messages": msgs, "per_s": statistics.median(w["rate"] for w in ws),
               "cpu_us_per_msg": sum(w["cpu_us_per_msg"] * w["messages"] for w in ws) / max(msgs, 1),
               "serve_us_per_msg": sum(w["serve_us_per_msg"] * w["messages"] for w in ws) / max(msgs, 1)}
        if kind != "raw":
            ratios = [w["rate"] / ((windows[i - 1]["rate"] + windows[i + 1]["rate"]) / 2)
                      for i, w in enumerate(windows) if w["kind"] == kind]
            quart = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
            row.update(over_raw=statistics.median(ratios), over_raw_quartiles=[quart[0], quart[2]],
                       window_ratios=ratios)
        out["by_kind"][kind] = row
    main, raw = out["by_kind"]["ps"], out["by_kind"]["raw"]
    out.update(ps_over_raw=main["over_raw"], ps_over_raw_quartiles=main["over_raw_quartiles"],
               window_ratios=main["window_ratios"])
    for kind, row in (("ps", main), ("raw", raw)):
        out.update({f"{kind}_messages": row["messages"], f"{kind}_per_s": row["per_s"],
                    f"{kind}_cpu_us_per_msg": row["cpu_us_per_msg"], f"{kind}_serve_us_per_msg": row["serve_us_per_msg"]})
    out["window_list"] = windows
    return out


def million_frames(frames: int = 1_000_000) -> dict:
    """One message of ``frames`` empty frames (a pull header first) to the real serve loop: seconds until
    its ``frame-count`` error arrives, and how much of that the serve loop spent receiving it."""
    from edgebed.ps.serve import ZmqServer
    ps, _, _ = make_ps("adacomp", 3)
    server = ZmqServer(ps, "tcp://127.0.0.1:0")
    recv, spent = server._recv, []

    def timed_recv():
        t0 = time.perf_counter()
        try:
            return recv()
        finally:
            spent.append(time.perf_counter() - t0)
    server._recv = timed_recv
    server.start()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.connect(server.endpoint)
    msg = [wire._PREFIX.pack(wire.MAGIC, 1, wire.Pull.TYPE) + b'{"session":"x","arrays":[]}'] + [b""] * frames
    t0 = time.perf_counter()
    sock.send_multipart(msg)
    sent = time.perf_counter() - t0
    # Behind the frame guard (ps/frameguard.py) the message never reaches the serve loop: the guard
    # cuts the connection at its 257th frame and nothing answers; without it the loop refuses it.
    guarded = server.guard is not None
    reply = wire.decode(sock.recv_multipart()) if sock.poll(5_000 if guarded else 120_000) else None
    answered = time.perf_counter() - t0
    sock.close(0)
    cut = server.guard.stats()["cut_frames"] if guarded else 0
    server.stop()
    return {"frames": frames, "frame_guard": guarded, "cut_by_guard": cut, "reply": getattr(reply, "code", None),
            "client_send_s": sent, "answered_after_s": answered if reply is not None else None,
            "serve_loop_receive_s": max(spent) if spent else 0.0}


SIZES = {"0.2 M (mlp)": "mlp", "1 M": "tests.sized_models:mlp_1m", "11 M": "tests.sized_models:mlp_11m"}
# Two devices pushing at once: an 11 M dense push is 44 MB, and 8 of them in flight took longer than a
# one-second window to come back on the shared 2-core host.
SIZE_SOCKETS = 2


def ingest_by_size(seconds: float = 2.0, rounds: int = 3, sockets: int = SIZE_SOCKETS) -> list[dict]:
    """Ingest (pushes/s through the real ZmqServer) for each model of ``SIZES``, ASGD (dense pushes of
    4·|Θ| bytes) and AdaComp (top-1 % per layer), beside raw pyzmq (``NullPS``: the same serve loop
    and clients around a ``process`` doing no work, sized for the same model); PS and raw runs
    alternate ``rounds`` times and the medians are compared. Unpinned: the CPUs are shared."""
    rows = []
    for label, model in SIZES.items():
        theta, layers = initial_theta(model, 0)
        for rule in ("asgd", "adacomp"):
            v, idx = payload(rule, layers, theta.size, np.random.default_rng(0))
            nbytes = wire.frames_nbytes(wire.encode(wire.Push("0123456789abcdef", 1, 0, v, idx)))
            runs = []
            for _ in range(rounds):
                ps_rate, ps_cpu, _ = _serve_ps(rule, seconds, sockets, model=model)
                raw_rate, raw_cpu = _raw_once(rule, seconds, sockets, model=model)
                runs.append({"ps_pushes_per_s": ps_rate, "raw_zmq_msgs_per_s": raw_rate,
                             "ps_cpu_us_per_push": ps_cpu * 1e6, "raw_cpu_us_per_msg": raw_cpu * 1e6,
                             "ps_over_raw": ps_rate / raw_rate})
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "ps_over_raw"}
            rows.append({"size": label, "model": model, "parameters": int(theta.size), "rule": rule,
                         "message_bytes": nbytes, "message_cap": wire.message_cap(theta.size), **med,
                         "ps_over_raw": med["ps_pushes_per_s"] / med["raw_zmq_msgs_per_s"],
                         "ps_bytes_per_s": med["ps_pushes_per_s"] * nbytes, "rounds": runs})
            print(f"{label:12s} {rule:8s} {nbytes:>11,} B: PS {med['ps_pushes_per_s']:8.1f}/s, raw "
                  f"{med['raw_zmq_msgs_per_s']:8.1f}/s, ratio {rows[-1]['ps_over_raw']:.2f}", flush=True)
    return rows


# What makes this machine another instruction-set "host" (tests/integration/test_numerics_hosts.py's
# HOST_B: numpy's AVX-512 groups off, OpenBLAS on an AVX kernel, ATen and oneDNN limited)
DISPATCH_ENV = ("NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                "ONEDNN_MAX_CPU_ISA", "EDGEBED_GEMM_PATH")


def _host() -> dict:
    """The CPU model, cores and load average: what a rate measured on a shared host depends on."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    dispatch = {k: os.environ[k] for k in DISPATCH_ENV if k in os.environ}   # another "host" of this one
    from edgebed import numerics
    return {"cpu_model": model, "cores": os.cpu_count(), "load_average": os.getloadavg(),
            "numpy_simd": numerics._numpy_simd(), "blas_kernel": numerics._blas_kernel(),
            **({"dispatch_env": dispatch} if dispatch else {})}


def _write_json(path: Path, res: dict, host: dict) -> str:
    """``res`` with the load at its end → ``path`` (json); → the opening of its .md: when, the host, the
    load average at the start (``host``'s) and the end."""
    res["load_average_end"] = os.getloadavg()
    path.write_text(json.dumps(res, indent=2) + "\n")
    return (f"{res['date']}, {host['cpu_model']}, {host['cores']} cores, load average at start / end: "
            f"{host['load_average'][0]:.1f} / {res['load_average_end'][0]:.1f}"
            + (f"; dispatch as another host: {' '.join(f'{k}={v}' for k, v in host['dispatch_env'].items())} "
               f"(numpy's SIMD found: {', '.join(host['numpy_simd'].get('found', [])) or 'none'}; OpenBLAS kernel "
               f"{host['blas_kernel']})" if host.get("dispatch_env") else ""))


def write_sizes(path: Path, seconds: float, rounds: int) -> None:
    """``--sizes``: ingest per model size → ``path`` (json) and the same with ``.md``."""
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "host_start": _host(), "seconds_each": seconds,
           "rounds": rounds, "client_sockets": SIZE_SOCKETS, "ingest": ingest_by_size(seconds, rounds)}
    lines = [_write_json(path, res, res["host_start"]) + f"; medians of {rounds} alternating "
             f"rounds of {seconds:g} s, {SIZE_SOCKETS} client DEALERs (one push in flight each) in another "
             "process, CPUs shared", "",
             "| model | parameters | rule | message B | PS pushes/s | PS MB/s | raw pyzmq msgs/s | PS/raw [per round] |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['size']} | {r['parameters']:,} | {r['rule']} | {r['message_bytes']:,} | {r['ps_pushes_per_s']:.1f} "
              f"| {r['ps_bytes_per_s'] / 1e6:.0f} | {r['raw_zmq_msgs_per_s']:.1f} | {r['ps_over_raw']:.2f} "
              f"[{_ratios(r)}] |" for r in res["ingest"]]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _switched(ps: ParameterServer, module, name: str):
    """A ``process`` for ``interleaved``: the PS's own with ``module.name`` set to None around each
    call (the switch costs it ~0.2 µs)."""
    def process(peer, frames, principal=None):
        kept = getattr(module, name)
        setattr(module, name, None)
        try:
            return type(ps).process(ps, peer, frames, principal)
        finally:
            setattr(module, name, kept)
    return process


def python_short_path(ps: ParameterServer):
    """The PS with its short path for pushes in Python (``ParameterServer._push_py``) instead of
    compiled (``_shortpath.c``)."""
    from edgebed.ps import server
    return _switched(ps, server, "_SHORT")


def on_numpy_path(ps: ParameterServer):
    """The PS with its compiled kernels switched off (``aggregate._fast = None``, so the short path
    too): the numpy code it falls back to."""
    from edgebed.ps import aggregate
    return _switched(ps, aggregate, "_fast")


def canned_ack(ps: ParameterServer, busy_us: float = 0.0):
    """A ``process`` that answers every push with a canned Ack without decoding it, but hellos as the PS
    does, and counts versions: the serve loop and ZeroMQ alone, the ceiling of any ``process``
    (``busy_us``: after spinning that long on the serve thread, a ``process`` of exactly that cost)."""
    ack, clock, busy = wire.encode(wire.Ack(1)), time.perf_counter, busy_us * 1e-6

    def canned(peer, frames, principal=None):
        if len(frames) == 1:   # hello
            return type(ps).process(ps, peer, frames, principal)
        if busy:
            until = clock() + busy
            while clock() < until:
                pass
        ps.version += 1
        return ack
    return canned


INTERLEAVED_KINDS = {"ps": "the PS (short path compiled)", "python": "the PS, short path in Python",
                     "floor": "compiled parts alone (compiled_floor)", "numpy": "the PS on its numpy path",
                     "stub": "canned-Ack stub (hellos answered, versions counted)"}


def interleaved_settings(seconds: float, others: dict, label: str = "") -> list[dict]:
    """``interleaved`` for AdaComp and ASGD, CPUs shared then pinned, ``others`` taking turns with the PS
    between the raw windows: the runs without their window lists, each with the load after it; a line
    printed per setting."""
    runs = []
    for pinned in (False, True):
        for rule in ("adacomp", "asgd"):
            r = interleaved(rule, seconds, pinned=pinned, others=others)
            r.pop("window_list")
            r["load_average_after"] = os.getloadavg()
            runs.append(r)
            print(f"{label}{rule} {'pinned' if pinned else 'shared'}: " + "; ".join(
                f"{k} {v['over_raw']:.2f} [{v['over_raw_quartiles'][0]:.2f}, {v['over_raw_quartiles'][1]:.2f}] "
                f"serve {v['serve_us_per_msg']:.1f} µs" for k, v in r["by_kind"].items() if k != "raw")
                + f"; raw serve {r['by_kind']['raw']['serve_us_per_msg']:.1f} µs", flush=True)
    return runs


def write_interleaved(path: Path, seconds: float) -> None:
    """``--interleaved``: ``interleaved`` for AdaComp and ASGD, CPUs shared and pinned, the windows of
    each run taking turns between the real PS, the PS with its short path in Python and
    ``compiled_floor`` → ``path`` (json, without the window lists) and the same with ``.md``."""
    res = {"what": "bench_ps --interleaved: PS against raw in alternating 0.5 s windows of one run (the same "
                   "processes and connections); between the raw windows, in turn: the real PS, the PS with its "
                   "short path in Python, the compiled parts of a push alone (compiled_floor)",
           "date": time.strftime("%Y-%m-%d %H:%M"), "host": _host(), "seconds_each": seconds}
    res["runs"] = interleaved_settings(seconds, {"python": python_short_path, "floor": compiled_floor})
    lines = [_write_json(path, res, res["host"]) + f". `python -m benchmarks.bench_ps "
             f"--interleaved FILE`: {seconds:g} s a run of 0.5 s windows, raw and another kind alternating (raw, "
             "PS, raw, Python, raw, floor, raw, …; see `interleaved`); each window against the mean rate of the "
             "raw windows either side; median [quartiles] over a kind's windows. CPU µs per message: the "
             "serving process (serve, ZeroMQ and frame-guard threads) and its serve thread alone.", "",
             "| rule | CPUs | process | of raw (goal) | msgs/s | CPU µs/msg | serve thread µs/msg |",
             "|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        for kind, v in r["by_kind"].items():
            of_raw = (f"{v['over_raw']:.2f} [{v['over_raw_quartiles'][0]:.2f}, {v['over_raw_quartiles'][1]:.2f}]"
                      + (f" (≥ {r['goal_ratio']:.1f})" if kind == "ps" else "")) if kind != "raw" else "1"
            lines.append(f"| {r['rule']} | {'pinned' if r['pinned'] else 'shared'} | "
                         f"{INTERLEAVED_KINDS.get(kind, 'raw (canned Ack)')} | {of_raw} | {v['per_s']:.0f} | "
                         f"{v['cpu_us_per_msg']:.1f} | {v['serve_us_per_msg']:.1f} |")
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def write_ingest(path: Path, seconds: float, rounds: int) -> None:
    """``--ingest``: the ingest runs alone (what the main run measures after its apply costs) → ``path``
    (json) and the same with ``.md``; the host's CPU model and load recorded."""
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": _host(), "seconds_each": seconds, "rounds": rounds,
           "ingest": []}
    for pinned in (False, True):
        for rule in ("adacomp", "asgd"):
            r = ingest(rule, seconds, rounds=rounds, pinned=pinned)
            r["load_average_after"] = os.getloadavg()
            res["ingest"].append(r)
            print(f"ingest {rule}{' pinned' if pinned else ''}: PS {r['ps_pushes_per_s']:.0f}/s vs raw "
                  f"{r['raw_zmq_msgs_per_s']:.0f}/s = {r['ps_over_raw']:.2f} [{_ratios(r)}], stub "
                  f"{r['stub_over_raw']:.2f}", flush=True)
    lines = [_write_json(path, res, res["host"]) + f"; medians of {rounds} alternating rounds "
             f"of {seconds:g} s (PS, its numpy path, the canned-Ack stub, raw: see bench_ps's docstring); "
             "per-round ratios in brackets", "",
             "| rule | CPUs | PS pushes/s | raw msgs/s | PS/raw (goal) | PS CPU µs/push | raw CPU µs/msg "
             "| stub/raw | numpy path/raw |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['rule']} | {'pinned' if r['pinned'] else 'shared'} | {r['ps_pushes_per_s']:.0f} "
              f"| {r['raw_zmq_msgs_per_s']:.0f} | {r['ps_over_raw']:.2f} (≥ {r['goal_ratio']:.1f}) [{_ratios(r)}] "
              f"| {r['ps_cpu_us_per_push']:.1f} | {r['raw_cpu_us_per_msg']:.1f} "
              f"| {r['stub_over_raw']:.2f} [{_ratios(r, 'stub_over_raw')}] "
              f"| {r['numpy_over_raw']:.2f} [{_ratios(r, 'numpy_over_raw')}] |" for r in res["ingest"]]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _ratios(r: dict, key: str = "ps_over_raw") -> str:
    return ", ".join(f"{x[key]:.2f}" for x in r["rounds"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer pushes and seconds (smoke)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--process-only", metavar="FILE", help="only process() CPU per push, to FILE (json)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating PS / raw ingest runs per rule")
    ap.add_argument("--parts", metavar="FILE", help="only the µs of process()'s parts, to FILE (json)")
    ap.add_argument("--budget", metavar="FILE", help="only the ratio to raw for a process() of fixed cost, to FILE (json)")
    ap.add_argument("--memory", metavar="FILE", help="only the PS's memory per outstanding pull, to FILE (json)")
    ap.add_argument("--sizes", metavar="FILE", help="only ingest per model size (0.2 M, 1 M, 11 M), ASGD and "
                    "AdaComp beside raw pyzmq, to FILE (json) and FILE with .md")
    ap.add_argument("--breakdown", metavar="FILE", help="only process()'s phases per push (decode, check, apply, "
                    "step, record, reply, bookkeeping), AdaComp and ASGD, to FILE (json) and FILE with .md")
    ap.add_argument("--ingest", metavar="FILE", help="only the ingest runs (AdaComp and ASGD, CPUs shared and "
                    "pinned, --rounds alternating rounds of --seconds each) to FILE (json) and FILE with .md")
    ap.add_argument("--interleaved", metavar="FILE", help="only PS against raw in alternating 0.5 s windows of one "
                    "run (AdaComp, ASGD; shared, pinned; the real PS, its short path in Python and compiled_floor "
                    "taking turns; --seconds a run, default 30) to FILE (json) and FILE with .md")
    ap.add_argument("--seconds", type=float, help="--sizes, --ingest, --guard: seconds of each PS or raw run "
                    "(default 2); --interleaved: of each run (default 30)")
    ap.add_argument("--interleaved-seconds", type=float, help="the main run's interleaved ingest: seconds a "
                    "setting (default 45; --quick 6)")
    ap.add_argument("--guard", metavar="FILE", help="only ingest with the frame guard vs without, to FILE (json)")
    args = ap.parse_args(argv)
    if args.breakdown:
        from benchmarks import ps_breakdown
        res = {"what": "bench_ps --breakdown: µs per push of each phase of ParameterServer.process (decode, check, "
                       "apply, step, record, reply, bookkeeping), AdaComp and dense ASGD, warm and in the serve loop",
               "date": time.strftime("%Y-%m-%d %H:%M"), "host": _host(),
               "rows": [ps_breakdown.breakdown(rule, per=50 if rule == "adacomp" else 5)
                        for rule in ("adacomp", "asgd")]}
        res["in_serve_loop"] = [ps_breakdown.in_serve_loop_median(rule, pinned, short=short)
                                for pinned in (False, True) for rule in ("adacomp", "asgd") for short in (True, False)]
        res["load_average_end"] = os.getloadavg()
        Path(args.breakdown).write_text(json.dumps(res, indent=2) + "\n")
        Path(args.breakdown).with_suffix(".md").write_text(ps_breakdown.markdown(res))
        print(ps_breakdown.markdown(res))
        return 0
    if args.ingest:
        write_ingest(Path(args.ingest), args.seconds or 2.0, args.rounds)
        return 0
    if args.interleaved:
        write_interleaved(Path(args.interleaved), args.seconds or 30.0)
        return 0
    if args.guard:
        res = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": _host(), "load_average_start": os.getloadavg(),
               "guard": guard_ab(args.rounds, args.seconds or 2.0)}
        res["load_average_end"] = os.getloadavg()
        Path(args.guard).write_text(json.dumps(res, indent=2) + "\n")
        return 0
    if args.sizes:
        write_sizes(Path(args.sizes), args.seconds or 2.0, args.rounds)
        return 0
    if args.memory:
        rows = [pull_memory(rule, n) for rule in ("asgd", "comp-asgd", "adacomp") for n in (10, 200)]
        Path(args.memory).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"),
                                                 "load_average": os.getloadavg(), "pull_memory": rows}, indent=2) + "\n")
        for r in rows:
            print(f"{r['rule']:9s} n={r['n']:3d}: {r['bytes_per_pull']:,.0f} B per outstanding pull "
                  f"(peak {r['peak_bytes_per_pull']:,.0f})", flush=True)
        return 0
    if args.budget:
        res = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average_start": os.getloadavg(), **budget()}
        res["load_average_end"] = os.getloadavg()
        Path(args.budget).write_text(json.dumps(res, indent=2))
        for r in res["rounds"]:
            print(f"raw {r['raw_zmq_msgs_per_s']:.0f}/s: " + ", ".join(
                f"{c['process_us']} µs → {c['of_raw']:.2f}" for c in r["by_cost"]), flush=True)
        return 0
    if args.parts:
        res = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average": os.getloadavg(), **process_parts(),
               "spread": process_spread()}
        Path(args.parts).write_text(json.dumps(res, indent=2))
        print(json.dumps(res, indent=2))
        return 0
    if args.process_only:
        rows = [process_cpu(rule) for rule in ("asgd", "comp-asgd", "adacomp")]
        Path(args.process_only).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"),
                                                       "load_average": os.getloadavg(), "process": rows}, indent=2))
        print(json.dumps(rows))
        return 0
    pushes = 400 if args.quick else 3000
    seconds = 1.0 if args.quick else 3.0
    res = {"machine": {"cores": os.cpu_count(), "cpu_model": _host()["cpu_model"]}, "date": time.strftime("%Y-%m-%d %H:%M"),
           "load_average_start": os.getloadavg(), "apply": [], "ingest": []}
    for rule in ("asgd", "comp-asgd", "adacomp"):
        for n in (10, 50, 200):
            r = apply_cost(rule, n, max(pushes, 2 * n))
            res["apply"].append(r)
            print(f"apply {rule:9s} n={n:3d}: mean {r['mean_us']:7.1f} µs  median {r['median_us']:7.1f} µs", flush=True)
    res["pull_memory"] = [pull_memory(rule, n) for rule in ("asgd", "adacomp") for n in (10, 200)]
    print("PS bytes per outstanding pull: " + ", ".join(
        f"{r['rule']} n={r['n']} {r['bytes_per_pull']:,.0f}" for r in res["pull_memory"]), flush=True)
    res["process"] = [process_cpu(rule) for rule in ("asgd", "comp-asgd", "adacomp")]
    print("process CPU µs per push, compiled / numpy: " + ", ".join(
        f"{r['rule']} {r['cpu_us_per_push']:.1f} / {r['numpy_cpu_us_per_push']:.1f}" for r in res["process"]), flush=True)
    for pinned in (False, True):
        for rule in ("asgd", "adacomp"):
            r = ingest(rule, seconds, rounds=args.rounds, pinned=pinned)
            res["ingest"].append(r)
            print(f"ingest {rule}{' pinned' if pinned else ''}: PS {r['ps_pushes_per_s']:.0f}/s vs raw pyzmq "
                  f"{r['raw_zmq_msgs_per_s']:.0f}/s = {r['ps_over_raw']:.2f} ({r['message_bytes']} B messages; "
                  f"medians of {args.rounds} rounds)", flush=True)
    # the same four settings in alternating windows of one run: the figure the goals are read from
    iseconds = args.interleaved_seconds or (6.0 if args.quick else 45.0)
    res["ingest_interleaved"] = interleaved_settings(iseconds, {"numpy": on_numpy_path, "stub": canned_ack},
                                                     label="interleaved ")
    res["million_frames"] = million_frames(100_000 if args.quick else 1_000_000)
    print(f"million frames: {res['million_frames']}", flush=True)
    res["load_average_end"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ps.json").write_text(json.dumps(res, indent=2))
    lines = [f"{res['date']}, {res['machine']['cpu_model']}, {res['machine']['cores']} cores, load average at start / end: "
             f"{res['load_average_start'][0]:.1f} / {res['load_average_end'][0]:.1f}", "",
             "| rule | n outstanding | mean µs | median µs | p90 µs | CPU µs |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['rule']} | {r['n']} | {r['mean_us']:.1f} | {r['median_us']:.1f} | {r['p90_us']:.1f} "
              f"| {r['cpu_mean_us']:.1f} |" for r in res["apply"]]
    before = OUT / "ps-pull-memory-before.json"
    was = {(r["rule"], r["n"]): r["bytes_per_pull"] for r in json.loads(before.read_text())["pull_memory"]} \
        if before.exists() else {}
    lines += ["", "PS memory per outstanding pull (CNN, tracemalloc, after 3 × n round-robin pushes; before issue 26 "
              "in brackets, `ps-pull-memory-before.json`): " + ", ".join(
                  f"{r['rule']} n = {r['n']}: {r['bytes_per_pull']:,.0f} B"
                  + (f" ({was[(r['rule'], r['n'])]:,.0f} B)" if (r["rule"], r["n"]) in was else "")
                  for r in res["pull_memory"])]
    lines += ["", "`process()` alone, CPU µs per push, one device with a pull on record (best of 3 × 3,000), "
              "compiled push path / numpy path: " + ", ".join(
                  f"{r['rule']} {r['cpu_us_per_push']:.1f} / {r['numpy_cpu_us_per_push']:.1f}" for r in res["process"])]
    lines += ["", f"Ingest, medians of {args.rounds} alternating rounds of {seconds:g} s: the real PS (compiled push "
              "path), the real PS on its numpy path, the serve loop with a canned Ack (hellos answered, versions "
              "counted), and raw: the same serve loop around a `process` that does no work (the ceiling); "
              "8 client DEALERs in another process, one push in flight each, every device with a pull on "
              "record; CPUs: both shared as the scheduler places the threads, or pinned (server process on "
              "CPU 0, client on CPU 1). Per-round ratios in brackets:", "",
              "| rule | CPUs | message B | PS pushes/s | raw pyzmq msgs/s | PS/raw (goal) | PS CPU µs/push | raw CPU µs/msg "
              "| numpy path pushes/s (of raw), CPU µs/push | canned Ack pushes/s (of raw), CPU µs/push |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['rule']} | {'pinned' if r['pinned'] else 'shared'} | {r['message_bytes']} | {r['ps_pushes_per_s']:.0f} | {r['raw_zmq_msgs_per_s']:.0f} "
              f"| {r['ps_over_raw']:.2f} (≥ {r['goal_ratio']:.1f}) [{_ratios(r)}] "
              f"| {r['ps_cpu_us_per_push']:.1f} | {r['raw_cpu_us_per_msg']:.1f} "
              f"| {r['numpy_pushes_per_s']:.0f} ({r['numpy_over_raw']:.2f}) [{_ratios(r, 'numpy_over_raw')}], "
              f"{r['numpy_cpu_us_per_push']:.1f} "
              f"| {r['stub_pushes_per_s']:.0f} ({r['stub_over_raw']:.2f}) [{_ratios(r, 'stub_over_raw')}], "
              f"{r['stub_cpu_us_per_push']:.1f} |" for r in res["ingest"]]
    lines += ["", f"Ingest in alternating windows of one run (`interleaved`: {iseconds:g} s a setting, 0.5 s "
              "windows; the same serving process, clients and connections throughout; at each window's start the "
              "serve loop's `process` switches between raw — a canned Ack, nothing decoded — and, in turn, the "
              "real PS, the PS on its numpy path and the canned-Ack stub). Each window against the mean rate of "
              "the raw windows either side of it; median [quartiles] over a kind's windows. The goals are read "
              "here: separate runs seconds apart drift with this host's load (the per-round ratios above).", "",
              "| rule | CPUs | process | of raw (goal) | windows | msgs/s | serve thread µs/msg |",
              "|---|---|---|---|---|---|---|"]
    for r in res["ingest_interleaved"]:
        for kind, v in r["by_kind"].items():
            if kind == "raw":
                continue
            lines.append(f"| {r['rule']} | {'pinned' if r['pinned'] else 'shared'} | {INTERLEAVED_KINDS[kind]} "
                         f"| {v['over_raw']:.2f} [{v['over_raw_quartiles'][0]:.2f}, {v['over_raw_quartiles'][1]:.2f}]"
                         + (f" (≥ {r['goal_ratio']:.1f})" if kind == "ps" else "")
                         + f" | {v['windows']} | {v['per_s']:.0f} | {v['serve_us_per_msg']:.1f} |")
        raw = r["by_kind"]["raw"]
        lines.append(f"| {r['rule']} | {'pinned' if r['pinned'] else 'shared'} | raw (canned Ack) | 1 | "
                     f"{raw['windows']} | {raw['per_s']:.0f} "
                     f"| {raw['serve_us_per_msg']:.1f} |")
    m = res["million_frames"]
    if m["reply"] is None and m.get("cut_by_guard"):
        lines += ["", f"One message of {m['frames']:,} empty frames: cut by the frame guard before the serve "
                  f"loop saw it (the client's send took {m['client_send_s']:.2f} s; the serve loop spent "
                  f"{m['serve_loop_receive_s']:.2f} s receiving)."]
    else:
        lines += ["", f"One message of {m['frames']:,} empty frames: answered `{m['reply']}` after "
                  f"{m['answered_after_s'] or float('nan'):.2f} s (the client's send took {m['client_send_s']:.2f} s; "
                  f"the serve loop spent {m['serve_loop_receive_s']:.2f} s receiving it)."]
    (out / "ps.md").write_text("\n".join(lines) + "\n")
    print(f"written {out / 'ps.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
