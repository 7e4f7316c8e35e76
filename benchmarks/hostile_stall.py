"""Hostile soak, stall lock-out (issue 51, point 2): connections that stop mid-frame and hold the PS's cap.

Run by ``benchmarks/hostile_soak.py --stall``. Each case attacks a real `edgebed run` (local runtime, 4
honest agents training, mlp, adacomp; connection cap 2·4 + 16 = 24) with ``--stallers`` connections
that complete the ZMTP handshake and then stop mid-frame (a frame header announcing 1,000 bytes, 10
sent; raw bytes, tests/zmtp_raw.py), held up to 45 s. Meanwhile a probe opens a new connection
every second (a handshake, as a device joining or rejoining would: 1 s to be answered) until one is
admitted: the seconds from the attack's start to that admission are the lock-out. The stallers the cap
refused wait in line (their handshake's 10 s time-out) and stall in their turn when a place frees. Measured: honest
updates/s before and during the attack (from the updates table, as benchmarks/hostile_transport.py
does), the lock-out, the PS's events (``refused-at-cap``, the guard's ``cut_stalled``) and how the run
ended. Cases: ``security.stall_timeout`` 0 (never: the code before this change), 5 s and the default
30 s. Writes benchmarks/results/hostile_soak-stall.json and .md.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgebed.rundir import read_json, read_table  # noqa: E402
from tests import zmtp_raw  # noqa: E402
from benchmarks.hostile_transport import Run as TransportRun, _closed  # noqa: E402

SCENARIO = """
name: hostile-stall
seed: 9
dataset: {{train_samples: 4000, test_fraction: 0.1}}
model: {{name: mlp}}
algorithm: {{name: adacomp, lr: 0.05, c: 0.05}}
workers:
  n: 4
  classes: [{{name: default, share: 1.0, think_time: 20ms}}]
stop: {{wall_time: 600s}}
eval: {{every: 500, test_samples: 300}}
security: {{stall_timeout: {stall}s}}
"""
CASES = (0, 5, 30)   # security.stall_timeout, s (0: never cut)
HOLD = 45.0          # s the stallers are held at most (past the default time-out of 30 s)


class Run(TransportRun):
    """A live `edgebed run` (no descriptor limit), its clock mapped onto ours."""

    NAME = "hostile-stall"
    SAMPLES = 10

    def __init__(self, stall: float):
        super().__init__(scenario=SCENARIO.format(stall=stall), limited=False)

    def end(self) -> dict:
        self.stop()
        s = read_json(self.path, "summary.json")
        events = read_table(self.path, "events")
        pick = events[events["event"].isin(("connections", "refused-at-cap"))]
        return {"status": s.get("status"), "reason": s.get("reason"), "updates": s.get("updates"),
                "errors": s.get("errors"), "refused_at_cap_events": int((pick["event"] == "refused-at-cap").sum()),
                "connection_events": [d for d in pick.loc[pick["event"] == "connections", "detail"]]}


def _stall(host: str, port: int, out: list) -> None:
    try:
        s = zmtp_raw.connect(host, port)
        s.sendall(b"\x02" + (1000).to_bytes(8, "big") + b"x" * 10)
        out.append(s)
    except (ConnectionError, OSError):
        pass


def _admitted(host: str, port: int) -> bool:
    """A new connection's handshake answered within 1 s (a joining device's)."""
    try:
        import socket
        s = socket.create_connection((host, port), timeout=1)
    except OSError:
        return False
    try:
        s.sendall(zmtp_raw.GREETING + zmtp_raw._ready())
        return zmtp_raw.wait_for(s, b"ROUTER", 1.0)
    except OSError:
        return False
    finally:
        s.close()


def stall_case(stall: float, stallers: int, hold: float, baseline: float) -> dict:
    run = Run(stall)
    try:
        time.sleep(1.0)
        b0 = time.monotonic()
        time.sleep(baseline)
        b1 = t0 = time.monotonic()
        held: list = []
        threads = [threading.Thread(target=_stall, args=(run.host, run.port, held)) for _ in range(stallers)]
        for t in threads:
            t.start()
        while len(held) < stallers and any(t.is_alive() for t in threads) and time.monotonic() - t0 < 1:
            time.sleep(0.05)   # the cap filled (the stallers beyond it wait up to 10 s, in line)
        filled = time.monotonic() - t0
        lockout = None
        while time.monotonic() - t0 < hold:
            if _admitted(run.host, run.port):
                lockout = round(time.monotonic() - t0, 2)
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0) % 1.0))
        t1 = time.monotonic()
        for t in threads:
            t.join()
        cut = sum(1 for s in held if _closed(s))
        for s in held:
            s.close()
        time.sleep(2.5)   # the updates table's next flush
        before, during = run.rate(b0, b1), run.rate(t0, t1)
        return {"stall_timeout_s": stall, "stallers": stallers, "handshaken": len(held),
                "seconds_to_fill": round(filled, 2), "lockout_s": lockout, "held_up_to_s": hold,
                "stallers_cut_by_the_ps": cut,
                "honest_updates_per_s": {"before": before, "during": during,
                                         "ratio": round(during / before, 3) if before else None},
                "run": run.end()}
    finally:
        if run.proc.poll() is None:
            run.proc.kill()


def main(args) -> int:
    host = f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start"
    cases = [stall_case(s, args.stallers, HOLD, args.baseline) for s in CASES]
    result = {"what": __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
              "host": f"{host}; {os.getloadavg()[0]:.1f} at the end", "cases": cases}
    out = Path(args.out or ROOT / "benchmarks" / "results" / "hostile_soak-stall.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(out.with_suffix(".md").read_text())
    return 0


def markdown(r: dict) -> str:
    lines = ["# Hostile soak: stall lock-out (issue 51)", "", r["what"], "", f"Host: {r['host']}", "",
             "| stall_timeout | stallers handshaken | probing from (s) | new connection admitted after (s) | "
             "stallers cut by the PS | honest/s before | during | ratio | refused-at-cap events | run |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in r["cases"]:
        h, run = c["honest_updates_per_s"], c["run"]
        lock = f"{c['lockout_s']:g}" if c["lockout_s"] is not None else f"never within {c['held_up_to_s']:g}"
        lines.append(f"| {c['stall_timeout_s']:g} s{' (never)' if not c['stall_timeout_s'] else ''} | "
                     f"{c['handshaken']} of {c['stallers']} | {c['seconds_to_fill']} | {lock} | "
                     f"{c['stallers_cut_by_the_ps']} | {h['before']} | {h['during']} | {h['ratio']} | "
                     f"{run['refused_at_cap_events']} | {run['status']}: {'; '.join(run['connection_events'])} |")
    return "\n".join(lines) + "\n"
