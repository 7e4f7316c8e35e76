"""Compression: what devices send of their gradients (compressors) and how pulls are encoded (downlink).

- ``dense`` — every entry (ASGD); ``top-c`` — the fraction c of entries with the largest |g| over the
  whole model (Comp-ASGD); ``top-c-per-layer`` — the fraction c of each layer (AdaComp).
- ``error_feedback`` wraps any of them: the residual of what was not sent stays on the device and is
  added to the next gradient; ``momentum`` adds DGC's momentum correction (``compressors.ErrorFeedback``).
- ``quantize: q8`` — 8-bit unbiased stochastic quantization of the sent values, one scale per layer
  tensor (``compressors.Quantize8``); its bytes shrink only with the compact wire encoding.

The scenario's ``compression:`` section chooses these (``CompressionSpec``); the update rule chooses
the selection (``UpdateRule.compressor``). Math is in ``ops.py``, pure functions.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .compressors import Compressor, ErrorFeedback, Quantize8, Sparse, TopC, TopCPerLayer
from .ops import keep_count, topk_indices

# The selections an update rule names (``UpdateRule.compressor``): registry key → class.
SELECTORS: dict[str, type[Compressor]] = {cls.name: cls for cls in (Compressor, TopC, TopCPerLayer)}
SELECTIONS = tuple(SELECTORS)


def make_compressor(name: str, c: float, layers: Sequence, error_feedback: bool = False,
                    momentum: float = 0.0, quantize: str = "none",
                    rng: np.random.Generator | None = None) -> Compressor:
    """The device's compressor: selection ``name`` (an update rule's), then q8, then error feedback."""
    if name not in SELECTORS:
        raise ValueError(f"unknown compressor {name!r}; use one of {', '.join(SELECTIONS)}")
    comp = SELECTORS[name].build(c, layers)
    if quantize == "q8":
        comp = Quantize8(comp, layers, rng if rng is not None else np.random.default_rng())
    elif quantize != "none":
        raise ValueError(f"unknown quantization {quantize!r}; use none or q8")
    if momentum and not error_feedback:
        raise ValueError("momentum correction needs error_feedback: true (it corrects the residual)")
    if error_feedback:
        comp = ErrorFeedback(comp, momentum)
    return comp


__all__ = ["Compressor", "ErrorFeedback", "Quantize8", "Sparse", "TopC", "TopCPerLayer", "keep_count",
           "make_compressor", "topk_indices", "SELECTIONS", "SELECTORS"]
