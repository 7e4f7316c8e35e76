"""Models trained by the devices, and the flat parameter vector Θ the PS holds.

``cnn`` is the paper's network (Hardy et al. 2017), 211,690 parameters:
conv 1→32 3×3 same · maxpool 2 · conv 32→32 3×3 same · maxpool 2 · FC 1568→128 · FC 128→10, ReLU.
``mlp`` follows the tech report's fully-connected baseline: 784→200→200→10 with ReLU (199,210 params).

Θ holds the trainable parameters (``trainable``): a frozen one is left out. Max-pooling before ReLU is the same function as after it (both are monotone) and is cheaper; the CNN
runs in ``channels_last`` (2.6 ms vs 4.8 ms per batch-10 step here). Θ order is
``model.parameters()`` order, each tensor flattened in its logical (NCHW) order.

Non-gradient state (``statistics``): the running means and variances of normalisation layers
(BatchNorm, InstanceNorm with ``track_running_stats``). Where a scenario's ``model.buffers`` policy is
``average``, Θ carries them after the parameters (``Layer.kind == "buffer"``, float32, in
``named_buffers()`` order); otherwise Θ is the parameters alone, exactly as for a model without them.
``num_batches_tracked`` is never in Θ: it is a counter, only read by a BatchNorm whose ``momentum`` is
None, and each module keeps its own (a device's counts its own batches; the evaluator's counts the
recomputation's). ``state_problems`` names any other state, which no policy can carry.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from . import portable_ops


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
    """One weight tensor or bias vector inside the flat Θ (AdaComp selects top-c per layer), or with
    ``kind == "buffer"`` one running statistic carried after them (never in a gradient)."""
    name: str
    offset: int
    size: int
    shape: tuple
    kind: str = "param"   # "param" | "buffer"


def build_model(name, seed: int = 0) -> nn.Module:
    """The model of workload ``name`` (a registry key, ``module:attr`` or a Workload), seeded."""
    from .workload import resolve
    w = resolve(name)
    torch.manual_seed(seed)
    model = w.build()
    if w.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return portable_ops.adopt(model)   # fixed-order Linear/Conv2d under numerics: portable


def trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters Θ holds: those that require a gradient, in ``named_parameters()`` order. A frozen
    parameter stays out of Θ (a device never pushes a gradient for it; every device keeps its
    seeded initial value)."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def grad_flat(model: nn.Module) -> np.ndarray:
    """The gradient of the last backward pass as a float32 vector in Θ order."""
    return torch.cat([p.grad.reshape(-1) for _, p in trainable(model)]).cpu().numpy()



# A normalisation layer's running statistics: what recompute re-estimates and average carries in Θ.
STATISTICS = ("running_mean", "running_var")
COUNTER = "num_batches_tracked"


def _norm_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    from torch.nn.modules.batchnorm import _NormBase
    return [(n, m) for n, m in model.named_modules() if isinstance(m, _NormBase) and m.track_running_stats]


def statistics(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The running statistics Θ may carry: floating ``running_mean``/``running_var`` buffers of the
    normalisation layers that track them, in ``named_buffers()`` order (empty for the CNN and MLP)."""
    own = {id(m) for _, m in _norm_layers(model)}
    out = []
    for mname, m in model.named_modules():
        if id(m) not in own:
            continue
        for bname in STATISTICS:
            b = m._buffers.get(bname)
            if b is not None and b.is_floating_point():
                out.append((f"{mname}.{bname}" if mname else bname, b))
    return out


def layers_of(model: nn.Module, buffers: bool = False) -> list[Layer]:
    """Θ's layout: the trainable parameters, then (``buffers``) the running statistics."""
    out, off = [], 0
    for name, p in trainable(model):
        out.append(Layer(name, off, p.numel(), tuple(p.shape)))
        off += p.numel()
    for name, b in statistics(model) if buffers else ():
        out.append(Layer(name, off, b.numel(), tuple(b.shape), "buffer"))
        off += b.numel()
    return out


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for _, p in trainable(model))


def _tensors(model: nn.Module, buffers: bool) -> list[torch.Tensor]:
    return [p for _, p in trainable(model)] + ([b for _, b in statistics(model)] if buffers else [])


def get_flat(model: nn.Module, buffers: bool = False) -> np.ndarray:
    """Θ as a new float32 vector (with the running statistics after the parameters if ``buffers``)."""
    return torch.cat([t.detach().reshape(-1).float() for t in _tensors(model, buffers)]).cpu().numpy().copy()


def set_flat(model: nn.Module, theta: np.ndarray, buffers: bool = False) -> None:
    """Copy Θ into the parameters (and, if ``buffers``, the running statistics) in place (keeps
    channels_last, unlike vector_to_parameters). A Θ of the parameters alone leaves the statistics as
    they are."""
    t = torch.from_numpy(np.asarray(theta, dtype=np.float32))
    off = 0
    with torch.no_grad():
        for p in _tensors(model, buffers):
            n = p.numel()
            p.copy_(t[off:off + n].view(p.shape))
            off += n


def recompute_statistics(model: nn.Module, x: torch.Tensor, batch: int = 100) -> None:
    """Re-estimate the running statistics for the model's current weights from the samples ``x``, as
    ``torch.optim.swa_utils.update_bn`` does (PreciseBN): statistics reset, momentum None (an equal-
    weight average over the batches of ``batch`` samples, in order), a train-mode forward without
    gradients; the model is left in eval mode with its momenta restored."""
    norms = [m for _, m in _norm_layers(model)]
    if not norms:
        model.eval()
        return
    momenta = {m: m.momentum for m in norms}
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for i in range(0, len(x), batch):
            model(x[i:i + batch])
    for m, mom in momenta.items():
        m.momentum = mom
    model.eval()


def workload_state_problems(name, input_shape: tuple, where: str = "model.name") -> list[str]:
    """``state_problems`` of workload ``name`` built on torch's meta device (no CPU kernel runs), one
    train-mode forward of a batch of 2 samples of ``input_shape``. A forward that fails is the input
    check's to report (``workload.input_problems``): none here then."""
    from .workload import resolve
    w = resolve(name)
    with torch.device("meta"):
        model = w.build()
        try:
            return state_problems(model, torch.empty((2, *input_shape)), where)
        except Exception:  # noqa: BLE001 — reported by input_problems, with the user's error
            return []


def state_problems(model: nn.Module, x: torch.Tensor, where: str = "model.name") -> list[str]:
    """The model's state no buffer policy can carry, each saying what, where and what to do: a buffer a
    training step (one train-mode forward of ``x``; on torch's meta device no kernel runs) changes or
    replaces that is not a normalisation layer's running statistic or batch counter."""
    known = {id(b) for _, b in statistics(model)}
    for _, m in _norm_layers(model):
        if m._buffers.get(COUNTER) is not None:
            known.add(id(m._buffers[COUNTER]))
    before = {n: (b, b._version) for n, b in model.named_buffers()}
    model.train()
    with torch.no_grad():
        model(x)
    after = dict(model.named_buffers())
    out = []
    for name, (b, version) in before.items():
        if (after.get(name) is not b or b._version != version) and id(b) not in known:
            out.append(f"{where}: buffer {name!r} ({str(b.dtype).removeprefix('torch.')}) changes in a "
                       "training step and is not a normalisation layer's running statistic, so no "
                       "model.buffers policy can carry it between the devices, the PS and the evaluator; "
                       "make it an nn.Parameter (requires_grad=False if it is not trained), compute it "
                       "inside forward, or use a normalisation layer (e.g. nn.BatchNorm2d) instead")
    return out


def model_layers(name: str, buffers: bool = False) -> list[Layer]:
    """``name``'s parameter layout (names, offsets in Θ, sizes, shapes) without computing anything:
    the model is built on torch's meta device, so no CPU kernel runs. A study driver calls this (the
    paper-encoding byte counts of a compact result) before a cell run in its own process applies
    the numerics profile, which must come before the process's first CPU kernel."""
    from .workload import resolve
    w = resolve(name)
    with torch.device("meta"):
        return layers_of(w.build(), buffers)


_STATISTICS_SIZE: dict = {}


def statistics_size(name) -> int:
    """Entries of running statistics workload ``name`` has (0: none), counted on torch's meta device
    once per name (the Welcome asks for each device)."""
    key = _reference_key(name)
    try:
        return _STATISTICS_SIZE[key]
    except (KeyError, TypeError):   # TypeError: a reference that is no dict key is counted each time
        pass
    n = sum(layer.size for layer in model_layers(name, True) if layer.kind == "buffer")
    try:
        _STATISTICS_SIZE[key] = n
    except TypeError:
        pass
    return n


def _reference_key(ref):
    """A dict key for a model reference: a model section (``ModelSpec``, or a dict with name and args)
    by its name and its arguments as canonical JSON; anything else as it is."""
    from .workload import model_section
    section = model_section(ref)
    if section is None:
        return ref
    import json
    return section[0], json.dumps(section[1], sort_keys=True, default=str)


def initial_theta(name: str, seed: int, buffers: bool = False) -> tuple[np.ndarray, list[Layer]]:
    """Θ₀ of the seeded model and its layout (with the running statistics after the parameters if
    ``buffers``: the scenario's ``model.buffers`` is average)."""
    model = build_model(name, seed)
    return get_flat(model, buffers), layers_of(model, buffers)
