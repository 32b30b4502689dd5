"""Derivatives: one row per differentiable op in ``ir.ops``.

A rule gets ``ctx`` (the inputs and outputs it asked to save, the op's attributes) and the
output gradient ``g``, and returns one gradient per input (``None`` where there is none).
Rules are written with Tensor ops, so they are differentiable themselves
(``create_graph=True``); the engine reduces results over broadcast dims and casts them to
the input's dtype. Convolution and pooling go through registry ops of their own
(``conv2d_grad_input``, ``max_pool2d_grad``, ...) which have no derivative, and dropout
replays its draw: those are first-order only, and say so.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from scriptmod.autograd import grad_mode
from scriptmod.ir import dtypes
from scriptmod.ir.ops.rules import broadcast_shapes, reduce_dims
from scriptmod.runtime import random as rng
from scriptmod.runtime.kernels import nn as knn
from scriptmod._creation import arange, full_like, zeros
from scriptmod._shape_ops import cat, index, index_put
from scriptmod._tensor_ops import floor_divide, where
from scriptmod.tensor import Tensor, wrap
from scriptmod.autograd.derivative_table import DERIVATIVES, Derivative, _op, derivative  # noqa: F401


def _zero(g: Tensor) -> Tensor:
    return g * 0


# ---- elementwise ---------------------------------------------------------------------
derivative("neg")(lambda ctx, g: (-g,))
@derivative("abs", saves=(0,))
def _abs(ctx: Any, g: Tensor) -> tuple:
    """``g * sign(x)``; of a complex ``x``, ``g * x / |x|`` (0 at 0), as PyTorch's."""
    x = ctx.inputs[0]
    if x.dtype.is_complex:
        from scriptmod._ops_math import sgn
        return (g * sgn(x),)
    return (g * x.sign(),)


for _n in ("sign", "floor", "ceil", "round", "trunc"):
    derivative(_n)(lambda ctx, g: (_zero(g),))
# piecewise constant: a zero gradient for both operands (PyTorch's div(rounding_mode='floor'))
derivative("floor_divide")(lambda ctx, g: (_zero(g), _zero(g)))
derivative("relu", output=True)(lambda ctx, g: (where(ctx.output > 0, g, 0.0),))
derivative("exp", output=True, holomorphic=True)(lambda ctx, g: (g * ctx.output,))
derivative("log", saves=(0,), holomorphic=True)(lambda ctx, g: (g / ctx.inputs[0],))
derivative("log1p", saves=(0,), holomorphic=True)(lambda ctx, g: (g / (ctx.inputs[0] + 1),))
derivative("expm1", output=True, holomorphic=True)(lambda ctx, g: (g * (ctx.output + 1),))
derivative("sqrt", output=True, holomorphic=True)(lambda ctx, g: (g / (2 * ctx.output),))
derivative("rsqrt", output=True, holomorphic=True)(lambda ctx, g: (g * (-0.5) * ctx.output * ctx.output * ctx.output,))
derivative("sin", saves=(0,), holomorphic=True)(lambda ctx, g: (g * ctx.inputs[0].cos(),))
derivative("cos", saves=(0,), holomorphic=True)(lambda ctx, g: (-g * ctx.inputs[0].sin(),))
derivative("tanh", output=True, holomorphic=True)(lambda ctx, g: (g * (1 - ctx.output * ctx.output),))
derivative("sigmoid", output=True, holomorphic=True)(lambda ctx, g: (g * ctx.output * (1 - ctx.output),))
derivative("erf", saves=(0,))(
    lambda ctx, g: (g * (2 / math.sqrt(math.pi)) * (-(ctx.inputs[0] * ctx.inputs[0])).exp(),))
derivative("erfc", saves=(0,))(
    lambda ctx, g: (g * (-2 / math.sqrt(math.pi)) * (-(ctx.inputs[0] * ctx.inputs[0])).exp(),))
derivative("reciprocal", output=True, holomorphic=True)(lambda ctx, g: (-g * ctx.output * ctx.output,))
derivative("log2", saves=(0,), holomorphic=True)(lambda ctx, g: (g / (ctx.inputs[0] * math.log(2)),))
derivative("exp2", output=True, holomorphic=True)(lambda ctx, g: (g * ctx.output * math.log(2),))
derivative("add")(lambda ctx, g: (g, g))
derivative("sub")(lambda ctx, g: (g, -g))
derivative("mul", saves=(0, 1), holomorphic=True)(lambda ctx, g: (g * ctx.inputs[1], g * ctx.inputs[0]))
derivative("cast")(lambda ctx, g: (g,))


@derivative("div", saves=(0, 1), holomorphic=True)
def _div(ctx: Any, g: Tensor) -> tuple:
    a, b = ctx.inputs
    ga = g / b
    return ga, (None if not isinstance(b, Tensor) else -ga * a / b)


derivative("copy_")(lambda ctx, g: (None, g))     # self's old value is overwritten


@derivative("remainder", saves=(0, 1))
def _remainder(ctx: Any, g: Tensor) -> tuple:
    a, b = ctx.inputs
    return g, (None if not isinstance(b, Tensor) else -g * floor_divide(a, b))


@derivative("pow", saves=(0, 1), output=True, holomorphic=True)
def _pow(ctx: Any, g: Tensor) -> tuple:
    a, b = ctx.inputs
    ga = gb = None
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            ga = where(b == 0, 0.0, g * b * a ** (b - 1))
        else:
            ga = _zero(g) if b == 0 else g * b * a ** (b - 1)
    if isinstance(b, Tensor):
        base = a if isinstance(a, Tensor) else full_like(b, a)
        gb = where((base == 0) & (b >= 0), 0.0, g * ctx.output * base.log())
    return ga, gb


def _minmax(ctx: Any, g: Tensor, pick_a: Callable) -> tuple:
    a, b = ctx.inputs
    half = g / 2
    ga = where(a == b, half, where(pick_a(a, b), g, 0.0))
    gb = where(a == b, half, where(pick_a(a, b), 0.0, g))
    return ga, gb


derivative("maximum", saves=(0, 1))(lambda ctx, g: _minmax(ctx, g, lambda a, b: a > b))
derivative("minimum", saves=(0, 1))(lambda ctx, g: _minmax(ctx, g, lambda a, b: a < b))


@derivative("atan2", saves=(0, 1))
def _atan2(ctx: Any, g: Tensor) -> tuple:
    a, b = ctx.inputs
    den = a * a + b * b
    return g * b / den, -g * a / den


@derivative("where", saves=(0,))
def _where(ctx: Any, g: Tensor) -> tuple:
    c = ctx.inputs[0]
    return None, where(c, g, 0.0), where(c, 0.0, g)


@derivative("clamp", saves=(0,))
def _clamp(ctx: Any, g: Tensor) -> tuple:
    x, lo, hi = ctx.inputs[0], ctx.attrs["min"], ctx.attrs["max"]
    keep = None
    if lo is not None:
        keep = x >= lo
    if hi is not None:
        keep = (x <= hi) if keep is None else keep & (x <= hi)
    return (where(keep, g, 0.0),)


# ---- reductions ----------------------------------------------------------------------
def _dims(ctx: Any) -> list[int]:
    return list(reduce_dims(ctx.attrs, len(ctx.input_meta[0][0])))


def _unreduce(ctx: Any, t: Tensor) -> Tensor:
    """Put reduced dims back (size 1) so ``t`` broadcasts against the input."""
    if ctx.attrs.get("keepdim"):
        return t
    shape = list(ctx.input_meta[0][0])
    for d in _dims(ctx):
        shape[d] = 1
    return t.reshape(shape)


def _expand_back(ctx: Any, t: Tensor) -> Tensor:
    return _unreduce(ctx, t).expand(ctx.input_meta[0][0])


derivative("sum")(lambda ctx, g: (_expand_back(ctx, g),))


@derivative("mean")
def _mean(ctx: Any, g: Tensor) -> tuple:
    shape = ctx.input_meta[0][0]
    n = math.prod(shape[d] for d in _dims(ctx))
    return (_expand_back(ctx, g) / max(n, 1),)


@derivative("var", saves=(0,))
def _var(ctx: Any, g: Tensor) -> tuple:
    x = ctx.inputs[0]
    dims = _dims(ctx)
    n = math.prod(x.shape[d] for d in dims)
    mean = x.mean(dim=dims, keepdim=True)
    c = ctx.attrs["correction"]          # an int where it is one: ``n - c`` stays a size
    return (_unreduce(ctx, g) * 2 * (x - mean) / (n - (int(c) if c == int(c) else c)),)


@derivative("prod", saves=(0,), output=True)
def _prod(ctx: Any, g: Tensor) -> tuple:
    x = ctx.inputs[0]
    dims = _dims(ctx)
    out, gg = _unreduce(ctx, ctx.output), _unreduce(ctx, g)
    is_zero = x == 0
    zeros = is_zero.sum(dim=dims, keepdim=True)
    others = where(is_zero, 1.0, x).prod(dim=dims, keepdim=True)
    safe_x = where(is_zero, 1.0, x)
    grad = where(is_zero, where(zeros == 1, others, 0.0), where(zeros == 0, out / safe_x, 0.0))
    return (gg * grad,)


def _ties(ctx: Any, g: Tensor) -> tuple:
    x = ctx.inputs[0]
    mask = (x == _unreduce(ctx, ctx.output)).to(g.dtype)
    return (_unreduce(ctx, g) * mask / mask.sum(dim=_dims(ctx), keepdim=True),)


derivative("amax", saves=(0,), output=True)(_ties)
derivative("amin", saves=(0,), output=True)(_ties)
derivative("logsumexp", saves=(0,), output=True)(
    lambda ctx, g: (_unreduce(ctx, g) * (ctx.inputs[0] - _unreduce(ctx, ctx.output)).exp(),))


def _sgn(x: Tensor) -> Tensor:
    """x / |x| (0 at 0): ``sign`` of a real tensor, the unit phase of a complex one."""
    if not x.is_complex():
        return x.sign()
    mag = x.abs()
    return where(mag == 0, 0.0, x / mag)


@derivative("linalg_vector_norm", saves=(0,), output=True)
def _vector_norm(ctx: Any, g: Tensor) -> tuple:
    """torch's ``norm_backward``: 0 where the norm is 0 (a zero vector's 2-norm has no
    gradient; sqrt(sum(x * x)) would give NaN there), ties of the inf-norm share theirs."""
    x, p = ctx.inputs[0], ctx.attrs["ord"]
    norm, g = _unreduce(ctx, ctx.output), _unreduce(ctx, g)
    if p == 0:                    # piecewise constant: no gradient at all, as in torch
        return (None,)
    if p == 1:
        return (_sgn(x) * g,)
    if p == 2:
        return (g * where(norm == 0, 0.0, x / norm),)
    mag = x.abs()
    if math.isinf(p):
        mask = ((mag == norm) | mag.isnan()).to(g.dtype)
        return (_sgn(x) * (g / mask.sum(dim=_dims(ctx), keepdim=True) * mask),)
    if p < 1:
        return (_sgn(x) * where(x == 0, 0.0, mag ** (p - 1)) * g * norm ** (1 - p),)
    scale = where(norm == 0, 0.0, g / norm ** (p - 1))
    return ((_sgn(x) * mag ** (p - 1) if p < 2 else x * mag ** (p - 2)) * scale,)


def _select_back(ctx: Any, gs: list) -> tuple:
    g, idx = gs[0], ctx.outputs[1]
    shape, dim = ctx.input_meta[0][0], ctx.attrs["dim"]
    if len(shape) == 0:
        return (g,)
    d = dim % len(shape)
    if not ctx.attrs.get("keepdim"):
        g, idx = g.unsqueeze(d), idx.unsqueeze(d)
    view = [1] * len(shape)
    view[d] = shape[d]
    pos = arange(shape[d], device=g.device).reshape(view)
    return (where(pos == idx, g, 0.0),)


derivative("max_dim", output=True)(_select_back)
derivative("min_dim", output=True)(_select_back)


@derivative("softmax", output=True)
def _softmax(ctx: Any, g: Tensor) -> tuple:
    y = ctx.output
    return (y * (g - (g * y).sum(dim=ctx.attrs["dim"], keepdim=True)),)


@derivative("log_softmax", output=True)
def _log_softmax(ctx: Any, g: Tensor) -> tuple:
    return (g - ctx.output.exp() * g.sum(dim=ctx.attrs["dim"], keepdim=True),)


@derivative("cumsum")
def _cumsum(ctx: Any, g: Tensor) -> tuple:
    if len(ctx.input_meta[0][0]) == 0:
        return (g,)
    d = ctx.attrs["dim"]
    return (g.sum(dim=d, keepdim=True) - g.cumsum(d) + g,)


# ---- shape and data movement ---------------------------------------------------------
derivative("reshape")(lambda ctx, g: (g.reshape(ctx.input_meta[0][0]), None))
derivative("expand")(lambda ctx, g: (g, None))   # the engine sums over expanded dims
derivative("contiguous")(lambda ctx, g: (g,))
derivative("clone")(lambda ctx, g: (g,))
derivative("squeeze")(lambda ctx, g: (g.reshape(ctx.input_meta[0][0]),))
derivative("unsqueeze")(lambda ctx, g: (g.squeeze(ctx.attrs["dim"]),))
derivative("transpose")(lambda ctx, g: (g.transpose(ctx.attrs["dim0"], ctx.attrs["dim1"]),))
derivative("to_device")(lambda ctx, g: (g.to(ctx.device),))


@derivative("permute")
def _permute(ctx: Any, g: Tensor) -> tuple:
    n = len(ctx.input_meta[0][0])
    dims = [d % n for d in ctx.attrs["dims"]]
    inv = [0] * n
    for i, d in enumerate(dims):
        inv[d] = i
    return (g.permute(inv),)


@derivative("narrow", saves=(1, 2))
def _narrow(ctx: Any, g: Tensor) -> tuple:
    shape = list(ctx.input_meta[0][0])
    d = ctx.attrs["dim"] % len(shape)
    start, length = (int(v) for v in ctx.inputs[1:3])
    start = start % shape[d] if shape[d] else 0
    parts = []
    for size in (start, shape[d] - start - length):
        if size:
            s = list(shape)
            s[d] = size
            parts.append(zeros(s, dtype=g.dtype, device=g.device))
    if not parts:
        return (g, None, None)
    return (cat(parts[:1] + [g] + parts[1:] if start else [g] + parts, dim=d), None, None)


@derivative("cat")
def _cat(ctx: Any, g: Tensor) -> tuple:
    d = ctx.attrs["dim"]
    out, start = [], 0
    for shape, _ in ctx.input_meta:
        if len(shape) == 1 and shape[0] == 0 and g.ndim > 1:
            out.append(None)
            continue
        n = shape[d % len(shape)]
        out.append(g.narrow(d, start, n))
        start += n
    return tuple(out)


@derivative("stack")
def _stack(ctx: Any, g: Tensor) -> tuple:
    d = ctx.attrs["dim"]
    return tuple(g.narrow(d, i, 1).squeeze(d) for i in range(len(ctx.input_meta)))


def _grid_index(index: Tensor, dim: int) -> list[Tensor]:
    """Index tensors addressing, for every element of ``index``, its target in the input."""
    n = index.ndim
    out = []
    for k in range(n):
        if k == dim % n:
            out.append(index)
        else:
            view = [1] * n
            view[k] = index.shape[k]
            out.append(arange(index.shape[k], device=index.device).reshape(view).expand(index.shape))
    return out


def _scatter_add(shape: Any, g: Tensor, index: Tensor, dim: int) -> Tensor:
    """Zeros of ``shape`` with ``g`` added at ``index`` along ``dim`` (gather's transpose)."""
    base = zeros(shape, dtype=g.dtype, device=g.device)
    spec = tuple(("tensor", k) for k in range(index.ndim))
    return index_put(base, g, *_grid_index(index, dim), spec=spec, accumulate=True)


def _sorted_back(ctx: Any, gs: list) -> tuple:
    """sort/topk: each value's gradient goes back to where it came from (``indices``)."""
    shape = ctx.input_meta[0][0]
    if len(shape) == 0:
        return (gs[0],)
    return (_scatter_add(shape, gs[0], ctx.outputs[1], ctx.attrs["dim"]),)


derivative("sort", output=True)(_sorted_back)
derivative("topk", output=True)(_sorted_back)


@derivative("index", saves="all")
def _index(ctx: Any, g: Tensor) -> tuple:
    tensors = ctx.inputs[1:]
    base = zeros(ctx.input_meta[0][0], dtype=g.dtype, device=g.device)
    out = index_put(base, g, *tensors, spec=ctx.attrs["spec"], accumulate=True)
    return (out,) + (None,) * len(tensors)


@derivative("index_put", saves="all")
def _index_put(ctx: Any, g: Tensor) -> tuple:
    tensors, spec = ctx.inputs[2:], ctx.attrs["spec"]
    gx = g if ctx.attrs["accumulate"] else index_put(g, zeros((), dtype=g.dtype, device=g.device),
                                                       *tensors, spec=spec)
    gv = index(g, *tensors, spec=spec)
    return (gx, gv) + (None,) * len(tensors)


# ---- linear algebra and nn -----------------------------------------------------------
@derivative("matmul", saves=(0, 1), holomorphic=True)
def _matmul(ctx: Any, g: Tensor) -> tuple:
    a, b = ctx.inputs
    if a.ndim == 1 and b.ndim == 1:   # dot: g is 0-d
        return g * b, g * a
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = g2.unsqueeze(-2)
    if b.ndim == 1:
        g2 = g2.unsqueeze(-1)
    ga = g2 @ b2.transpose(-1, -2)
    if b.ndim == 2 and a.ndim > 2:
        # a batch of rows times one matrix (a Linear on (T, B, E)): one GEMM over all the
        # rows, not a batch of small GEMMs whose results the engine then sums
        gb = a.reshape(-1, a.shape[-1]).transpose(0, 1) @ g2.reshape(-1, g2.shape[-1])
    else:
        gb = a2.transpose(-1, -2) @ g2
    if a.ndim == 1:
        ga = ga.squeeze(-2)
    if b.ndim == 1:
        gb = gb.squeeze(-1)
    return ga, gb


@derivative("attention", saves=(0, 1, 2, 3))
def _attention(ctx: Any, g: Tensor) -> tuple:
    """Recomputes the weights ``p`` from the saved inputs (the forward never keeps them):
    ``ds = p * (dp - rowsum(dp * p))`` is softmax's derivative; the mask's gradient is
    ``ds`` (the engine sums it over the dims the mask was broadcast along)."""
    q, k, v, mask = ctx.inputs
    s = ctx.attrs["scale"]
    scores = q @ k.transpose(-2, -1) * s
    if mask is not None:
        scores = scores + mask
    p = scores.softmax(-1)
    gp = g @ v.transpose(-2, -1)
    ds = p * (gp - (gp * p).sum(dim=-1, keepdim=True))
    return (ds @ k * s, ds.transpose(-2, -1) @ q * s, p.transpose(-2, -1) @ g,
            ds if mask is not None else None)


@derivative("linalg_svdvals", saves=(0,))
def _svdvals(ctx: Any, g: Tensor) -> tuple:
    """First-order only (``linalg_svdvals_grad`` has no derivative)."""
    return (_op("linalg_svdvals_grad", ctx.inputs[0], g),)


@derivative("embedding", saves=(1,))
def _embedding(ctx: Any, g: Tensor) -> tuple:
    idx = ctx.inputs[1]
    shape = ctx.input_meta[0][0]
    pad = ctx.attrs["padding_idx"]
    if pad is not None:
        g = where((idx == pad).unsqueeze(-1), 0.0, g)
    base = zeros(shape, dtype=g.dtype, device=g.device)
    return index_put(base, g, idx, spec=(("tensor", 0),), accumulate=True), None


@derivative("mse_loss", saves=(0, 1))
def _mse_loss(ctx: Any, g: Tensor) -> tuple:
    """Two passes: (x - t), then its product with the scalar 2g/n (2g for "none", per
    element); the target's gradient only when it requires one."""
    x, t = ctx.inputs
    reduction = ctx.attrs["reduction"]
    if reduction == "mean":         # g * 2 / n: a size, read at run time in a compiled graph
        n = math.prod(_broadcast(ctx.input_meta[0][0], ctx.input_meta[1][0]))
        scale = g * 2 / max(n, 1)
    else:
        scale = g * 2
    d = (x - t) * scale
    return d, (-d if isinstance(t, Tensor) and t.requires_grad else None)


def _broadcast(a: Any, b: Any) -> tuple:
    return tuple(broadcast_shapes(tuple(a), tuple(b)) or ())


@derivative("dropout", saves=(0, 1))
def _dropout(ctx: Any, g: Tensor) -> tuple:
    """Replays the forward's random draw to rebuild the exact mask."""
    x, train = ctx.inputs[0], ctx.inputs[1]
    p = ctx.attrs["p"]
    if not train or p == 0.0:
        return g, None
    if p == 1.0:
        return _zero(g), None
    with rng.replay(ctx.device, ctx.rng):
        mask = knn.dropout_mask(x._xp(), x._data, p)
    return g * wrap(mask).to(g.dtype), None


@derivative("batch_norm", saves=(0, 1, 2, 3, 5))
def _batch_norm(ctx: Any, g: Tensor) -> tuple:
    x, rm, rv, w, _, training, _ = ctx.inputs
    if x.numel() == 0:      # an empty batch: the output was a copy of it
        affine = tuple(None if meta is None else g.new_zeros(meta[0], dtype=meta[1])
                       for meta in ctx.input_meta[3:5])
        return (g, None, None) + affine + (None, None)
    eps = ctx.attrs["eps"]
    if _fused_batch_norm(x, g, (rm, rv, w), ctx.input_meta[4]):
        gx, gw, gb = _op("batch_norm_backward", g, x, rm, rv, w, training, eps=eps)
        return (gx, None, None, gw if w is not None else None,
                gb if ctx.input_meta[4] is not None else None, None, None)
    dims = [0] + list(range(2, x.ndim))
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)
    if training or rm is None:
        mean = x.mean(dim=dims, keepdim=True)
        var = x.var(dim=dims, keepdim=True, correction=0)
    else:
        mean, var = rm.reshape(shape), rv.reshape(shape)
    inv = (var + eps).rsqrt()
    xhat = (x - mean) * inv
    gw = (g * xhat).sum(dim=dims) if w is not None else None
    gb = g.sum(dim=dims) if ctx.input_meta[4] is not None else None
    gh = g * w.reshape(shape) if w is not None else g
    if training or rm is None:
        n = x.numel() // x.shape[1]
        gx = inv / n * (gh * n - gh.sum(dim=dims, keepdim=True)
                        - xhat * (gh * xhat).sum(dim=dims, keepdim=True))
    else:
        gx = gh * inv
    return gx, None, None, gw, gb, None, None


def _fused_batch_norm(x: Tensor, g: Tensor, params: tuple, bias_meta: Any) -> bool:
    """Whether batch norm's gradient is the one ``batch_norm_backward`` op: a first-order
    backward (no graph of it recorded), every tensor of one float32/float64 dtype."""
    if grad_mode.is_grad_enabled() or x.dtype not in (dtypes.float32, dtypes.float64):
        return False
    return g.dtype is x.dtype and all(t is None or t.dtype is x.dtype for t in params) and \
        (bias_meta is None or bias_meta[1] is x.dtype)


# The families' rows, each in its own module (they import ``derivative`` and ``_op`` from here).
from scriptmod.autograd import (derivatives_conv, derivatives_layers, derivatives_loss,  # noqa: E402,F401
                                derivatives_norm, derivatives_pooling, derivatives_vision)
from scriptmod.autograd import (derivatives_fft, derivatives_indexing, derivatives_linalg,  # noqa: E402,F401
                                derivatives_math, derivatives_products, derivatives_rnn,
                                derivatives_scans, derivatives_special, derivatives_views)
