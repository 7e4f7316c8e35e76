"""Compressed pulls: the PS sends Θ as f16/bf16, or as the delta since the device's last pull when
that is smaller; the device rebuilds the full model.

Lossy codings never drift: the PS keeps, per device, exactly the model the device rebuilt (the same
float32 arithmetic on the same rounded values), and a delta is always taken against that copy — so
each pull's error is one rounding of Θ, however many deltas came before (error feedback on the
downlink). The copies cost |Θ|·4 bytes per device at the PS (twice that with f16/bf16), only with
``delta``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..wire import codec as _codec
from .. import wire

_WIDTH = {"f32": 4, "f16": 2, "bf16": 2}


def rounded(values: np.ndarray, coding: str) -> np.ndarray:
    """float32 values exactly as the receiver decodes them after ``coding``."""
    if coding == "f16":
        if values.size and float(np.abs(values).max()) > _codec.FP16_MAX:
            return values.astype(np.float32)   # encode_values falls back to f32
        return values.astype(np.float16).astype(np.float32)
    if coding == "bf16":
        return _codec.bf16_values(_codec.bf16_bits(values))
    return values.astype(np.float32)


class ModelDownlink:
    """PS side: builds each device's Model reply. Owned by the ParameterServer (its thread only)."""

    def __init__(self, codec: _codec.Codec, delta: bool = False):
        self.codec, self.delta = codec, delta
        # device → (version, Θ as of that pull, the model the device rebuilt from it). Changes are
        # found against the exact Θ (a lossy copy differs everywhere) and sent against the device's
        # copy; with f32 both are one array.
        self.held: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}
        self.sent = {"full": 0, "delta": 0}

    def model(self, device: int, version: int, theta: np.ndarray) -> wire.Model:
        held = self.held.get(device) if self.delta else None
        if held is not None:
            base, exact, copy = held
            changed = np.flatnonzero(theta != exact).astype(np.uint32)
            if self._delta_bytes(changed) < _WIDTH[self.codec.values] * theta.size:
                values = theta[changed] - copy[changed]
                exact[changed] = theta[changed]
                if copy is not exact:
                    copy[changed] += rounded(values, self.codec.values)   # what the device will hold
                self.held[device] = (version, exact, copy)
                self.sent["delta"] += 1
                return wire.Model(version, values, indices=changed, base=base, codec=self.codec)
        params = theta.copy()   # a private copy: a zero-copy send of the live Θ could be torn by an apply
        if self.delta:
            copy = params.copy() if self.codec.values == "f32" else rounded(params, self.codec.values)
            self.held[device] = (version, copy if self.codec.values == "f32" else params.copy(), copy)
        self.sent["full"] += 1
        return wire.Model(version, params, codec=self.codec)

    def _delta_bytes(self, changed: np.ndarray) -> int:
        """The size model: index bytes of the cheaper coding + value bytes (before zstd)."""
        idx = min(_codec.index_sizes(changed).values()) if changed.size else 0
        return idx + _WIDTH[self.codec.values] * changed.size

    def forget(self, device: int) -> None:
        self.held.pop(device, None)


class PulledModel:
    """Device side: turns each Model reply into the full Θ (keeps the last one only for deltas)."""

    def __init__(self, keep: bool):
        self.keep = keep
        self.version: Optional[int] = None
        self.params: Optional[np.ndarray] = None

    def receive(self, msg: wire.Model) -> wire.Model:
        if msg.base is None:
            params = msg.params
        else:
            if self.params is None or self.version != msg.base:
                raise RuntimeError(f"the PS sent a model delta against version {msg.base}, but this device "
                                   f"holds version {self.version}; the PS's per-device copy is out of step")
            params = self.params.copy()   # a new array: the previous one may still be in use
            params[msg.indices] += msg.params
        if self.keep:
            self.version, self.params = msg.version, params
        return wire.Model(msg.version, params)

    def reset(self) -> None:
        self.version = self.params = None
