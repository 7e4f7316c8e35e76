"""The portable profile's own products (edgebed/portable_ops.py, edgebed/_gemm.c): the AVX2 kernel and the
scalar fallback give the same bits, the layers compute what torch's do (to rounding), and the fixed-order
layers run only under portable."""
from __future__ import annotations

import hashlib

import pytest
import torch
from torch import nn
import torch.nn.functional as F

from edgebed import portable_ops as po

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not po.AVAILABLE, reason="edgebed._gemm not built (no C compiler)")]

# (M, K, N, ta, tb, init): tile edges (not multiples of 6 × 16), K = 0 and 1, both orientations the
# kernel may pick (N > M with a long and a short K), transposed operands, the CNN's and MLP's shapes.
SHAPES = [(1, 1, 1, False, False, False), (7, 0, 5, False, False, True), (5, 3, 17, False, False, True),
          (13, 40, 37, False, True, True), (37, 40, 13, True, False, False), (10, 1568, 128, False, True, True),
          (10, 128, 1568, False, False, False), (128, 10, 1568, True, False, False),
          (32, 1960, 288, True, False, False), (1960, 288, 32, False, True, True), (32, 7840, 9, True, False, False),
          (6, 33, 16, True, True, True), (100, 64, 100, False, False, False), (50, 40, 32, False, False, True),
          (9, 7840, 32, True, False, False)]


def _operands(M, K, N, ta, tb, init, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn((K, M) if ta else (M, K), generator=g)
    b = torch.randn((N, K) if tb else (K, N), generator=g)
    return a, b, (torch.randn(N, generator=g) if init else None)


@pytest.fixture
def path():
    """Switch the kernel path for one test; restore the one the module started with."""
    yield po._gemm.set_path
    po._gemm.set_path(po.PATH)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + "".join("tT"[v] for v in s[3:5]))
def test_product_is_the_matrix_product_and_identical_on_both_paths(shape, path):
    a, b, init = _operands(*shape)
    ta, tb = shape[3], shape[4]
    ref = (a.T if ta else a).double() @ (b.T if tb else b).double() + (0 if init is None else init.double())
    got = {}
    for name in ("avx2", "scalar"):
        path(name)
        got[name] = po._mm(a, b, init, ta=ta, tb=tb)
    assert got["avx2"].shape == ref.shape
    torch.testing.assert_close(got["scalar"].double(), ref, rtol=1e-4, atol=1e-4 * (1 + shape[1]) ** 0.5)
    assert torch.equal(got["avx2"], got["scalar"]), "the AVX2 and scalar products differ in their bits"


@pytest.mark.parametrize("name", ["avx2", "scalar"])
def test_the_fold_is_fused_multiply_adds_in_increasing_k_from_the_bias(name, path):
    # (1 + 2⁻¹²)² = 1 + 2⁻¹¹ + 2⁻²⁴ needs 25 bits: a separate multiply rounds it to 1 + 2⁻¹¹, a fused
    # multiply-add onto −(1 + 2⁻¹¹) keeps the 2⁻²⁴. It is kept only if the accumulator holds −(1 + 2⁻¹¹)
    # before that product: from the bias, or from the earlier k.
    path(name)
    u, v = 1 + 2 ** -12, -(1 + 2 ** -11)
    from_bias = po._mm(torch.tensor([[u]]), torch.tensor([[u]]), torch.tensor([v]))
    in_order = po._mm(torch.tensor([[1.0, u]]), torch.tensor([[v], [u]]))
    reversed_order = po._mm(torch.tensor([[u, 1.0]]), torch.tensor([[u], [v]]))
    assert from_bias.item() == in_order.item() == 2 ** -24
    assert reversed_order.item() == 0.0   # the product first: rounded on its own, then cancelled


def _cnn_gradient_hash(model_name: str, x: torch.Tensor, y: torch.Tensor) -> str:
    from edgebed.models import build_model
    model = build_model(model_name, 0)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    h = hashlib.sha256(loss.detach().numpy().tobytes())
    for p in model.parameters():
        h.update(p.grad.contiguous().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture
def active():
    was = po.active()
    po.activate(True)
    yield
    po.activate(was)


def test_paper_models_gradients_identical_on_both_paths(active, path):
    g = torch.Generator().manual_seed(1)
    x = torch.rand((10, 1, 28, 28), generator=g).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (10,), generator=g)
    for name in ("cnn", "mlp"):
        path("avx2")
        fast = _cnn_gradient_hash(name, x, y)
        path("scalar")
        assert _cnn_gradient_hash(name, x, y) == fast, name


@pytest.mark.parametrize("conv", [dict(in_channels=3, out_channels=5, kernel_size=3, padding=1),
                                  dict(in_channels=2, out_channels=4, kernel_size=(3, 2), stride=2, padding=(1, 0)),
                                  dict(in_channels=4, out_channels=3, kernel_size=5, padding=0, bias=False),
                                  dict(in_channels=1, out_channels=8, kernel_size=3, padding=2)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv_layer_matches_torch_forward_and_backward(conv, channels_last, active, path):
    torch.manual_seed(0)
    ref = nn.Conv2d(**conv)
    ours = po.adopt(nn.Conv2d(**conv))
    ours.load_state_dict(ref.state_dict())
    assert type(ours) is po.PortableConv2d
    x = torch.randn(3, conv["in_channels"], 11, 9)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    grads = {}
    for name in ("avx2", "scalar"):
        path(name)
        xs = x.clone().requires_grad_(True)
        out = ours(xs)
        (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        grads[name] = [out.detach(), xs.grad] + [p.grad.clone() for p in ours.parameters()]
        ours.zero_grad()
    xr = x.clone().requires_grad_(True)
    out = ref(xr)
    (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
    want = [out.detach(), xr.grad] + [p.grad for p in ref.parameters()]
    for got, exp, fast in zip(grads["scalar"], want, grads["avx2"]):
        assert got.shape == exp.shape
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-5)
        assert torch.equal(got, fast)


def test_linear_layer_matches_torch_on_3d_input_and_without_bias(active):
    torch.manual_seed(0)
    for bias in (True, False):
        ref = nn.Linear(7, 5, bias=bias)
        ours = po.adopt(nn.Linear(7, 5, bias=bias))
        ours.load_state_dict(ref.state_dict())
        x = torch.randn(2, 3, 7)
        xo, xr = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        ours(xo).pow(2).sum().backward()
        ref(xr).pow(2).sum().backward()
        torch.testing.assert_close(xo.grad, xr.grad)
        for p, q in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)


def test_only_portable_adopts_and_uncovered_cases_run_torchs_own(active):
    grouped = po.adopt(nn.Sequential(nn.Conv2d(4, 4, 3, groups=2), nn.Linear(3, 2)))
    x = torch.randn(1, 4, 5, 5)
    torch.testing.assert_close(grouped(x), F.linear(F.conv2d(x, grouped[0].weight, grouped[0].bias, groups=2),
                                                    grouped[1].weight, grouped[1].bias))
    po.activate(False)   # native: nothing adopted, and adopted modules run torch's kernels again
    assert type(po.adopt(nn.Linear(3, 2))) is nn.Linear
    lin = grouped[1]
    z = torch.randn(4, 3)
    assert torch.equal(lin(z), F.linear(z, lin.weight, lin.bias))


def test_numerics_apply_turns_the_layers_on_for_portable_only():
    import os
    from edgebed import numerics
    was, env, mkldnn = po.active(), dict(os.environ), torch.backends.mkldnn.enabled
    try:
        numerics.apply("native")
        assert not po.active()
        numerics.apply("portable")
        assert po.active() and numerics.fingerprint("portable")["gemm"] == po.PATH
    finally:
        os.environ.clear()
        os.environ.update(env)
        torch.backends.mkldnn.enabled = mkldnn
        po.activate(was)


def test_unknown_path_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="avx2 or scalar"):
        po._gemm.set_path("sse")


def test_inside_torch_func_transforms_the_layers_run_torchs_kernels(active):
    """The virtual clock's batched gradients (vmap over grad) can't hand raw memory to the kernels."""
    from torch.func import functional_call, grad, vmap
    lin = po.adopt(nn.Linear(4, 3))
    ws = torch.randn(2, 3, 4)
    xs = torch.randn(2, 5, 4)
    g = vmap(grad(lambda w, x: functional_call(lin, {"weight": w, "bias": lin.bias}, (x,)).sum()))(ws, xs)
    torch.testing.assert_close(g, xs.sum(1, keepdim=True).expand(2, 3, 4))


def test_flop_count_of_a_step_is_the_same_with_the_layers_on(active):
    """The virtual clock scales step times by torch's FLOP counter, which must still see the products."""
    from edgebed.workload import step_flops
    on = step_flops("cnn"), step_flops("mlp")
    po.activate(False)
    assert on == (step_flops("cnn"), step_flops("mlp")) and min(on) > 0


@pytest.mark.parametrize("geo", [(1, 5, 4, 1, 3, 3, 1, 1, 1, 1), (3, 8, 7, 2, 3, 2, 2, 0, 2, 3), (2, 5, 7, 3, 1, 3, 0, 2, 1, 2)])
def test_im2col_takes_the_patches_torch_unfold_takes(geo):
    c, h, w, n, kh, kw, ph, pw, sh, sw = geo
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    x = torch.randn(n, c, h, w)
    xh = x.permute(0, 2, 3, 1).contiguous()   # NHWC, held while the kernel reads it
    cols = torch.full((n * oh * ow, kh * kw * c), 7.0)
    po._gemm.im2col(xh.data_ptr(), cols.data_ptr(), n, h, w, c, kh, kw, ph, pw, sh, sw, oh, ow)
    ref = F.unfold(x, (kh, kw), padding=(ph, pw), stride=(sh, sw)).view(n, c, kh, kw, oh * ow)
    assert torch.equal(cols, ref.permute(0, 4, 2, 3, 1).reshape(n * oh * ow, -1))
