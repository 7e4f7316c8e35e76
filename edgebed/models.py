"""Models trained by the devices, and the flat parameter vector Θ the PS holds.

``cnn`` is the paper's network (Hardy et al. 2017), 211,690 parameters:
conv 1→32 3×3 same · maxpool 2 · conv 32→32 3×3 same · maxpool 2 · FC 1568→128 · FC 128→10, ReLU.
``mlp`` follows the tech report's fully-connected baseline: 784→200→200→10 with ReLU (199,210 params).

Max-pooling before ReLU is the same function as after it (both are monotone) and is cheaper; the CNN
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


MODELS = {"cnn": PaperCNN, "mlp": PaperMLP}


@dataclass(frozen=True)
class Layer:
    """One weight tensor or bias vector inside the flat Θ: AdaComp selects top-c per layer."""
    name: str
    offset: int
    size: int
    shape: tuple


def _model_class(name: str) -> type[nn.Module]:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return MODELS[name]


def build_model(name: str, seed: int = 0) -> nn.Module:
    cls = _model_class(name)
    torch.manual_seed(seed)
    model = cls()
    if name == "cnn":
        model = model.to(memory_format=torch.channels_last)
    return model


def layers_of(model: nn.Module) -> list[Layer]:
    out, off = [], 0
    for name, p in model.named_parameters():
        out.append(Layer(name, off, p.numel(), tuple(p.shape)))
        off += p.numel()
    return out


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def get_flat(model: nn.Module) -> np.ndarray:
    """Θ as a new float32 vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def set_flat(model: nn.Module, theta: np.ndarray) -> None:
    """Copy Θ into the parameters in place (keeps channels_last, unlike vector_to_parameters)."""
    t = torch.from_numpy(np.asarray(theta, dtype=np.float32))
    off = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(t[off:off + n].view(p.shape))
            off += n


def grad_flat(model: nn.Module) -> np.ndarray:
    """The gradient of the last backward pass as a float32 vector in Θ order."""
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()


def model_layers(name: str) -> list[Layer]:
    """``name``'s parameter layout (names, offsets in Θ, sizes, shapes) without computing anything:
    the model is built on torch's meta device, so no CPU kernel runs. A study driver calls this (the
    paper-encoding byte counts of a compact result) before a cell run in its own process applies
    the numerics profile, which must come before the process's first CPU kernel."""
    cls = _model_class(name)
    with torch.device("meta"):
        return layers_of(cls())


def initial_theta(name: str, seed: int) -> tuple[np.ndarray, list[Layer]]:
    model = build_model(name, seed)
    return get_flat(model), layers_of(model)
