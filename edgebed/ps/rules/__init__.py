"""Registry of update rules: scenario ``algorithm.name`` → the PS's rule class for that algorithm
(``edgebed.algorithms`` says what each algorithm is: parameters, device policy, compressor)."""
from .adacomp import AdaComp
from .asgd import ASGD
from .base import Applied, UpdateRule
from .comp_asgd import CompASGD
from .dynamic_averaging import DynamicAveraging
from .easgd import EASGD
from .model_averaging import ModelAveraging

RULES: dict[str, type[UpdateRule]] = {cls.name: cls for cls in (
    ASGD, CompASGD, AdaComp, ModelAveraging, DynamicAveraging, EASGD)}
__all__ = ["RULES", "Applied", "UpdateRule", "ASGD", "CompASGD", "AdaComp", "ModelAveraging",
           "DynamicAveraging", "EASGD"]
