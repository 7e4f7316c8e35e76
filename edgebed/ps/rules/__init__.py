"""Registry of update rules: scenario ``algorithm.name`` → class, and the ``algorithm`` section's schema
(the union of the rules' own ``Params``, told apart by ``name``)."""
from typing import Annotated, Union

from pydantic import Field

from .adacomp import AdaComp
from .asgd import ASGD
from .base import AlgorithmParams, Applied, CompressingParams, UpdateRule
from .comp_asgd import CompASGD
from .dynamic_averaging import DynamicAveraging
from .easgd import EASGD
from .model_averaging import ModelAveraging

RULES: dict[str, type[UpdateRule]] = {cls.name: cls for cls in (
    ASGD, CompASGD, AdaComp, ModelAveraging, DynamicAveraging, EASGD)}
# The rule the others are compared with when a report is not told a baseline.
BASELINE = ASGD.name

# The scenario's ``algorithm`` section: one rule's parameters, chosen by ``name``.
Algorithm = Annotated[Union[tuple(cls.Params for cls in RULES.values())], Field(discriminator="name")]

# Every key of the one flat ``algorithm`` model that came before the rules' own ``Params``: the form
# recorded in the scenario.yaml of older runs, and still the form of the Welcome (see ``flat``).
FLAT_KEYS = ("name", "lr", "batch_size", "c", "local_steps", "delta", "moving_rate", "loss_threshold")


def takers(key: str) -> list[str]:
    """The algorithms whose parameters include ``key``."""
    return [name for name, cls in RULES.items() if key in cls.Params.model_fields]


def own_keys(section: dict) -> dict:
    """``section`` (an ``algorithm`` mapping) without the keys its algorithm does not take; as it is
    when the name is not an algorithm's (validation then says so)."""
    rule = RULES.get(section.get("name"))
    return section if rule is None else {k: v for k, v in section.items() if k in rule.Params.model_fields}


def flat(algorithm: AlgorithmParams) -> dict:
    """``algorithm`` in the flat form (every key of ``FLAT_KEYS``, the other rules' at their defaults).
    The Welcome carries this form: its bytes cross the emulated link, so it stays as it was and the
    virtual clock's tables stay bit-identical (tests/integration/test_sim_golden.py)."""
    defaults = {}
    for cls in RULES.values():
        for key, field in cls.Params.model_fields.items():
            defaults.setdefault(key, field.default)
    return {**{k: defaults[k] for k in FLAT_KEYS}, **algorithm.model_dump(mode="json")}


__all__ = ["RULES", "BASELINE", "Algorithm", "AlgorithmParams", "CompressingParams", "FLAT_KEYS", "takers", "own_keys",
           "flat", "Applied", "UpdateRule", "ASGD", "CompASGD", "AdaComp", "ModelAveraging",
           "DynamicAveraging", "EASGD"]
