"""Virtual-clock runtime: the whole run in one process as a discrete-event simulation.

Every device follows the agent's protocol (Hello→Welcome, Pull→Model, Push→Ack|Stop, Bye) with real
``wire`` frames handed to ``ParameterServer.process`` — so ingress bytes, update rules, staleness and
crash draws are those of a real run — but time is virtual: a message takes ``AppLink.transfer_time``
(bytes·8/rate + delay ± jitter + loss RTOs), a gradient takes ``step_time × slowdown`` (± ``step_jitter``),
then the class's think time. Events are ordered by (virtual time, sequence number), so the same
scenario and seed give the same run, bit for bit. Gradients of devices whose pulled Θ is known are
computed together (``device_agent/batched.py``) only when a push needs one, so batching never changes
the event order (``runtime.sim.max_batch``; off by default, as it is slower on CPUs measured so far).

Semantics a scenario should know about:
- ``stop.wall_time`` is emulated (virtual) time here: the run describes the emulated system, and a
  wall-clock stop would make the run depend on the host's speed.
- ``stop.target_accuracy`` is checked the moment Θ is evaluated (inline), not at the next engine tick.
- ``runtime.sim.link_model``: ``network`` (default) — a message reaches the PS after its transfer time;
  ``app`` — it reaches the PS when sent and the sender waits the transfer time afterwards, which is what
  the local runtime's application-level shaping does (use it to compare against ``local``);
  ``kernel-rate`` — the docker runtime on a kernel without netem: the rate applies on the wire (TCP/IP
  framing, the tbf bucket's burst, ``timing.kernel_rate_time``) while the agent sleeps delay and jitter
  (use it to compare against ``docker``; ``runtime.sim.dilation`` matches a dilated docker run's burst).
"""
from __future__ import annotations

import heapq
import math
import signal
import time
from dataclasses import dataclass, field
from typing import Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ...ps import wire
from ...ps.evaluator import InlineEvaluator
from ...scenario import Duration, class_assignment
from ...timing import DEFAULT_STEP_TIME, draw_delay, kernel_rate_time, wait_enabled
from .base import AgentHandle, AgentSpec, Capabilities, Runtime


# Update rules whose devices compute one gradient per pulled Θ (the protocol the sim replays).
GRADIENT_RULES = ("asgd", "comp-asgd", "adacomp")

# event kinds
_ARRIVE, _REPLY, _PUSH_READY = 0, 1, 2


def sim_step_time(scenario, spec: "SimSpec") -> float:
    """Virtual seconds per step: runtime.sim.step_time, else timing.step_time (a duration; `calibrate`
    means the engine's calibration, handed over as a number), else the reference machine's."""
    if spec.step_time is not None:
        return spec.step_time
    if isinstance(scenario.timing.step_time, float):
        return scenario.timing.step_time
    return DEFAULT_STEP_TIME[scenario.model.name]


class SimSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step_time: Optional[Duration] = Field(None, description="virtual seconds per SGD step at slowdown 1")
    # Each step takes step_time × slowdown × U(1 − j, 1 + j): real step times vary, and without that
    # identical devices stay in lockstep forever (every round computed on one Θ), which no real run does.
    step_jitter: float = Field(0.1, ge=0, lt=1, description="relative spread of the compute time")
    link_model: Literal["network", "app", "kernel-rate"] = "network"
    # One at a time by default: on the reference CPU a vmap'd batch of 32 costs more per gradient than
    # separate calls (CNN 4.9–6.9 vs 1.9–3.2 ms, MLP 0.74–0.98 vs 0.42–0.65 ms, one thread;
    # benchmarks/bench_sim_paper.py times both).
    max_batch: int = Field(1, ge=1, description="gradients computed together with vmap (1: one at a time)")
    threads: int = Field(1, ge=1, description="torch threads for the gradient computations")
    dilation: float = Field(1.0, gt=0, description="link_model kernel-rate: the timing.dilation of the docker "
                            "run to compare with (the kernel's bucket holds bytes, not time)")


@dataclass
class _Job:
    version: int
    theta: np.ndarray          # the Θ this device pulled (its private snapshot)
    ready: tuple = ()          # (virtual time, seq) of its push: batching order
    update: object = None      # compressed gradient, once computed
    loss: float = math.nan


@dataclass
class _Device:
    device: int
    klass: dict
    peer: bytes
    up: object
    down: object
    rng: np.random.Generator
    compute_rng: np.random.Generator
    wait_rng: Optional[np.random.Generator] = None
    trainer: object = None
    pulled: object = None           # compression.downlink.PulledModel: compressed pulls → full Θ
    session: str = ""
    seq: int = 0
    job: Optional[_Job] = None
    frozen: bool = False
    code: Optional[int] = None      # exit code once ended
    wait_after_send: float = 0.0    # link_model app: the sender's transfer time still to wait
    app_until: float = 0.0          # link_model kernel-rate: the sender sleeps its link delays until then


class SimHandle(AgentHandle):
    """A virtual device, as a Popen-like handle for the engine."""

    def __init__(self, dev: _Device):
        self.device = dev.device
        self._dev = dev

    def poll(self) -> Optional[int]:
        return self._dev.code

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        return self._dev.code

    def send_signal(self, sig: int) -> None:
        if self._dev.code is None and sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT):
            self._dev.code = -int(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def freeze(self) -> None:
        self._dev.frozen = True


class SimEvaluator(InlineEvaluator):
    """Inline (deterministic) evaluation that stops the run at the target accuracy on the spot."""

    def __init__(self, scenario_dict: dict, runtime: "SimRuntime"):
        super().__init__(scenario_dict)
        self.runtime = runtime

    def submit(self, version: int, theta: np.ndarray, info: dict) -> None:
        super().submit(version, theta, info)
        target, ps = self.runtime.scenario.stop.target_accuracy, self.runtime.ps
        if target is not None and ps is not None and self._out[-1]["accuracy"] >= target:
            ps.request_stop(f"reached target accuracy {target:.2%} at update {version}")


class SimRuntime(Runtime):
    name = "sim"
    capabilities = Capabilities(link_rate="model", link_delay="model", link_jitter="model",
                                link_loss="model", cpu_quota=False, freeze="model")
    Spec = SimSpec
    uses_sockets = False

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        self.now = 0.0                     # virtual seconds
        self.t_wall = time.monotonic()
        self.ps = None
        self.step_time = sim_step_time(scenario, self.spec)
        self.dilation = self.spec.dilation
        self.devices: dict[int, _Device] = {}
        self._heap: list = []
        self._seq = 0
        self._batched = None
        self._codec = None
        self.stats = {"events": 0, "gradients": 0, "batches": 0, "compute_s": 0.0}

    def check(self) -> list[str]:
        problems = super().check()
        if self.scenario.algorithm.name not in GRADIENT_RULES:
            problems.append(f"algorithm.name: {self.scenario.algorithm.name!r} is not supported by runtime 'sim' "
                            f"yet (its devices run one gradient per pull: {', '.join(GRADIENT_RULES)}); "
                            "use runtime local")
        return problems

    def applied(self) -> dict:
        return {**super().applied(), "link_model": self.spec.link_model, "step_time_s": self.step_time,
                "stop_wall_time": "virtual", "compute": f"max_batch={self.spec.max_batch}"}

    def clock(self) -> tuple[float, float]:
        return time.monotonic() - self.t_wall, self.now

    def make_evaluator(self, scenario_dict: dict):
        return SimEvaluator(scenario_dict, self)

    # -- set-up --------------------------------------------------------------------------------
    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        import torch
        torch.set_num_threads(self.spec.threads)
        from ...data import load_dataset, partition
        from ...device_agent.link import AppLink
        from ...compression.downlink import PulledModel
        from ...device_agent.trainer import Trainer
        from ...ps.rules import RULES
        sc = self.scenario
        seed = sc.seed
        ds = load_dataset(sc.dataset, seed)
        shards = partition(ds.train_y, sc.workers.n, sc.dataset.partition, seed, sc.dataset.labels_per_worker)
        compressor = RULES[sc.algorithm.name].compressor
        self._codec = sc.compression.push_codec()   # None: wire version 1
        classes = class_assignment(sc)
        handles = []
        for spec in specs:
            d = spec.device
            klass = sc.workers.classes[classes[d]]
            # The same random streams as the agent (device_agent/agent.py): links, think time.
            dev = _Device(d, klass.model_dump(mode="json"), f"sim-{d}".encode(),
                          AppLink.from_config(klass.uplink.model_dump(), seed=[seed, d, 1]),
                          AppLink.from_config(klass.downlink.model_dump(), seed=[seed, d, 2]),
                          np.random.default_rng([seed, d, 3]), np.random.default_rng([seed, d, 4]))
            dev.trainer = Trainer(sc.model.name, ds.train_x[shards[d]], ds.train_y[shards[d]],
                                  sc.algorithm.batch_size, compressor, sc.algorithm.c, seed, d,
                                  compression=sc.compression.model_dump())
            dev.pulled = PulledModel(keep=sc.compression.pull_delta)
            if wait_enabled(sc.timing.wait.model_dump()):
                dev.wait_rng = np.random.default_rng([seed, d, 5])
            self.devices[d] = dev
            handles.append(SimHandle(dev))
            self._send(dev, wire.Hello(d, spec.speed_class, 0))
        if self.spec.max_batch > 1:
            from ...device_agent.batched import BatchedGradient
            self._batched = BatchedGradient(sc.model.name, seed)
        return handles

    # -- the event loop ------------------------------------------------------------------------
    def drive(self, ps, seconds: float) -> None:
        """Process events for about ``seconds`` of wall time. Once the PS has stopped, run until every
        device has had its Stop (so the run ends the way a real one does), whatever that takes."""
        self.ps = ps
        deadline = time.monotonic() + seconds
        limit = self.scenario.stop.wall_time
        if not self._heap:
            time.sleep(min(seconds, 0.05))
        while self._heap:
            if ps.stopped is None and time.monotonic() >= deadline:
                return
            t = self._heap[0][0]
            if limit is not None and t > limit and ps.stopped is None:
                self.now = limit
                ps.request_stop(f"wall time {limit:.0f} s reached (virtual time)")
            t, _, kind, d, payload = heapq.heappop(self._heap)
            self.now = max(self.now, t)
            self.stats["events"] += 1
            dev = self.devices[d]
            if kind == _ARRIVE:
                self._arrive(dev, payload)
            elif dev.code is not None or dev.frozen:
                continue
            elif kind == _REPLY:
                self._on_reply(dev, payload)
            else:
                self._push(dev)

    def _schedule(self, t: float, kind: int, device: int, payload=None) -> tuple:
        key = (t, self._seq)
        heapq.heappush(self._heap, (t, self._seq, kind, device, payload))
        self._seq += 1
        return key

    def _send(self, dev: _Device, msg: wire.Message) -> None:
        """The device sends ``msg`` over its uplink."""
        frames = wire.encode(msg)
        nbytes = wire.frames_nbytes(frames)
        up = dev.up.transfer_time(nbytes)
        if self.spec.link_model == "kernel-rate":   # rate on the wire (tbf), delays slept by the agent
            rate = dev.up.rate
            dev.app_until = self.now + up - (nbytes * 8.0 / rate if rate else 0.0)
            self._schedule(self.now + kernel_rate_time(nbytes, rate, self.dilation), _ARRIVE, dev.device, frames)
        elif self.spec.link_model == "app":
            dev.wait_after_send = up
            self._schedule(self.now, _ARRIVE, dev.device, frames)
        else:
            self._schedule(self.now + up, _ARRIVE, dev.device, frames)

    def _arrive(self, dev: _Device, frames) -> None:
        """A message reaches the PS; its reply goes down the device's downlink."""
        reply = self.ps.process(dev.peer, frames)
        if reply is None:
            return
        nbytes = wire.frames_nbytes(reply)
        down = dev.down.transfer_time(nbytes)
        if self.spec.link_model == "kernel-rate":   # handled once it arrived and the agent slept its delay
            rate = dev.down.rate
            arrives = self.now + kernel_rate_time(nbytes, rate, self.dilation)
            self._schedule(max(arrives, dev.app_until) + down - (nbytes * 8.0 / rate if rate else 0.0),
                           _REPLY, dev.device, reply)
            return
        wait, dev.wait_after_send = dev.wait_after_send, 0.0
        self._schedule(self.now + wait + down, _REPLY, dev.device, reply)

    def _on_reply(self, dev: _Device, frames) -> None:
        msg = wire.decode(frames)
        if isinstance(msg, wire.Welcome):
            dev.session = msg.session
            self._send(dev, wire.Pull(dev.session))
        elif isinstance(msg, wire.Model):
            msg = dev.pulled.receive(msg)
            dev.job = _Job(msg.version, msg.params)
            compute = self.step_time * dev.klass["slowdown"]
            if self.spec.step_jitter:
                compute *= 1.0 + self.spec.step_jitter * (2.0 * dev.compute_rng.random() - 1.0)
            busy = compute + draw_delay(dev.klass["think_time"], dev.rng)
            if dev.wait_rng is not None:   # timing.wait: the agent's draw, from the agent's stream
                busy += draw_delay(self.scenario.timing.wait.model_dump(), dev.wait_rng)
            dev.job.ready = self._schedule(self.now + busy, _PUSH_READY, dev.device)
        elif isinstance(msg, wire.Ack):
            if msg.freeze:
                dev.frozen = True       # fail-stop: never sends again
            else:
                self._send(dev, wire.Pull(dev.session))
        elif isinstance(msg, wire.Stop):
            self._send(dev, wire.Bye(dev.session, "stop"))
            dev.code = 0
        else:                           # Error: the real agent raises and exits with 1
            dev.code = 1

    def _push(self, dev: _Device) -> None:
        job = dev.job
        if job.update is None:
            self._compute(dev)
        dev.job = None
        self._send(dev, wire.Push(dev.session, dev.seq, job.version, job.update.values,
                                  job.update.indices, job.loss, codec=self._codec, q8=job.update.q8))
        dev.seq += 1

    # -- compute -------------------------------------------------------------------------------
    def _compute(self, dev: _Device) -> None:
        """Compute ``dev``'s gradient, and with it those of the devices that push next (batching)."""
        t0 = time.perf_counter()
        if self._batched is None:
            batch = [dev]
        else:
            waiting = [x for x in self.devices.values()
                       if x.job is not None and x.job.update is None and x.code is None and not x.frozen]
            waiting.sort(key=lambda x: x.job.ready)
            batch = waiting[: self.spec.max_batch]
            assert batch[0] is dev, "the device pushing now must have the earliest push"
        if len(batch) == 1:
            grads = [dev.trainer.gradient(dev.job.theta)]
        else:
            from ...device_agent.batched import trainer_batches
            g, losses = self._batched([x.job.theta for x in batch], *trainer_batches([x.trainer for x in batch]))
            grads = list(zip(g, losses))
        for x, (grad, loss) in zip(batch, grads):
            x.job.update = x.trainer.compressor.compress(grad)
            x.job.loss = float(loss)
            x.job.theta = None          # the snapshot is no longer needed
        self.stats["gradients"] += len(batch)
        self.stats["batches"] += 1
        self.stats["compute_s"] += time.perf_counter() - t0

    def cleanup(self) -> None:
        from ...rundir import write_json_atomic
        if self.run_dir.is_dir():
            write_json_atomic(self.run_dir / "sim.json", {
                "virtual_time_s": self.now, **self.spec.model_dump(), "step_time": self.step_time,
                **{k: round(v, 3) if isinstance(v, float) else v for k, v in self.stats.items()}})
