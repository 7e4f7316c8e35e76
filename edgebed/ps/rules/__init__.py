"""Registry of update rules: scenario ``algorithm.name`` → class."""
from .adacomp import AdaComp
from .asgd import ASGD
from .base import Applied, UpdateRule
from .comp_asgd import CompASGD

RULES: dict[str, type[UpdateRule]] = {cls.name: cls for cls in (ASGD, CompASGD, AdaComp)}

__all__ = ["RULES", "Applied", "UpdateRule", "ASGD", "CompASGD", "AdaComp"]
