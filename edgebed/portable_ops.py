"""The portable numerics profile's linear and convolution layers: products in one fixed order on every host.

Under ``numerics: portable`` (``edgebed/numerics.py``) :func:`adopt` gives a model's ``nn.Linear`` and
``nn.Conv2d`` modules a forward and backward of their own: each matrix product is ``edgebed._gemm``'s,
whose every output element is a sequence of fused multiply-adds in increasing k from the bias (or 0),
so the AVX2 kernel (any x86-64 with AVX2 and FMA, Intel or AMD, with or without AVX-512) and the scalar
fallback (``fmaf`` in the same order) give the same bits. Before, portable meant MKL's SSE2
``COMPATIBLE`` branch and im2col through ATen; this is faster (``benchmarks/results/numerics.json``).

A convolution is im2col on the NHWC image, one product, and for its backward two products (weights:
patchesᵀ · output gradient, summed over positions in increasing order; input: output gradient · weights,
then col2im) and the bias's column sum. Parameters, their order and their gradients' shapes are those of
the torch modules (Θ does not change); only the bits of the results do. Modules keep their class's
behaviour for what this path does not cover (CUDA tensors, dtypes other than float32, grouped or dilated
convolutions, padding modes other than zeros, inside ``torch.func`` transforms — the virtual clock's
batched gradients, ``device_agent/batched.py``, stay on torch's portable-pinned kernels — and under a
dispatch mode such as the FLOP counter) and whenever the profile in force is not portable.

``EDGEBED_GEMM_PATH=scalar`` in the environment (before the first product) forces the scalar path: the
test that the two paths agree uses it. ``PATH`` says which path runs; ``AVAILABLE`` whether the compiled
module is there (without a C compiler at install time, portable falls back to torch's kernels: its bits
then differ from other hosts', and ``numerics.fingerprint`` says so).
"""
from __future__ import annotations

import os

import torch
from torch import nn
from torch._C import _functorch

try:
    from . import _gemm
except ImportError:   # built without a C compiler (setup.py's optional extension)
    _gemm = None

AVAILABLE = _gemm is not None
PATH_ENV = "EDGEBED_GEMM_PATH"
PATH = _gemm.set_path(os.environ.get(PATH_ENV) or "avx2") if _gemm is not None else None
_active = False


def activate(on: bool) -> None:
    """Turn the fixed-order layers on (portable) or off (native) for this process's adopted modules
    and for :func:`adopt` from now on. Called by ``numerics.apply``."""
    global _active
    _active = bool(on) and AVAILABLE


def active() -> bool:
    return _active


def adopt(model: nn.Module) -> nn.Module:
    """Give ``model``'s Linear and Conv2d modules the fixed-order forward and backward (in place, same
    parameters) when the portable layers are active; returns ``model``."""
    if not _active:
        return model
    for m in model.modules():
        if type(m) is nn.Linear:
            m.__class__ = PortableLinear
        elif type(m) is nn.Conv2d:
            m.__class__ = PortableConv2d
    return model


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def _mm(a: torch.Tensor, b: torch.Tensor, init=None, *, ta: bool = False, tb: bool = False) -> torch.Tensor:
    """``op(a) @ op(b) (+ init)`` in the fixed order, op = transpose where ``ta``/``tb``; a, b contiguous 2-D
    float32 tensors (read through strides, never copied here)."""
    M, K = (a.shape[1], a.shape[0]) if ta else a.shape
    N = b.shape[0] if tb else b.shape[1]
    lda, ldb = a.shape[1], b.shape[1]
    ars, acs = (1, lda) if ta else (lda, 1)
    brs, bcs = (1, ldb) if tb else (ldb, 1)
    out = torch.empty((M, N), dtype=torch.float32)
    _gemm.gemm(_ptr(a), ars, acs, _ptr(b), brs, bcs, _ptr(out), N, M, N, K, 0 if init is None else _ptr(init))
    return out


def _colsum(a: torch.Tensor) -> torch.Tensor:
    out = torch.empty(a.shape[1], dtype=torch.float32)
    _gemm.colsum(_ptr(a), _ptr(out), a.shape[0], a.shape[1])
    return out


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        w = weight.contiguous()
        b = bias.contiguous() if bias is not None else None
        ctx.save_for_backward(x2, w)
        ctx.shape, ctx.has_bias = x.shape, bias is not None
        return _mm(x2, w, b, tb=True).reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        d2 = dy.reshape(-1, w.shape[0]).contiguous()
        dx = _mm(d2, w).reshape(ctx.shape) if ctx.needs_input_grad[0] else None
        dw = _mm(d2, x2, ta=True) if ctx.needs_input_grad[1] else None
        db = _colsum(d2) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


class _Conv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        n, c, h, w = x.shape
        o, _, kh, kw = weight.shape
        oh, ow = (h + 2 * padding[0] - kh) // stride[0] + 1, (w + 2 * padding[1] - kw) // stride[1] + 1
        geo = (n, h, w, c, kh, kw, padding[0], padding[1], stride[0], stride[1], oh, ow)
        xh = x.permute(0, 2, 3, 1).contiguous()                      # NHWC (a view for channels_last)
        w2 = weight.permute(0, 2, 3, 1).contiguous().view(o, -1)     # [O, kh·kw·C]
        b = bias.contiguous() if bias is not None else None
        out = torch.empty((n * oh * ow, o), dtype=torch.float32)
        _gemm.conv(_ptr(xh), _ptr(w2), 0 if b is None else _ptr(b), _ptr(out), o, *geo)
        ctx.save_for_backward(xh, w2)
        ctx.geo, ctx.wshape, ctx.has_bias = geo, (o, kh, kw, c), bias is not None
        return out.view(n, oh, ow, o).permute(0, 3, 1, 2)          # NCHW logical, channels_last memory

    @staticmethod
    def backward(ctx, dy):
        xh, w2 = ctx.saved_tensors
        o = w2.shape[0]
        d2 = dy.permute(0, 2, 3, 1).contiguous().view(-1, o)      # [P, O]
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _conv_input_grad(d2, w2, ctx.geo, ctx.wshape).permute(0, 3, 1, 2)
        if ctx.needs_input_grad[1]:
            dw2 = torch.empty((o, w2.shape[1]), dtype=torch.float32)    # Σ over positions in increasing order
            _gemm.conv_wgrad(_ptr(xh), _ptr(d2), _ptr(dw2), o, *ctx.geo)
            dw = dw2.view(ctx.wshape).permute(0, 3, 1, 2)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = _colsum(d2)
        return dx, dw, db, None, None


def _conv_input_grad(d2: torch.Tensor, w2: torch.Tensor, geo: tuple, wshape: tuple) -> torch.Tensor:
    """∂loss/∂x (NHWC) from the output gradient ``d2`` [P, O]. Stride 1: a convolution of the output
    gradient, padded by kh−1−ph, with the flipped kernel (one product, each element one fold over
    (i, j, o)); otherwise the patches' gradient and col2im (the fold, then the sum over patches)."""
    n, h, w, c, kh, kw, ph, pw, sh, sw, oh, ow = geo
    o = wshape[0]
    if (sh, sw) == (1, 1) and 0 <= ph < kh and 0 <= pw < kw:
        wf = w2.view(wshape).flip(1, 2).permute(3, 1, 2, 0).contiguous().view(c, -1)   # [C, kh·kw·O]
        dx = torch.empty((n, h, w, c), dtype=torch.float32)
        _gemm.conv(_ptr(d2), _ptr(wf), 0, _ptr(dx), c, n, oh, ow, o, kh, kw, kh - 1 - ph, kw - 1 - pw, 1, 1, h, w)
        return dx
    dcols = _mm(d2, w2)                                           # [P, kh·kw·C]
    dxh = torch.empty((n, h, w, c), dtype=torch.float32)
    _gemm.col2im(_ptr(dcols), _ptr(dxh), *geo)
    return dxh


def _ours(*tensors) -> bool:
    """Portable in force, plain CPU float32 tensors, no torch.func transform (vmap, grad) running — the
    kernels read raw memory, which a transform's batched tensors are not — and no dispatch mode, such as
    the FLOP counter (``workload.step_flops``), which must see torch's own operations."""
    return (_active and _functorch.peek_interpreter_stack() is None and torch._C._len_torch_dispatch_stack() == 0
            and all(t is None or (t.device.type == "cpu" and t.dtype == torch.float32) for t in tensors))


class PortableLinear(nn.Linear):
    """``nn.Linear`` whose product is ``edgebed._gemm``'s fixed-order one under the portable profile."""

    def forward(self, x):
        if not _ours(x, self.weight, self.bias):
            return super().forward(x)
        return _Linear.apply(x, self.weight, self.bias)


class PortableConv2d(nn.Conv2d):
    """``nn.Conv2d`` as im2col and ``edgebed._gemm``'s fixed-order product under the portable profile
    (groups 1, dilation 1, numeric zero padding; anything else runs the class's own)."""

    def forward(self, x):
        if (not _ours(x, self.weight, self.bias) or self.groups != 1 or self.dilation != (1, 1)
                or self.padding_mode != "zeros" or isinstance(self.padding, str) or x.dim() != 4):
            return super().forward(x)
        return _Conv2d.apply(x, self.weight, self.bias, self.stride, self.padding)


__all__ = ["AVAILABLE", "PATH", "PATH_ENV", "activate", "active", "adopt", "PortableLinear", "PortableConv2d"]
