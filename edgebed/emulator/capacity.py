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

AdaComp's PS adds per-parameter state once, whatever the population (``PS_PER_PARAMETER_BYTES``).

The constants were measured by benchmarks/bench_scale.py (benchmarks/results/scale.json): the model
predicts each point's peak there within the margin the checks add (``MARGIN``).
"""
from __future__ import annotations

import os
from typing import Optional

from ..algorithms import ALGORITHMS
from ..scenario import Scenario
from .runtimes import RUNTIMES



def base_bytes(model) -> int:
    """Fixed costs of a sim process: the interpreter with torch and the rest imported, Θ, the evaluator
    and the normalised data set (bundled digits). The workload's measured ``base_bytes`` (the paper
    CNN's and MLP's: bench_scale, n = 200), else an estimate: the larger built-in's plus four copies
    of Θ (PS, evaluator, its gradient, the pulled copy) — an estimate, not a measurement."""
    from ..workload import WORKLOADS, num_params, resolve
    w = resolve(model)
    if w.base_bytes is not None:
        return w.base_bytes
    return max(b.base_bytes for b in WORKLOADS.values() if b.base_bytes) + 16 * num_params(w)

# AdaComp's per-parameter state at the PS, bytes per parameter: the touch log's heads (16) and its
# pool's first room (MIN_CAP = 4 stamps of 4 bytes: 16), and the update counts (4) — ps/staleness.py,
# ps/rules/adacomp.py. Measured: 28 bytes a parameter above ASGD at 25.6 M parameters after 8 updates
# (benchmarks/results/model_memory-25m.json); the model takes the pool's full first room.
PS_PER_PARAMETER_BYTES = 36

# A device's Python objects (state machine, trainer, links, random streams, its Welcome config, the
# PS's session record), without any array of its model's size; measured (bench_scale's slope).
DEVICE_BYTES = 24 << 10
MARGIN = 1.25   # what the checks add to the prediction before comparing it with the host's memory
# Runtimes that start one process per device on this host: the private memory (USS) of one agent
# process forked from the preloaded fork server, CNN, measured by bench_docker_agents (28.5 MiB mean over
# 200 agents, benchmarks/results/docker_agents.json), rounded up.
HOST_AGENT_BYTES = {"local": 29 << 20}


def sim_memory(sc: Scenario) -> dict:
    """Predicted peak bytes of a virtual-clock run of ``sc``: {"base", "per_device", "total"} (for a
    runtime whose devices live in the engine's process: ``RuntimeEntry.devices_in_engine``)."""
    from ..workload import num_params
    size = num_params(sc.model)
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
    base = base_bytes(sc.model)
    if rule.policy == "gradient" and rule.staleness == "per-parameter":
        base += PS_PER_PARAMETER_BYTES * size           # AdaComp's state at the PS, whatever n is
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


def process_limit() -> Optional[int]:
    """How many processes this user may have (RLIMIT_NPROC's soft limit), or None where unlimited."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    except (ImportError, AttributeError, ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def problems(sc: Scenario, memory: Optional[int] = None, nproc: Optional[int] = -1) -> list[str]:
    """What makes ``sc`` impossible here before it starts (empty: nothing): too few samples for its
    partition, more memory than the host has by the model above (virtual clock; one agent process
    per device on ``local``), or more agent processes than this user may start (``nproc``: the
    process limit, -1 for this host's, None for none)."""
    from ..data import partition_problems
    out = list(partition_problems(sc.dataset, sc.workers.n))
    n, gib = sc.workers.n, 2 ** 30
    per_agent = HOST_AGENT_BYTES.get(sc.runtime.name)
    if per_agent:
        memory = host_memory() if memory is None else memory
        nproc = process_limit() if nproc == -1 else nproc
        if memory is not None and n * per_agent * MARGIN > memory:
            fits = max(1, int(memory / MARGIN // per_agent))
            out.append(f"workers.n={n}: runtime {sc.runtime.name} starts one agent process per device, about "
                       f"{per_agent >> 20} MiB each (benchmarks/results/docker_agents.json), so "
                       f"{n * per_agent * MARGIN / gib:,.1f} GiB with the ×{MARGIN} margin, and this host has "
                       f"{memory / gib:.1f} GiB; lower workers.n to at most {fits:,}, or use runtime: sim "
                       "(every device in one process; docs/scale.md)")
        elif nproc is not None and n + 16 > nproc:   # the engine, its PS and evaluator, the fork server
            out.append(f"workers.n={n}: runtime {sc.runtime.name} starts one process per device and this user "
                       f"may have {nproc:,} processes (ulimit -u); lower workers.n to at most "
                       f"{max(1, nproc - 16):,} or raise the limit")
    if RUNTIMES[sc.runtime.name].devices_in_engine:
        memory = host_memory() if memory is None else memory
        need = sim_memory(sc)
        if memory is not None and need["total"] * MARGIN > memory:
            fits = max(0, int((memory / MARGIN - need["base"]) // need["per_device"]))
            dense = ALGORITHMS[sc.algorithm.name].compressor == "dense"
            out.append(f"workers.n={sc.workers.n}: the virtual clock would need about "
                       f"{need['total'] * MARGIN / gib:.1f} GiB ({need['base'] / gib:.1f} GiB + "
                       f"{need['per_device'] / 1024:,.0f} KiB per device, ×{MARGIN} margin; docs/scale.md) and this "
                       f"host has {memory / gib:.1f} GiB; lower workers.n to at most {fits:,}"
                       + (", or use a compressing rule (adacomp, comp-asgd: a device then holds c·|Θ| "
                          "entries instead of a dense gradient)" if dense else ""))
    return out
