"""Comp-ASGD: devices send the top-c fraction of entries over the whole model; PS applies α/τ."""
from __future__ import annotations

from typing import Literal

from .asgd import ASGD
from .base import CompressingParams


class CompASGDParams(CompressingParams):
    name: Literal["comp-asgd"] = "comp-asgd"


class CompASGD(ASGD):
    Params = CompASGDParams
    compressor = "top-c"
