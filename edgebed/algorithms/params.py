"""The parameters of each algorithm: the scenario's ``algorithm`` section is one of these, told apart
by ``name`` (a one-value Literal). Pure description: the PS's update rules (``ps/rules``) and the
devices' policies read them; a field's ``title`` is its symbol.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..units import Fraction


class AlgorithmParams(BaseModel):
    """The scenario's ``algorithm`` section: name, α, b and one algorithm's own parameters. Each
    algorithm subclasses it below (with ``name`` a one-value Literal); the scenario's section is their
    union, told apart by ``name``. A field's ``title`` is its symbol."""
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str
    lr: float = Field(0.1, gt=0, title="α", description="α, the base learning rate (of the local SGD "
                      "steps for the averaging rules)")
    batch_size: int = Field(10, ge=1, title="b", description="b, samples per gradient")

    @property
    def ratio(self) -> float:
        """c, the fraction of gradient entries a device sends: 1 for a rule that sends them all."""
        return 1.0

    def own(self) -> dict:
        """This rule's own parameters (beyond name, α and b), in their order."""
        return {k: getattr(self, k) for k in type(self).model_fields if k not in AlgorithmParams.model_fields}

    def describe(self) -> str:
        """The parameters in symbols, e.g. ``α=0.05, b=10, c=0.01`` or ``α=0.05, b=10, τ=10``."""
        fields = type(self).model_fields
        return ", ".join(f"{fields[k].title or k}={v}" for k, v in
                         {"lr": self.lr, "batch_size": self.batch_size, **self.own()}.items() if v is not None)


class CompressingParams(AlgorithmParams):
    """The parameters of a rule whose devices send a top-c selection of each gradient."""
    c: Fraction = Field(0.01, title="c", description="compression ratio: the fraction of gradient "
                        "entries a device sends")

    @field_validator("c")
    @classmethod
    def _positive(cls, c):
        if c <= 0:
            raise ValueError("c must be > 0 (the fraction of gradient entries sent), e.g. 0.01")
        return c

    @property
    def ratio(self) -> float:
        return self.c


class ASGDParams(AlgorithmParams):
    name: Literal["asgd"] = "asgd"


class CompASGDParams(CompressingParams):
    name: Literal["comp-asgd"] = "comp-asgd"


class AdaCompParams(CompressingParams):
    name: Literal["adacomp"] = "adacomp"


class ModelAveragingParams(AlgorithmParams):
    name: Literal["model-averaging"] = "model-averaging"
    local_steps: int = Field(10, ge=1, title="τ", description="τ, local SGD steps per round")


class DynamicAveragingParams(ModelAveragingParams):   # τ local steps a round, as model averaging
    name: Literal["dynamic-averaging"] = "dynamic-averaging"
    delta: float = Field(1.0, ge=0, title="δ", description="δ, the divergence threshold "
                         "‖local − reference‖² that triggers a synchronisation")


class EASGDParams(AlgorithmParams):
    name: Literal["easgd"] = "easgd"
    moving_rate: float = Field(0.1, gt=0, lt=1, title="moving rate", description="the moving rate α "
                               "of the elastic exchange, in (0, 1)")
    loss_threshold: float = Field(5.0, gt=0, title="loss threshold", description="training loss a "
                                  "device accumulates before it exchanges with the center: DeepSpark's "
                                  "adaptive period")
    period: Optional[int] = Field(None, ge=1, title="τ", description="exchange every τ local steps, whatever "
                                  "the loss (EASGD's fixed communication period); unset: DeepSpark's "
                                  "loss-driven period (loss_threshold)")
