"""What separates the PS's short path from its compiled parts alone, warm (one thread, no serve loop):
µs per AdaComp push through ``ParameterServer.process`` with the short path compiled, with it in Python
(``_push_py``), and through ``bench_ps.compiled_floor`` (header, session, check, kernel, Ack — no
bookkeeping), in alternating batches; then the pieces of the difference, each timed alone: AdaComp's
``apply`` against its kernel called directly, its wrapper's checks, the touch log's bookkeeping, the
``Applied`` record, the hooks the short path calls and the traffic meter's two counts in Python; and
the compiled short path counting through the meter's dicts (its tally switched off), as it did
before the tally.

    python -m benchmarks.ps_warm_gap [--out benchmarks/results/ps-warm-gap.json]   (+ .md)

The setting is the ingest benchmark's (``bench_ps.pushing_devices``: 8 devices with a pull on record,
64 distinct top-1 % gradients of the CNN, fresh sequence numbers); the garbage collector is off while
timing, so its passes don't land in one variant's batches. Medians over the batches of each variant."""
from __future__ import annotations

import argparse
import gc
import statistics
import time
import timeit
from pathlib import Path

OUT = Path(__file__).parent / "results" / "ps-warm-gap.json"


def alternating(batches: int = 30, pushes: int = 2000) -> dict:
    """µs per push of each variant: the median over ``batches`` batches of ``pushes`` each, in turn."""
    from benchmarks.bench_ps import compiled_floor, push_batch, pushing_devices
    from edgebed.ps import server
    compiled = server._SHORT
    ps, sessions, pool = pushing_devices("adacomp", 8, 64)
    floor = compiled_floor(ps)
    seq = [1] * len(sessions)
    variants = {"compiled": (compiled, ps.process), "python": (None, ps.process), "floor": (compiled, floor),
                "compiled_meter_dicts": (compiled, ps.process)}
    times = {k: [] for k in variants}
    tally = ps.meter.tally
    try:
        for _ in range(batches):
            for name, (short, process) in variants.items():
                server._SHORT = short
                # the short path counting through the meter's dicts under its lock, as before the tally
                ps.meter.tally = None if name == "compiled_meter_dicts" else tally
                msgs = push_batch(sessions, pool, seq, pushes)
                t = time.perf_counter()
                for m in msgs:
                    process(b"p", m)
                times[name].append((time.perf_counter() - t) / pushes * 1e6)
    finally:
        server._SHORT = compiled
        ps.meter.tally = tally
    return {name: statistics.median(ts) for name, ts in times.items()}


def pieces() -> dict:
    """µs of each piece, timed alone (least of 5 repeats of 20,000 calls)."""
    from benchmarks.bench_ps import push_batch, pushing_devices
    from edgebed.ps import _fastpush as fast
    from edgebed.ps.aggregate import adacomp_apply
    from edgebed.ps.rules.base import Applied
    ps, sessions, pool = pushing_devices("adacomp", 8, 64)
    seq = [1] * len(sessions)
    for m in push_batch(sessions, pool, seq, 2000):   # as in the ingest run: the pulls now hold snapshots
        ps.process(b"p", m)
    rule, (values, indices) = ps.rule, pool[0]
    snap = rule.pulls.dense.get(0)

    def t(fn) -> float:
        return min(timeit.repeat(fn, number=20_000, repeat=5)) / 20_000 * 1e6
    kernel = t(lambda: fast.adacomp(rule.theta, rule.counts, snap, indices, values, rule.lr, 0, rule._lr_table))
    return {
        "rule_apply": t(lambda: rule.apply(0, 0, values, indices)),
        "kernel_alone": kernel,
        "wrapper_checks": t(lambda: adacomp_apply(rule.theta, rule.counts, snap, indices, values, rule.lr, 0,
                                                  rule._lr_table)) - kernel,
        "touch_log_bookkeeping": t(lambda: rule.pulls.applied(indices, rule.counts)),
        "applied_record": t(lambda: Applied(0, 1.0, 2.0)),
        "hook_clock": t(lambda: ps.hooks.clock()),
        "hooks_class_of_record_step_scale": t(lambda: (ps.config.class_of(0), ps.hooks.record("updates", {}),
                                                       rule.step_scale())),
        # what _push_py counts per push (the compiled short path counts in the meter's tally instead)
        "traffic_counts_push_and_ack_python": t(lambda: (ps.meter.received("push", 17102, 0),
                                                         ps.meter.sent("ack", 40, 0))),
    }


def markdown(res: dict, opening: str) -> str:
    """The .md under ``opening`` (``bench_ps._write_json``'s: when, the host, its load)."""
    w, p = res["warm_us_per_push"], res["pieces_us"]
    rows = [f"{opening}. `python -m benchmarks.ps_warm_gap`: an AdaComp push, warm, one thread, GC off; "
            "medians of 30 alternating batches of 2,000 pushes.", "",
            "| short path compiled | short path in Python | compiled parts alone | gap, compiled − floor |"
            + (" compiled, counting in the meter's dicts |" if "compiled_meter_dicts" in w else ""),
            "|---|---|---|---|" + ("---|" if "compiled_meter_dicts" in w else ""),
            f"| {w['compiled']:.2f} µs | {w['python']:.2f} µs | {w['floor']:.2f} µs | {w['compiled'] - w['floor']:.2f} µs |"
            + (f" {w['compiled_meter_dicts']:.2f} µs |" if "compiled_meter_dicts" in w else ""),
            "", "Pieces of the gap, each timed alone (µs a call):", "", "| piece | µs |", "|---|---|"]
    rows += [f"| {k.replace('_', ' ')} | {v:.2f} |" for k, v in p.items()]
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    from benchmarks.bench_ps import _host, _write_json
    res = {"what": "ps_warm_gap: the PS's short path (compiled, Python) against its compiled parts alone, warm, "
                   "and the pieces of the difference", "date": time.strftime("%Y-%m-%d %H:%M"), "host": _host()}
    gc.collect()
    gc.disable()
    try:
        res["warm_us_per_push"] = alternating()
        res["pieces_us"] = pieces()
    finally:
        gc.enable()
    out = Path(args.out)
    text = markdown(res, _write_json(out, res, res["host"]))
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
