"""Trainer: one device's model, shard and SGD gradient — the compute part of an agent, no I/O."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..data import normalize
from .gradbuf import GradientBuffers
from ..models import build_model, get_flat, grad_flat, layers_of, set_flat, trainable
from ..workload import resolve


class SharedData:
    """A training set as the tensors trainers read batches from, normalised once: the virtual clock's
    devices all index into one copy (read-only) instead of each holding its shard."""

    def __init__(self, x: np.ndarray, y: np.ndarray, model: str, torch_device: str = "cpu"):
        self.dev = torch.device(torch_device)
        self.x = torch.from_numpy(normalize(x)).to(self.dev)
        if resolve(model).channels_last:
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.y = torch.from_numpy(y.astype(np.int64)).to(self.dev)


class Trainer:
    """Computes the gradient of the loss on b samples of the device's shard, at a given Θ.

    Batches walk through a per-device shuffled order of the shard, reshuffled every epoch, so the
    sequence of batches is a function of (seed, device) alone.

    ``x``, ``y``: the shard's images and labels. Or, for many trainers in one process, ``data`` (a
    ``SharedData``) and ``index`` (this device's rows in it), and ``module``: a model shared by trainers
    that only compute gradients at a Θ they are given (set in full before each one, so sharing changes
    no bit); without it the trainer builds its own, which local SGD steps (averaging rules) need.
    ``buffers``: a ``GradientBuffers`` pool of the process, whose handed-back buffers the gradients
    are written into (on the CPU; the same bits as without)."""

    def __init__(self, model: str, x: Optional[np.ndarray], y: Optional[np.ndarray], batch_size: int,
                 seed: int, device: int, torch_device: str = "cpu", *, data: Optional[SharedData] = None,
                 index: Optional[np.ndarray] = None, module: Optional[torch.nn.Module] = None,
                 buffers: Optional[GradientBuffers] = None):
        if data is None:
            data, index = SharedData(x, y, model, torch_device), None
        size = len(data.y) if index is None else len(index)
        if size == 0:
            raise ValueError(f"device {device} has an empty shard; use fewer workers or more samples")
        self.dev = data.dev
        self.workload = resolve(model)   # its loss is what the device differentiates
        self.model = module if module is not None else build_model(model, seed).to(self.dev)
        self.layers = layers_of(self.model)
        self.buffers = buffers if self.dev.type == "cpu" else None
        self._entries = sum(layer.size for layer in self.layers)
        self.data, self.index, self.size = data, index, size
        self.b = batch_size
        self.rng = np.random.default_rng([seed, device, 0xBA7C])
        self._order = np.empty(0, dtype=np.int32)
        self._pos = 0
        # Θ carries the running statistics after the weights (model.buffers average): set_params and
        # params move them too; a gradient is the weights' alone either way.
        self.carry_buffers = False
        self.steps = 0   # batches drawn: SGD steps taken (the virtual clock charges compute time by it)

    @property
    def x(self) -> torch.Tensor:
        """The shard's normalised images (a copy when the data is shared)."""
        return self.data.x if self.index is None else self.data.x[torch.from_numpy(self.index)]

    @property
    def y(self) -> torch.Tensor:
        return self.data.y if self.index is None else self.data.y[torch.from_numpy(self.index)]

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch's (images, labels)."""
        idx = self.next_batch()
        rows = torch.from_numpy((idx if self.index is None else self.index[idx]).astype(np.int64)).to(self.dev)
        return self.data.x[rows], self.data.y[rows]

    def next_batch(self) -> np.ndarray:
        if self._pos + self.b > len(self._order):
            self._order = self.rng.permutation(self.size).astype(np.int32)   # 4 bytes a sample kept per device
            self._pos = 0
        idx = self._order[self._pos:self._pos + self.b]
        self._pos += self.b
        self.steps += 1
        return idx

    def gradient(self, theta: np.ndarray) -> tuple[np.ndarray, float]:
        """∇loss at Θ on the next batch, as a flat float32 vector in Θ order, and the batch loss."""
        set_flat(self.model, theta)
        loss = self._backward()
        if self.buffers is not None:
            grads = [p.grad for _, p in trainable(self.model)]
            if all(g.dtype == torch.float32 for g in grads):
                out = self.buffers.take(self._entries)
                torch.cat([g.reshape(-1) for g in grads], out=torch.from_numpy(out))
                return out, loss
        return grad_flat(self.model).astype(np.float32, copy=False), loss

    def _backward(self) -> float:
        x, y = self.batch()
        for p in self.model.parameters():
            p.grad = None
        loss = self.workload.loss(self.model(x), y)
        loss.backward()
        return float(loss.detach())

    # -- local SGD on the trainer's own model (model averaging, EASGD) -----------------------------
    def set_params(self, theta: np.ndarray) -> None:
        set_flat(self.model, theta, self.carry_buffers)

    def params(self) -> np.ndarray:
        """The local model as a new flat float32 vector in Θ order (its statistics after the weights
        when ``carry_buffers``)."""
        return get_flat(self.model, self.carry_buffers)

    def local_step(self, lr: float) -> float:
        """One SGD step x ← x − lr·∇loss on the next batch, in place; returns the batch loss.

        A manual update: torch.optim would import torch._dynamo (+65 MiB per agent on the reference host; that measurement is not committed)."""
        loss = self._backward()
        with torch.no_grad():
            for _, p in trainable(self.model):
                p.add_(p.grad, alpha=-lr)
        return loss
