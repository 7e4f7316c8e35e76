"""Registry of update rules: scenario ``algorithm.name`` → class."""
from .adacomp import AdaComp
from .asgd import ASGD
from .base import Applied, UpdateRule
from .comp_asgd import CompASGD
from .dynamic_averaging import DynamicAveraging
from .easgd import EASGD
from .model_averaging import ModelAveraging

RULES: dict[str, type[UpdateRule]] = {cls.name: cls for cls in (
    ASGD, CompASGD, AdaComp, ModelAveraging, DynamicAveraging, EASGD)}


def uses_c(algorithm: str) -> bool:
    """Whether ``algorithm`` compresses (so its c means something); False for unknown names."""
    return algorithm in RULES and RULES[algorithm].uses_c()

__all__ = ["RULES", "uses_c", "Applied", "UpdateRule", "ASGD", "CompASGD", "AdaComp", "ModelAveraging",
           "DynamicAveraging", "EASGD"]
