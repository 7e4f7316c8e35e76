"""Hostile soak, trust categories (issue 51): statistics poisoning and a stealthy poisoner.

Run by ``benchmarks/hostile_soak.py --trust``. Each category attacks real `edgebed run`s (local runtime)
from a session taken over from a sleeping device (think time 900 s: it notices at its next heartbeat
and says hello again; the attacker then takes the slot back), after ``--baseline`` s of honest
training, for the rest of the run (``stop.wall_time``), at an honest device's pace (think time 20 ms). From the run directory: honest updates/s in
the baseline window and during the attack (the attack starts at the attacker's first hello, an
``events`` row with attempt 99), accuracy at the last evaluation before the attack and over the
evaluations during it, refusals, agents that exited, and how the run ended.

- **statistics poisoning**: a BatchNorm CNN under EASGD (a fixed period of 5 local steps, so the honest rate
  does not change as the loss falls) with ``model.buffers: average`` (3 honest
  devices); the attacker alternates pushes that would drive every running variance to −37 and
  deltas of 10³⁰ on the running means and variances.
- **stealthy poisoner**: mlp, ASGD α = 0.05, 7 honest devices; the attacker pushes a dense ±19 on every
  entry after each pull (each push moves every entry by 0.95, under the value bound). Run with
  ``security.robust`` off (the default) and on (``{clip: 1.5}``).

``--baseline-tree DIR`` also attacks the edgebed of another checkout (e.g. the commit before issue 51).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgebed import wire  # noqa: E402
from edgebed.rundir import read_json, read_table  # noqa: E402

BNNET = textwrap.dedent('''
    from torch import nn

    def bncnn():
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(8 * 7 * 7, 10))
''')
STATS = """
name: trust-stats
seed: 4
model: {{name: "bnnets:bncnn", buffers: average}}
dataset: {{train_samples: 3000, test_fraction: 0.1}}
algorithm: {{name: easgd, lr: 0.05, moving_rate: 0.3, period: 5}}
workers:
  n: 4
  classes: [{{name: default, share: 0.75, think_time: 20ms}}, {{name: sleeper, share: 0.25, think_time: 900s}}]
stop: {{wall_time: {wall}s}}
eval: {{every: 40, test_samples: 300}}
"""
STEALTHY = """
name: trust-stealthy
seed: 9
model: {{name: mlp}}
dataset: {{train_samples: 4000, test_fraction: 0.1}}
algorithm: {{name: asgd, lr: 0.05}}
workers:
  n: 8
  classes: [{{name: default, share: 0.875, think_time: 20ms}}, {{name: sleeper, share: 0.125, think_time: 900s}}]
stop: {{wall_time: {wall}s}}
eval: {{every: 200, test_samples: 300}}
{security}
"""
ATTEMPT = 99   # the attacker's hellos: their events row marks the attack's start
THINK = 0.02   # s between the attacker's pull and push: the honest devices' think time


class Hijacker:
    """Takes device ``device``'s session and pushes ``make(model, i)`` after each pull."""

    def __init__(self, endpoint: str, device: int, make):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.device, self.make, self.session = device, make, None
        self.seen = {"hellos": 0, "pushes": 0, "applied": 0, "refused": 0, "codes": {}, "stop": False}

    def ask(self, msg):
        self.sock.send_multipart(wire.encode(msg))
        return wire.decode(self.sock.recv_multipart()) if self.sock.poll(10_000) else None

    def run(self, until: float) -> dict:
        i = 0
        try:
            while time.monotonic() < until and not self.seen["stop"]:
                if self.session is None:
                    w = self.ask(wire.Hello(self.device, "sleeper", ATTEMPT))
                    self.seen["hellos"] += 1
                    if isinstance(w, wire.Stop):
                        self.seen["stop"] = True
                        break
                    self.session = w.session if isinstance(w, wire.Welcome) else None
                    continue
                m = self.ask(wire.Pull(self.session))
                if not isinstance(m, wire.Model):
                    self._note(m)
                    continue
                values, indices = self.make(m, i)
                time.sleep(THINK)   # a device's pace, as the honest ones' think time: poison, not a flood
                r = self.ask(wire.Push(self.session, i, m.version, values, indices, 0.5))
                i += 1
                self.seen["pushes"] += 1
                self._note(r)
        finally:
            self.sock.close()
        return self.seen

    def _note(self, r) -> None:
        if isinstance(r, wire.Ack):
            self.seen["applied"] += r.applied
        elif isinstance(r, wire.Error):
            self.seen["codes"][r.code] = self.seen["codes"].get(r.code, 0) + 1
            self.seen["refused"] += r.code == "bad-payload"
            if r.code == "unknown-session":   # the sleeper took its slot back: take it again
                self.session = None
            elif r.code == "busy":
                time.sleep(0.05)
        elif isinstance(r, wire.Stop):
            self.seen["stop"] = True
        elif r is None:
            self.session = None


def _statistics_attack(layout: dict):
    """Alternately: every running variance to −37; 10³⁰ on every statistic (EASGD: c ← c + e)."""
    def make(m, i):
        delta = np.zeros_like(m.params)
        if i % 2 == 0:
            for off, size in layout["var"]:
                delta[off:off + size] = -37.0 - m.params[off:off + size]
        else:
            delta[layout["first"]:] = 1e30
        return delta, None
    return make


def _stealthy_attack(n: int):
    signs = np.where(np.random.default_rng(1).random(n) < 0.5, -19.0, 19.0).astype(np.float32)
    return lambda m, i: (signs, None)


def _layout(tmp: Path) -> dict:
    sys.path.insert(0, str(tmp))
    try:
        from edgebed.models import initial_theta
        _, layers = initial_theta("bnnets:bncnn", 0, buffers=True)
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop("bnnets", None)
    stats = [L for L in layers if L.kind == "buffer"]
    return {"first": stats[0].offset, "var": [(L.offset, L.size) for L in stats if L.name.endswith("running_var")]}


def _run(tree: Path, tmp: Path, scenario: str, attack, honest: list[int], device: int, baseline: float,
         wall: float) -> dict:
    (tmp / "s.yaml").write_text(scenario)
    env = {**os.environ, "PYTHONPATH": f"{tree}:{tmp}"}
    proc = subprocess.Popen([sys.executable, "-m", "edgebed.cli", "run", "s.yaml", "--out", "runs"], cwd=tmp, env=env,
                            stdout=open(tmp / "run.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        run = _wait(lambda: next((d for d in (tmp / "runs").glob("*-*") if (d / "endpoint.json").exists()), None)
                    if (tmp / "runs").exists() else None, 180, proc)
        _wait(lambda: list((run / "updates").glob("part-*.parquet")), 180, proc)
        time.sleep(baseline)
        seen = Hijacker(read_json(run, "endpoint.json")["bind"], device, attack).run(time.monotonic() + wall + 60)
        proc.wait(wall + 120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
    return _measure(run, seen, honest, baseline)


def _wait(pred, timeout: float, proc):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended (code {proc.returncode}) before the attack")
        time.sleep(0.2)
    raise RuntimeError("timed out waiting for the run")


def _measure(run: Path, seen: dict, honest: list[int], baseline: float) -> dict:
    s = read_json(run, "summary.json")
    updates, evals, events = read_table(run, "updates"), read_table(run, "evals"), read_table(run, "events")
    hellos = events[(events["event"] == "hello") & events["detail"].str.contains(f"attempt={ATTEMPT}")]
    t0 = float(hellos["wall_time"].min()) if len(hellos) else float("nan")
    stop = events[events["event"] == "stop"]
    t1 = float(stop["wall_time"].min()) if len(stop) else float(updates["wall_time"].max())
    mine = updates[updates["device"].isin(honest)]
    before = mine[(mine["wall_time"] >= t0 - baseline) & (mine["wall_time"] < t0)]
    during = mine[(mine["wall_time"] >= t0) & (mine["wall_time"] <= t1)]
    ev_before, ev_during = evals[evals["wall_time"] < t0], evals[evals["wall_time"] >= t0]
    exits = events[(events["event"] == "exit") & (events["detail"] != "code=0")]
    return {
        "status": s["status"], "reason": s["reason"], "errors": s["errors"], "updates": s["updates"],
        "attack_s": round(t1 - t0, 1), "attacker": seen,
        "honest_per_s_before": round(len(before) / baseline, 2),
        "honest_per_s_during": round(len(during) / (t1 - t0), 2) if t1 > t0 else None,
        "accuracy_before": float(ev_before["accuracy"].iloc[-1]) if len(ev_before) else None,
        "accuracy_during_min": float(ev_during["accuracy"].min()) if len(ev_during) else None,
        "accuracy_final": s["final_accuracy"],
        "loss_not_finite_evals": int((~np.isfinite(evals["loss"])).sum()),
        "honest_agents_exited_with_error": sorted(int(d) for d in exits["device"] if int(d) in honest),
        "harm": s.get("harm"),
    }


def trust(args) -> dict:
    trees = [("this tree", ROOT)] + ([("baseline tree", Path(args.baseline_tree))] if args.baseline_tree else [])
    out: dict = {"statistics poisoning": {}, "stealthy poisoner": {}}
    wall = args.attack + args.baseline + 20   # agents take ~10-20 s to start before wall time counts
    for label, tree in trees:
        with tempfile.TemporaryDirectory(prefix="trust-") as tmp:
            tmp = Path(tmp)
            (tmp / "bnnets.py").write_text(BNNET)
            r = _run(tree, tmp, STATS.format(wall=int(wall)), _statistics_attack(_layout(tmp)), [0, 1, 2], 3,
                     args.baseline, wall)
            out["statistics poisoning"][label] = r
            print("statistics poisoning", label, r, flush=True)
        for robust in ("off", "on"):
            if robust == "on" and tree != ROOT:
                continue
            with tempfile.TemporaryDirectory(prefix="trust-") as tmp:
                security = "security: {robust: {clip: 1.5}}" if robust == "on" else ""
                r = _run(tree, Path(tmp), STEALTHY.format(wall=int(wall), security=security), _stealthy_attack(199_210),
                         list(range(7)), 7, args.baseline, wall)
                out["stealthy poisoner"][f"{label}, robust {robust}"] = r
                print("stealthy poisoner", label, robust, r, flush=True)
    return out


def markdown(result: dict) -> str:
    lines = ["# Hostile soak: trust categories (issue 51)", "", result["what"], "",
             f"`{result.get('command', 'benchmarks/hostile_soak.py --trust')}`; host: {result['host']}. \"baseline "
             "tree\": the same attacks on acdb01f, the commit before issue 51. Honest updates/s: devices other than "
             "the attacked slot, over the baseline window and from the attacker's first hello to the run's stop.", ""]
    for cat, runs in result["categories"].items():
        lines += [f"## {cat.capitalize()}", "",
                  "| run | honest updates/s before → during | accuracy before → min during → final | "
                  "attacker pushes (applied / refused) | NaN-loss evals | honest agents exited | status | moved Θ most |",
                  "|---|---|---|---|---:|---|---|---|"]
        for label, r in runs.items():
            acc = " → ".join("—" if a is None else f"{a:.3f}" for a in
                             (r["accuracy_before"], r["accuracy_during_min"], r["accuracy_final"]))
            a = r["attacker"]
            moved = (r.get("harm") or {}).get("moved_most", "—")
            lines.append(f"| {label} | {r['honest_per_s_before']} → {r['honest_per_s_during']} | {acc} | "
                         f"{a['pushes']} ({a['applied']} / {a['refused']}) | {r['loss_not_finite_evals']} | "
                         f"{r['honest_agents_exited_with_error'] or 'none'} | {r['status']} | device {moved} |")
        lines.append("")
        for label, r in runs.items():
            lines.append(f"- {label}: {r['status']}: {r['reason']}; errors {r['errors']}")
        lines.append("")
    return "\n".join(lines)
