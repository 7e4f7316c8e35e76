"""Hostile soak, transport categories (issue 36): descriptor exhaustion and concurrent frame floods.

Run by ``benchmarks/hostile_soak.py --transport``. Each category attacks a real `edgebed run` (local
runtime, 4 honest agents training, mlp, adacomp, checkpoint every 10 updates) started under
``ulimit -n 1024`` (soft and hard), and measures honest updates/s in a window before the attack and
during it (from the updates table, whose wall times are mapped to this process's clock by the
tightest of 20 samples of now − the newest row), the engine's RSS and descriptors, and how the run
ended.

- **descriptor exhaustion**: ``--raw`` TCP connections that never send a byte of ZMTP, held open for
  ``--hold`` s (libzmq holds each until its 30 s handshake timeout).
- **concurrent frame floods**: 4 connections each send one message of 1,000,000 empty frames at once
  (raw ZMTP bytes, built once: the senders cost ~nothing), until each is cut by the PS's frame guard
  (ps/frameguard.py: the connection closed) or refused ``frame-count``. Measured three times, in three
  runs: the guard (the default), and without it (``EDGEBED_FRAME_GUARD=off``) the PS's compiled
  discard (ps/discard.py) and its Python loop (``EDGEBED_DISCARD=python``): the baselines of the same
  benchmark.
"""
from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgebed import wire  # noqa: E402
from edgebed.rundir import read_json, read_table  # noqa: E402
from tests import zmtp_raw  # noqa: E402

SCENARIO = """
name: hostile-transport
seed: 9
dataset: {train_samples: 4000, test_fraction: 0.1}
model: {name: mlp}
algorithm: {name: adacomp, lr: 0.05, c: 0.05}
workers:
  n: 4
  classes: [{name: default, share: 1.0, think_time: 20ms}]
stop: {wall_time: 600s}
eval: {every: 500, test_samples: 300}
checkpoint: {every: 10}
"""
NOFILE = 1024


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def _mib(b: int) -> float:
    return round(b / 2 ** 20, 1)


def _proc_stat(pid: int) -> tuple[int, int]:
    """(RSS bytes, open descriptors) of ``pid``."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return 0, 0


class Run:
    """A live `edgebed run` under ulimit -n 1024 (``limited``), its clock mapped onto ours.
    benchmarks/hostile_stall.py's runs are this class with another scenario."""

    NAME = "hostile-transport"   # the scenario's name: its run directory is runs/NAME-*
    SAMPLES = 20                 # looks at the updates table that map its clock onto ours

    def __init__(self, env: dict | None = None, scenario: str = SCENARIO, limited: bool = True):
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.NAME}-"))
        (self.tmp / "s.yaml").write_text(scenario)
        self.proc = subprocess.Popen([sys.executable, "-m", "edgebed.cli", "run", "s.yaml", "--out", "runs"],
                                     cwd=self.tmp, stdout=open(self.tmp / "run.log", "w"), stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_limited if limited else None,
                                     env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 180
        while True:
            runs = list((self.tmp / "runs").glob(f"{self.NAME}-*")) if (self.tmp / "runs").exists() else []
            if runs and (runs[0] / "endpoint.json").exists() and len(list((runs[0] / "updates").glob("part-*"))) >= 3:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.tmp / "run.log").read_text()[-3000:])
            time.sleep(0.2)
        self.path = runs[0]
        self.host, port = read_json(self.path, "endpoint.json")["bind"][len("tcp://"):].rsplit(":", 1)
        self.port = int(port)
        self.offset = min(self._sample() for _ in range(self.SAMPLES))   # our monotonic − the run's wall_time

    def _sample(self) -> float:
        time.sleep(0.1)
        return time.monotonic() - float(read_table(self.path, "updates")["wall_time"].max())

    def rate(self, t0: float, t1: float) -> float:
        """Honest updates/s between our monotonic times t0 and t1 (the table read now)."""
        w = read_table(self.path, "updates")["wall_time"]
        return round(int(((w >= t0 - self.offset) & (w < t1 - self.offset)).sum()) / (t1 - t0), 2)

    def stop(self) -> None:
        """SIGTERM the run and wait for it to write its summary (kill after 120 s)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def end(self) -> dict:
        self.stop()
        s = read_json(self.path, "summary.json")
        events = read_table(self.path, "events")
        conn = [d for d in events[events["event"] == "connections"]["detail"]]
        return {"status": s.get("status"), "reason": s.get("reason"), "updates": s.get("updates"),
                "rows_in_updates_table": len(read_table(self.path, "updates")), "connection_events": conn}


def _settle(run: Run, seconds: float) -> tuple[float, float]:
    """Honest traffic alone for ``seconds``: → (start, end) of the window."""
    t0 = time.monotonic()
    time.sleep(seconds)
    return t0, time.monotonic()


def descriptor_exhaustion(raw: int, hold: float, baseline: float) -> dict:
    run = Run()
    try:
        b0, b1 = _settle(run, baseline)
        rss0, fds0 = _proc_stat(run.proc.pid)
        socks, refused, peak_rss, peak_fds = [], 0, rss0, fds0
        t0 = time.monotonic()
        for _ in range(raw):
            s = socket.socket()
            s.settimeout(5)
            try:
                s.connect((run.host, run.port))
                socks.append(s)
            except OSError:
                s.close()
                refused += 1
        connected = time.monotonic() - t0
        while time.monotonic() - t0 < hold:
            rss, fds = _proc_stat(run.proc.pid)
            peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
            time.sleep(0.5)
        t1 = time.monotonic()
        closed_by_ps = sum(1 for s in socks if _closed(s))
        for s in socks:
            s.close()
        time.sleep(3)
        before, during = run.rate(b0, b1), run.rate(t0, t1)
        return {"nofile": NOFILE, "raw_connections": raw, "connect_failed": refused, "connect_seconds": round(connected, 2),
                "held_seconds": hold, "closed_by_the_ps": closed_by_ps,
                "engine_fds": {"before": fds0, "peak": peak_fds}, "engine_rss_mib": {"before": _mib(rss0), "peak": _mib(peak_rss)},
                "honest_updates_per_s": {"before": before, "during": during,
                                         "ratio": round(during / before, 3) if before else None},
                "run": run.end()}
    finally:
        if run.proc.poll() is None:
            run.proc.kill()


def _closed(s: socket.socket) -> bool:
    """Whether the PS closed this connection (its ZMTP greeting, if any, read and skipped)."""
    s.setblocking(False)
    try:
        while s.recv(4096):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


PATHS = {"guard": {}, "compiled": {"EDGEBED_FRAME_GUARD": "off"},
         "python": {"EDGEBED_FRAME_GUARD": "off", "EDGEBED_DISCARD": "python"}}


def frame_floods(path: str, senders: int, frames: int, baseline: float) -> dict:
    run = Run(PATHS[path])
    try:
        b0, b1 = _settle(run, baseline)
        rss0, _ = _proc_stat(run.proc.pid)
        msg = zmtp_raw.many_frames(wire._PREFIX.pack(b"EB", 1, 3) + b'{"session":"x","arrays":[]}', frames)
        socks = [zmtp_raw.connect(run.host, run.port) for _ in range(senders)]
        done: list[float] = []
        how: list[str] = []
        peak = [rss0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], _proc_stat(run.proc.pid)[0])
                time.sleep(0.1)

        def flood(s):
            try:
                s.sendall(msg)
                how.append("refused" if zmtp_raw.wait_for(s, b"frame-count", 300) else "cut")
            except OSError:   # the guard closed the connection while we sent
                how.append("cut")
            done.append(time.monotonic())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.monotonic()
        threads = [threading.Thread(target=flood, args=(s,)) for s in socks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t1 = max(done) if done else time.monotonic()
        window = max(t1 - t0, baseline)   # a window as long as the baseline's, from the floods' start
        while time.monotonic() < t0 + window + 1:
            time.sleep(0.1)
        stop.set()
        rss_after = _proc_stat(run.proc.pid)[0]
        for s in socks:
            s.close()
        before = run.rate(b0, b1)
        during, over = run.rate(t0, t1), run.rate(t0, t0 + window)
        return {"discard": path, "senders": senders, "frames_each": frames, "refused": how.count("refused"),
                "cut": how.count("cut"), "seconds_to_last_refusal": round(t1 - t0, 2),
                "engine_rss_mib": {"before": _mib(rss0), "peak": _mib(peak[0]), "after": _mib(rss_after)},
                "honest_updates_per_s": {"before": before, "until_last_refusal": during,
                                         f"first_{window:.0f}_s": over,
                                         "ratio_until_last_refusal": round(during / before, 3) if before else None,
                                         f"ratio_first_{window:.0f}_s": round(over / before, 3) if before else None},
                "run": run.end()}
    finally:
        if run.proc.poll() is None:
            run.proc.kill()


def transport(args) -> dict:
    return {"descriptor exhaustion": descriptor_exhaustion(args.raw, args.hold, args.baseline),
            "concurrent frame floods": [frame_floods(p, 4, 1_000_000, args.baseline) for p in PATHS]}


def markdown(r: dict) -> str:
    d = r["descriptor exhaustion"]
    h = d["honest_updates_per_s"]
    lines = ["# Hostile soak: transport categories (issue 36)", "", r["what"], "", f"Host: {r['host']}", "",
             "## Descriptor exhaustion", "",
             f"Engine under `ulimit -n {d['nofile']}`: {d['raw_connections']:,} raw TCP connections (no ZMTP) held "
             f"{d['held_seconds']:g} s; {d['closed_by_the_ps']:,} were closed by the PS, {d['connect_failed']} failed to "
             f"connect. Engine descriptors {d['engine_fds']['before']} → peak {d['engine_fds']['peak']}; RSS "
             f"{d['engine_rss_mib']['before']} → peak {d['engine_rss_mib']['peak']} MiB. Honest updates/s "
             f"{h['before']} before, {h['during']} during (×{h['ratio']}). Run: {d['run']['status']} "
             f"({d['run']['reason']}), {d['run']['updates']} updates = {d['run']['rows_in_updates_table']} rows; "
             f"{'; '.join(d['run']['connection_events'])}.", "",
             "## Concurrent frame floods (4 × 1,000,000 frames)", "",
             "guard: the frame guard cuts each connection at its 257th frame, before libzmq queues the "
             "message; compiled, python: no guard (`EDGEBED_FRAME_GUARD=off`), libzmq assembles each message "
             "and the PS discards it (in C, or its Python loop). \"until last\": honest updates/s from the "
             "floods' start to the last cut or refusal (— where that is under 1 s: too few updates to "
             "count); \"first window\": over the baseline's length from the floods' start.", "",
             "| PS | cut | refused | s to last cut or refusal | honest/s before | until last | ratio | "
             "first window | ratio | RSS before → peak → after (MiB) | run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for f in r["concurrent frame floods"]:
        u = f["honest_updates_per_s"]
        first = [k for k in u if k.startswith("first_")][0]
        m = f["engine_rss_mib"]
        short = f["seconds_to_last_refusal"] < 1
        until = ("—", "—") if short else (u["until_last_refusal"], u["ratio_until_last_refusal"])
        lines.append(f"| {f['discard']} | {f.get('cut', 0)} | {f['refused']} | {f['seconds_to_last_refusal']} | {u['before']} | "
                     f"{until[0]} | {until[1]} | {u[first]} ({first[6:]}) | "
                     f"{u['ratio_' + first]} | {m['before']} → {m['peak']} → {m['after']} | {f['run']['status']} |")
    return "\n".join(lines) + "\n"
