"""Algorithms: one registry of what a scenario's ``algorithm.name`` means — its parameters, the policy
its devices follow between messages and the compressor they send with — below the scenario, the PS
and the devices, so none of them compares an algorithm's name.

The PS's update rule for each algorithm is registered in ``ps/rules`` (``RULES``, same keys), the
device policies in ``device_agent/policies``; ``averaging`` holds the math both sides share.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Union

from pydantic import Field

from .params import (AdaCompParams, AlgorithmParams, ASGDParams, CompASGDParams, CompressingParams,
                     DynamicAveragingParams, EASGDParams, ModelAveragingParams)


@dataclass(frozen=True)
class AlgorithmInfo:
    """What one algorithm is, apart from the code that runs it."""
    params: type[AlgorithmParams]     # the scenario's ``algorithm`` section for it
    policy: str = "gradient"          # device_agent/policies.py: gradient | local-steps | dynamic | elastic
    compressor: str = "dense"         # compression.SELECTORS: dense | top-c | top-c-per-layer
    # how the PS measures a push's staleness: "global" (updates since the pull, τ) or "per-parameter"
    # (σ_k, updates that touched each entry since the pull: the PS keeps a touch log, ps/staleness.py)
    staleness: str = "global"

    @property
    def name(self) -> str:
        return self.params.model_fields["name"].default


ALGORITHMS: dict[str, AlgorithmInfo] = {a.name: a for a in (
    AlgorithmInfo(ASGDParams),
    AlgorithmInfo(CompASGDParams, compressor="top-c"),
    AlgorithmInfo(AdaCompParams, compressor="top-c-per-layer", staleness="per-parameter"),
    AlgorithmInfo(ModelAveragingParams, policy="local-steps"),
    AlgorithmInfo(DynamicAveragingParams, policy="dynamic"),
    AlgorithmInfo(EASGDParams, policy="elastic"))}

# The algorithm the others are compared with when a report is not told a baseline.
BASELINE = "asgd"

# The scenario's ``algorithm`` section: one algorithm's parameters, chosen by ``name``.
Algorithm = Annotated[Union[tuple(a.params for a in ALGORITHMS.values())], Field(discriminator="name")]

# Every key of the one flat ``algorithm`` model that came before the rules' own ``Params``: the form
# recorded in the scenario.yaml of older runs, and still the form of the Welcome (see ``flat``).
FLAT_KEYS = ("name", "lr", "batch_size", "c", "local_steps", "delta", "moving_rate", "loss_threshold")


def takers(key: str) -> list[str]:
    """The algorithms whose parameters include ``key``."""
    return [name for name, a in ALGORITHMS.items() if key in a.params.model_fields]


def own_keys(section: dict) -> dict:
    """``section`` (an ``algorithm`` mapping) without the keys its algorithm does not take; as it is
    when the name is not an algorithm's (validation then says so)."""
    algo = ALGORITHMS.get(section.get("name"))
    return section if algo is None else {k: v for k, v in section.items() if k in algo.params.model_fields}


def flat(algorithm: AlgorithmParams) -> dict:
    """``algorithm`` in the flat form (every key of ``FLAT_KEYS``, the other rules' at their defaults).
    The Welcome carries this form: its bytes cross the emulated link, so it stays as it was and the
    virtual clock's tables stay bit-identical (tests/integration/test_sim_golden.py)."""
    defaults = {}
    for a in ALGORITHMS.values():
        for key, field in a.params.model_fields.items():
            defaults.setdefault(key, field.default)
    # A key added since (EASGD's period) travels only when set, so older agents' Welcome is unchanged.
    return {**{k: defaults[k] for k in FLAT_KEYS},
            **{k: v for k, v in algorithm.model_dump(mode="json").items() if k in FLAT_KEYS or v is not None}}


__all__ = ["ALGORITHMS", "AlgorithmInfo", "Algorithm", "AlgorithmParams", "CompressingParams", "BASELINE",
           "FLAT_KEYS", "takers", "own_keys", "flat"]
