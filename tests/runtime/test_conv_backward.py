"""runtime.conv_backward and runtime.batch_norm: the native float32 training paths of a CNN.
The convolution's input and weight gradients (1-D/2-D/3-D, odd channels, 1x1/3x3/7x7
kernels, stride, dilation, groups, padding, batch 1 and 33; depthwise and other narrow
groups) against a float64 NumPy reference and torch's autograd; transposed convolutions (output_padding, groups) forward and backward;
batch norm's training forward (running statistics included), its backward in training and
eval mode, traced with grad, and the composite formula under create_graph."""
from __future__ import annotations

import math

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod.runtime import batch_norm as bn
from scriptmod.runtime import conv_backward as cb
from scriptmod.runtime.kernels import conv as kc

# (N, C, O, spatial, kernel, stride, padding, dilation, groups)
CONVS = [
    (2, 5, 7, (13,), (3,), (1,), (1,), (1,), 1),
    (1, 7, 9, (11, 10), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (33, 4, 8, (6, 5), (1, 1), (1, 1), (0, 0), (1, 1), 1),
    (2, 3, 16, (17, 19), (7, 7), (2, 2), (3, 3), (1, 1), 1),
    (2, 8, 12, (12, 11), (3, 3), (2, 2), (1, 0), (2, 2), 2),
    (1, 9, 12, (9, 10), (3, 2), (2, 1), (2, 0), (1, 3), 3),
    (2, 4, 6, (5, 6, 7), (3, 2, 3), (1, 2, 1), (1, 0, 2), (1, 1, 2), 1),
    # fewer batch positions than output channels (grad_input forms gyᵀ @ W)
    (3, 6, 40, (3, 2), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (2, 8, 36, (5, 4), (3, 3), (2, 2), (1, 1), (1, 1), 2),
    (4, 5, 24, (5,), (3,), (1,), (2,), (2,), 1),
    (2, 3, 30, (2, 3, 2), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    # small images side by side in one patch block
    (9, 4, 8, (3, 4), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (9, 12, 8, (3, 4), (1, 1), (1, 1), (0, 0), (1, 1), 1),
]
IDS = [f"{len(c[3])}d-n{c[0]}-k{'x'.join(map(str, c[4]))}-s{c[5][0]}-g{c[8]}" for c in CONVS]


@pytest.fixture(autouse=True)
def _native_at_small_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small tensors through the native paths, on the pool, in several row blocks."""
    monkeypatch.setattr(cb, "MIN_FLOPS", 0)
    monkeypatch.setattr(cb, "MIN_THREAD_FLOPS", 0)
    monkeypatch.setattr(cb, "BLOCK_FLOATS", 600)
    monkeypatch.setattr(cb, "WEIGHT_BLOCK_FLOATS", 900)
    monkeypatch.setattr(bn, "MIN_SIZE", 0)
    monkeypatch.setattr(bn, "MIN_THREAD_SIZE", 0)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / (np.abs(b).max() + 1e-30))


def _operands(case: tuple, seed: int = 0) -> tuple:
    n, c, o, size, k, s, p, d, g = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *size), dtype=np.float32)
    w = rng.standard_normal((o, c // g, *k), dtype=np.float32)
    out = tuple((size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(len(k)))
    gy = rng.standard_normal((n, o, *out), dtype=np.float32)
    return x, w, gy


@pytest.mark.parametrize("case", CONVS, ids=IDS)
def test_gradients_against_float64(case: tuple) -> None:
    x, w, gy = _operands(case)
    s, p, d, g = case[5:]
    assert cb.taken(gy, w, x.shape, w.shape, s, p, d, g)          # the native paths
    assert cb.taken(gy, x, x.shape, w.shape, s, p, d, g)
    ref_x = kc.conv_grad_input(np, gy.astype(np.float64), w.astype(np.float64), x.shape,
                               s, p, d, g)
    ref_w = kc.conv_grad_weight(np, gy.astype(np.float64), x.astype(np.float64), w.shape,
                                s, p, d, g)
    dx = cb.grad_input(gy, w, x.shape, s, p, d, g)
    dw = cb.grad_weight(gy, x, w.shape, s, p, d, g)
    assert dx.dtype == dw.dtype == np.float32 and dx.shape == x.shape and dw.shape == w.shape
    assert _rel(dx, ref_x) < 2e-6 and _rel(dw, ref_w) < 2e-6


@pytest.mark.parametrize("case", CONVS, ids=IDS)
def test_autograd_against_torch(case: tuple) -> None:
    torch = pytest.importorskip("torch")
    x, w, gy = _operands(case, seed=1)
    s, p, d, g = case[5:]
    rank = len(case[3])
    tx, tw = (torch.from_numpy(a).requires_grad_() for a in (x, w))
    tconv = getattr(torch.nn.functional, f"conv{rank}d")
    (tconv(tx, tw, None, s, p, d, g) * torch.from_numpy(gy)).sum().backward()
    sx, sw = (sm.from_numpy(a).requires_grad_() for a in (x, w))
    (getattr(F, f"conv{rank}d")(sx, sw, None, s, p, d, g) * sm.from_numpy(gy)).sum().backward()
    assert _rel(sx.grad.numpy(), tx.grad.numpy()) < 1e-5
    assert _rel(sw.grad.numpy(), tw.grad.numpy()) < 1e-5


@pytest.mark.parametrize("rank,stride,padding,out_pad,dilation,groups", [
    (1, 2, 1, 1, 1, 1), (2, 2, 1, 1, 1, 2), (2, 3, 2, 2, 1, 1), (2, 1, 0, 0, 2, 4),
    (3, 2, 1, 1, 1, 1), (2, 1, 0, 1, 2, 1)])
def test_conv_transpose_against_torch(rank: int, stride: int, padding: int, out_pad: int,
                                      dilation: int, groups: int) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(rank + stride)
    size = (9, 8, 7)[:rank]
    x = rng.standard_normal((2, 8, *size), dtype=np.float32)
    k = 1 if out_pad and stride == 1 else 3       # 1x1, dilation 2: a pointwise grad_weight
    w = rng.standard_normal((8, 12 // groups, *(k,) * rank), dtype=np.float32)
    b = rng.standard_normal(12, dtype=np.float32)
    args = (stride, padding, out_pad, groups, dilation)
    tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
    ty = getattr(torch.nn.functional, f"conv_transpose{rank}d")(tx, tw, tb, *args)
    tgy = torch.from_numpy(rng.standard_normal(tuple(ty.shape), dtype=np.float32))
    (ty * tgy).sum().backward()
    sx, sw, sb = (sm.from_numpy(a).requires_grad_() for a in (x, w, b))
    sy = getattr(F, f"conv_transpose{rank}d")(sx, sw, sb, *args)
    (sy * sm.from_numpy(tgy.numpy())).sum().backward()
    assert _rel(sy.detach().numpy(), ty.detach().numpy()) < 1e-5
    for s_, t_ in ((sx, tx), (sw, tw), (sb, tb)):
        assert _rel(s_.grad.numpy(), t_.grad.numpy()) < 1e-5


# (N, C, O, spatial, kernel, stride, padding, dilation, groups): groups too narrow for a GEMM
NARROW = [
    (2, 6, 6, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1), 6),           # depthwise
    (3, 5, 5, (12, 9), (3, 3), (2, 2), (1, 1), (1, 1), 5),           # stride 2
    (1, 4, 8, (10, 13), (3, 5), (2, 3), (2, 1), (2, 1), 4),          # multiplier 2, dilation
    (33, 3, 3, (7, 6), (5, 5), (1, 1), (2, 2), (1, 1), 3),           # batch 33, 5x5
    (2, 6, 6, (17,), (3,), (2,), (1,), (1,), 6),                     # 1-D
    (2, 6, 3, (8, 9), (3, 3), (1, 1), (1, 1), (1, 1), 3),            # two channels in, one out
]


@pytest.mark.parametrize("case", NARROW, ids=str)
def test_narrow_groups_against_float64_and_torch(case: tuple) -> None:
    """Depthwise and other narrow groups: the direct kernel's input gradient and the
    per-tap weight gradient, against the float64 NumPy reference and torch's autograd."""
    x, w, gy = _operands(case, seed=3)
    s, p, d, g = case[5:]
    assert not cb.taken(gy, w, x.shape, w.shape, s, p, d, g)
    assert cb.narrow_taken(gy, w, x.shape, w.shape, s, p, d, g)
    dx = cb.narrow_grad_input(gy, w, x.shape, s, p, d, g)
    dw = cb.narrow_grad_weight(gy, x, w.shape, s, p, d, g)
    ref_x = kc.conv_grad_input(np, gy.astype(np.float64), w.astype(np.float64), x.shape,
                               s, p, d, g)
    ref_w = kc.conv_grad_weight(np, gy.astype(np.float64), x.astype(np.float64), w.shape,
                                s, p, d, g)
    assert dx is not None and dx.dtype == dw.dtype == np.float32
    assert dx.shape == x.shape and dw.shape == w.shape
    assert _rel(dx, ref_x) < 2e-6 and _rel(dw, ref_w) < 2e-6
    torch = pytest.importorskip("torch")
    tx, tw = (torch.from_numpy(a).requires_grad_() for a in (x, w))
    tconv = getattr(torch.nn.functional, f"conv{len(case[3])}d")
    (tconv(tx, tw, None, s, p, d, g) * torch.from_numpy(gy)).sum().backward()
    sx, sw = (sm.from_numpy(a).requires_grad_() for a in (x, w))
    (getattr(F, f"conv{len(case[3])}d")(sx, sw, None, s, p, d, g) * sm.from_numpy(gy)).sum() \
        .backward()
    assert _rel(sx.grad.numpy(), tx.grad.numpy()) < 1e-5
    assert _rel(sw.grad.numpy(), tw.grad.numpy()) < 1e-5


def test_small_or_narrow_convolutions_keep_the_numpy_kernels() -> None:
    x, w, gy = _operands((2, 4, 4, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), 4))   # depthwise
    one = (1, 1)
    assert not cb.taken(gy, w, x.shape, w.shape, one, one, one, 4)
    assert not cb.narrow_taken(gy.astype(np.float64), w.astype(np.float64), x.shape, w.shape,
                               one, one, one, 4)
    x3, w3, gy3 = _operands((2, 4, 4, (5, 6, 7), (3, 3, 3), (1,) * 3, (1,) * 3, (1,) * 3, 4))
    assert not cb.narrow_taken(gy3, w3, x3.shape, w3.shape, (1,) * 3, (1,) * 3, (1,) * 3, 4)
    assert not cb.taken(gy.astype(np.float64), w.astype(np.float64), x.shape, w.shape, one,
                        one, one, 1)
    ref = kc.conv_grad_input(np, gy.astype(np.float64), w.astype(np.float64), x.shape,
                             (1, 1), (1, 1), (1, 1), 4)
    assert _rel(kc.conv_grad_input(np, gy, w, x.shape, (1, 1), (1, 1), (1, 1), 4), ref) < 1e-5


def test_shapes_that_disagree_never_reach_the_native_loops() -> None:
    x, w, gy = _operands((2, 6, 8, (9, 9), (3, 3), (1, 1), (1, 1), (1, 1), 1))
    one = (1, 1)
    assert cb.taken(gy, x, x.shape, w.shape, one, one, one, 1)
    bad = [((2, 6, 6, 6), w.shape, one, one),             # gy larger than the windows
           (x.shape, (8, 5, 3, 3), one, one),             # channels
           (x.shape, w.shape, (0, 1), one),               # stride 0
           (x.shape, w.shape, one, (-1, 1)),              # negative padding
           ((3, 6, 9, 9), w.shape, one, one)]             # batch
    for xs, ws, s, p in bad:
        assert not cb.taken(gy, np.zeros(xs, np.float32), xs, ws, s, p, one, 1)
    with pytest.raises(ValueError):        # the NumPy kernel's own error, not a crash
        kc.conv_grad_weight(np, gy, x[:, :, :4], w.shape, one, one, one, 1)


def _bn_data(shape: tuple, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)
    g = rng.standard_normal(shape, dtype=np.float32)
    w, b = (rng.standard_normal(shape[1], dtype=np.float32) for _ in range(2))
    return x, g, w, b


@pytest.mark.parametrize("shape", [(8, 5, 33, 7), (33, 3, 130), (2, 4, 5, 6, 7)])
def test_batch_norm_training_against_torch(shape: tuple) -> None:
    torch = pytest.importorskip("torch")
    x, g, w, b = _bn_data(shape)
    assert bn.taken(x, g, w, b)
    c = shape[1]
    tx = torch.from_numpy(x).requires_grad_()
    tw, tb = (torch.from_numpy(a).requires_grad_() for a in (w, b))
    rm, rv = torch.zeros(c), torch.ones(c)
    ty = torch.nn.functional.batch_norm(tx, rm, rv, tw, tb, True, 0.3, 1e-5)
    ty.backward(torch.from_numpy(g))
    sx = sm.from_numpy(x).requires_grad_()
    sw, sb = (sm.from_numpy(a).requires_grad_() for a in (w, b))
    srm, srv = sm.zeros(c), sm.ones(c)
    sy = F.batch_norm(sx, srm, srv, sw, sb, True, 0.3, 1e-5)
    sy.backward(sm.from_numpy(g))
    assert _rel(sy.detach().numpy(), ty.detach().numpy()) < 1e-5
    assert _rel(srm.numpy(), rm.numpy()) < 1e-6 and _rel(srv.numpy(), rv.numpy()) < 1e-6
    for s_, t_ in ((sx, tx), (sw, tw), (sb, tb)):
        assert _rel(s_.grad.numpy(), t_.grad.numpy()) < 2e-5


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_eval_mode_and_float64_autograd_against_torch(dtype: str) -> None:
    """Eval mode (running statistics: constants) through the fused backward op, and float64
    (its NumPy formula) in training and eval."""
    torch = pytest.importorskip("torch")
    x, g, w, b = (a.astype(dtype) for a in _bn_data((5, 4, 9, 11), seed=5))
    rm, rv = np.linspace(4, 6, 4).astype(dtype), np.linspace(5, 12, 4).astype(dtype)
    for training in ((False, True) if dtype == "float64" else (False,)):
        tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
        ty = torch.nn.functional.batch_norm(tx, torch.from_numpy(rm.copy()),
                                            torch.from_numpy(rv.copy()), tw, tb, training)
        ty.backward(torch.from_numpy(g))
        sx, sw, sb = (sm.from_numpy(a).requires_grad_() for a in (x, w, b))
        sy = F.batch_norm(sx, sm.from_numpy(rm.copy()), sm.from_numpy(rv.copy()), sw, sb,
                          training)
        sy.backward(sm.from_numpy(g))
        assert _rel(sy.detach().numpy(), ty.detach().numpy()) < 1e-5
        for s_, t_ in ((sx, tx), (sw, tw), (sb, tb)):
            assert _rel(s_.grad.numpy(), t_.grad.numpy()) < 1e-5


def test_batch_norm_eval_backward_and_no_affine_against_float64() -> None:
    x, g, w, _ = _bn_data((4, 6, 20, 9), seed=2)
    rm, rv = np.linspace(-1, 1, 6).astype(np.float32), np.linspace(0.5, 2, 6).astype(np.float32)
    gx, gw, gb = bn.backward(g, x, rm, rv, w, 1e-5, batch_stats=False)
    inv = 1 / np.sqrt(rv.astype(np.float64) + 1e-5)
    shape = (1, 6, 1, 1)
    xhat = (x - rm.reshape(shape)) * inv.reshape(shape)
    assert _rel(gx, g * (w * inv).reshape(shape)) < 1e-6
    assert _rel(gw, (g * xhat).sum(axis=(0, 2, 3))) < 1e-6
    assert _rel(gb, g.astype(np.float64).sum(axis=(0, 2, 3))) < 1e-6
    y = bn.normalize(x, rm, rv, None, None, 1e-5)
    assert _rel(y, xhat) < 1e-6


def test_batch_norm_statistics_keep_their_digits_far_from_zero() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((16, 2, 40, 40)) * 0.01 + 1000).astype(np.float32)
    mean, var = bn.stats(x)
    x64 = x.astype(np.float64)
    assert _rel(mean, x64.mean(axis=(0, 2, 3))) < 1e-12
    assert _rel(var, x64.var(axis=(0, 2, 3))) < 1e-6
    y = bn.normalize(x, mean, var, None, None, 0.0)
    ref = (x64 - x64.mean(axis=(0, 2, 3), keepdims=True)) / x64.std(axis=(0, 2, 3), keepdims=True)
    assert _rel(y, ref) < 1e-3     # the float32 input's own rounding near 1000: ~6e-5 / 0.01


def test_batch_norm_traced_with_grad_and_double_backward() -> None:
    torch = pytest.importorskip("torch")
    x, g, _, _ = _bn_data((4, 3, 8, 8), seed=4)
    sbn, tbn = sm.nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)

    class M(sm.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = sbn

        def forward(self, a: sm.Tensor, b: sm.Tensor) -> sm.Tensor:
            return (self.bn(a) * b).sum()
    sx, sg = sm.from_numpy(x).requires_grad_(), sm.from_numpy(g)
    traced = sm.jit.trace(M(), (sx, sg))
    sx.grad = None
    traced(sx, sg).backward()
    tx = torch.from_numpy(x).requires_grad_()
    (tbn(tx) * torch.from_numpy(g)).sum().backward()
    assert _rel(sx.grad.numpy(), tx.grad.numpy()) < 1e-5
    # create_graph: the composite derivative, itself differentiable
    sx2 = sm.from_numpy(x).requires_grad_()
    gx, = sm.autograd.grad((sm.nn.BatchNorm2d(3)(sx2) * sg).sum(), sx2, create_graph=True)
    (gx * gx).sum().backward()
    tx2 = torch.from_numpy(x).requires_grad_()
    tgx, = torch.autograd.grad((torch.nn.BatchNorm2d(3)(tx2) * torch.from_numpy(g)).sum(), tx2,
                               create_graph=True)
    (tgx * tgx).sum().backward()
    assert _rel(sx2.grad.numpy(), tx2.grad.numpy()) < 1e-4
    assert math.isfinite(float(sx2.grad.numpy().sum()))


def test_batch_norm_backward_refuses_a_gradient_of_another_shape() -> None:
    from scriptmod.ir.errors import ShapeError
    from scriptmod.runtime.kernels import nn as knn
    x, g, w, _ = _bn_data((2, 3, 8, 8))
    with pytest.raises(ShapeError, match="grad of the input's shape"):
        knn._batch_norm_backward(np, g[:, :, :4], x, None, None, w, True)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "traced"])
def test_gradients_nobody_reads_are_not_computed(monkeypatch: pytest.MonkeyPatch,
                                                 compiled: bool) -> None:
    """A network's first convolution (an input without grad) runs no input-gradient
    convolution, a frozen weight no weight gradient; the gradients that are read still
    equal the full backward's."""
    calls: list[str] = []
    for name in ("conv_grad_input", "conv_grad_weight"):
        real = getattr(kc, name)
        monkeypatch.setattr(kc, name, lambda *a, _r=real, _n=name: (calls.append(_n), _r(*a))[1])
    x, w, gy = _operands((2, 4, 6, (9, 8), (3, 3), (1, 1), (1, 1), (1, 1), 1))

    def run(x_grad: bool, w_grad: bool) -> tuple:
        sx = sm.from_numpy(x).requires_grad_(x_grad)
        sw = sm.from_numpy(w).requires_grad_(w_grad)
        fn = lambda a, b: (F.conv2d(a, b, None, 1, 1) * sm.from_numpy(gy)).sum()  # noqa: E731
        if compiled:
            class M(sm.nn.Module):
                def forward(self, a: sm.Tensor, b: sm.Tensor) -> sm.Tensor:
                    return fn(a, b)
            fn = sm.jit.trace(M(), (sx, sw))
        calls.clear()
        fn(sx, sw).backward()
        return sorted(set(calls)), sx.grad, sw.grad

    assert run(False, True)[0] == ["conv_grad_weight"]
    assert run(True, False)[0] == ["conv_grad_input"]
    _, full_x, full_w = run(True, True)
    assert np.array_equal(run(False, True)[2].numpy(), full_w.numpy())
    assert np.array_equal(run(True, False)[1].numpy(), full_x.numpy())
