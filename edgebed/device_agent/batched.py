"""Batched gradients: k devices' SGD gradients, each at its own Θ on its own batch, in one call.

The virtual-clock runtime holds many devices whose pulled Θ are already known; their gradients are
independent, so it computes them together with ``torch.func`` (``functional_call`` + ``vmap`` over
``grad_and_value``) on one shared module. The result equals ``Trainer.gradient`` per device within
float tolerance (the kernels differ, so the last bits may too); batches are taken from each device's
own ``Trainer`` (``next_batch``), so the sequence of samples is the agent's exactly.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch.func import functional_call, grad_and_value, vmap

from ..models import build_model, layers_of
from ..workload import resolve


class BatchedGradient:
    """∇ cross-entropy of one model architecture at k parameter vectors on k batches."""

    def __init__(self, model: str, seed: int = 0):
        self.workload = resolve(model)
        self.module = build_model(model, seed)
        self.layers = layers_of(self.module)
        self.names = [l.name for l in self.layers]
        self._fn = vmap(grad_and_value(self._loss))

    def _loss(self, params, x, y):
        out = functional_call(self.module, dict(zip(self.names, params)), (x,))
        return self.workload.loss(out, y)

    def __call__(self, thetas: Sequence[np.ndarray], xs: Sequence[torch.Tensor],
                 ys: Sequence[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        """Gradients as float32 [k, |Θ|] in Θ order, and the k batch losses.

        ``thetas[i]`` is a flat Θ, ``xs[i]``/``ys[i]`` the batch (same b for all i)."""
        k = len(thetas)
        theta = torch.from_numpy(np.stack([np.asarray(t, dtype=np.float32) for t in thetas]))
        params = [theta[:, l.offset:l.offset + l.size].reshape(k, *l.shape) for l in self.layers]
        with torch.no_grad():
            grads, losses = self._fn(params, torch.stack(list(xs)), torch.stack(list(ys)))
        flat = torch.cat([g.reshape(k, -1) for g in grads], dim=1)
        return flat.numpy(), losses.numpy().astype(np.float64)


def trainer_batches(trainers: Sequence) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The next batch of each trainer (advances each one's order exactly as ``Trainer.gradient``)."""
    xs, ys = [], []
    for tr in trainers:
        x, y = tr.batch()
        xs.append(x)
        ys.append(y)
    return xs, ys
