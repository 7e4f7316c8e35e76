"""Models trained by the devices, and the flat parameter vector Θ the PS holds.

``cnn`` is the paper's network (Hardy et al. 2017), 211,690 parameters:
conv 1→32 3×3 same · maxpool 2 · conv 32→32 3×3 same · maxpool 2 · FC 1568→128 · FC 128→10, ReLU.
``mlp`` follows the tech report's fully-connected baseline: 784→200→200→10 with ReLU (199,210 params).

Θ holds the trainable parameters (``trainable``): a frozen one is left out. Max-pooling before ReLU is the same function as after it (both are monotone) and is cheaper; the CNN
runs in ``channels_last`` (2.6 ms vs 4.8 ms per batch-10 step here). Θ order is
``model.parameters()`` order, each tensor flattened in its logical (NCHW) order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class PaperCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = torch.flatten(x.contiguous(), 1)
        return self.fc2(F.relu(self.fc1(x)))


class PaperMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 200)
        self.fc2 = nn.Linear(200, 200)
        self.fc3 = nn.Linear(200, 10)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


@dataclass(frozen=True)
class Layer:
    """One weight tensor or bias vector inside the flat Θ: AdaComp selects top-c per layer."""
    name: str
    offset: int
    size: int
    shape: tuple


def build_model(name, seed: int = 0) -> nn.Module:
    """The model of workload ``name`` (a registry key, ``module:attr`` or a Workload), seeded."""
    from .workload import resolve
    w = resolve(name)
    torch.manual_seed(seed)
    model = w.factory()
    if w.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters Θ holds: those that require a gradient, in ``named_parameters()`` order. A frozen
    parameter stays out of Θ (a device never pushes a gradient for it; every device keeps its
    seeded initial value)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def layers_of(model: nn.Module) -> list[Layer]:
    out, off = [], 0
    for name, p in trainable(model):
        out.append(Layer(name, off, p.numel(), tuple(p.shape)))
        off += p.numel()
    return out


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for _, p in trainable(model))


def get_flat(model: nn.Module) -> np.ndarray:
    """Θ as a new float32 vector."""
    return torch.cat([p.detach().reshape(-1) for _, p in trainable(model)]).numpy().copy()


def set_flat(model: nn.Module, theta: np.ndarray) -> None:
    """Copy Θ into the parameters in place (keeps channels_last, unlike vector_to_parameters)."""
    t = torch.from_numpy(np.asarray(theta, dtype=np.float32))
    off = 0
    with torch.no_grad():
        for _, p in trainable(model):
            n = p.numel()
            p.copy_(t[off:off + n].view(p.shape))
            off += n


def grad_flat(model: nn.Module) -> np.ndarray:
    """The gradient of the last backward pass as a float32 vector in Θ order."""
    return torch.cat([p.grad.reshape(-1) for _, p in trainable(model)]).numpy()


def model_layers(name: str) -> list[Layer]:
    """``name``'s parameter layout (names, offsets in Θ, sizes, shapes) without computing anything:
    the model is built on torch's meta device, so no CPU kernel runs. A study driver calls this (the
    paper-encoding byte counts of a compact result) before a cell run in its own process applies
    the numerics profile, which must come before the process's first CPU kernel."""
    from .workload import resolve
    w = resolve(name)
    with torch.device("meta"):
        return layers_of(w.factory())


def initial_theta(name: str, seed: int) -> tuple[np.ndarray, list[Layer]]:
    model = build_model(name, seed)
    return get_flat(model), layers_of(model)
