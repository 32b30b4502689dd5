"""Linear, convolution, pooling, regularization, normalization, embedding and padding of
``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from scriptmod._creation import arange, full, tensor as _const
from scriptmod._dispatch import dispatch
from scriptmod._tensor_ops import where
from scriptmod.ir import dtypes
from scriptmod.autograd import grad_mode
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _HALVES, _apply, _pair, _tracing


# ---- linear, convolution, pooling --------------------------------------------------------
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x W^T + b."""
    if input.dim() == 0 or input.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"linear: expected input with last dimension {weight.shape[-1]} "
                         f"(weight is {tuple(weight.shape)}), got shape {tuple(input.shape)}")
    _check_linear_dtypes(input, weight, bias)
    out = input.matmul(weight.t())
    return out if bias is None else out + bias


def _check_linear_dtypes(input: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """PyTorch's addmm messages; the matmul op's type rule refuses mixed dtypes too, so a
    traced model fed another dtype raises as well (never a silent mixed-precision call)."""
    if input.dtype is not weight.dtype:
        raise DTypeError(f"mat1 and mat2 must have the same dtype, but got {input.dtype.short} "
                         f"and {weight.dtype.short}")
    if bias is not None and bias.dtype is not weight.dtype:
        raise DTypeError(f"self and mat2 must have the same dtype, but got {bias.dtype.short} "
                         f"and {weight.dtype.short}")


def _same_padding(input: Tensor, weight: Tensor, stride: tuple[int, int],
                  dilation: tuple[int, int]) -> tuple[Tensor, tuple[int, int]]:
    """'same': equal padding where it splits evenly, the extra row/column right/bottom."""
    if stride != (1, 1):
        raise ValueError("conv2d: padding='same' is not supported for strided convolutions")
    total = [dilation[i] * (weight.shape[2 + i] - 1) for i in range(2)]
    sym = (total[0] // 2, total[1] // 2)
    extra = (total[1] - 2 * sym[1], total[0] - 2 * sym[0])
    if extra != (0, 0):
        input = pad(input, (0, extra[0], 0, extra[1]))
    return input, sym


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation of a (N, C, H, W) or (C, H, W) input."""
    if input.dim() not in (3, 4):
        raise ShapeError(f"conv2d: expected 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                         f"shape {tuple(input.shape)}")
    batched = input.dim() == 4
    x = input if batched else input.unsqueeze(0)
    st, dil = _pair(stride, "stride"), _pair(dilation, "dilation")
    _positive(st, "stride", "conv2d", "non-positive stride is not supported")
    _positive(dil, "dilation", "conv2d", "dilation should be greater than zero")
    if padding == "valid":
        pd = (0, 0)
    elif padding == "same":
        x, pd = _same_padding(x, weight, st, dil)
    else:
        pd = _pair(padding, "padding")
        if min(pd) < 0:
            raise ShapeError(f"conv2d: negative padding is not supported, got padding={pd}")
    out = dispatch("conv2d", (x, weight, bias), {"stride": st, "padding": pd, "dilation": dil,
                                                 "groups": int(groups)})
    return out if batched else out.squeeze(0)


def _pool_args(kernel_size: Any, stride: Any, padding: Any,
               name: str) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) \
        else _pair(stride, "stride")
    p = _pair(padding, "padding")
    if min(s) == 0:
        raise ShapeError(f"{name}: stride should not be zero, got stride={s}")
    if min(s) < 0:
        raise ShapeError(f"{name}: stride should be greater than zero, got stride={s}")
    if min(k) <= 0:
        raise ShapeError(f"{name}: kernel size should be greater than zero, got kernel_size={k}")
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise ShapeError(f"{name}: pad should be at most half of effective kernel size, got "
                         f"padding={p} and kernel_size={k}")
    return k, s, p


def _positive(v: tuple[int, int], arg: str, op: str, what: str) -> None:
    if min(v) <= 0:
        raise ShapeError(f"{op}: {what}, got {arg}={v}")


def _check_pool_input(input: Tensor, name: str) -> None:
    if input.dim() not in (3, 4):
        raise ShapeError(f"{name}: expected 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                         f"shape {tuple(input.shape)}")


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    if return_indices:
        raise NotImplementedError("max_pool2d: return_indices=True is not supported")
    _check_pool_input(input, "max_pool2d")
    k, s, p = _pool_args(kernel_size, stride, padding, "max_pool2d")
    dil = _pair(dilation, "dilation")
    _positive(dil, "dilation", "max_pool2d", "dilation should be greater than zero")
    return dispatch("max_pool2d", (input,), {"kernel_size": k, "stride": s, "padding": p,
                                             "dilation": dil,
                                             "ceil_mode": bool(ceil_mode)})


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    _check_pool_input(input, "avg_pool2d")
    k, s, p = _pool_args(kernel_size, stride, padding, "avg_pool2d")
    if divisor_override is not None and (ceil_mode or not count_include_pad):
        raise NotImplementedError("avg_pool2d: divisor_override is supported with "
                                  "ceil_mode=False and count_include_pad=True only")
    out = dispatch("avg_pool2d", (input,), {"kernel_size": k, "stride": s, "padding": p,
                                            "ceil_mode": bool(ceil_mode),
                                            "count_include_pad": bool(count_include_pad)})
    if divisor_override is not None:
        if divisor_override == 0:
            raise ArgumentValueError("avg_pool2d: divisor must be not zero")
        out = out * (k[0] * k[1] / divisor_override)
    return out


# ---- regularization and normalization ------------------------------------------------------
def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero elements with probability ``p`` and scale the rest by 1/(1-p) when ``training``.
    ``training`` is an input of the op (not a constant) so traced models honour train/eval."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return _apply(input, lambda x: dispatch("dropout", (x, bool(training)), {"p": float(p)}),
                  inplace)


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | None = 0.1, eps: float = 1e-5, *,
               num_batches_tracked: Tensor | None = None) -> Tensor:
    """Normalize over every dim but 1. In training it updates the running stats in place and
    counts the batch in ``num_batches_tracked`` (a scriptmod extension: the op does the
    bookkeeping, so a traced model follows ``.train()``/``.eval()``); ``momentum=None`` is a
    cumulative average."""
    if training and input.numel() // max(input.shape[1] if input.dim() > 1 else 1, 1) <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {list(input.shape)}")
    for name, p in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if p is not None and p.dtype.category < dtypes.FLOAT:
            raise DTypeError(f"batch_norm: mixed dtype (CPU): expect parameter to have scalar "
                             f"type of Float, got {name} of {p.dtype.name}")
    return dispatch("batch_norm", (input, running_mean, running_var, weight, bias, bool(training),
                                   num_batches_tracked),
                    {"momentum": None if momentum is None else float(momentum), "eps": float(eps)})


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the trailing ``normalized_shape`` dims, then affine."""
    shape = [int(normalized_shape)] if isinstance(normalized_shape, int) else \
        [int(s) for s in normalized_shape]
    if list(input.shape[input.dim() - len(shape):]) != shape or input.dim() < len(shape):
        raise ShapeError(f"layer_norm: given normalized_shape={shape}, expected input with "
                         f"shape [*, {', '.join(map(str, shape))}], but got input of size "
                         f"{list(input.shape)}")
    _check_norm_params("layer_norm", input, weight, bias)
    dims = list(range(-len(shape), 0))
    centered = input - input.mean(dim=dims, keepdim=True)
    var = (centered * centered).mean(dim=dims, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    out = out if bias is None else out + bias
    return out if out.dtype is input.dtype else out.to(input.dtype)   # half x, float32 w


def _check_norm_params(name: str, input: Tensor, *params: Tensor | None) -> None:
    """PyTorch's CPU rule: parameters of the input's dtype, or float32 for a half input."""
    for p in params:
        if p is not None and p.dtype is not input.dtype and not (
                input.dtype in _HALVES and p.dtype is dtypes.float32):
            raise DTypeError(f"{name}: mixed dtype (CPU): expected parameters of dtype "
                             f"{input.dtype.name} (the input's), got {p.dtype.name}")


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: Any = None) -> Tensor:
    """x / max(||x||_p, eps) along ``dim`` (finite gradient at x == 0)."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported")
    if p == 0 or math.isinf(p):   # count of non-zeros, max or min |x| (torch's vector norms)
        a = input.abs()
        norm = ((input != 0).sum(dim=dim, keepdim=True).to(input.dtype) if p == 0 else
                a.amax(dim=dim, keepdim=True) if p > 0 else a.amin(dim=dim, keepdim=True))
        return input / norm.clamp(min=eps)
    powered = input * input if p == 2 else input.abs() ** p
    total = powered.sum(dim=dim, keepdim=True).clamp(min=eps ** p)
    norm = total.sqrt() if p == 2 else total ** (1.0 / p)
    return input / norm


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (broadcast first), each
    divided by its norm clamped at ``eps`` as PyTorch does (zeros give 0, not nan).

    >>> F.cosine_similarity(scriptmod.tensor([[1.0, 0.0]]), scriptmod.tensor([[1.0, 1.0]]))
    tensor([0.7071])
    """
    shape = list((x1 + x2).shape)   # the broadcast shape (torch expands both to it)
    a, b = x1.expand(shape), x2.expand(shape)
    na = (a * a).sum(dim=dim, keepdim=True).sqrt().clamp(min=eps)
    nb = (b * b).sum(dim=dim, keepdim=True).sqrt().clamp(min=eps)
    return ((a / na) * (b / nb)).sum(dim=dim)


def _embedding_renorm_(weight: Tensor, idx: Tensor, max_norm: float, norm_type: float) -> None:
    with grad_mode.no_grad():
        flat = idx.reshape(-1)
        rows = weight.index_select(0, flat)
        norms = (rows.abs() ** norm_type).sum(dim=1, keepdim=True) ** (1.0 / norm_type)
        scale = where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).to(weight.dtype)
        weight[flat] = rows * scale


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` picked by the integer ``input``; ``padding_idx`` gets no gradient."""
    if sparse or scale_grad_by_freq:
        raise NotImplementedError("embedding: sparse=True and scale_grad_by_freq=True are not "
                                  "supported (scriptmod has no sparse gradients)")
    if weight.dim() != 2:
        raise ShapeError(f"embedding: 'weight' must be 2-D, got shape {tuple(weight.shape)}")
    n = weight.shape[0]
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding: padding_idx must be within num_embeddings ({n}), "
                             f"got {padding_idx}")
        padding_idx = padding_idx % n
    if max_norm is not None:
        _embedding_renorm_(weight, input, max_norm, norm_type)
    return dispatch("embedding", (weight, input), {"padding_idx": padding_idx})


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    if tensor.dtype != dtypes.int64:
        raise DTypeError(f"one_hot is only applicable to index tensor of type LongTensor, got "
                         f"{tensor.dtype.name}")
    if not _tracing() and tensor.numel():    # a value check; a tracer would bake it in
        if tensor.min().item() < 0:
            raise ShapeError("one_hot: Class values must be non-negative.")
        if num_classes >= 0 and tensor.max().item() >= num_classes:
            raise ShapeError(f"one_hot: Class values must be smaller than num_classes "
                             f"({num_classes}), got {tensor.max().item()}")
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    return (tensor.unsqueeze(-1) == arange(num_classes, device=tensor.device)).long()


# ---- padding --------------------------------------------------------------------------------
def _pad_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """Source index of each output position along one dim, for the non-constant modes."""
    pos = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(pos, 0, n - 1)
    if mode == "circular":
        if lo > n or hi > n:
            raise ShapeError("pad: circular padding may wrap around at most once")
        return pos % n
    if lo >= n or hi >= n:
        raise ShapeError(f"pad: padding ({lo}, {hi}) should be less than the corresponding "
                         f"input dimension {n} for reflect padding")
    period = 2 * (n - 1) if n > 1 else 1
    m = np.abs(pos) % period
    return np.where(m >= n, period - m, m)


def _pad_constant(x: Tensor, d: int, lo: int, hi: int, value: float) -> Tensor:
    if lo < 0 or hi < 0:    # negative padding crops
        start, stop = max(-lo, 0), x.shape[d] - max(-hi, 0)
        x = x.narrow(d, start, stop - start)
    parts = [x]
    for amount, at in ((lo, 0), (hi, 1)):
        if amount > 0:
            shape = list(x.shape)
            shape[d] = amount
            side = full(shape, value, dtype=x.dtype, device=x.device)
            parts.insert(0 if at == 0 else len(parts), side)
    return parts[0] if len(parts) == 1 else dispatch("cat", tuple(parts), {"dim": d})


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims: ``pad = (left, right, top, bottom, ...)``."""
    if len(pad) % 2 or len(pad) // 2 > input.dim():
        raise ShapeError(f"pad: padding length must be even and at most 2 * input.dim() "
                         f"({2 * input.dim()}), got {len(pad)}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode {mode!r} is not supported; expected 'constant', "
                                  "'reflect', 'replicate' or 'circular'")
    if mode != "constant" and value:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    out = input
    for i in range(len(pad) // 2):
        d, lo, hi = input.dim() - 1 - i, int(pad[2 * i]), int(pad[2 * i + 1])
        if mode == "constant":
            out = _pad_constant(out, d, lo, hi, 0.0 if value is None else value)
        elif lo or hi:
            idx = _const(_pad_index(out.shape[d], lo, hi, mode), device=out.device)
            out = out.index_select(d, idx)
    return out
