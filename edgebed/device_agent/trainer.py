"""Trainer: one device's model, shard and SGD gradient — the compute part of an agent, no I/O."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..compression import Sparse, make_compressor
from ..data import normalize
from ..models import build_model, get_flat, grad_flat, layers_of, set_flat


class Trainer:
    """Computes the gradient of the loss on b samples of the device's shard, at a given Θ.

    Batches walk through a per-device shuffled order of the shard, reshuffled every epoch, so the
    sequence of batches is a function of (seed, device) alone."""

    def __init__(self, model: str, x: np.ndarray, y: np.ndarray, batch_size: int,
                 compressor: str, c: float, seed: int, device: int, torch_device: str = "cpu",
                 compression: dict | None = None):
        if len(y) == 0:
            raise ValueError(f"device {device} has an empty shard; use fewer workers or more samples")
        self.dev = torch.device(torch_device)
        self.model = build_model(model, seed).to(self.dev)
        self.layers = layers_of(self.model)
        self.x = torch.from_numpy(normalize(x)).to(self.dev)
        if model == "cnn":
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.y = torch.from_numpy(y.astype(np.int64)).to(self.dev)
        self.b = batch_size
        cp = compression or {}   # the scenario's compression section (error feedback, q8)
        self.compressor = make_compressor(compressor, c, self.layers, cp.get("error_feedback", False),
                                          cp.get("momentum", 0.0), cp.get("quantize", "none"),
                                          np.random.default_rng([seed, device, 0x9A8]))
        self.rng = np.random.default_rng([seed, device, 0xBA7C])
        self._order = np.empty(0, dtype=np.int64)
        self._pos = 0
        self.steps = 0      # SGD steps computed so far (a paced agent's compute budget counts them)

    def next_batch(self) -> np.ndarray:
        if self._pos + self.b > len(self._order):
            self._order = self.rng.permutation(len(self.y))
            self._pos = 0
        idx = self._order[self._pos:self._pos + self.b]
        self._pos += self.b
        return idx

    def gradient(self, theta: np.ndarray) -> tuple[np.ndarray, float]:
        """∇loss at Θ on the next batch, as a flat float32 vector in Θ order, and the batch loss."""
        set_flat(self.model, theta)
        loss = self._backward()
        return grad_flat(self.model).astype(np.float32, copy=False), loss

    def _backward(self) -> float:
        idx = torch.from_numpy(self.next_batch()).to(self.dev)
        self.steps += 1
        for p in self.model.parameters():
            p.grad = None
        loss = F.cross_entropy(self.model(self.x[idx]), self.y[idx])
        loss.backward()
        return float(loss.detach())

    # -- local SGD on the trainer's own model (model averaging, EASGD) -----------------------------
    def set_params(self, theta: np.ndarray) -> None:
        set_flat(self.model, theta)

    def params(self) -> np.ndarray:
        """The local model as a new flat float32 vector in Θ order."""
        return get_flat(self.model)

    def local_step(self, lr: float) -> float:
        """One SGD step x ← x − lr·∇loss on the next batch, in place; returns the batch loss.

        A manual update: torch.optim would import torch._dynamo (+65 MiB per agent, MEASURED.md)."""
        loss = self._backward()
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(p.grad, alpha=-lr)
        return loss

    def step(self, theta: np.ndarray) -> tuple[Sparse, float]:
        grad, loss = self.gradient(theta)
        return self.compressor.compress(grad), loss
