"""Models of a chosen size for the size tests and benchmarks, by import path (``tests.sized_models:mlp_25m``).

Plain MLPs on 28×28 digits whose parameter counts match the models users bring: 0.2 M (the registry's
``mlp``), ~1 M, ~11 M (ResNet-18: 11.7 M) and 25.6 M (ResNet-50: 25,557,032). Only |Θ| matters to
what they test (message caps, ingest, memory), so they are Linear layers: cheap to build and to step.
"""
from __future__ import annotations

from torch import nn


def _mlp(*widths: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def mlp_1m() -> nn.Module:
    """784-1216-10: 966,730 parameters."""
    return _mlp(784, 1216, 10)


def mlp_11m() -> nn.Module:
    """784-4096-1920-10: 11,100,810 parameters."""
    return _mlp(784, 4096, 1920, 10)


def mlp_25m() -> nn.Module:
    """784-8192-2336-10: 25,592,938 parameters, ResNet-50's size (25.6 M)."""
    return _mlp(784, 8192, 2336, 10)
