"""Docker scale: start-up time and memory per agent container, up to 200 containers.

    python -m benchmarks.bench_docker_scale [--counts 10,50,100,200] [--torch-counts 4,16] [--out FILE]

Two kinds of container, both on one internal bridge with a tbf-shaped eth0, as the docker runtime
makes them (offline image, read-only host mounts, gated start after shaping):
  idle   the runtime's per-device overhead: a Python process that only sleeps;
  torch  an agent's footprint: imports torch, builds the paper's CNN, runs SGD steps with one thread.
Per count: wall time until every container is up (created, shaped, process started and reporting),
and memory per container from its cgroup (v1 memory.stat rss = anonymous memory; usage incl. page
cache). Results go to benchmarks/results/docker_scale.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

from edgebed.emulator.runtimes.docker import clean as docker_clean
from edgebed.emulator.runtimes.base import AgentSpec
from edgebed.emulator.runtimes.docker.runtime import DockerRuntime
from edgebed.scenario import parse_scenario

IDLE = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"
TORCH = ("import torch\ntorch.set_num_threads(1)\nfrom edgebed.models import build_model\n"
         "m = build_model('cnn')\nx = torch.randn(10, 1, 28, 28)\ny = torch.randint(0, 10, (10,))\n"
         "for _ in range(3):\n    m.zero_grad(); torch.nn.functional.cross_entropy(m(x), y).backward()\n"
         "print('ready', flush=True)\nimport time\ntime.sleep(600)\n")


def _mem(container_id: str) -> dict:
    base = Path(f"/sys/fs/cgroup/memory/docker/{container_id}")
    if not base.exists():
        return {}
    stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
    return {"rss_mib": int(stat.get("rss", 0)) / 2**20,
            "usage_mib": int((base / "memory.usage_in_bytes").read_text()) / 2**20}


def run(kind: str, n: int, timeout: float) -> dict:
    sc = parse_scenario({"name": "bench", "workers": {"n": n, "classes": [
        {"name": "edge", "share": 1, "uplink": {"rate": "1mbit"}}]}, "stop": {"updates": 1},
        "runtime": {"name": "docker", "docker": {"quota_after": "start"}}})
    code = IDLE if kind == "idle" else TORCH

    class BenchRuntime(DockerRuntime):
        def agent_command(self, spec):
            return [self.image.python, "-c", code]

    rt = BenchRuntime(sc, Path(tempfile.mkdtemp(prefix="edgebed-bench-")))
    try:
        rt.ps_bind()
        t0 = time.monotonic()
        handles = rt.start([AgentSpec(d, "edge", "") for d in range(n)])
        t_started = time.monotonic() - t0
        pending = {h.device: h for h in handles}
        while pending and time.monotonic() - t0 < timeout:
            for d, h in list(pending.items()):
                if b"ready" in h.container.logs():
                    del pending[d]
            time.sleep(0.5)
        t_ready = time.monotonic() - t0
        mems = [_mem(h.container.id) for h in handles]
        mems = [m for m in mems if m]
        out = {"kind": kind, "containers": n, "ready": n - len(pending),
               "create_start_shape_s": round(t_started, 2), "all_ready_s": round(t_ready, 2),
               "per_container_start_s": round(t_ready / n, 3)}
        if mems:
            out["rss_mib_mean"] = round(sum(m["rss_mib"] for m in mems) / len(mems), 1)
            out["usage_mib_mean"] = round(sum(m["usage_mib"] for m in mems) / len(mems), 1)
            out["rss_mib_total"] = round(sum(m["rss_mib"] for m in mems), 1)
        return out
    finally:
        t1 = time.monotonic()
        rt.cleanup()
        assert docker_clean.leftovers(rt.run_id) == {"containers": [], "networks": []}
        print(f"  teardown of {n}: {time.monotonic() - t1:.1f} s", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", default="10,50,100,200")
    ap.add_argument("--torch-counts", default="4,16")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "docker_scale.json"))
    args = ap.parse_args(argv)
    results = []
    for kind, counts in (("idle", args.counts), ("torch", args.torch_counts)):
        for n in [int(c) for c in counts.split(",") if c]:
            r = run(kind, n, args.timeout)
            print(json.dumps(r), flush=True)
            results.append(r)
    load = open("/proc/loadavg").read().split()[:3]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "benchmark": "docker_scale", "host": {"cores": __import__("os").cpu_count(), "kernel": platform.release(),
                                              "loadavg_at_end": load},
        "note": "shared host: other workloads ran concurrently; start-up times are upper bounds",
        "results": results}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
