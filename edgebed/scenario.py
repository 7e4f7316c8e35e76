"""Scenario: the validated, pure-data description of one experiment.

One config path: the defaults below → the YAML file → ``--set a.b=c`` overrides. The engine turns a
``Scenario`` into processes, containers or events; nothing here starts anything. Units in the YAML are
human strings (see ``edgebed.units``); after validation every rate is bits/s, every duration seconds,
every probability a fraction.
"""
from __future__ import annotations

import bisect
import copy
import functools
import logging
from itertools import accumulate
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from .atomic import replacing
from .crashes import CrashSchedule, CrashSpec, crash_schedule
from .dynamics import DynamicsSpec
from .algorithms import ALGORITHMS, FLAT_KEYS, Algorithm, AlgorithmParams, own_keys, takers
from .units import Duration, Fraction, Rate


class ScenarioError(ValueError):
    """A scenario that can't be used: says which file, which key and what to do."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


DATA_FORMATS = ("idx", "cifar10", "cifar100", "imagefolder", "npz", "parquet", "arrow", "leaf", "python")


class Normalise(_Strict):
    mean: list[float] = Field(..., min_length=1, description="per-channel mean, on the [0, 1] scale for "
                              "images stored as bytes")
    std: list[float] = Field(..., min_length=1, description="per-channel standard deviation (> 0)")


class DatasetSpec(_Strict):
    name: Literal["mnist", "fashion-mnist"] = "mnist"
    format: Literal[DATA_FORMATS] = Field("idx", description="how the data set is stored "
                                          "(edgebed/data/formats.py, docs/data.md): idx (MNIST layout), "
                                          "cifar10, cifar100, imagefolder, npz, parquet, arrow, leaf, python")
    # bundled: the 10,000 MNIST digits shipped in the package; path: an IDX directory (or the format's
    # file / directory); download: the standard files, verified, cached in `path` (or ~/.cache/edgebed).
    source: Literal["bundled", "path", "download"] = "bundled"
    path: Optional[str] = None
    test_path: Optional[str] = Field(None, description="formats with one split per file (imagefolder, npz, "
                                     "parquet, arrow, leaf): the test split's file; absent: test_fraction "
                                     "of the training file is held out")
    options: dict[str, Any] = Field(default_factory=dict, description="the format's own options "
                                    "(docs/data.md): x_key/y_key/users_key (npz), image_column/label_column/"
                                    "user_column/shape (parquet), label (cifar100), channels/size/"
                                    "follow_symlinks (imagefolder), vocab (leaf), factory/args (python)")
    normalise: Optional[Normalise] = Field(None, description="images: per-channel mean/std (default: "
                                           "computed from the training split; idx: MNIST's)")
    # When the source has no separate test split (bundled), this fraction is held out for testing.
    test_fraction: Fraction = 0.2
    train_samples: Optional[int] = Field(None, gt=0, description="use only the first N training samples")
    # Tuning: the last N samples of the training split are held out and evaluated *instead of* the
    # test set (which is then never read), so α is chosen without looking at the test set.
    validation_samples: Optional[int] = Field(None, gt=0, description="hold out the last N training "
                                              "samples and evaluate on them instead of the test set")
    partition: Literal["iid", "by-label", "dirichlet", "natural", "quantity"] = "iid"
    labels_per_worker: int = Field(2, ge=1, le=10, description="for partition: by-label")
    # Partitions of edgebed/data/partitions.py (docs/data.md): Dirichlet(α) label skew, natural (one
    # user per device), quantity skew (log-normal or power-law device sizes).
    alpha: Optional[float] = Field(None, gt=0, description="for partition: dirichlet, the concentration α "
                                   "(0.1: strong label skew, 100: near IID)")
    min_size: int = Field(1, ge=1, description="for partition: dirichlet and quantity, the fewest samples a "
                          "device may get (dirichlet redraws until every device has them)")
    sizes: Literal["lognormal", "powerlaw"] = Field("lognormal", description="for partition: quantity, how "
                                                    "device sizes are drawn")
    sigma: float = Field(1.0, ge=0, description="for partition: quantity with sizes: lognormal, the σ of "
                         "log-normal(0, σ) device sizes")
    exponent: float = Field(1.0, ge=0, description="for partition: quantity with sizes: powerlaw, device "
                            "sizes ∝ rank^-exponent")
    # Off: the paper's disjoint shards (every device a different slice; n ≤ the training samples). On:
    # each device draws its own k samples from its own stream (seed, device), overlapping across
    # devices as in FL simulators, so populations larger than the data set can run (docs/scale.md).
    samples_per_device: Optional[int] = Field(None, gt=0, description="each device draws its own sample of "
                                              "this many training samples (overlapping across devices) "
                                              "instead of a disjoint shard")

    @model_validator(mode="before")
    @classmethod
    def _source_default(cls, v: Any):
        """Formats other than idx have nothing bundled: their source defaults to path."""
        if isinstance(v, dict) and v.get("format", "idx") != "idx" and "source" not in v:
            v = {**v, "source": "download" if v.get("format") in ("cifar10", "cifar100") and not v.get("path")
                 else "path"}
        return v

    @model_validator(mode="after")
    def _path_needed(self):
        if self.format == "python":
            if not self.options.get("factory"):
                raise ValueError("format: python needs options.factory: 'package.module:function'")
        elif self.source == "path" and not self.path:
            raise ValueError("source: path needs `path:` (a directory with the four IDX files, or the "
                             "format's file or directory)")
        if self.format != "idx" and self.source == "bundled":
            raise ValueError(f"format {self.format} has nothing bundled; use source: path with path: "
                             "(or source: download for cifar10 / cifar100)")
        if self.source == "download" and self.format not in ("idx", "cifar10", "cifar100"):
            raise ValueError(f"source: download works for idx, cifar10 and cifar100, not {self.format}; "
                             "give source: path")
        if self.test_path and self.format in ("idx", "cifar10", "cifar100", "python"):
            raise ValueError(f"test_path: format {self.format} has its test split in the same place; remove it")
        if self.partition == "dirichlet" and self.alpha is None:
            raise ValueError("partition: dirichlet needs `alpha:` (e.g. 0.5; smaller is more skewed)")
        if self.samples_per_device and self.partition not in ("iid", "by-label"):
            raise ValueError(f"samples_per_device works with partition iid or by-label, not {self.partition}")
        if self.name == "fashion-mnist" and self.source == "bundled":
            raise ValueError("fashion-mnist is not bundled; use source: path with "
                             "path: /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist)")
        return self


class ModelSpec(_Strict):
    name: str = Field("cnn", description="the workload: a registry key (cnn, mlp) or an import path "
                      "'package.module:attr' naming a Workload or a function returning an nn.Module "
                      "(edgebed/workload.py)")
    path: Optional[str] = Field(None, description="a directory to import the model's module from "
                                "(relative to the scenario file; default for an import path: the "
                                "scenario file's directory); devices and the evaluator get it too")
    buffers: Literal["auto", "recompute", "average", "local"] = Field(
        "auto", description="what becomes of the running statistics of normalisation layers (BatchNorm): "
        "`recompute`, the evaluator re-estimates them for the weights it evaluates from buffer_samples "
        "training samples (a gradient push carries none); `average`, they travel in Θ after the "
        "weights and are averaged with them (averaging rules only); `local`, each device keeps its own "
        "(FedBN) and the evaluator recomputes; `auto`: recompute for asgd, comp-asgd and adacomp, "
        "average for the averaging rules (docs/your-own-model.md)")
    buffer_samples: int = Field(1000, ge=1, description="training samples the evaluator recomputes the "
                                "running statistics from (buffers recompute or local): the first N of "
                                "a permutation seeded by the scenario's seed, in batches of 100")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the model's "
                                 "factory (e.g. {depth: 8, in_channels: 1} for resnet20); recorded in the "
                                 "resolved scenario, so study cells can vary them (model.args.depth)")

    @model_validator(mode="before")
    @classmethod
    def _factory_alias(cls, v: Any):
        """``factory:`` is another spelling of ``name:`` (the Hydra habit); the resolved scenario says name."""
        if isinstance(v, dict) and "factory" in v:
            if "name" in v:
                raise ValueError("give the model as name: or factory:, not both")
            v = {k: x for k, x in v.items() if k != "factory"} | {"name": v["factory"]}
        return v

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        from .workload import WORKLOADS
        if v not in WORKLOADS and ":" not in v:
            raise ValueError(f"unknown model {v!r}: use one of {sorted(WORKLOADS)} or an import path "
                             "'package.module:factory'")
        return v


DEFAULT_ALGORITHM = "adacomp"


def _algorithm_section(value: Any) -> Any:
    """The ``algorithm`` section as the union reads it: ``name`` defaults to adacomp, and a section in
    the flat form older runs recorded (every key of every algorithm, ``FLAT_KEYS``) keeps only its own
    algorithm's keys, so their scenario.yaml still loads and compares equal to today's."""
    if isinstance(value, dict):
        value = {"name": DEFAULT_ALGORITHM, **value}
        if set(FLAT_KEYS) <= value.keys():
            value = own_keys(value)
    return value


class CompressionSpec(_Strict):
    """Beyond the update rule's selection (edgebed/compression): error feedback, quantization, and the
    wire encodings of pushes and pulls. The defaults are the paper's: no residual, float32 values,
    wire version 1 — so the paper-reproduction studies' bytes stay comparable."""
    error_feedback: bool = Field(False, description="keep the residual of what was not sent on the "
                                 "device and add it to the next gradient (gradient rules)")
    momentum: float = Field(0.0, ge=0, lt=1, description="DGC momentum correction m (needs error_feedback)")
    quantize: Literal["none", "q8"] = Field("none", description="q8: 8-bit stochastic quantization of "
                                            "the sent values, one scale per layer (needs encoding: compact)")
    encoding: Literal["v1", "compact"] = Field("v1", description="pushes: v1 = uint32 indices + float32 "
                                               "values; compact = wire v2 (wire/codec.py)")
    values: Literal["f32", "f16", "bf16"] = Field("f32", description="compact push values")
    indices: Literal["auto", "varint", "bitmap"] = Field("auto", description="compact push indices "
                                                         "(auto: the smaller per push)")
    zstd: bool = Field(False, description="zstd the compact pushes and pulls when smaller (pip install "
                       "'edgebed[zstd]')")
    pull: Literal["f32", "f16", "bf16"] = Field("f32", description="model values sent at each pull")
    pull_delta: bool = Field(False, description="send the delta since the device's last pull when smaller")

    @model_validator(mode="after")
    def _consistent(self):
        if self.momentum and not self.error_feedback:
            raise ValueError("momentum (DGC's momentum correction) needs error_feedback: true")
        if self.encoding == "v1":
            bad = [k for k, d in (("quantize", "none"), ("values", "f32"), ("indices", "auto"))
                   if getattr(self, k) != d]
            if bad:
                raise ValueError(f"{', '.join(bad)} change(s) the push encoding: set encoding: compact "
                                 "(v1 always sends uint32 indices and float32 values)")
        if self.zstd:
            from .wire.codec import zstandard
            if zstandard is None:
                raise ValueError("zstd: true needs the zstandard package: pip install 'edgebed[zstd]'")
        return self

    @property
    def compact_pulls(self) -> bool:
        return self.pull != "f32" or self.pull_delta

    def push_codec(self):
        """The wire codec of pushes (None: version 1)."""
        from .wire.codec import Codec
        return Codec(self.values, self.indices, self.zstd) if self.encoding == "compact" else None

    def downlink(self):
        """The PS's pull encoder (None: full float32 models, version 1)."""
        if not self.compact_pulls:
            return None
        from .compression.downlink import ModelDownlink
        from .wire.codec import Codec
        return ModelDownlink(Codec(self.pull, "auto", self.zstd), self.pull_delta)


class ThinkTime(_Strict):
    """Idle time between computing a gradient and pushing it."""
    dist: Literal["constant", "exponential", "uniform"] = "constant"
    mean: Duration = 0.0
    # uniform draws from [mean - spread, mean + spread]
    spread: Duration = 0.0

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any):
        if isinstance(v, (str, int, float)):
            return {"dist": "constant", "mean": v}
        return v


class LinkProfile(_Strict):
    """One direction of a device's access link. ``rate: null`` means unshaped."""
    rate: Optional[Rate] = None
    delay: Duration = 0.0
    jitter: Duration = 0.0
    loss: Fraction = 0.0


class SpeedClass(_Strict):
    name: str
    share: Fraction
    slowdown: float = Field(1.0, ge=1.0, description="compute time multiplier (1 = full speed)")
    think_time: ThinkTime = ThinkTime()
    uplink: LinkProfile = LinkProfile()
    downlink: LinkProfile = LinkProfile()


class WorkersSpec(_Strict):
    n: int = Field(..., ge=1, le=1_000_000)
    classes: list[SpeedClass] = Field(default_factory=lambda: [SpeedClass(name="default", share=1.0)])

    @model_validator(mode="after")
    def _shares(self):
        total = sum(c.share for c in self.classes)
        if abs(total - 1.0) > 1e-6:
            shares = ", ".join(f"{c.name}={c.share:g}" for c in self.classes)
            raise ValueError(f"class shares must sum to 1, got {total:g} ({shares}); fix the `share:` values")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"class names must be unique, got {names}")
        return self


class FailureSpec(_Strict):
    crash_probability: Fraction = Field(0.0, description="fail-stop probability per push (for k of n devices "
                                        "crashing, failures.crash states it directly)")
    crash: Optional[CrashSpec] = Field(None, description="an exact number of devices crash (fail-stop), chosen "
                                       "and timed by a seed: {fraction: 0.1 | devices: 2, between: [100, 400] "
                                       "(updates) or [30s, 2min], seed}; see edgebed/crashes.py")

    @model_validator(mode="after")
    def _one_form(self):
        if self.crash is not None and self.crash_probability > 0:
            raise ValueError("failures: give crash_probability (a draw per push) or crash (an exact number of "
                             "devices), not both; remove one")
        return self
    lost_after: Duration = Field(60.0, description="a device silent this long is recorded as lost")


class StopSpec(_Strict):
    updates: Optional[int] = Field(None, ge=1, description="I: stop after this many applied updates")
    target_accuracy: Optional[Fraction] = None
    wall_time: Optional[Duration] = Field(None, description="run time limit (sim: emulated time); on real-time "
                                          "runtimes counted from the first device's hello, so agent start-up "
                                          "is not run time (summary.json's startup says when it came)")
    first_hello_within: Duration = Field(300.0, gt=0, description="real-time runtimes: a run in which no device "
                                         "said hello this long after the agents were started ends failed "
                                         "(agent start-up, e.g. containers under load); raise it for slow hosts")

    @model_validator(mode="after")
    def _something(self):
        if self.updates is None and self.target_accuracy is None and self.wall_time is None:
            raise ValueError("give at least one of updates, target_accuracy, wall_time")
        return self


class DenseEval(_Strict):
    """Evaluate more often near target accuracies, where a to-target count is read: every
    ``every`` updates while the last evaluated accuracy is within ``within`` of one of ``near``."""
    near: list[Fraction] = Field(..., min_length=1, description="target accuracies (0–1 or %), e.g. [0.96, 0.97]")
    within: Fraction = Field(0.01, gt=0, description="how close to a target (accuracy points, 0–1) turns dense on")
    every: int = Field(..., ge=1, description="evaluate at every k-th update while dense; must divide eval.every")


class EvalSpec(_Strict):
    every: int = Field(250, ge=1, description="evaluate Θ at every k-th update")
    test_samples: Optional[int] = Field(None, ge=1, description="use the first N test samples")
    dense: Optional[DenseEval] = Field(None, description="evaluate every dense.every updates near the "
                                       "dense.near accuracies (off by default)")

    @model_validator(mode="after")
    def _dense_divides(self):
        if self.dense is not None and self.every % self.dense.every:
            raise ValueError(f"eval.dense.every ({self.dense.every}) must divide eval.every ({self.every}), "
                             "so the coarse evaluations stay on their grid; e.g. "
                             f"eval.dense.every: {max(1, self.every // 4)}")
        return self


class CheckpointSpec(_Strict):
    every: int = Field(0, ge=0, description="PS checkpoint every k applied updates (0: off); "
                       "`edgebed run --resume <run-dir>` restarts from the latest one")


class RobustSpec(_Strict):
    """security.robust: norm clipping of pushes against the recent median (``ps/robust.py``)."""
    clip: float = Field(1.5, gt=1.0, le=1e6, description="a push whose L2 norm is over this multiple of the "
                        "median norm of the last `window` pushes the PS applied is scaled down to it")
    window: int = Field(64, ge=3, le=100_000, description="pushes the median norm is taken over")


class SecuritySpec(_Strict):
    curve: bool = Field(False, description="ZeroMQ CURVE encryption + allow-list of per-run device keys")
    on_divergence: Literal["fail", "exclude"] = Field(
        "fail", description="when Θ diverges (NaN/Inf, or ‖Θ‖∞ over 100 × its initial scale), the device "
        "whose pushes moved it most is named and refused from then on; `fail`: the run ends failed "
        "(reason `diverged: …`); `exclude`: Θ goes back to its last sound state and the run goes on "
        "without that device")
    robust: Optional[RobustSpec] = Field(
        None, description="against a stealthy poisoner that stays under the value bound: `{clip: 1.5}` scales "
        "every push whose L2 norm is over 1.5 × the median of the recent pushes down to that norm (it slows a "
        "poisoner down, it does not stop one that pushes the same direction for long: docs in ps/robust.py); off (null) by default; cost on honest runs: "
        "benchmarks/results/robust.md")
    stall_timeout: Duration = Field(30.0, ge=0, description="the PS cuts a connection whose peer owes bytes (a "
                                    "frame or message begun, or its first message) and sent none this long, so "
                                    "stalled peers cannot hold the connection cap; progress, not a message's "
                                    "duration, is judged (a big push over a slow link is never cut). Without "
                                    "the frame guard, ZMTP heartbeats judge whole frames. 0: never")


class OutputSpec(_Strict):
    """What a run writes besides its tables (output only: runs that differ here are the same run)."""
    tensorboard: bool = Field(False, description="live curves while the run goes: TensorBoard event files "
                              "in <run dir>/tensorboard/ (evaluations, PS ingress, update rate, staleness, "
                              "live devices per class); needs pip install 'edgebed[tensorboard]'")


class TimingSpec(_Strict):
    """How real-time runtimes keep the scenario's clock (``edgebed/timing.py``); all off by default."""
    pacing: bool = Field(False, description="paced compute on local/docker/spark: a device's compute phase "
                         "lasts step_time × slowdown, never less (real compute runs inside it, the device "
                         "waits out the rest); overruns are counted and the run gets a fidelity verdict")
    step_time: Optional[Duration | Literal["calibrate"]] = Field(
        None, description="seconds per SGD step at slowdown 1 for pacing and the expected timing: a duration, "
        "or `calibrate` (timed on this host before the agents start); default: the sim's reference value")
    dilation: float | Literal["auto"] = Field(1.0, description="scale every configured time (compute, think, "
                                              "waiting time, link delay/jitter, 1/rate) by this factor on "
                                              "real-time runtimes; results are reported in emulated time. "
                                              "`auto`: the smallest factor the calibrated host can hold")
    wait: ThinkTime = Field(ThinkTime(), description="random waiting time of every device between compute and "
                            "push (the paper's platform: the order of worker updates is random); 0: off")
    tolerance: Fraction = Field(0.1, description="a speed class whose realized update rate or share is off "
                                "its expected value by more than this (relative) is reported distorted")

    @model_validator(mode="after")
    def _dilation_positive(self):
        if self.dilation != "auto" and not self.dilation > 0:
            raise ValueError(f"dilation must be > 0 (a factor; 1 = real time) or auto, got {self.dilation}")
        return self


# The runtimes' names, spelled here once; emulator/runtimes/__init__.py maps each to its class.
RUNTIME_NAMES = ("local", "docker", "sim", "spark", "compose", "swarm")


class RuntimeSpec(_Strict):
    name: Literal[RUNTIME_NAMES] = "local"
    local: dict[str, Any] = Field(default_factory=dict)
    # Sections of the other runtimes are free-form here and validated by the runtime itself
    # (its class has a `Spec` pydantic model), so an optional backend adds no import cost.
    docker: dict[str, Any] = Field(default_factory=dict)
    sim: dict[str, Any] = Field(default_factory=dict)
    spark: dict[str, Any] = Field(default_factory=dict)
    compose: dict[str, Any] = Field(default_factory=dict)   # set by `compose serve` in the PS container
    swarm: dict[str, Any] = Field(default_factory=dict)


class Scenario(_Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    device: Literal["cpu", "cuda"] = Field("cpu", description="where torch computes: cpu, or cuda (the first "
                                           "GPU) for the devices' gradients and local steps, the evaluator and "
                                           "the virtual clock's gradients; Θ stays float32 numpy at the PS and on "
                                           "the wire. validate refuses cuda where torch sees no CUDA device "
                                           "(untested on a GPU here: docs/performance.md)")
    dataset: DatasetSpec = DatasetSpec()
    model: ModelSpec = ModelSpec()
    algorithm: Annotated[Algorithm, BeforeValidator(_algorithm_section)] = Field(
        default_factory=lambda: ALGORITHMS[DEFAULT_ALGORITHM].params())
    compression: CompressionSpec = CompressionSpec()
    workers: WorkersSpec
    failures: FailureSpec = FailureSpec()
    stop: StopSpec
    eval: EvalSpec = EvalSpec()
    runtime: RuntimeSpec = RuntimeSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
    security: SecuritySpec = SecuritySpec()
    timing: TimingSpec = TimingSpec()
    output: OutputSpec = OutputSpec()
    dynamics: DynamicsSpec = Field(DynamicsSpec(), description="what changes while the run goes: availability "
                                   "churn, a device trace, timed network events, a shared PS link (docs/churn.md)")
    numerics: Literal["portable", "native"] = Field(
        "portable", description="which CPU kernels compute gradients and evaluations (`edgebed/numerics.py`): "
        "`portable`, the same bits on every x86-64 host with AVX2 (Intel or AMD) for the same torch; "
        "`native`, the host's fastest kernels, repeatable on the same host type only")

    @model_validator(mode="after")
    def _compression_applies(self):
        cp = self.compression
        gradient = [name for name, a in ALGORITHMS.items() if a.policy == "gradient"]
        if (cp.error_feedback or cp.quantize != "none") and self.algorithm.name not in gradient:
            raise ValueError(f"compression.error_feedback / quantize apply to gradient pushes ({', '.join(gradient)}), "
                             f"not to {self.algorithm.name}; remove them or change algorithm.name")
        return self

    @model_validator(mode="after")
    def _buffers_apply(self):
        if self.model.buffers == "average" and ALGORITHMS[self.algorithm.name].policy == "gradient":
            raise ValueError(f"model.buffers: average needs an averaging rule; {self.algorithm.name}'s devices "
                             "push gradients, which carry no running statistics; use recompute (or auto)")
        return self

    def buffer_policy(self) -> str:
        """``model.buffers`` with auto resolved: recompute for the gradient rules, average otherwise."""
        if self.model.buffers != "auto":
            return self.model.buffers
        return "recompute" if ALGORITHMS[self.algorithm.name].policy == "gradient" else "average"

    def statistics_in_theta(self) -> int:
        """Entries of running statistics Θ carries after the weights: the model's, when the buffer
        policy is average; else 0 (Θ is the weights alone)."""
        if self.buffer_policy() != "average":
            return 0
        from .models import statistics_size
        return statistics_size(self.model)

    @model_validator(mode="after")
    def _dynamics_names(self):
        problems = self.dynamics.problems([c.name for c in self.workers.classes], self.workers.n)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _crash_fits(self):
        spec = self.failures.crash
        if spec is not None:
            self.crash_schedule()   # raises a ValueError naming the key: too many devices, no window
            ends = {"updates": (self.stop.updates, "stop.updates"), "s": (self.stop.wall_time, "stop.wall_time")}
            end, key = ends[spec.unit()]
            if spec.between is not None and end is not None and spec.between[0] > end:
                raise ValueError(f"failures.crash.between: {spec.between} starts after {key} ({end:g}): no "
                                 f"crash would happen; move the window inside the run")
        return self

    def crash_schedule(self) -> Optional[CrashSchedule]:
        """``failures.crash`` as {device: crash point} (edgebed/crashes.py); None without one."""
        if self.failures.crash is None:
            return None
        classes = [(c.name, k) for c, k in zip(self.workers.classes, class_counts(self))]
        return crash_schedule(self.failures.crash, classes, self.stop.updates, self.seed)

    def class_of(self, device: int) -> SpeedClass:
        """The speed class of ``device`` (0..n-1), without listing every device's (O(classes))."""
        if not 0 <= device < self.workers.n:
            raise IndexError(f"device {device} of {self.workers.n}")
        return self.workers.classes[bisect.bisect_right(list(accumulate(class_counts(self))), device)]

    def to_dict(self, units: bool = True) -> dict:
        """The scenario as JSON types, a valid scenario file: rates and durations as strings with their
        unit (``1000000bit``, ``0.02s``), or without ``units`` as numbers in bits/s and seconds."""
        out = self.model_dump(mode="json", context={"units": "write"} if units else None)
        if self.timing == TimingSpec():   # absent when off: resolved scenarios of older runs stay equal
            del out["timing"]
        if self.output == OutputSpec():   # likewise
            del out["output"]
        if self.dynamics == DynamicsSpec():   # likewise
            del out["dynamics"]
        if self.failures.crash is None:   # likewise
            del out["failures"]["crash"]
        if self.security.robust is None:  # likewise
            del out["security"]["robust"]
        if self.model.path is None:       # likewise
            del out["model"]["path"]
        if not self.model.args:           # likewise
            del out["model"]["args"]
        for key in ("buffers", "buffer_samples"):   # likewise, at their defaults
            if getattr(self.model, key) == ModelSpec.model_fields[key].default:
                del out["model"][key]
        for key in ("format", "test_path", "options", "normalise"):   # likewise, at their defaults
            if getattr(self.dataset, key) == DatasetSpec.model_fields[key].get_default(call_default_factory=True):
                del out["dataset"][key]
        return out


def class_counts(sc: Scenario) -> list[int]:
    """Devices per speed class, in class order: n split by the shares, by largest remainder."""
    n = sc.workers.n
    raw = [c.share * n for c in sc.workers.classes]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def class_assignment(sc: Scenario) -> list[int]:
    """Speed-class index of each device 0..n-1: contiguous blocks of ``class_counts`` devices."""
    return [i for i, k in enumerate(class_counts(sc)) for _ in range(k)]


def _list_index(node: list, part: str, where: str, assignment: str) -> int:
    """``part`` as an index into ``node``: a number in range, or the ``name:`` of an entry (classes)."""
    names = [e.get("name") for e in node if isinstance(e, dict)]
    if part in names:
        return names.index(part)
    if part.lstrip("-").isdigit() and 0 <= int(part) < len(node):
        return int(part)
    valid = f"0..{len(node) - 1}" if node else "none: the list is empty"
    named = f" or a name ({', '.join(map(str, filter(None, names)))})" if any(names) else ""
    raise ScenarioError(f"--set {assignment!r}: {where} has {len(node)} entries; use an index "
                        f"({valid}){named}, or edit the file to add one")


def apply_override(data: dict, assignment: str) -> str:
    """Apply one ``a.b.c=value`` override in place; the value is parsed as YAML (``0.1``, ``true``).
    Returns the key path it wrote with list entries as indices (``workers.classes.1.share``).

    A list entry is addressed by index or by its ``name:`` (``workers.classes.slow.share=0.2``)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected key.path=value, e.g. algorithm.c=0.1")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ScenarioError(f"--set {assignment!r}: empty key in {key.strip()!r}; e.g. algorithm.c=0.1")
    try:
        value = load_yaml_text(raw)
    except yaml.YAMLError as err:
        raise ScenarioError(f"--set {assignment!r}: the value is not valid YAML "
                            f"({getattr(err, 'problem', None) or err}); "
                            "quote it, e.g. --set 'name=\"x: y\"'") from None
    node: Any = data
    resolved = list(parts)
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "the scenario"
        last = depth == len(parts) - 1
        if isinstance(node, list):
            i = _list_index(node, part, where, assignment)
            resolved[depth] = str(i)
            if last:
                node[i] = value
            else:
                node = node[i]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if node.get(part) is None:     # absent, or `key:` with nothing (null)
                    if parts[depth + 1].isdigit():
                        here = ".".join(parts[:depth + 1])
                        raise ScenarioError(f"--set {assignment!r}: {here} is not in the file (its default "
                                            f"applies), so it has no entry {parts[depth + 1]}; write "
                                            f"{here}: in the file first")
                    node[part] = {}
                node = node[part]
        else:
            raise ScenarioError(f"--set {assignment!r}: {where} is a value ({node!r}), not a section; "
                                f"set {where}=... instead")
    return ".".join(resolved)


def _walk(loc: tuple) -> tuple[list, Any]:
    """(the key path of a pydantic error location without the union tags pydantic puts in it —
    ``algorithm.asgd.delta`` → ``algorithm.delta`` —, the model at the end of it or None)."""
    model: Any = Scenario
    path: list = []
    members: dict = {}   # tag → model, right after a union field
    for part in loc:
        if part in members:
            model, members = members[part], {}
            continue
        path.append(part)
        if isinstance(part, int) or model is None:
            continue
        field = getattr(model, "model_fields", {}).get(part)
        ann = field.annotation if field is not None else None
        models = [t for t in (*getattr(ann, "__args__", ()), ann) if isinstance(t, type) and issubclass(t, BaseModel)]
        if len(models) > 1 and all("name" in m.model_fields for m in models):
            members = {m.model_fields["name"].default: m for m in models}
        model = models[0] if models else None
    return path, model


def _extra_key(loc: tuple) -> str:
    """What to say of a key the schema does not take at ``loc``."""
    path, model = _walk(loc[:-1])
    key = loc[-1]
    if isinstance(model, type) and issubclass(model, AlgorithmParams) and takers(key):
        users = takers(key)
        return (f"a parameter of {' and '.join(users)}, not of {model.model_fields['name'].default}; "
                f"remove it or set algorithm.name to {users[0]}")
    known = list(getattr(model, "model_fields", {}))
    return (f"unknown key{did_you_mean(key, known)}"
            + ("" if did_you_mean(key, known) else f"; the keys here are {', '.join(known)}" if known else "; remove it")
            + f" ({REFERENCE} lists every key)")


# Where a user reads every scenario key: the documentation site's generated reference page.
REFERENCE = "the docs' Scenario keys page, scenario-reference/ on the site (make docs),"


def did_you_mean(word: str, choices) -> str:
    """`` — did you mean 'x'?`` for the closest choice, or ``""``."""
    import difflib
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _set_by(loc: str, overrides: tuple) -> Optional[str]:
    """The last ``--set`` that wrote ``loc`` (the key itself, a key inside it, or its section); an
    override is its text or (the key path it wrote, its text)."""
    for ov in reversed(overrides):
        key, ov = ov if isinstance(ov, tuple) else (ov.split("=", 1)[0].strip(), ov)
        if key == loc or loc.startswith(key + ".") or key.startswith(loc + "."):
            return ov
    return None


# An error report stays readable whatever the file: at most this many problems, each line cut here.
MAX_ERRORS = 10
MAX_LINE = 300


def said(override: str, via: str = "--set") -> str:
    """How a message names an override ``k=v``: ``--set 'k=v'`` for the command line; from Python
    (``via="overrides"``, edgebed.run's argument) ``overrides['k'] = 'v'``."""
    if via == "--set" or "=" not in override:
        return f"{via} {override!r}"
    key, value = override.split("=", 1)
    return f"{via}[{key.strip()!r}] = {value!r}"


def format_errors(err: ValidationError, source: str, prefix: str = "", overrides: tuple[str, ...] = (),
                  via: str = "--set") -> str:
    """One line per problem: ``source: key.path: what is wrong and what to do`` — with ``--set 'k=v'
    (on source)`` as the source where an override wrote the key (``via``: see ``said``)."""
    lines = []
    errors = err.errors()
    for e in errors[:MAX_ERRORS]:
        path = _walk(tuple(e["loc"]))[0] if not prefix else list(e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        dotted = ".".join([prefix] * bool(prefix) + [str(x) for x in path])
        ov = _set_by(dotted, overrides)
        section = _walk(tuple(e["loc"]))[1] if not prefix else None
        if e["type"] in ("model_type", "dict_type") and isinstance(e.get("input"), str) and \
                "name" in getattr(section, "model_fields", {}):   # `runtime: sim` for `runtime: {name: sim}`
            msg = (f"{e['input']!r} is a name, and {dotted} is a section: "
                   + (f"write --set {dotted}.name={e['input']}" if ov else
                      f"write `{dotted}: {{name: {e['input']}}}`"))
        elif e["type"] == "extra_forbidden":
            msg = _extra_key(tuple(e["loc"]))
        elif e["type"] == "union_tag_invalid":   # an unknown algorithm.name
            ctx = e.get("ctx", {})
            path.append(str(ctx.get("discriminator", "name")).strip("'"))
            names = [x.strip().strip("'") for x in str(ctx.get("expected_tags", "")).split(",")]
            msg = (f"{ctx.get('tag')!r} is not one of {', '.join(names)}{did_you_mean(ctx.get('tag'), names)}"
                   if names else msg)
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] == "literal_error":
            expected = [x.strip().strip("'") for x in str(e.get("ctx", {}).get("expected", "")).replace(" or ", ", ").split(",")]
            msg += did_you_mean(e.get("input"), expected)
        loc = ".".join([prefix] * bool(prefix) + [str(x) for x in path]) or "(top level)"
        line = f"{f'{said(ov, via)} (on {source})' if ov else source}: {loc}: {msg}"
        lines.append(line if len(line) <= MAX_LINE else line[:MAX_LINE - 1] + "…")
    if len(errors) > MAX_ERRORS:
        lines.append(f"{source}: … and {len(errors) - MAX_ERRORS:,} more problems (fix these first)")
    return "\n".join(lines)


def read_yaml(path: str | Path, what: str = "scenario") -> Any:
    """The YAML document in ``path``; ScenarioError naming the file when it is missing, not UTF-8
    text (binary, UTF-16), not valid YAML, a key twice in a mapping, or aliases that expand it past
    ``MAX_EXPANDED_NODES`` values (``load_yaml_text``)."""
    path = Path(path)
    if not path.is_file():
        shipped = "scenarios/studies/" if what == "study" else "scenarios/"
        raise ScenarioError(f"{path}: no such {what} file (the shipped ones are in {shipped})")
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw[:4096]:
        kind = "UTF-16 text" if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or raw[1:2] == b"\x00" else "binary"
        how = " (iconv -f UTF-16 -t UTF-8)" if kind.startswith("UTF") else ""
        raise ScenarioError(f"{path}: is {kind}, not a UTF-8 YAML {what} file; give a YAML file"
                            f"{' saved as UTF-8' + how if how else ''}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ScenarioError(f"{path}: not UTF-8 text (byte {err.start}: {raw[err.start:err.start + 1]!r}); "
                            "save it as UTF-8") from None
    try:
        return load_yaml_text(text)
    except TooLarge as err:
        raise ScenarioError(f"{path}: refused: {err}") from None
    except RecursionError:
        raise ScenarioError(f"{path}: refused: its values are nested too deep to read (a scenario is a "
                            "few levels deep); write them out flat") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ScenarioError(f"{path}: not valid YAML: {where}{problem}") from None


# A scenario is a few hundred values; aliases (`*name`) that expand beyond this many are refused
# before anything walks the expansion (a 600-byte "billion laughs" file expands to 10^8 values).
MAX_EXPANDED_NODES = 100_000


class TooLarge(yaml.YAMLError):
    """Valid YAML that expands beyond what a scenario may hold."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (YAML says keys are unique;
    PyYAML would keep the last one silently). Keys merged in by ``<<:`` may still be overridden."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:   # an unhashable key: the base class says so
                    break
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first.start_mark.line + 1}); "
                        "YAML keys are unique: keep one", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(node, memo: dict, inside: set | None = None) -> int:
    """How many nodes ``node`` stands for once every alias is copied out (aliases share nodes). A node
    reached again from inside itself (``&a [*a]``) has no finite size: ``yaml.YAMLError`` at its line
    (its values would be written to a run directory's scenario.yaml, which can't hold a cycle)."""
    done = memo.get(id(node))
    if done is not None:
        return done
    inside = set() if inside is None else inside
    if id(node) in inside:
        raise yaml.constructor.ConstructorError(
            None, None, "this value contains itself (an alias *name used inside its own &name): a "
            "scenario's values must be finite; write the inner value out", node.start_mark)
    inside.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(v, memo, inside) for v in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo, inside) + _expanded_size(v, memo, inside) for k, v in node.value)
    else:
        size = 1
    inside.discard(id(node))
    memo[id(node)] = size
    return size


def load_yaml_text(text: str) -> Any:
    """The YAML document in ``text`` (safe types only), refusing duplicate keys and aliases that expand
    to more than ``MAX_EXPANDED_NODES`` values; ``yaml.YAMLError`` otherwise."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {})
        if size > MAX_EXPANDED_NODES:
            raise TooLarge(f"its aliases (*name) expand to {size:,} values, more than the "
                                 f"{MAX_EXPANDED_NODES:,} a scenario may hold; write the values out or "
                                 "use fewer nested aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _algorithm_name(data: dict) -> Any:
    section = data.get("algorithm")
    return section.get("name", DEFAULT_ALGORITHM) if isinstance(section, dict) else None


@functools.lru_cache(maxsize=64)
def _notice(text: str) -> None:
    """Say ``text`` once per process (a study resolves the same cell for every seed)."""
    logging.getLogger("edgebed.scenario").warning(text)


def parse_scenario(data: dict, source: str = "<scenario>", overrides: tuple[str, ...] = (),
                   resolved: bool = False, notify: bool = True, via: str = "--set") -> Scenario:
    """Override and validate a scenario's data. Rates and durations need their unit (``10mbit``,
    ``20ms``) unless ``resolved``: a scenario a run recorded before units were written out (bare SI
    numbers: bits/s, seconds). With ``notify``, an ``algorithm.name`` override that drops the keys
    the new algorithm does not take logs a warning naming them (a study's cells do this by design).
    ``via``: how messages name an override (``--set``; ``overrides`` from Python: ``said``)."""
    try:
        data = copy.deepcopy(data) if data is not None else {}
        if isinstance(data, dict):
            _refuse_cycles(data, source)
    except RecursionError:
        raise ScenarioError(f"{source}: its values are nested too deep (a scenario is a few levels deep)") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: the top level must be a mapping of keys (name:, workers:, ...)")
    written = []
    for ov in overrides:
        before = _algorithm_name(data)
        try:
            written.append((apply_override(data, ov), ov))
        except ScenarioError as err:   # the --set is at fault, not the file
            raise ScenarioError(f"{err} (on {source})".replace(f"--set {ov!r}", said(ov, via), 1)) from None
        if ov.split("=", 1)[0].strip() == "algorithm.name" and _algorithm_name(data) != before:
            # A switch of algorithm (a study cell, --set): the parameters set before it that the new
            # one does not take were the previous algorithm's, and go; those set after it must apply.
            section = data["algorithm"]
            kept = own_keys(section)
            dropped = ", ".join(f"{k}={section[k]!r}" for k in section if k not in kept)
            if dropped and notify:
                _notice(f"{said(ov, via)} (on {source}): {_algorithm_name(data)} does not take {dropped}; "
                        "dropped (set the new algorithm's own parameters after the switch)")
            data["algorithm"] = kept
    try:
        return Scenario.model_validate(data, context=None if resolved else {"units": "required"})
    except ValidationError as err:
        raise ScenarioError(format_errors(err, source, overrides=tuple(written), via=via)) from None


def _refuse_cycles(value: Any, source: str, where: str = "", inside: set | None = None, done: set | None = None) -> None:
    """ScenarioError for a mapping or list that contains itself (a dict built in Python; a file's
    recursive alias is refused as it is read): a run's scenario.yaml could not hold it."""
    inside, done = (set(), set()) if inside is None else (inside, done)
    if not isinstance(value, (dict, list)) or id(value) in done:
        return
    if id(value) in inside:
        raise ScenarioError(f"{source}: {where or '(top level)'} contains itself: a scenario's values must "
                            "be finite; give a copy of the inner value instead")
    inside.add(id(value))
    for key, item in value.items() if isinstance(value, dict) else enumerate(value):
        _refuse_cycles(item, source, f"{where}.{key}" if where else str(key), inside, done)
    inside.discard(id(value))
    done.add(id(value))


def load_scenario(path: str | Path, overrides: tuple[str, ...] = (), via: str = "--set") -> Scenario:
    """Read, override and validate a scenario file. Raises ScenarioError with file and key path."""
    data = read_yaml(path)
    model = data.get("model") if isinstance(data, dict) else None
    if isinstance(model, dict) and ":" in str(model.get("name", model.get("factory", ""))) or \
            isinstance(model, dict) and model.get("path"):
        # a user's module: importable from the scenario file's directory, or model.path relative to it
        data = {**data, "model": {**model, "path": str((Path(path).resolve().parent / model.get("path", ".")).resolve())}}
    return parse_scenario(data, str(path), tuple(overrides), via=via)


def load_resolved(path: str | Path, overrides: tuple[str, ...] = ()) -> Scenario:
    """Read a run directory's ``scenario.yaml`` (what ``dump_scenario`` wrote, today or before units were
    written out): as ``load_scenario``, bare numbers read as SI units (bits/s, seconds)."""
    return parse_scenario(read_yaml(path), str(path), tuple(overrides), resolved=True)


def dump_scenario(sc: Scenario, path: str | Path) -> None:
    """Write the scenario as YAML, atomically (a run's own scenario.yaml is read while it runs)."""
    with replacing(path) as tmp:
        tmp.write_text(yaml.safe_dump(sc.to_dict(), sort_keys=False))
