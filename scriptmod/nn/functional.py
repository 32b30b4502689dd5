"""``scriptmod.nn.functional``: the stateless forms of every layer (PyTorch's signatures).

Activations are decompositions into primitive ops (``ir.ops``), written in numerically safe
forms, so a backend only implements the primitives and the tracer sees plain elementwise
chains that fuse::

    >>> import scriptmod.nn.functional as F
    >>> F.gelu(scriptmod.tensor([0.0, 1.0]))
    tensor([0.0000, 0.8413])

``inplace=True`` writes the result into the input tensor and returns that same object.
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod import _dispatch
from scriptmod._creation import arange, full, tensor as _const
from scriptmod._dispatch import dispatch
from scriptmod._tensor_ops import where
from scriptmod.ir import dtypes
from scriptmod.autograd import grad_mode
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.ir.ops.rules import no_kernel
from scriptmod.tensor import Tensor

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_HALVES = (dtypes.float16, dtypes.bfloat16)

__all__ = [
    "relu", "relu_", "relu6", "hardtanh", "gelu", "silu", "elu", "leaky_relu", "prelu",
    "threshold", "sigmoid", "tanh", "softplus", "logsigmoid", "softmax", "log_softmax",
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "dropout", "batch_norm", "layer_norm",
    "embedding", "pad", "normalize", "cosine_similarity", "one_hot", "scaled_dot_product_attention",
    "multi_head_attention_forward", "mse_loss", "l1_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy_with_logits",
]


# ---- helpers ----------------------------------------------------------------------------
def _tracing() -> bool:
    return bool(_dispatch.TRACERS)


def _pair(v: Any, name: str) -> tuple[int, int]:
    """``3`` or ``(3, 2)`` -> ``(3, 2)``; the error names the argument."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v), int(v)
    if isinstance(v, (tuple, list)) and len(v) in (1, 2):
        return (int(v[0]), int(v[-1]))
    raise TypeError(f"{name} must be an int or a pair of ints, got {v!r}")


def _apply(input: Tensor, fn: Callable[[Tensor], Tensor], inplace: bool) -> Tensor:
    """``fn(input)``, or with ``inplace`` written back into ``input`` (same object returned).

    In place under autograd, ``fn`` reads a clone so that the values its derivative saved
    are not the ones overwritten (PyTorch saves the result instead; same gradients)."""
    if not inplace:
        return fn(input)
    needs_clone = input.requires_grad and grad_mode.is_grad_enabled()
    out = fn(input.clone() if needs_clone else input)
    if out._data is input._data and not _tracing():   # nothing written (eval dropout): torch
        return input                                   # leaves the version as it is
    return input.copy_(out)


def _floating(x: Tensor, name: str) -> Tensor:
    """The activations PyTorch has float kernels only for refuse an integer or bool input
    (NotImplementedError) instead of computing in float."""
    if x.dtype.category < dtypes.FLOAT:
        raise no_kernel(name, x.dtype)
    return x


def _opmath(x: Tensor) -> Tensor:
    """What PyTorch compares a half tensor with a bound in: float32 (``x <= 0.1`` on a
    bfloat16 tensor would round 0.1 to bfloat16 first)."""
    return x.float() if x.dtype in _HALVES else x


def _rounded_once(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``fn`` computed in float32 for a float16/bfloat16 input and its result rounded once to
    the input's dtype, as PyTorch's activation kernels compute (silu(-20.3) in float16 is
    -6e-08, not the -0.0 of a decomposition that rounds after each op). A traced graph holds
    the two casts, and a fused kernel computes the same."""
    @functools.wraps(fn)
    def once(x: Tensor) -> Tensor:
        return fn(x.float()).to(x.dtype) if x.dtype in _HALVES else fn(x)
    return once


# ---- activations ------------------------------------------------------------------------
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0)."""
    return input.relu_() if inplace else input.relu()


def relu_(input: Tensor) -> Tensor:
    return input.relu_()


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError("hardtanh: min_val cannot be greater than max_val")
    if input.dtype is dtypes.bool_:
        raise DTypeError("Bool inputs not supported for hardtanh")
    if input.dtype is dtypes.uint8 and (min_val < 0 or max_val < 0):
        raise DTypeError("cannot do hardtanh on an unsigned type with negative limits")
    return _apply(input, lambda x: _hardtanh(x, min_val, max_val), inplace)


def _hardtanh(x: Tensor, lo: float, hi: float) -> Tensor:
    """where, not clamp: PyTorch's gradient is 0 at the bounds themselves. A bound of 0 is
    relu, which keeps -0.0 (as PyTorch's clamp does) and has gradient 0 at 0; NaN stays NaN."""
    c = _opmath(x)
    lower = x.relu() if lo == 0 else where(c <= lo, lo, x)
    return where(c >= hi, hi, lower).to(x.dtype)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


@_rounded_once
def _gelu_none(x: Tensor) -> Tensor:
    # erfc form: no cancellation for large negative x (0.5 x (1 + erf) loses all digits there)
    return 0.5 * x * (x * -_SQRT1_2).erfc()


@_rounded_once
def _gelu_tanh(x: Tensor) -> Tensor:
    # x * (1 + tanh u) / 2 == x * sigmoid(2u): one exp, no cancellation; sigmoid saturates to
    # exactly 0 or 1, so backward never meets 0 * inf, and x = -inf gives -inf * 0 = NaN,
    # large negative x gives -0.0, as PyTorch's formula does
    u = (x + 0.044715 * (x * x * x)) * _SQRT_2_PI
    return x * (u * 2.0).sigmoid()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit; ``approximate='tanh'`` is the tanh approximation."""
    _floating(input, "gelu")
    if approximate == "none":
        return _gelu_none(input)
    if approximate == "tanh":
        return _gelu_tanh(input)
    raise ArgumentValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return _apply(_floating(input, "silu"), _rounded_once(lambda x: x * x.sigmoid()), inplace)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    # expm1 sees min(x, 0) so that the unused branch never overflows (its grad would be NaN)
    fn = _rounded_once(lambda x: where(x > 0, x, x.clamp(max=0.0).expm1() * alpha))
    return _apply(_floating(input, "elu"), fn, inplace)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return _apply(_floating(input, "leaky_relu"), lambda x: where(x > 0, x, x * negative_slope),
                  inplace)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """where(x > 0, x, w * x) with ``weight`` broadcast over channel dim 1; with more than one
    weight a 1-D input (one channel) raises, as PyTorch documents."""
    _floating(input, "prelu")
    if weight.dtype is not input.dtype:
        raise DTypeError(f"prelu: Type promoting not supported. Got {input.dtype.short} and "
                         f"{weight.dtype.short}")
    if weight.dim() > 1:
        raise ShapeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: "
                         f"ndim = {weight.dim()}")
    n = weight.numel()
    if n != 1:   # PyTorch: the channel dim is dim 1, and a 1-D input has one channel
        if input.dim() == 0:
            raise ShapeError("Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.dim() >= 2 else 1
        if channels != n:
            raise ShapeError(f"Mismatch of parameter numbers and input channel size. Found "
                             f"parameter numbers = {n} and channel size = {channels}.")
        if input.dim() >= 2:
            weight = weight.reshape([n] + [1] * (input.dim() - 2))
    elif weight.dim() != 0:
        weight = weight.reshape([])
    return where(input > 0, input, weight * input)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """value if x <= threshold else x (so NaN stays NaN, as in PyTorch)."""
    if input.dtype is dtypes.bool_:
        raise no_kernel("threshold", input.dtype)
    return _apply(input, lambda x: where(_opmath(x) <= threshold, value, x).to(x.dtype), inplace)


def threshold_(input: Tensor, threshold_: float, value: float) -> Tensor:
    return threshold(input, threshold_, value, True)


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def _softplus(z: Tensor) -> Tensor:
    """log(1 + e^z) with an exact gradient everywhere, sigmoid(z), including z == 0:
    both branches only ever exponentiate -|z|, so neither overflows nor yields 0 * inf."""
    pos = z > 0
    return where(pos, z, 0.0) + where(pos, -z, z).exp().log1p()


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    @_rounded_once
    def fn(x: Tensor) -> Tensor:
        z = x * beta if beta != 1 else x
        sp = _softplus(z) if beta == 1 else _softplus(z) / beta
        return where(z > threshold, x, sp)
    return fn(_floating(input, "softplus"))


def logsigmoid(input: Tensor) -> Tensor:
    """min(x, 0) - log1p(exp(-|x|)), PyTorch's form (logsigmoid(+inf) is +0.0); -|x| is
    written as a where so that the gradient at 0 is exact (1/2)."""
    return _logsigmoid(_floating(input, "log_sigmoid"))


@_rounded_once
def _logsigmoid(input: Tensor) -> Tensor:
    neg = input < 0
    return where(neg, input, 0.0) - where(neg, input, -input).exp().log1p()


def _softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("softmax", input.dim())
    return input.softmax(dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("log_softmax", input.dim())
    return input.log_softmax(dim, dtype=dtype)


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


# ---- attention and losses live in their own modules -----------------------------------------
from scriptmod.nn._functional_attention import (  # noqa: E402
    multi_head_attention_forward, scaled_dot_product_attention)
from scriptmod.nn._functional_loss import (  # noqa: E402
    binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss, nll_loss)
