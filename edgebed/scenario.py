"""Scenario: the validated, pure-data description of one experiment.

One config path: the defaults below → the YAML file → ``--set a.b=c`` overrides. The engine turns a
``Scenario`` into processes, containers or events; nothing here starts anything. Units in the YAML are
human strings (see ``edgebed.units``); after validation every rate is bits/s, every duration seconds,
every probability a fraction.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from . import units

Rate = Annotated[float, BeforeValidator(units.parse_rate)]
Duration = Annotated[float, BeforeValidator(units.parse_duration)]
Fraction = Annotated[float, BeforeValidator(units.parse_fraction)]


class ScenarioError(ValueError):
    """A scenario that can't be used: says which file, which key and what to do."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetSpec(_Strict):
    name: Literal["mnist", "fashion-mnist"] = "mnist"
    # bundled: the 10,000 MNIST digits shipped in the package; path: an IDX directory;
    # download: the standard MNIST files, sha256-verified, cached in `path` (or ~/.cache/edgebed).
    source: Literal["bundled", "path", "download"] = "bundled"
    path: Optional[str] = None
    # When the source has no separate test split (bundled), this fraction is held out for testing.
    test_fraction: Fraction = 0.2
    train_samples: Optional[int] = Field(None, gt=0, description="use only the first N training samples")
    # Tuning: the last N samples of the training split are held out and evaluated *instead of* the
    # test set (which is then never read), so α is chosen without looking at the test set.
    validation_samples: Optional[int] = Field(None, gt=0, description="hold out the last N training "
                                              "samples and evaluate on them instead of the test set")
    partition: Literal["iid", "by-label"] = "iid"
    labels_per_worker: int = Field(2, ge=1, le=10, description="for partition: by-label")

    @model_validator(mode="after")
    def _path_needed(self):
        if self.source == "path" and not self.path:
            raise ValueError("source: path needs `path:` (a directory with the four IDX files)")
        if self.name == "fashion-mnist" and self.source == "bundled":
            raise ValueError("fashion-mnist is not bundled; use source: path with "
                             "path: /usr/share/datasets/fashion-mnist (apt-get install dataset-fashion-mnist)")
        return self


class ModelSpec(_Strict):
    name: Literal["cnn", "mlp"] = "cnn"


# Parameters of the Spark papers' algorithms, and which algorithms use each (others refuse them).
_ALGORITHM_PARAMS = {
    "local_steps": ("model-averaging", "dynamic-averaging"),
    "delta": ("dynamic-averaging",),
    "moving_rate": ("easgd",),
    "loss_threshold": ("easgd",),
}


class AlgorithmSpec(_Strict):
    name: Literal["asgd", "comp-asgd", "adacomp", "model-averaging", "dynamic-averaging", "easgd"] = "adacomp"
    lr: float = Field(0.1, gt=0, description="α, the base learning rate (of the local SGD steps for "
                      "model-averaging, dynamic-averaging, easgd)")
    batch_size: int = Field(10, ge=1, description="b, samples per gradient")
    c: Fraction = Field(0.01, description="compression ratio: fraction of entries sent (comp-asgd, adacomp)")
    local_steps: int = Field(10, ge=1, description="τ, local SGD steps per round (model-averaging, "
                             "dynamic-averaging)")
    delta: float = Field(1.0, ge=0, description="δ, divergence threshold ‖local − reference‖² that "
                         "triggers a synchronisation (dynamic-averaging)")
    moving_rate: float = Field(0.1, gt=0, lt=1, description="EASGD moving rate α of the elastic "
                               "exchange, in (0, 1) (easgd)")
    loss_threshold: float = Field(5.0, gt=0, description="training loss a device accumulates "
                                  "before it exchanges with the center: DeepSpark's adaptive period (easgd)")

    @model_validator(mode="after")
    def _c_positive(self):
        if self.name in ("comp-asgd", "adacomp") and self.c <= 0:
            raise ValueError(f"{self.name} needs c > 0 (the fraction of gradient entries sent)")
        return self

    def describe(self) -> str:
        """The parameters this algorithm uses, e.g. ``α=0.05, b=10, c=0.01`` or ``α=0.05, b=10, τ=10``."""
        own = {"c": self.c} if self.name in ("asgd", "comp-asgd", "adacomp") else {}
        symbols = {"local_steps": "τ", "delta": "δ", "moving_rate": "moving rate", "loss_threshold": "loss threshold"}
        own.update({symbols[k]: getattr(self, k) for k, users in _ALGORITHM_PARAMS.items() if self.name in users})
        return ", ".join([f"α={self.lr}", f"b={self.batch_size}"] + [f"{k}={v}" for k, v in own.items()])

    @model_validator(mode="after")
    def _params_apply(self):
        for key, users in _ALGORITHM_PARAMS.items():
            # Compared with the default, not model_fields_set: a dumped (resolved) scenario holds every key.
            if getattr(self, key) != type(self).model_fields[key].default and self.name not in users:
                raise ValueError(f"{key} is a parameter of {' and '.join(users)}, not of {self.name}; "
                                 f"remove it or set algorithm.name to {users[0]}")
        return self


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
    n: int = Field(..., ge=1, le=10_000)
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
    crash_probability: Fraction = Field(0.0, description="fail-stop probability per push")
    lost_after: Duration = Field(60.0, description="a device silent this long is recorded as lost")


class StopSpec(_Strict):
    updates: Optional[int] = Field(None, ge=1, description="I: stop after this many applied updates")
    target_accuracy: Optional[Fraction] = None
    wall_time: Optional[Duration] = Field(None, description="run time limit, counted once all agents are started (sim: emulated time)")

    @model_validator(mode="after")
    def _something(self):
        if self.updates is None and self.target_accuracy is None and self.wall_time is None:
            raise ValueError("give at least one of updates, target_accuracy, wall_time")
        return self


class EvalSpec(_Strict):
    every: int = Field(250, ge=1, description="evaluate Θ at every k-th update")
    test_samples: Optional[int] = Field(None, ge=1, description="use the first N test samples")


class CheckpointSpec(_Strict):
    every: int = Field(0, ge=0, description="PS checkpoint every k applied updates (0: off); "
                       "`edgebed run --resume <run-dir>` restarts from the latest one")


class SecuritySpec(_Strict):
    curve: bool = Field(False, description="ZeroMQ CURVE encryption + allow-list of per-run device keys")


class RuntimeSpec(_Strict):
    name: Literal["local", "docker", "sim", "spark"] = "local"
    local: dict[str, Any] = Field(default_factory=dict)
    # Sections of the other runtimes are free-form here and validated by the runtime itself
    # (its class has a `Spec` pydantic model), so an optional backend adds no import cost.
    docker: dict[str, Any] = Field(default_factory=dict)
    sim: dict[str, Any] = Field(default_factory=dict)
    spark: dict[str, Any] = Field(default_factory=dict)


class Scenario(_Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    dataset: DatasetSpec = DatasetSpec()
    model: ModelSpec = ModelSpec()
    algorithm: AlgorithmSpec = AlgorithmSpec()
    workers: WorkersSpec
    failures: FailureSpec = FailureSpec()
    stop: StopSpec
    eval: EvalSpec = EvalSpec()
    runtime: RuntimeSpec = RuntimeSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
    security: SecuritySpec = SecuritySpec()

    def class_of(self, device: int) -> SpeedClass:
        return self.workers.classes[class_assignment(self)[device]]

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")


def class_assignment(sc: Scenario) -> list[int]:
    """Speed-class index of each device 0..n-1: contiguous blocks, sizes by largest remainder."""
    n = sc.workers.n
    raw = [c.share * n for c in sc.workers.classes]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return [i for i, k in enumerate(counts) for _ in range(k)]


def apply_override(data: dict, assignment: str) -> None:
    """Apply one ``a.b.c=value`` override in place; the value is parsed as YAML (``0.1``, ``true``)."""
    if "=" not in assignment:
        raise ScenarioError(f"--set {assignment!r}: expected key.path=value, e.g. algorithm.c=0.1")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    node: Any = data
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
            if not isinstance(node, (dict, list)):
                raise ScenarioError(f"--set {assignment!r}: {part!r} is not a section")
    last = parts[-1]
    value = yaml.safe_load(raw)
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def format_errors(err: ValidationError, source: str, prefix: str = "") -> str:
    """One line per problem: ``source: key.path: what is wrong and what to do``."""
    lines = []
    for e in err.errors():
        loc = ".".join([prefix] * bool(prefix) + [str(x) for x in e["loc"]]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling (see scenarios/README.md for the keys)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"{source}: {loc}: {msg}")
    return "\n".join(lines)


def parse_scenario(data: dict, source: str = "<scenario>", overrides: tuple[str, ...] = ()) -> Scenario:
    data = copy.deepcopy(data) if data is not None else {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: the top level must be a mapping of keys (name:, workers:, ...)")
    for ov in overrides:
        apply_override(data, ov)
    try:
        return Scenario.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(format_errors(err, source)) from None


def load_scenario(path: str | Path, overrides: tuple[str, ...] = ()) -> Scenario:
    """Read, override and validate a scenario file. Raises ScenarioError with file and key path."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file (the shipped ones are in scenarios/)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ScenarioError(f"{path}: not valid YAML: {err}") from None
    return parse_scenario(data, str(path), tuple(overrides))


def dump_scenario(sc: Scenario, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(sc.to_dict(), sort_keys=False))
