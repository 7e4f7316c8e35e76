"""Stand-ins for the engine that study tests hand to ``run_study``: they write a run directory as the
Engine does, instantly. A module of their own, light to import: with ``jobs > 1`` each cell runs in a
spawned process that imports the runner's module, and this one costs no torch (the test modules
import the CLI, which does), about 0.6 s of CPU less per cell.
"""
from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

import yaml

from edgebed import rundir
from edgebed.scenario import dump_scenario

NAN = math.nan

BASE = {"name": "base", "seed": 0, "algorithm": {"name": "adacomp", "c": 0.01},
        "workers": {"n": 4}, "stop": {"updates": 400}, "eval": {"every": 100}}

# bytes per update and accuracy at updates 100..400, per algorithm
CURVES = {"asgd": (1000, [0.5, 0.8, 0.95, 0.98]), "adacomp": (10, [0.6, 0.9, 0.975, 0.99]),
          "comp-asgd": (20, [0.5, 0.7, 0.8, 0.9])}


class FakeRunner:
    """Writes a run dir like the Engine's; ``fail`` names cells (scenario name parts) that raise."""

    def __init__(self, fail=(), crashed=0):
        self.calls = []
        self.fail = fail
        self.crashed = crashed

    def __call__(self, sc, out, progress):
        self.calls.append(sc.name)
        if any(f in sc.name for f in self.fail):
            raise RuntimeError(f"boom in {sc.name}")
        path = rundir.new_run_dir(out, sc.name)
        dump_scenario(sc, path / "scenario.yaml")
        per, accs = CURVES[sc.algorithm.name]
        accs = [min(1.0, a + 0.001 * sc.seed) for a in accs]
        w = rundir.RunWriter(path)
        for i in range(1, 401):
            w.append("updates", {"update": i, "wall_time": 0.0, "virtual_time": NAN, "device": i % 4,
                                 "speed_class": "fast" if i % 4 else "slow", "staleness": 0,
                                 "sigma_mean": NAN, "sigma_max": NAN, "entries": 1, "bytes_in": per,
                                 "loss": 1.0})
        for k, a in enumerate(accs, start=1):
            w.append("evals", {"update": 100 * k, "wall_time": 0.0, "virtual_time": NAN,
                               "ingress_bytes": 100 * k * per, "push_bytes": 100 * k * per,
                               "accuracy": a, "loss": 1 - a})
        w.flush()
        pull = 2_000 if sc.compression.compact_pulls else 4_000    # PS → device bytes per update
        summary = {"status": "complete", "reason": "done", "updates": 400, "ingress_bytes": 400 * per,
                   "egress_bytes": 400 * pull,
                   "devices": {"crashed": self.crashed, "alive_at_end": 4 - self.crashed}}
        rundir.write_json_atomic(path / "summary.json", summary)
        progress("updates 400", True)

        class Result:
            pass
        res = Result()
        res.path, res.summary = path, summary
        return res




class DiesOnce:
    """Kills its own worker process (SIGKILL: no clean-up, as an OOM kill) the first time it runs a
    scenario whose name contains ``victim``; ``always``: every time. Otherwise a FakeRunner."""

    def __init__(self, marks: str, victim: str, always: bool = False):
        self.marks, self.victim, self.always = marks, victim, always

    def __call__(self, sc, out, progress):
        mark = Path(self.marks, sc.name)
        if self.victim in sc.name and (self.always or not mark.exists()):
            mark.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return FakeRunner()(sc, out, progress)


class DiesBesideASlowCell(DiesOnce):
    """The victim dies a second after it starts, while every other cell takes 3 s: each death happens
    while another cell runs in the process beside it."""

    def __call__(self, sc, out, progress):
        time.sleep(1 if self.victim in sc.name else 3)
        return super().__call__(sc, out, progress)


class Slow(FakeRunner):
    """Every cell but asgd's first seed takes 4 s."""

    def __call__(self, sc, out, progress):
        if "asgd-s1" not in sc.name:
            time.sleep(4)
        return super().__call__(sc, out, progress)


def write_study(tmp_path, **spec):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    data = {"name": "st", "base": "base.yaml", "seeds": 2, "target": 0.97, **spec}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


COMPRESSION = dict(baseline="asgd", cells=[
    {"label": "asgd", "set": {"algorithm.name": "asgd"}},
    {"label": "adacomp", "set": {"algorithm.name": "adacomp"}},
    {"label": "comp-asgd", "set": {"algorithm.name": "comp-asgd"}}])
