"""Comp-ASGD: devices send the top-c fraction of entries over the whole model; PS applies α/τ."""
from __future__ import annotations

from ...algorithms.params import CompASGDParams
from .asgd import ASGD


class CompASGD(ASGD):
    Params = CompASGDParams
