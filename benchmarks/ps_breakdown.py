"""Where one push's time goes at the PS: ``ParameterServer.process`` split into its phases, measured in
place (``python -m benchmarks.bench_ps --breakdown FILE``).

Phases, each the real code timed where ``process`` calls it (a timer around the call, installed on the
instance or the module for the measurement only):

- ``decode``  ``wire.decode``: header, scalars, zero-copy views on the frames;
- ``check``   ``ParameterServer._check_payload``: shape, dtype, version, index order and range, values
  finite and bounded (one C pass for a sparse push, one BLAS pass for a dense one);
- ``apply``   the rule's ``apply``: Θ, and AdaComp's counters and touch log (σ_k);
- ``step``    ``_note_step``: the largest |value|, kept per device for the divergence check's blame;
- ``record``  ``_record_update``: the ``updates`` row (clock, dict; the hook is the benchmark's no-op,
  so what a run's table writer costs on top is not in it);
- ``reply``   ``wire.encode`` of the Ack;
- ``bookkeeping``  the rest: whole − the phases above (traffic meter, session and sequence checks,
  staleness, dispatch, counters) — the Python between the calls.

These are the phases of ``process``'s general path (``install`` turns the short path for pushes off
while its timers are in place). Most pushes take the short path (``ParameterServer._push``: the same
phases, fewer steps between them); ``short_whole`` is ``process`` with it, measured beside ``whole``,
and ``in_serve_loop(short=True)`` its cost in the serve loop.

``whole`` is ``process`` without any timer, so the phases' timers do not inflate it; each phase is
timed in other batches, less one timer read per call; every figure is the least per push over many
short batches (see ``breakdown``), the bookkeeping therefore a lower bound's difference, not exact.
The setting is the ingest benchmark's: ``devices`` devices with a pull on record pushing in turn from a
pool of ``distinct`` gradients (AdaComp: top-1 % per layer of the CNN, 2,122 entries; ASGD: dense,
211,690), fresh sequence numbers, the compiled push path in use where built.
"""
from __future__ import annotations

import time


from edgebed import wire

PHASES = ("decode", "check", "apply", "step", "record", "reply")
LOOP = ("receive", "process", "send")


def _messages(rule: str, devices: int, distinct: int, pushes: int):
    from benchmarks.bench_ps import push_batch, pushing_devices
    ps, sessions, pool = pushing_devices(rule, devices, distinct)
    seq = [1] * devices
    return ps, lambda: push_batch(sessions, pool, seq, pushes), pool[0][0].size


def _timed(fn, acc: list, clock=time.perf_counter_ns):

    def timed(*args, **kwargs):
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[0] += clock() - t
            acc[1] += 1
    return timed


def install(ps, acc: dict, clock=time.perf_counter_ns):
    """Timers (``clock``) around each phase's call in ``ps.process`` (``acc[phase]`` = [ns, calls],
    added to), the general path's (the short path for pushes off meanwhile); → a function that takes
    them off again."""
    real = {"decode": wire.decode, "reply": wire.encode}
    fast, ps.fast_push = ps.fast_push, False
    wire.decode = _timed(real["decode"], acc["decode"], clock)
    wire.encode = _timed(real["reply"], acc["reply"], clock)
    ps._check_payload = _timed(ps._check_payload, acc["check"], clock)
    ps.rule.apply = _timed(ps.rule.apply, acc["apply"], clock)
    ps._note_step = _timed(ps._note_step, acc["step"], clock)
    ps._record_update = _timed(ps._record_update, acc["record"], clock)

    def remove() -> None:
        wire.decode, wire.encode = real["decode"], real["reply"]
        ps.fast_push = fast
        for name in ("_check_payload", "_note_step", "_record_update"):
            del ps.__dict__[name]
        del ps.rule.__dict__["apply"]
    return remove


def in_serve_loop(rule: str, seconds: float = 2.0, sockets: int = 8, pinned: bool = False, cpu: bool = False,
                  short: bool = False) -> dict:
    """The same phases as the serve loop runs them (``bench_ps._serve_ps``: the real ZmqServer, clients
    in another process): µs per push of each (their total over the pushes), and of the loop's receive
    and send (bookkeeping: process less its phases and their timers), with caches and
    CPUs shared with the ZeroMQ I/O thread, the clients and whatever else the host runs — what
    ``breakdown``'s warm, one-thread figures leave out. Every call carries a timer here (~0.1 µs each;
    less one timer read per call). ``cpu``: the serve thread's CPU time (thread_time) instead of wall
    time, which also counts the time the thread waited for a CPU on a loaded host. ``short``: the PS
    as it runs, its short path for pushes on, and timers around process, receive and send only (the
    phases are the general path's)."""
    from benchmarks.bench_ps import _serve_ps
    clock = time.thread_time_ns if cpu else time.perf_counter_ns
    phases = () if short else PHASES
    acc = {p: [0, 0] for p in (*phases, "process", "receive", "send")}
    rate, cpu_s, pushes = _serve_ps(rule, seconds, sockets, pinned=pinned, timers=(acc, clock))
    timer = _timer_ns(clock=clock) / 1e3
    # process's own figure holds its phases' whole timers (call, two clock reads, the sums): less those
    acc["process"][0] -= _wrapper_ns(clock) * sum(acc[p][1] for p in phases)
    # per push: the receive is also called when the socket is empty (zmq.Again ends a batch)
    us = {p: (ns / 1e3 - timer * calls) / max(pushes, 1) for p, (ns, calls) in acc.items()}
    if not short:
        us["bookkeeping"] = us["process"] - sum(us[p] for p in PHASES)
    return {"rule": rule, "pinned": pinned, "path": "short" if short else "general", "clock": "thread CPU" if cpu else "wall", "pushes_per_s": rate,
            "process_cpu_us_per_push": cpu_s * 1e6,
            "pushes": pushes, "us_per_push": us}


def in_serve_loop_median(rule: str, pinned: bool, rounds: int = 3, seconds: float = 2.0, short: bool = False) -> dict:
    """``in_serve_loop`` (thread CPU) ``rounds`` times; the median of each figure, and every round's."""
    import statistics
    runs = [in_serve_loop(rule, seconds, pinned=pinned, cpu=True, short=short) for _ in range(rounds)]
    us = {p: statistics.median(r["us_per_push"][p] for r in runs) for p in runs[0]["us_per_push"]}
    return {**runs[0], "us_per_push": us, "pushes_per_s": statistics.median(r["pushes_per_s"] for r in runs),
            "process_cpu_us_per_push": statistics.median(r["process_cpu_us_per_push"] for r in runs),
            "rounds": runs}


def _wrapper_ns(clock, calls: int = 100_000) -> float:
    """ns a ``_timed`` wrapper adds to a call, as its caller's timer sees it (least of 5)."""
    import timeit

    def noop():
        return None
    wrapped = _timed(noop, [0, 0], clock)
    bare = min(timeit.repeat(noop, number=calls, repeat=5))
    return max(min(timeit.repeat(wrapped, number=calls, repeat=5)) - bare, 0.0) / calls * 1e9


def _timer_ns(reads: int = 100_000, clock=time.perf_counter_ns) -> float:
    """ns one ``clock() - t`` around nothing costs (what each phase's timer adds to it)."""
    best = float("inf")
    for _ in range(5):
        total = 0
        for _ in range(reads):
            t = clock()
            total += clock() - t
        best = min(best, total / reads)
    return best


def breakdown(rule: str, devices: int = 8, distinct: int = 64, per: int = 50, batches: int = 100) -> dict:
    """µs per push of ``process`` (wall, and CPU: thread_time) and of each phase; see the module docstring.

    ``batches`` small batches of ``per`` pushes, plain and timed alternating; each figure is the least
    over the batches (per push): a batch short enough (~1 ms) that many run without being preempted on a
    loaded host, so the least is what the code costs, not what the host's load adds."""
    from edgebed.ps import aggregate
    ps, batch, entries = _messages(rule, devices, distinct, per)
    whole = cpu = short = short_cpu = float("inf")
    acc = {p: [0, 0] for p in PHASES}
    best = {p: float("inf") for p in PHASES}
    fast = ps.fast_push
    for _ in range(batches):
        msgs = batch()   # the short path as the PS runs it, no timer anywhere
        t, c = time.perf_counter(), time.thread_time()
        for m in msgs:
            ps.process(b"p", m)
        short, short_cpu = min(short, (time.perf_counter() - t) / per), min(short_cpu, (time.thread_time() - c) / per)
        msgs = batch()   # plain: no timer anywhere, the general path
        ps.fast_push = False
        t, c = time.perf_counter(), time.thread_time()
        for m in msgs:
            ps.process(b"p", m)
        whole, cpu = min(whole, (time.perf_counter() - t) / per), min(cpu, (time.thread_time() - c) / per)
        ps.fast_push = fast
        msgs = batch()   # timed: the same kind of pushes, a timer around each phase's call
        for a in acc.values():
            a[:] = [0, 0]
        remove = install(ps, acc)
        try:
            for m in msgs:
                ps.process(b"p", m)
        finally:
            remove()
        for p, (ns, calls) in acc.items():
            assert calls == per, f"{p}: {calls} calls for {per} pushes"   # each phase once a push
            best[p] = min(best[p], ns / per)
    timer = _timer_ns()
    phases = {p: max(best[p] - timer, 0.0) / 1e3 for p in PHASES}
    phases["bookkeeping"] = whole * 1e6 - sum(phases.values())
    assert ps.version == 3 * per * batches, "a push was refused"
    return {"rule": rule, "entries": int(entries), "devices": devices, "distinct_gradients": distinct,
            "pushes_per_batch": per, "batches": batches, "compiled_path": aggregate.FAST,
            "whole_us": whole * 1e6, "whole_cpu_us": cpu * 1e6, "short_path": fast,
            "short_whole_us": short * 1e6, "short_whole_cpu_us": short_cpu * 1e6, "timer_ns": timer, "phases_us": phases}


def markdown(res: dict) -> str:
    h = res["host"]
    lines = [f"{res['date']}, {h['cpu_model']}, {h['cores']} cores, load average at start / end: "
             f"{h['load_average'][0]:.1f} / {res['load_average_end'][0]:.1f}. `process()` per push (µs, wall; least "
             "over short batches) and its phases timed in place (`benchmarks/ps_breakdown.py`); bookkeeping = "
             "whole − the phases.", "",
             "| rule | entries | short path µs (CPU) | whole µs (CPU) | " + " | ".join(PHASES) + " | bookkeeping |",
             "|---|---|---|---|" + "---|" * (len(PHASES) + 1)]
    for r in res["rows"]:
        p = r["phases_us"]
        lines.append(f"| {r['rule']} | {r['entries']:,} | {r['short_whole_us']:.1f} ({r['short_whole_cpu_us']:.1f}) "
                     f"| {r['whole_us']:.1f} ({r['whole_cpu_us']:.1f}) | "
                     + " | ".join(f"{p[k]:.1f}" for k in (*PHASES, "bookkeeping")) + " |")
    loop = res.get("in_serve_loop") or []
    if loop:
        lines += ["", "The same phases in the serve loop (`bench_ps`'s ingest setting: the real ZmqServer, 8 client "
                  "DEALERs in another process), CPU µs per push of the serve thread (thread_time; medians of "
                  f"{len(loop[0]['rounds'])} runs of 2 s), with the loop's receive and send; the serving process's "
                  "CPU per push (serve + ZeroMQ I/O threads; here with the timers' own cost, ~1.3 µs a timed call) beside them:", "",
                  "| rule | path | CPUs | pushes/s | process CPU µs/push | receive | process | " + " | ".join(PHASES)
                  + " | bookkeeping | send |", "|---|---|---|---|---|---|---|" + "---|" * (len(PHASES) + 2)]
        for r in loop:
            u = r["us_per_push"]
            lines.append(f"| {r['rule']} | {r.get('path', 'general')} | {'pinned' if r['pinned'] else 'shared'} "
                         f"| {r['pushes_per_s']:.0f} | {r['process_cpu_us_per_push']:.1f} | {u['receive']:.1f} "
                         f"| {u['process']:.1f} | "
                         + " | ".join(f"{u[k]:.1f}" if k in u else "–" for k in (*PHASES, "bookkeeping"))
                         + f" | {u['send']:.1f} |")
    return "\n".join(lines) + "\n"
