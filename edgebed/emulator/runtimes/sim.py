"""Virtual-clock runtime: the whole run in one process as a discrete-event simulation.

Every device is the same state machine the socket agent drives (``device_agent/protocol.py``), here
driven from an event heap: its messages are real ``wire`` frames handed to ``ParameterServer.process``
— so ingress bytes, update rules, staleness and crash draws are those of a real run, for all six
algorithms — but time is virtual: a message takes ``AppLink.transfer_time`` (bytes·8/rate + delay ±
jitter + loss RTOs), a compute phase takes ``steps × step_time × slowdown`` (each step ± ``step_jitter``),
a wait (think time) its drawn seconds. Events are ordered by (virtual time, sequence number), so the
same scenario and seed give the same run, bit for bit. Replies a round-based rule holds (model
averaging) come back through ``Hooks.send`` and go down the device's downlink like any other. With
``runtime.sim.max_batch`` > 1, gradients of devices whose pulled Θ is known are computed together
(``device_agent/batched.py``) only when a push needs one, so batching never changes the event order
(off by default, as it is slower on CPUs measured so far).

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

from ...device_agent.gradbuf import GradientBuffers
from ...device_agent.policies import POLICIES
from ...device_agent.protocol import Compute, DeviceProtocol, Exit, Freeze, Send, Wait
from ... import wire
from ...ps.evaluator import InlineEvaluator
from ...scenario import Duration, class_assignment
from ...timing import default_step_time, kernel_rate_time
from .base import AgentHandle, AgentSpec, Capabilities, Runtime
from .transport import VirtualClock


# event kinds: a message reaches the PS; a reply reaches the device; the device's timed phase is over
_ARRIVE, _REPLY, _RESUME = 0, 1, 2
_DYN, _EDGE = 3, 4   # a dynamics event (sim_dynamics.py); a message at the PS's end of the device's link
_EARLY = "early"   # a _REPLY's payload: the model the device took when it was sent (receive_early)


def sim_step_time(scenario, spec: "SimSpec") -> float:
    """Virtual seconds per step: runtime.sim.step_time, else timing.step_time (a duration; `calibrate`
    means the engine's calibration, handed over as a number), else the reference machine's."""
    if spec.step_time is not None:
        return spec.step_time
    if isinstance(scenario.timing.step_time, float):
        return scenario.timing.step_time
    return default_step_time(scenario.model, scenario.dataset)


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
    # sim_pool.py: each separable device's work (gradient, local steps) computed ahead in N processes.
    workers: int = Field(1, ge=1, le=256, description="processes computing the devices' gradients and local "
                         "steps ahead, in parallel, with the same bits (1: in the clock's own process)")
    executor: Literal["local", "ray"] = Field("local", description="where the workers run: local processes, or "
                                              "Ray actors (sim_ray.py; any node of a Ray cluster)")
    ray_address: Optional[str] = Field(None, description="executor ray: the cluster's address (HEAD:6379 or "
                                       "auto); none: a private Ray on this machine for the run")
    dilation: float = Field(1.0, gt=0, description="link_model kernel-rate: the timing.dilation of the docker "
                            "run to compare with (the kernel's bucket holds bytes, not time)")
    # SparkNet's S (Moritz et al., Sec. 3): what one synchronisation costs beyond moving the bytes (a
    # Spark stage's scheduling, the broadcast and the collect, ~20 s on their EC2 cluster). Charged on
    # the model a device receives, so once per pull: per round for the averaging rules (whose pulls the
    # barrier holds), per exchange for EASGD, per update for the gradient rules.
    sync_time: Duration = Field(0.0, ge=0, description="virtual seconds each model a device receives (one "
                                "per pull: per round for averaging rules, per exchange for EASGD) arrives "
                                "later than its link alone would bring it: SparkNet's per-synchronisation "
                                "overhead S of a cluster")


@dataclass
class _Device:
    device: int
    klass: dict
    peer: bytes
    up: object
    down: object
    compute_rng: np.random.Generator
    machine: DeviceProtocol
    frozen: bool = False
    code: Optional[int] = None      # exit code once ended
    sent_until: float = -math.inf   # link_model app: when the sender is done waiting its transfer time
    app_until: float = 0.0          # link_model kernel-rate: the sender sleeps its link delays until then
    then: list = field(default_factory=list)   # actions to carry out when its timed phase is over
    ready: tuple = ()               # (virtual time, seq) of that moment: the batching order
    # dynamics (sim_dynamics.py): churn, trace, timed events
    online: bool = True
    epoch: int = 0                  # bumped when it goes offline or rejoins: older events are void
    in_flight: dict = field(default_factory=dict)   # seq of an uplink message in flight → its bytes
    wasted_bytes: int = 0           # uplink bytes lost in flight when it went offline
    step_s: Optional[float] = None  # trace ms_per_sample: seconds per step (instead of step_time × slowdown)
    ahead: object = None            # sim_pool.Ticket of its work computed by a worker, until its push


class SimHandle(AgentHandle):
    """A virtual device, as a Popen-like handle for the engine."""

    def __init__(self, dev: _Device, on_freeze=None):
        self.device = dev.device
        self._dev = dev
        self._on_freeze = on_freeze   # the dynamics' crash recovery

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
        if self._on_freeze is not None:
            self._on_freeze(self._dev)


class InlineTransport:
    """Messages go straight to ``ps.process`` from the event loop; held replies come back through
    ``Hooks.send`` onto the device's downlink."""
    endpoint = ""
    alive = True
    error = None

    def __init__(self, runtime: "SimRuntime", ps):
        runtime.ps = ps
        ps.hooks.send = runtime._deliver

    def stop(self) -> None:
        pass


class SimRuntime(Runtime):
    name = "sim"
    capabilities = Capabilities(link_rate="model", link_delay="model", link_jitter="model",
                                link_loss="model", cpu_quota=False, freeze="model",
                                dynamics=frozenset({"availability", "recovery", "trace", "event:link",
                                                    "event:partition", "event:ps-link", "ps-link"}),
                                cuda=True)
    Spec = SimSpec

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        self.ps = None
        self.step_time = sim_step_time(scenario, self.spec)
        self.dilation = self.spec.dilation
        self.devices: dict[int, _Device] = {}
        self._by_peer: dict[bytes, _Device] = {}
        self._heap: list = []
        self._seq = 0
        self._batched = None
        self.dyn = None   # sim_dynamics.SimDynamics when the scenario has dynamics
        self._void_reply = False   # the message being handled was sent before its device went away
        self.stats = {"events": 0, "gradients": 0, "batches": 0, "compute_s": 0.0}
        self._buffers = GradientBuffers()   # dense gradients' memory, reused (see _send)
        self.pool = None   # sim_pool.WorkerPool with runtime.sim.workers > 1

    def check(self) -> list[str]:
        problems = super().check()
        if self.spec.threads > 1 and self.scenario.numerics == "portable":
            problems.append(f"runtime.sim.threads: {self.spec.threads} with numerics: portable — multi-threaded "
                            "kernels split their sums by the thread count; use threads: 1, or numerics: native")
        if self.spec.executor == "ray":
            import importlib.util
            if importlib.util.find_spec("ray") is None:
                problems.append("runtime.sim.executor: ray needs Ray: pip install 'edgebed[ray]'")
        if self._parallel() and self.spec.max_batch > 1:
            problems.append(f"runtime.sim.workers: {self.spec.workers} with max_batch: {self.spec.max_batch} — "
                            "choose one: max_batch batches gradients in the clock's process (vmap), workers "
                            "computes them in other processes; set one of them to 1")
        if self._parallel() and self.scenario.device != "cpu":
            problems.append(f"runtime.sim.workers: {self.spec.workers} with device: {self.scenario.device} — the "
                            "workers compute on the CPU; use runtime.sim.workers: 1 on a GPU")
        parts = self.scenario.dynamics.parts()
        if parts and self.spec.link_model != "network":
            problems.append(f"dynamics ({', '.join(parts)}) on sim need runtime.sim.link_model: network "
                            f"(got {self.spec.link_model}); remove runtime.sim.link_model")
        if self.scenario.dynamics.trace is not None:
            from ...traces import TraceError, read_trace
            try:
                read_trace(self.scenario.dynamics.trace.path, self.scenario.workers.n)
            except TraceError as err:
                problems.append(f"dynamics.trace.path: {err}")
        from ...algorithms import ALGORITHMS
        if {"availability", "recovery", "trace"} & set(parts) and ALGORITHMS[self.scenario.algorithm.name].policy != "gradient":
            problems.append(f"dynamics.availability / trace with algorithm {self.scenario.algorithm.name}: churn is "
                            "modelled for the gradient rules only (asgd, comp-asgd, adacomp); a round-based rule "
                            "would wait for devices that are away")
        return problems

    def applied(self) -> dict:
        return {**super().applied(), "link_model": self.spec.link_model, "step_time_s": self.step_time,
                "sync_time_s": self.spec.sync_time,
                "stop_wall_time": "virtual",
                "compute": f"max_batch={self.spec.max_batch}" + (
                    f", workers={self.spec.workers} ({self.spec.executor})" if self._pooled() else
                    f", workers unused: {self.scenario.algorithm.name}'s local work continues the device's own "
                    "model, so it is computed in the clock's process" if self._parallel() else ""),
                **({"dynamics": {p: "model" for p in self.scenario.dynamics.parts()}}
                   if self.scenario.dynamics.parts() else {})}

    def _parallel(self) -> bool:
        """Whether the scenario asks for workers: more than one, or Ray actors (any number)."""
        return self.spec.workers > 1 or self.spec.executor == "ray"

    def _pooled(self) -> bool:
        """Whether workers compute the devices' work: asked for, and the rule's policy is separable."""
        from ...algorithms import ALGORITHMS
        return self._parallel() and POLICIES[ALGORITHMS[self.scenario.algorithm.name].policy].separable

    @property
    def now(self) -> float:
        """Virtual seconds."""
        return self.clock.t

    def make_clock(self) -> VirtualClock:
        return VirtualClock()

    def transport(self, ps, bind: str, curve_keys=None) -> InlineTransport:
        return InlineTransport(self, ps)

    def make_evaluator(self, scenario_dict: dict):
        return InlineEvaluator(scenario_dict)   # on the spot: a target stop falls on the same update

    # -- set-up --------------------------------------------------------------------------------
    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        if self._pooled() and self.spec.executor == "ray":
            from ... import numerics
            from .sim_ray import RayPool
            self.pool = RayPool(self.spec.workers, self.spec.ray_address, numerics.environment(self.scenario.numerics),
                                self._buffers.take)
        elif self._pooled():   # first: their start-up (torch's import) overlaps the data's loading
            from .sim_pool import WorkerPool
            self.pool = WorkerPool(self.spec.workers, self.run_dir, self._buffers.take)
        import torch
        torch.set_num_threads(self.spec.threads)
        from ...data import Partition, load_dataset
        from ...device_agent.link import AppLink
        from ...device_agent.trainer import SharedData, Trainer
        from ...models import build_model
        sc = self.scenario
        seed = sc.seed
        ds = load_dataset(sc.dataset, seed)
        shards = Partition.for_spec(ds.train_y, sc.workers.n, sc.dataset, seed, ds.users)
        classes = class_assignment(sc)
        # One normalised copy of the data for all devices, each with its index into it; one model for
        # every device that only computes gradients at a Θ it is given (set in full before each).
        data = SharedData(ds.train_x, ds.train_y, sc.model, sc.device)
        shared: dict[str, object] = {}

        def trainer_of(d: int):
            def make(cfg):
                module = None
                name = (cfg.policy or {}).get("name", "gradient")
                # with workers, a separable policy's local steps run there: no model of its own here
                if name == "gradient" or (self.pool is not None and getattr(POLICIES.get(name), "separable", False)):
                    if "module" not in shared:   # built once (a build reseeds torch and costs ms)
                        shared["module"] = build_model(cfg.workload, seed).to(data.dev)
                    module = shared["module"]
                index = shards[d]
                return Trainer(cfg.workload, None, None, cfg.algorithm["batch_size"], seed, d, data=data,
                               index=index.astype(np.int32) if len(ds.train_y) < 2**31 else index, module=module,
                               buffers=self._buffers)
            return make
        handles = []
        for spec in specs:
            d = spec.device
            klass = sc.workers.classes[classes[d]]
            # The agent's random streams (device_agent/agent.py): links [seed, d, 1|2]; compute time [.., 4].
            machine = DeviceProtocol(d, spec.speed_class, trainer_of(d))
            machine.deferred_gradients = self.spec.max_batch > 1
            dev = _Device(d, klass.model_dump(mode="json"), f"sim-{d}".encode(),
                          AppLink.from_config(klass.uplink.model_dump(), seed=[seed, d, 1]),
                          AppLink.from_config(klass.downlink.model_dump(), seed=[seed, d, 2]),
                          np.random.default_rng([seed, d, 4]), machine)
            self.devices[d] = dev
            self._by_peer[dev.peer] = dev
            handles.append(SimHandle(dev, self._crashed))
        if sc.dynamics.parts():
            from .sim_dynamics import SimDynamics
            trace = None
            if sc.dynamics.trace is not None:
                from ...traces import read_trace
                trace = read_trace(sc.dynamics.trace.path, sc.workers.n)
            self.dyn = SimDynamics(self, sc, trace)
            self.dyn.start()
        for dev in self.devices.values():
            if dev.online:
                self._carry_out(dev, dev.machine.hello(0))
        if self.spec.max_batch > 1:
            from ...device_agent.batched import BatchedGradient
            self._batched = BatchedGradient(sc.model, seed, sc.device)
        return handles

    # -- the event loop ------------------------------------------------------------------------
    def drive(self, ps, seconds: float) -> None:
        """Process events for about ``seconds`` of wall time. Once the PS has stopped, run until every
        device has had its Stop (so the run ends the way a real one does), whatever that takes."""
        deadline = time.monotonic() + seconds
        if self.dyn is not None and ps.stopped is not None:
            for dev in self.devices.values():   # away when the run ended: they never hear the Stop
                if not dev.online and dev.code is None:
                    dev.code = 0
        if not self._heap:
            time.sleep(min(seconds, 0.05))
        while self._heap:
            if ps.stopped is None and time.monotonic() >= deadline:
                return
            t, seq, kind, d, payload, epoch = heapq.heappop(self._heap)
            self.clock.advance(t)   # may fire the engine's time limit first, at exactly its time
            self.stats["events"] += 1
            if kind == _DYN:
                self.dyn.handle(d, payload)
                continue
            dev = self.devices[d]
            if epoch is not None and epoch != dev.epoch:
                continue             # sent, replied or timed before the device went away: lost with it
            if kind == _EDGE:        # at the PS's side of its link: through its shared queue, if any
                n = dev.in_flight.pop(seq, 0)
                self._schedule(self.dyn.ps_in.serve(t, n), _ARRIVE, d, (payload, epoch))
            elif kind == _ARRIVE and self.dyn is not None:
                frames, sent_in = payload   # the PS handles it; its reply is lost if the device left since
                self._void_reply = sent_in != dev.epoch or not dev.online
                self._arrive(dev, frames)
                self._void_reply = False
            elif kind == _ARRIVE:
                self._arrive(dev, payload)
            elif dev.code is not None or dev.frozen or not dev.online:
                continue
            elif kind == _REPLY:
                self._carry_out(dev, dev.machine.arrived() if payload is _EARLY else dev.machine.receive(payload))
            else:
                then, dev.then = dev.then, []
                self._carry_out(dev, then)

    def _schedule(self, t: float, kind: int, device: int, payload=None, epoch: Optional[int] = None) -> tuple:
        """Put an event on the heap; one with an ``epoch`` is void once the device's epoch moved on."""
        key = (t, self._seq)
        heapq.heappush(self._heap, (t, self._seq, kind, device, payload, epoch))
        self._seq += 1
        return key

    def _carry_out(self, dev: _Device, actions: list) -> None:
        """The device's actions, in order, on the virtual clock. A compute phase or a wait takes
        virtual time: the rest waits for a _RESUME event at its end."""
        busy = None   # virtual seconds of the timed phase in progress (None: none)
        while actions:
            action = actions.pop(0)
            if isinstance(action, Send) and busy is None:
                self._send(dev, action.msg)
            elif isinstance(action, Compute):
                t0 = time.perf_counter()
                steps = dev.machine.compute()
                self.stats["compute_s"] += time.perf_counter() - t0
                self.stats["gradients"] += steps
                if steps:
                    busy = (0.0 if busy is None else busy) + self._compute_time(dev, steps)
                actions = dev.machine.computed() + actions
            elif isinstance(action, Wait):   # the push is built when the wait is over
                busy = 0.0 if busy is None else busy
                for part in action.parts:    # compute + think + wait, in that order (as recorded)
                    busy += part
                actions = [_Waited()] + actions
            elif isinstance(action, _Waited) and busy is None:
                if dev.ahead is not None:
                    self._fill_ahead(dev)
                else:
                    self._fill_deferred(dev)
                actions = dev.machine.waited() + actions
            elif busy is not None:           # a Send or the end of a wait, after the timed phase
                dev.then = [action] + actions
                dev.ready = self._schedule(self.now + busy, _RESUME, dev.device,
                                           epoch=dev.epoch if self.dyn else None)
                return
            elif isinstance(action, Freeze):
                dev.frozen = True            # fail-stop: never sends again
                return
            elif isinstance(action, Exit):
                dev.code = action.code       # 1: the real agent raises (the PS refused a message)
                return
            else:                            # Rejoin: a virtual PS never forgets a session
                dev.code = 1
                return

    def _crashed(self, dev: _Device) -> None:
        if self.dyn is not None:
            self.dyn.crashed(dev)

    def _compute_time(self, dev: _Device, steps: int) -> float:
        """Virtual seconds of ``steps`` SGD steps on this device: step_time × slowdown × U(1 ± jitter) each."""
        total = 0.0
        for _ in range(steps):
            compute = self.step_time * dev.klass["slowdown"] if dev.step_s is None else dev.step_s
            if self.spec.step_jitter:
                compute *= 1.0 + self.spec.step_jitter * (2.0 * dev.compute_rng.random() - 1.0)
            total += compute
        return total

    def _send(self, dev: _Device, msg: wire.Message) -> None:
        """The device sends ``msg`` over its uplink. A dense push's gradient goes back to the gradient
        buffers, reused once the PS applied it and the device let go of it (device_agent/gradbuf.py)."""
        if type(msg) is wire.Push and msg.indices is None:
            self._buffers.give(msg.values)
        frames = wire.encode(msg)
        nbytes = wire.frames_nbytes(frames)
        if self.dyn is not None:   # link_model network (check): after a partition heals, then the PS's queue
            edge = self.dyn.gate(dev.device, self.now) + dev.up.transfer_time(nbytes)
            seq = self._schedule(edge, _EDGE, dev.device, frames, epoch=dev.epoch)[1]
            dev.in_flight[seq] = nbytes
            return
        up = dev.up.transfer_time(nbytes)
        if self.spec.link_model == "kernel-rate":   # rate on the wire (tbf), delays slept by the agent
            rate = dev.up.rate
            dev.app_until = self.now + up - (nbytes * 8.0 / rate if rate else 0.0)
            self._schedule(self.now + kernel_rate_time(nbytes, rate, self.dilation), _ARRIVE, dev.device, frames)
        elif self.spec.link_model == "app":
            dev.sent_until = self.now + up
            self._schedule(self.now, _ARRIVE, dev.device, frames)
        else:
            self._schedule(self.now + up, _ARRIVE, dev.device, frames)

    def _arrive(self, dev: _Device, frames) -> None:
        """A message reaches the PS; its reply (unless held) goes down the device's downlink."""
        reply = self.ps.process(dev.peer, frames)
        if reply is not None:
            self._deliver(dev.peer, reply)

    def _deliver(self, peer: bytes, frames) -> None:
        """A reply leaves the PS for the device (also ``Hooks.send`` for held replies).

        A model is taken by the device now (``DeviceProtocol.receive_early``: its compute and the
        push's compression happen at once, while this Θ is current), so what crosses the downlink
        and waits out the compute and think time is only what the device will send, not Θ; the
        deferred (batched) gradients need their Θ and take the model at its arrival."""
        dev = self._by_peer[peer]
        if self.dyn is not None and (self._void_reply or not dev.online):
            return             # to a device that went away after sending: lost
        nbytes = wire.frames_nbytes(frames)
        reply = wire.decode(frames, self.ps.config.max_message_bytes, nbytes)
        sync = self.spec.sync_time if isinstance(reply, wire.Model) else 0.0   # + 0.0: the same floats
        if (isinstance(reply, wire.Model) and not dev.machine.deferred_gradients and dev.code is None
                and not dev.frozen and dev.online):
            t0 = time.perf_counter()
            if self.pool is not None and dev.machine.policy.separable:
                self._submit(dev, reply)
            else:
                dev.machine.receive_early(reply)
            self.stats["compute_s"] += time.perf_counter() - t0
            reply = _EARLY
        if self.dyn is not None:
            leaves = self.dyn.ps_out.serve(self.now, nbytes)
            self._schedule(self.dyn.gate(dev.device, leaves) + dev.down.transfer_time(nbytes) + sync, _REPLY,
                           dev.device, reply, epoch=dev.epoch)
            return
        down = dev.down.transfer_time(nbytes)
        if self.spec.link_model == "kernel-rate":   # handled once it arrived and the agent slept its delay
            rate = dev.down.rate
            arrives = self.now + kernel_rate_time(nbytes, rate, self.dilation)
            self._schedule(max(arrives, dev.app_until) + down - (nbytes * 8.0 / rate if rate else 0.0) + sync,
                           _REPLY, dev.device, reply)
            return
        self._schedule(max(self.now, dev.sent_until) + down + sync, _REPLY, dev.device, reply)

    # -- work computed ahead by the workers (sim_pool.py) ---------------------------------------
    def _submit(self, dev: _Device, reply: wire.Model) -> None:
        """The device takes the model now (``receive_ahead``); its work goes to a worker."""
        model, batches = dev.machine.receive_ahead(reply)
        if not self.pool.configured:
            cfg = dev.machine.config
            self.pool.configure({"workload": cfg.workload, "model_path": cfg.model_path, "seed": cfg.seed,
                                 "batch_size": cfg.algorithm["batch_size"], "policy": cfg.policy,
                                 "carry_buffers": dev.machine.trainer.carry_buffers}, self.spec.threads)
        try:
            dev.ahead = self.pool.submit(model.params, model.version, batches,
                                         f"device {dev.device}'s work at version {model.version}")
        except BaseException:
            self._abandon()
            raise

    def _fill_ahead(self, dev: _Device) -> None:
        """The push is due: the worker's result, waited for if not back yet."""
        ticket, dev.ahead = dev.ahead, None
        try:
            values, loss = self.pool.result(ticket)
        except BaseException:
            self._abandon()
            raise
        dev.machine.fill_ahead(values, loss)

    def _abandon(self) -> None:
        """A worker failed: no device can push any more; they end (code 1) so the run's drain does not
        ask the workers again, and the pool's processes end now."""
        self._heap.clear()
        for dev in self.devices.values():
            if dev.code is None:
                dev.code = 1
        self.pool.shutdown()

    # -- batched compute -----------------------------------------------------------------------
    def _fill_deferred(self, dev: _Device) -> None:
        """Compute ``dev``'s deferred gradient, and with it those of the devices that push next."""
        if dev.machine.deferred_upload is None:
            return
        t0 = time.perf_counter()
        waiting = [x for x in self.devices.values()
                   if x.machine.deferred_upload is not None and x.code is None and not x.frozen]
        waiting.sort(key=lambda x: x.ready)
        batch = waiting[: self.spec.max_batch]
        assert batch[0] is dev, "the device pushing now must have the earliest push"
        if len(batch) == 1:
            grads = [dev.machine.trainer.gradient(dev.machine.deferred_upload.theta)]
        else:
            from ...device_agent.batched import trainer_batches
            g, losses = self._batched([x.machine.deferred_upload.theta for x in batch],
                                      *trainer_batches([x.machine.trainer for x in batch]))
            grads = list(zip(g, losses))
        for x, (grad, loss) in zip(batch, grads):
            up = x.machine.deferred_upload
            up.values, up.loss, up.theta = grad, float(loss), None   # the snapshot is no longer needed
        self.stats["batches"] += 1
        self.stats["compute_s"] += time.perf_counter() - t0

    def cleanup(self) -> None:
        from ...rundir import write_json_atomic
        if self.pool is not None:
            self.pool.shutdown()
            self.stats.update(worker_jobs=self.pool.jobs, worker_wait_s=self.pool.waited_s,
                              worker_busy_s=self.pool.busy_s, **({"worker_where": self.pool.where}
                                                                 if hasattr(self.pool, "where") else {}))
        if self.run_dir.is_dir():
            write_json_atomic(self.run_dir / "sim.json", {
                "virtual_time_s": self.now, **self.spec.model_dump(), "step_time": self.step_time,
                **{k: round(v, 3) if isinstance(v, float) else v for k, v in self.stats.items()},
                **({"wasted_uplink_bytes": sum(d.wasted_bytes for d in self.devices.values())}
                   if self.dyn is not None else {})})


class _Waited:
    """Marker in a device's action list: its Wait is over, ask the machine for the push."""
