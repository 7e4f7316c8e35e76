"""Soak: 200 simulated devices against the real ZmqServer + ParameterServer for a long time.

The PS (ZmqServer serve loop, ParameterServer with the paper's CNN Θ and AdaComp, a RunWriter that
flushes Parquet parts every 2 s like the engine) runs in its own process. A load generator in this
process drives ``--agents`` DEALER sockets through the real protocol: hello → (pull → think → push of
an AdaComp-size sparse update, c = 0.01 per layer, 2,122 entries → ack)*, with exponential think times
and device churn (a device drops its socket and re-hellos with attempt+1 now and then).

Every ``--sample`` seconds it records the PS process's RSS and open file descriptors (from /proc) and
the updates/s over the interval. Verdict after a warm-up: RSS within ±10 % of its post-warm-up
baseline, no FD growth, updates/s stable. Writes benchmarks/results/soak.json (rewritten at every
sample, so an interrupted soak still leaves its series).

    .venv/bin/python benchmarks/soak.py --minutes 30
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from edgebed import wire  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def serve_ps(conn, n_devices: int, checkpoint_every: int) -> None:
    """Child process: the real PS over ZeroMQ, writing its records like the engine does."""
    from edgebed.models import initial_theta
    from edgebed.ps.rules import RULES
    from edgebed.ps.serve import ZmqServer
    from edgebed.ps.server import Hooks, ParameterServer, PSConfig
    from edgebed.rundir import RunWriter

    theta, layers = initial_theta("cnn", 0)
    rule = RULES["adacomp"](theta, 0.05)
    run_dir = Path(tempfile.mkdtemp(prefix="edgebed-soak-"))
    writer = RunWriter(run_dir)
    ps = ParameterServer(PSConfig(n_devices=n_devices, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                                  class_of=lambda d: "soak"), theta, rule, Hooks(record=writer.append))
    if checkpoint_every:
        from edgebed.ps import checkpoint
        ps.config.checkpoint_every = checkpoint_every
        ps.hooks.checkpoint = lambda p: checkpoint.save(p, run_dir / "checkpoint")
    server = ZmqServer(ps).start()
    conn.send({"endpoint": server.endpoint, "layers": [(l.offset, l.size) for l in layers],
               "n_params": int(theta.size), "run_dir": str(run_dir)})
    while not conn.poll(2.0):
        writer.flush()
        if not server.alive:
            conn.send({"error": repr(server.error)})
            return
    server.stop()
    writer.flush()
    conn.send({"version": ps.version, "rejected": ps.meter.rejected, "errors": ps.errors,
               "ingress_bytes": ps.meter.ingress_bytes, "parts": len(list((run_dir / "updates").glob("*.parquet")))})


def proc_stats(pid: int) -> tuple[int, int]:
    """(RSS in KiB, number of open file descriptors) of a process, from /proc."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def update_pool(layers, n_params: int, c: float, count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pre-computed AdaComp-shaped sparse updates (top-c per layer of a random gradient)."""
    from edgebed.compression import TopCPerLayer
    rng = np.random.default_rng(seed)
    comp = TopCPerLayer(c, [type("L", (), {"offset": o, "size": s})() for o, s in layers])
    out = []
    for _ in range(count):
        sp = comp.compress((rng.standard_normal(n_params) * 1e-3).astype(np.float32))
        out.append((sp.values, sp.indices))
    return out


class LoadGen:
    """Many simulated devices on DEALER sockets, driven by one poll loop."""

    def __init__(self, endpoint: str, n: int, pool, think: float, churn: float, seed: int = 1):
        self.ctx = zmq.Context()
        self.endpoint, self.pool, self.think, self.churn = endpoint, pool, think, churn
        self.rng = np.random.default_rng(seed)
        self.poller = zmq.Poller()
        self.agents = [dict(device=d, attempt=0, seq=0) for d in range(n)]
        self.by_sock = {}
        self.applied = self.not_applied = self.errors = self.reconnects = 0
        for a in self.agents:
            self._connect(a)

    def _connect(self, a: dict) -> None:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(self.endpoint)
        a.update(sock=s, state="hello", session=None, due=None)
        self.by_sock[s] = a
        self.poller.register(s, zmq.POLLIN)
        s.send_multipart(wire.encode(wire.Hello(a["device"], "soak", a["attempt"])))

    def _reconnect(self, a: dict) -> None:
        self.poller.unregister(a["sock"])
        del self.by_sock[a["sock"]]
        a["sock"].close(0)
        a["attempt"] += 1
        self.reconnects += 1
        self._connect(a)

    def step(self, until: float) -> None:
        while True:
            now = time.monotonic()
            if now >= until:
                return
            for a in self.agents:
                if a["state"] == "think" and a["due"] <= now:
                    vals, idx = self.pool[int(self.rng.integers(len(self.pool)))]
                    a["sock"].send_multipart(wire.encode(wire.Push(a["session"], a["seq"], a["version"],
                                                                   vals, idx, 0.1)), copy=False)
                    a["seq"] += 1
                    a["state"] = "push"
            for sock, _ in self.poller.poll(10):
                a = self.by_sock[sock]
                frames = sock.recv_multipart(copy=False)
                msg = wire.decode([f.buffer for f in frames])
                self._on_reply(a, msg)

    def _on_reply(self, a: dict, msg) -> None:
        if isinstance(msg, wire.Error):
            self.errors += 1
            self._reconnect(a)
        elif a["state"] == "hello":
            a["session"] = msg.session
            self._pull(a)
        elif a["state"] == "pull":
            a["version"] = msg.version
            a["state"] = "think"
            a["due"] = time.monotonic() + self.rng.exponential(self.think)
        elif a["state"] == "push":
            if msg.applied:
                self.applied += 1
            else:
                self.not_applied += 1
            if self.rng.random() < self.churn:
                self._reconnect(a)
            else:
                self._pull(a)

    def _pull(self, a: dict) -> None:
        a["state"] = "pull"
        a["sock"].send_multipart(wire.encode(wire.Pull(a["session"])))

    def close(self) -> None:
        for s in list(self.by_sock):
            s.close(0)
        self.ctx.term()


def verdict(series: list[dict], warmup_s: float) -> dict:
    post = [s for s in series if s["t_s"] >= warmup_s]
    if len(post) < 6:
        return {"ok": False, "why": f"only {len(post)} samples after the {warmup_s:.0f} s warm-up"}
    rss = [s["ps_rss_kib"] for s in post]
    base = statistics.median(rss[: max(3, len(rss) // 10)])
    rss_dev = max(abs(r - base) / base for r in rss)
    third = len(post) // 3
    fds = [s["ps_fds"] for s in post]
    fd_growth = statistics.mean(fds[-third:]) - statistics.mean(fds[:third])
    ups = [s["updates_per_s"] for s in post]
    ups_first, ups_last = statistics.mean(ups[:third]), statistics.mean(ups[-third:])
    ups_drift = (ups_last - ups_first) / ups_first if ups_first else float("inf")
    cv = statistics.pstdev(ups) / statistics.mean(ups) if statistics.mean(ups) else float("inf")
    checks = {
        "rss_flat": {"ok": rss_dev <= 0.10, "baseline_kib": base, "max_deviation": round(rss_dev, 4),
                     "rule": "every post-warm-up sample within ±10 % of the median of the first tenth"},
        "no_fd_growth": {"ok": fd_growth <= 5, "mean_first_third": statistics.mean(fds[:third]),
                         "mean_last_third": statistics.mean(fds[-third:]), "min": min(fds), "max": max(fds),
                         "rule": "mean FDs of the last third − first third ≤ 5"},
        "updates_per_s_stable": {"ok": abs(ups_drift) <= 0.10 and cv <= 0.15, "mean_first_third": round(ups_first, 1),
                                 "mean_last_third": round(ups_last, 1), "drift": round(ups_drift, 4),
                                 "coefficient_of_variation": round(cv, 4),
                                 "rule": "|last third / first third − 1| ≤ 10 % and CV ≤ 15 %"},
    }
    return {"ok": all(c["ok"] for c in checks.values()), "checks": checks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds excluded from the verdict")
    ap.add_argument("--think", type=float, default=0.5, help="mean think time per device, seconds")
    ap.add_argument("--churn", type=float, default=0.002, help="probability per push that a device reconnects")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="PS checkpoint every k updates (0: off)")
    ap.add_argument("--out", default=str(RESULTS / "soak.json"))
    args = ap.parse_args(argv)
    import signal
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # `kill` ends it like Ctrl-C: results kept

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    ps_proc = ctx.Process(target=serve_ps, args=(child, args.agents, args.checkpoint_every), daemon=True)
    ps_proc.start()
    info = parent.recv()
    pool = update_pool(info["layers"], info["n_params"], 0.01, 32)
    gen = LoadGen(info["endpoint"], args.agents, pool, args.think, args.churn)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    series: list[dict] = []
    result = {"benchmark": "soak", "load_average_at_start": os.getloadavg(), "agents": args.agents, "duration_s_planned": args.minutes * 60,
              "think_mean_s": args.think, "churn_per_push": args.churn, "checkpoint_every": args.checkpoint_every,
              "entries_per_push": int(pool[0][0].size),
              "push_bytes": wire.frames_nbytes(wire.encode(wire.Push("0" * 16, 0, 0, *pool[0], 0.1))),
              "model_params": info["n_params"], "rule": "adacomp", "host": {"cores": os.cpu_count(),
              "python": platform.python_version(), "pyzmq": zmq.__version__}, "series": series}
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    last_applied, last_t = 0, t0
    try:
        while time.monotonic() < end:
            gen.step(min(end, last_t + args.sample))
            now = time.monotonic()
            rss, fds = proc_stats(ps_proc.pid)
            series.append({"t_s": round(now - t0, 1), "ps_rss_kib": rss, "ps_fds": fds, "updates": gen.applied,
                           "updates_per_s": round((gen.applied - last_applied) / (now - last_t), 1),
                           "duplicates_acked": gen.not_applied, "errors": gen.errors,
                           "reconnects": gen.reconnects})
            last_applied, last_t = gen.applied, now
            print(json.dumps(series[-1]), flush=True)
            result.update(duration_s=round(now - t0, 1), verdict=verdict(series, args.warmup),
                          load_average_at_end=os.getloadavg())
            out.write_text(json.dumps(result, indent=1) + "\n")
    finally:
        gen.close()
        parent.send("stop")
        result["ps_final"] = parent.recv() if parent.poll(30) else None
        ps_proc.join(10)
        result.update(duration_s=round(time.monotonic() - t0, 1), verdict=verdict(series, args.warmup))
        out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "series"}, indent=1))
    return 0 if result["verdict"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
