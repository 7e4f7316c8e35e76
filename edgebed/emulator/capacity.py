"""Capacity: will a scenario fit this host? The per-device memory model of the virtual clock, and the
checks ``edgebed validate`` and the engine run before anything starts or any run directory exists.

The virtual clock keeps every device, the PS and the evaluator in one process, so its memory is
``base + n × per_device`` (docs/scale.md). What a device holds beyond fixed Python objects depends on
what its update rule makes it keep between its pull and its push (|Θ| parameters of 4 bytes):

- a gradient rule sends a compressed gradient: it holds that selection, c·|Θ| values and indices
  (8·c·|Θ| bytes; the gradient is computed and compressed the moment its Θ is pulled); AdaComp's PS
  adds its touch log, the entries sent since the oldest outstanding pull (~c·|Θ| per device, twice
  that with the log's room to grow). A dense rule (ASGD) holds its dense gradient: 4·|Θ|.
- an averaging rule's device trains its own model: a torch module (parameters and gradients, 8·|Θ|)
  plus the Θ it pulled and the delta it sends (8·|Θ|).
- options that keep a model-sized array per device add |Θ| each: error feedback's residual (and
  momentum), compressed pulls' delta copies (device and PS), batched gradients' pulled Θ.

The constants were measured by benchmarks/bench_scale.py (benchmarks/results/scale.json): the model
predicts each point's peak there within the margin the checks add (``MARGIN``).
"""
from __future__ import annotations

import os
from typing import Optional

from ..algorithms import ALGORITHMS
from ..scenario import Scenario
from .runtimes import RUNTIMES

PARAMETERS = {"cnn": 211_690, "mlp": 199_210}
# Fixed costs of a sim process: the interpreter with torch and the rest imported, Θ, the evaluator and
# the normalised data set (bundled digits), by model; measured (bench_scale, n = 200).
BASE_BYTES = {"cnn": 700 << 20, "mlp": 512 << 20}
# A device's Python objects (state machine, trainer, links, random streams, its Welcome config, the
# PS's session record), without any array of its model's size; measured (bench_scale's slope).
DEVICE_BYTES = 24 << 10
MARGIN = 1.25   # what the checks add to the prediction before comparing it with the host's memory
# Host memory per device of the runtimes that start one process (and container) per device on this
# host, measured by benchmarks/bench_docker_agents.py (benchmarks/results/docker_agents.json,
# host_mem_per_device_mib): an agent forked from the torch-preloaded fork server (local's default,
# docker's agents: forked) 39.4 MiB at 200 devices; an agent in a container of its own 194.6 MiB.
FORKED_AGENT_BYTES = int(39.4 * 2**20)
CONTAINER_AGENT_BYTES = int(194.6 * 2**20)


def sim_memory(sc: Scenario) -> dict:
    """Predicted peak bytes of a virtual-clock run of ``sc``: {"base", "per_device", "total"} (for a
    runtime whose devices live in the engine's process: ``RuntimeEntry.devices_in_engine``)."""
    size = PARAMETERS[sc.model.name]
    rule = ALGORITHMS[sc.algorithm.name]
    c = sc.algorithm.ratio
    per = DEVICE_BYTES
    k = sc.dataset.samples_per_device
    per += 8 * k if k else 0                           # its sample's index and its shuffled order (int32)
    if rule.policy == "gradient":
        if rule.compressor == "dense":
            per += 4 * size                            # the dense gradient it will push
        else:
            per += 8 * int(c * size)                   # the selection it will push (values + indices)
            if rule.staleness == "per-parameter":
                per += 8 * int(c * size)               # the PS's touch log, with room to grow
        if (sc.runtime.sim or {}).get("max_batch", 1) > 1:
            per += 4 * size                            # the pulled Θ a deferred gradient waits with
    else:
        per += 16 * size                               # own module (params + grads), Θ pulled, delta
    cp = sc.compression
    per += 4 * size * (int(cp.error_feedback) + int(cp.momentum > 0))
    if cp.pull_delta:
        per += 4 * size * (1 + (2 if cp.pull != "f32" else 1))
    base = BASE_BYTES[sc.model.name]
    return {"base": base, "per_device": per, "total": base + sc.workers.n * per}


def host_memory() -> Optional[int]:
    """This host's RAM in bytes (MemTotal), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def process_memory(sc: Scenario) -> Optional[dict]:
    """Host bytes of a runtime that starts a process per device on this host (local; docker):
    {"per_device", "total", "how"}; None for the others (sim: ``sim_memory``; swarm, spark: a cluster)."""
    name = sc.runtime.name
    if name == "local":
        per, how = FORKED_AGENT_BYTES, "a forked agent process per device"
        if (sc.runtime.local or {}).get("start_method") == "exec":
            per, how = CONTAINER_AGENT_BYTES, "a fresh Python + torch process per device (start_method: exec)"
    elif name == "docker":
        forked = (sc.runtime.docker or {}).get("agents") == "forked"
        per = FORKED_AGENT_BYTES if forked else CONTAINER_AGENT_BYTES
        how = "a container and a forked agent per device" if forked else "a container with its own agent per device"
    else:
        return None
    return {"per_device": per, "total": sc.workers.n * per, "how": how}


def _pid_room() -> Optional[int]:
    """Processes this user may still start (RLIMIT_NPROC, the kernel's pid_max): the smaller."""
    import resource
    room = []
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if soft != resource.RLIM_INFINITY:
        room.append(soft)
    try:
        with open("/proc/sys/kernel/pid_max") as f:
            room.append(int(f.read()))
    except (OSError, ValueError):
        pass
    return min(room) if room else None


def problems(sc: Scenario, memory: Optional[int] = None) -> list[str]:
    """What makes ``sc`` impossible here before it starts (empty: nothing): too few samples for its
    partition, more memory than the host has (the virtual clock by the model above; a runtime with a
    process per device by its measured per-device cost), or more processes than the host allows."""
    from ..data import partition_problems
    out = list(partition_problems(sc.dataset, sc.workers.n, sc.seed))
    procs = process_memory(sc)
    if procs is not None:
        memory = host_memory() if memory is None else memory
        gib = 2 ** 30
        if memory is not None and procs["total"] * MARGIN > memory:
            fits = int(memory / MARGIN // procs["per_device"])
            out.append(f"workers.n={sc.workers.n:,}: runtime {sc.runtime.name} starts {procs['how']}, about "
                       f"{procs['per_device'] / 2**20:.0f} MiB each (benchmarks/results/docker_agents.json): "
                       f"{procs['total'] * MARGIN / gib:,.1f} GiB with the ×{MARGIN} margin, and this host has "
                       f"{memory / gib:.1f} GiB; lower workers.n to at most {fits:,}, or use runtime sim (a "
                       "device costs kilobytes there) or a cluster runtime (swarm, spark)")
        room = _pid_room()
        if room is not None and sc.workers.n > room:
            out.append(f"workers.n={sc.workers.n:,}: runtime {sc.runtime.name} needs a process per device and this "
                       f"host allows {room:,} (ulimit -u, /proc/sys/kernel/pid_max); lower workers.n")
    if RUNTIMES[sc.runtime.name].devices_in_engine:
        memory = host_memory() if memory is None else memory
        need = sim_memory(sc)
        if memory is not None and need["total"] * MARGIN > memory:
            gib = 2 ** 30
            fits = max(0, int((memory / MARGIN - need["base"]) // need["per_device"]))
            dense = ALGORITHMS[sc.algorithm.name].compressor == "dense"
            out.append(f"workers.n={sc.workers.n}: the virtual clock would need about "
                       f"{need['total'] * MARGIN / gib:.1f} GiB ({need['base'] / gib:.1f} GiB + "
                       f"{need['per_device'] / 1024:,.0f} KiB per device, ×{MARGIN} margin; docs/scale.md) and this "
                       f"host has {memory / gib:.1f} GiB; lower workers.n to at most {fits:,}"
                       + (", or use a compressing rule (adacomp, comp-asgd: a device then holds c·|Θ| "
                          "entries instead of a dense gradient)" if dense else ""))
    return out
