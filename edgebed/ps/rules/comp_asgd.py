"""Comp-ASGD: devices send the top-c fraction of entries over the whole model; PS applies α/τ."""
from __future__ import annotations

from .asgd import ASGD


class CompASGD(ASGD):
    name = "comp-asgd"
    compressor = "top-c"
