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

import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ir import dtypes as D
from scriptmod import _dispatch
from scriptmod._creation import arange, full, tensor as _const
from scriptmod._dispatch import dispatch
from scriptmod._tensor_ops import where
from scriptmod.autograd import grad_mode
from scriptmod.tensor import Tensor

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)

__all__ = [
    "relu", "relu_", "relu6", "hardtanh", "gelu", "silu", "elu", "leaky_relu", "prelu",
    "threshold", "sigmoid", "tanh", "softplus", "logsigmoid", "softmax", "log_softmax",
    "linear", "conv2d", "max_pool2d", "avg_pool2d", "dropout", "batch_norm", "layer_norm",
    "embedding", "pad", "normalize", "one_hot", "scaled_dot_product_attention",
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
    return input.copy_(out)


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
    # where, not clamp: PyTorch's gradient is 0 at the bounds themselves
    return _apply(input, lambda x: where(x <= min_val, min_val, where(x >= max_val, max_val, x)
                                         ).to(x.dtype), inplace)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def _gelu_none(x: Tensor) -> Tensor:
    # erfc form: no cancellation for large negative x (0.5 x (1 + erf) loses all digits there)
    return 0.5 * x * (x * -_SQRT1_2).erfc()


def _gelu_tanh(x: Tensor) -> Tensor:
    # x * (1 + tanh u) / 2 == x / (1 + exp(-2u)): one exp, no cancellation. -2u is capped at
    # 80 (exp stays finite in float32) so that backward never meets 0 * inf = NaN.
    u = (x + 0.044715 * (x * x * x)) * _SQRT_2_PI
    return x / ((u * -2.0).clamp(max=80.0).exp() + 1.0)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit; ``approximate='tanh'`` is the tanh approximation."""
    if approximate == "none":
        return _gelu_none(input)
    if approximate == "tanh":
        return _gelu_tanh(input)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return _apply(input, lambda x: x * x.sigmoid(), inplace)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    # expm1 sees min(x, 0) so that the unused branch never overflows (its grad would be NaN)
    return _apply(input, lambda x: where(x > 0, x, x.clamp(max=0.0).expm1() * alpha), inplace)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return _apply(input, lambda x: where(x > 0, x, x * negative_slope), inplace)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """where(x > 0, x, w * x) with ``weight`` broadcast over channel dim 1 (dim 0 of 1-D)."""
    n = weight.numel()
    if n != 1:
        if input.dim() == 0 or input.shape[1 if input.dim() >= 2 else 0] != n:
            raise ValueError(f"prelu: expected the input's channel dim (dim 1) to have size "
                             f"{n} (weight.numel()), got input of shape {tuple(input.shape)}")
        if input.dim() >= 2:
            weight = weight.reshape([n] + [1] * (input.dim() - 2))
    elif weight.dim() != 0:
        weight = weight.reshape([])
    return where(input > 0, input, weight * input)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x if x > threshold else value."""
    return _apply(input, lambda x: where(x > threshold, x, value).to(x.dtype), inplace)


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
    z = input * beta if beta != 1 else input
    sp = _softplus(z) if beta == 1 else _softplus(z) / beta
    return where(z > threshold, input, sp)


def logsigmoid(input: Tensor) -> Tensor:
    return -_softplus(-input)


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
        raise ValueError(f"linear: expected input with last dimension {weight.shape[-1]} "
                         f"(weight is {tuple(weight.shape)}), got shape {tuple(input.shape)}")
    out = input.matmul(weight.t())
    return out if bias is None else out + bias


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
        raise ValueError(f"conv2d: expected 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                         f"shape {tuple(input.shape)}")
    batched = input.dim() == 4
    x = input if batched else input.unsqueeze(0)
    st, dil = _pair(stride, "stride"), _pair(dilation, "dilation")
    if padding == "valid":
        pd = (0, 0)
    elif padding == "same":
        x, pd = _same_padding(x, weight, st, dil)
    else:
        pd = _pair(padding, "padding")
    out = dispatch("conv2d", (x, weight, bias), {"stride": st, "padding": pd, "dilation": dil,
                                                 "groups": int(groups)})
    return out if batched else out.squeeze(0)


def _pool_args(kernel_size: Any, stride: Any, padding: Any,
               name: str) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    k = _pair(kernel_size, "kernel_size")
    s = k if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) \
        else _pair(stride, "stride")
    p = _pair(padding, "padding")
    if p[0] * 2 > k[0] or p[1] * 2 > k[1]:
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, got "
                         f"padding={p} and kernel_size={k}")
    return k, s, p


def _check_pool_input(input: Tensor, name: str) -> None:
    if input.dim() not in (3, 4):
        raise ValueError(f"{name}: expected 3-D (C, H, W) or 4-D (N, C, H, W) input, got "
                         f"shape {tuple(input.shape)}")


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    if return_indices:
        raise NotImplementedError("max_pool2d: return_indices=True is not supported")
    _check_pool_input(input, "max_pool2d")
    k, s, p = _pool_args(kernel_size, stride, padding, "max_pool2d")
    return dispatch("max_pool2d", (input,), {"kernel_size": k, "stride": s, "padding": p,
                                             "dilation": _pair(dilation, "dilation"),
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
            raise ValueError("avg_pool2d: divisor must be not zero")
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
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize over every dim but 1; in training, updates the running stats in place."""
    if training and input.numel() // max(input.shape[1] if input.dim() > 1 else 1, 1) <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {list(input.shape)}")
    return dispatch("batch_norm", (input, running_mean, running_var, weight, bias, bool(training)),
                    {"momentum": float(momentum), "eps": float(eps)})


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the trailing ``normalized_shape`` dims, then affine."""
    shape = [int(normalized_shape)] if isinstance(normalized_shape, int) else \
        [int(s) for s in normalized_shape]
    if list(input.shape[input.dim() - len(shape):]) != shape or input.dim() < len(shape):
        raise ValueError(f"layer_norm: given normalized_shape={shape}, expected input with "
                         f"shape [*, {', '.join(map(str, shape))}], but got input of size "
                         f"{list(input.shape)}")
    dims = list(range(-len(shape), 0))
    centered = input - input.mean(dim=dims, keepdim=True)
    var = (centered * centered).mean(dim=dims, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: Any = None) -> Tensor:
    """x / max(||x||_p, eps) along ``dim`` (finite gradient at x == 0)."""
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported")
    powered = input * input if p == 2 else input.abs() ** p
    total = powered.sum(dim=dim, keepdim=True).clamp(min=eps ** p)
    norm = total.sqrt() if p == 2 else total ** (1.0 / p)
    return input / norm


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
            raise ValueError("pad: circular padding may wrap around at most once")
        return pos % n
    if lo >= n or hi >= n:
        raise ValueError(f"pad: padding ({lo}, {hi}) should be less than the corresponding "
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
        raise ValueError(f"pad: padding length must be even and at most 2 * input.dim() "
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


# ---- attention ------------------------------------------------------------------------------
def _mask_as_bias(mask: Tensor, like: Tensor) -> Tensor:
    """A boolean 'may attend' mask becomes 0 / -inf; a float mask is already additive."""
    if mask.dtype is D.bool_:
        return where(mask, 0.0, float("-inf")).to(like.dtype)
    return mask.to(like.dtype)


def _causal_mask(L: int, S: int, device: Any) -> Tensor:
    rows = arange(L, device=device).unsqueeze(1)
    return arange(S, device=device).unsqueeze(0) <= rows


def _repeat_heads(t: Tensor, rep: int) -> Tensor:
    """(..., Hkv, S, E) -> (..., Hkv * rep, S, E), each head repeated ``rep`` times in a row."""
    lead, (h, s, e) = list(t.shape[:-3]), t.shape[-3:]
    return t.unsqueeze(-3).expand(*lead, h, rep, s, e).reshape(*lead, h * rep, s, e)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(Q K^T * scale + mask) V over the last two dims (PyTorch's math definition)."""
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or is_causal, "
                         "not both")
    if enable_gqa and query.dim() >= 3 and key.shape[-3] != query.shape[-3]:
        key, value = (_repeat_heads(t, query.shape[-3] // t.shape[-3]) for t in (key, value))
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query.matmul(key.transpose(-2, -1)) * s
    if is_causal:
        attn_mask = _causal_mask(query.shape[-2], key.shape[-2], query.device)
    if attn_mask is not None:
        scores = scores + _mask_as_bias(attn_mask, scores)
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True)
    return weights.matmul(value)


def _mha_masks(attn_mask: Tensor | None, key_padding_mask: Tensor | None, q: Tensor,
               shape: tuple[int, int, int, int]) -> Tensor | None:
    """One additive mask broadcasting over (N, H, L, S) scores; boolean masks mean
    True = may NOT attend."""
    bsz, heads, L, S = shape
    mask = None
    if attn_mask is not None:
        want = [(L, S)] if attn_mask.dim() == 2 else [(bsz * heads, L, S)]
        if tuple(attn_mask.shape) not in want:
            raise ValueError(f"MultiheadAttention: attn_mask should have shape {want[0]}, got "
                             f"{tuple(attn_mask.shape)}")
        mask = _additive(attn_mask, q)
        mask = mask if mask.dim() == 2 else mask.reshape(bsz, heads, L, S)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, S):
            raise ValueError(f"MultiheadAttention: key_padding_mask should have shape "
                             f"{(bsz, S)}, got {tuple(key_padding_mask.shape)}")
        kpm = _additive(key_padding_mask, q).reshape(bsz, 1, 1, S)
        mask = kpm if mask is None else mask + kpm
    return mask


def _additive(mask: Tensor, like: Tensor) -> Tensor:
    if mask.dtype is D.bool_:
        return where(mask, float("-inf"), 0.0).to(like.dtype)
    return mask.to(like.dtype)


def _in_projection(query: Tensor, key: Tensor, value: Tensor, in_proj_weight: Tensor | None,
                   in_proj_bias: Tensor | None, separate: tuple | None) -> tuple:
    ws = separate if separate is not None else in_proj_weight.chunk(3)
    bs = in_proj_bias.chunk(3) if in_proj_bias is not None else (None, None, None)
    return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), ws, bs))


def _append_kv(k: Tensor, v: Tensor, extra_k: Tensor, extra_v: Tensor, dim: int,
               masks: list[Tensor | None]) -> tuple[Tensor, Tensor, list[Tensor | None]]:
    """Add one key/value position (bias_kv or zero attention); masks grow by one column."""
    k = dispatch("cat", (k, extra_k), {"dim": dim})
    v = dispatch("cat", (v, extra_v), {"dim": dim})
    return k, v, [None if m is None else pad(m, (0, 1)) for m in masks]


def _heads(x: Tensor, n: int, bsz: int, heads: int) -> Tensor:
    """(n, bsz, E) -> (bsz, heads, n, head_dim): a view (only the last dim is split), so no
    copy is made whatever the layout of ``x``; BLAS reads each head's matrix in place."""
    return x.reshape(n, bsz, heads, -1).permute(1, 2, 0, 3)


def _static_heads(t: Tensor, bsz: int, heads: int, name: str) -> Tensor:
    """A (bsz * heads, S, head_dim) ``static_k``/``static_v`` as (bsz, heads, S, head_dim)."""
    if t.dim() != 3 or t.shape[0] != bsz * heads:
        raise ValueError(f"MultiheadAttention: expected {name} of shape "
                         f"({bsz * heads}, S, head_dim), got {tuple(t.shape)}")
    return t.reshape(bsz, heads, t.shape[1], t.shape[2])


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
            training: bool) -> tuple:
    """softmax(q k^T + mask) v on (N, H, L, hd) heads; ``q`` comes already scaled. A dropout
    with p > 0 stays in the graph with the training flag as its input (train/eval after
    tracing is honoured); p == 0 emits nothing."""
    scores = q.matmul(k.transpose(-2, -1))
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training)
    return weights.matmul(v), weights


def _kv_extras(k: Tensor, v: Tensor, bias_k: Tensor | None, bias_v: Tensor | None,
               masks: list[Tensor | None], bsz: int) -> tuple:
    if bias_k is not None and bias_v is not None:
        e = k.shape[-1]
        k, v, masks = _append_kv(k, v, bias_k.reshape(1, 1, e).expand(1, bsz, e),
                                 bias_v.reshape(1, 1, e).expand(1, bsz, e), 0, masks)
    elif bias_k is not None or bias_v is not None:
        raise ValueError("MultiheadAttention: bias_k and bias_v must both be given or both None")
    return k, v, masks


def _batch_major(x: Tensor) -> bool:
    """A 3-D (L, N, E) tensor laid out (N, L, E) in memory (a ``batch_first`` input)."""
    st = x._data.strides if x.dim() == 3 else None
    return st is not None and x.shape[0] > 1 and x.shape[1] > 1 and st[1] > st[0]


def _merge_heads(out: Tensor, weight: Tensor, bias: Tensor | None, batch_major: bool) -> Tensor:
    """(N, H, L, hd) heads -> out_proj -> (L, N, E). Computed in the caller's memory order:
    for a batch-major input the result is an (L, N, E) view of an (N, L, E) array."""
    bsz, heads, L, hd = out.shape
    if batch_major:
        flat = out.permute(0, 2, 1, 3).reshape(bsz * L, heads * hd)
        return linear(flat, weight, bias).reshape(bsz, L, heads * hd).transpose(0, 1)
    flat = out.permute(2, 0, 1, 3).reshape(L * bsz, heads * hd)
    return linear(flat, weight, bias).reshape(L, bsz, heads * hd)


def multi_head_attention_forward(
        query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int, num_heads: int,
        in_proj_weight: Tensor | None, in_proj_bias: Tensor | None, bias_k: Tensor | None,
        bias_v: Tensor | None, add_zero_attn: bool, dropout_p: float, out_proj_weight: Tensor,
        out_proj_bias: Tensor | None, training: bool = True,
        key_padding_mask: Tensor | None = None, need_weights: bool = True,
        attn_mask: Tensor | None = None, use_separate_proj_weight: bool = False,
        q_proj_weight: Tensor | None = None, k_proj_weight: Tensor | None = None,
        v_proj_weight: Tensor | None = None, static_k: Tensor | None = None,
        static_v: Tensor | None = None, average_attn_weights: bool = True,
        is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    """PyTorch's MultiheadAttention forward on (L, N, E) / unbatched (L, E) inputs."""
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint.")
    batched = query.dim() == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
    L, bsz, E = query.shape
    if E != embed_dim_to_check or E % num_heads:
        raise ValueError(f"MultiheadAttention: expected query with embed_dim "
                         f"{embed_dim_to_check} divisible by num_heads={num_heads}, got "
                         f"shape {tuple(query.shape)}")
    sep = (q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight else None
    q, k, v = _in_projection(query, key, value, in_proj_weight, in_proj_bias, sep)
    masks: list[Tensor | None] = [attn_mask, key_padding_mask]
    k, v, masks = _kv_extras(k, v, bias_k, bias_v, masks, bsz)
    # the scale joins q's bias add (one fused pass) instead of a pass over the heads
    q = _heads(q * (1.0 / math.sqrt(E // num_heads)), L, bsz, num_heads)
    k = _heads(k, k.shape[0], bsz, num_heads) if static_k is None else \
        _static_heads(static_k, bsz, num_heads, "static_k")
    v = _heads(v, v.shape[0], bsz, num_heads) if static_v is None else \
        _static_heads(static_v, bsz, num_heads, "static_v")
    if add_zero_attn:
        z = full([bsz, num_heads, 1, k.shape[3]], 0.0, dtype=k.dtype, device=k.device)
        k, v, masks = _append_kv(k, v, z, z, 2, masks)
    mask = _mha_masks(masks[0], masks[1], q, (bsz, num_heads, L, k.shape[2]))
    out, weights = _attend(q, k, v, mask, dropout_p, training)
    out = _merge_heads(out, out_proj_weight, out_proj_bias, _batch_major(query))
    out = out if batched else out.reshape(L, E)
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = weights.mean(dim=1)
    return out, (weights if batched else weights.squeeze(0))


# ---- losses ---------------------------------------------------------------------------------
_REDUCTIONS = ("none", "mean", "sum")


def _legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    if size_average is None and reduce is None:
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{reduction} is not a valid value for reduction")
        return reduction
    warnings.warn("size_average and reduce args will be deprecated, please use "
                  "reduction='mean' instead.", stacklevel=3)
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else ("mean" if size_average else "sum")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    return loss.mean() if reduction == "mean" else loss.sum()


def _check_same_size(input: Tensor, target: Tensor, name: str) -> None:
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input "
                      f"size ({input.shape}). This will likely lead to incorrect results due to "
                      "broadcasting. Please ensure they have the same size.", stacklevel=3)


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
             reduce: bool | None = None, reduction: str = "mean",
             weight: Tensor | None = None) -> Tensor:
    """Mean squared error: reduce((x - y)^2)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "mse_loss")
    diff = input - target
    loss = diff * diff
    return _reduce(loss if weight is None else loss * weight, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
            reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "l1_loss")
    return _reduce((input - target).abs(), reduction)


def _nll_shapes(input: Tensor, target: Tensor, weight: Tensor | None) -> None:
    want = (input.shape[0],) + tuple(input.shape[2:]) if input.dim() > 1 else ()
    if input.dim() >= 2 and target.dim() >= 1 and input.shape[0] != target.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                         f"batch_size ({target.shape[0]}).")
    if input.dim() == 0 or tuple(target.shape) != want:
        raise ValueError(f"nll_loss: expected target of shape {want} for input of shape "
                         f"{tuple(input.shape)}, got {tuple(target.shape)}")
    C = input.shape[1] if input.dim() > 1 else input.shape[0]
    if weight is not None and tuple(weight.shape) != (C,):
        raise ValueError(f"nll_loss: weight tensor should be defined either for all {C} "
                         f"classes or no classes but got weight tensor of shape: "
                         f"{list(weight.shape)}")


def _nll_checks(input: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int) -> None:
    _nll_shapes(input, target, weight)
    if target.dtype.category > D.INT:
        raise TypeError(f"nll_loss: expected target of an integer dtype (class indices), got "
                        f"{target.dtype.name}")
    C = input.shape[1] if input.dim() > 1 else input.shape[0]
    if not _tracing() and target.numel():    # a value check; a tracer would bake it in
        bad = ((target < 0) | (target >= C)) & (target != ignore_index)
        if bad.any().item():
            raise IndexError(f"Target {int(target[bad].reshape(-1)[0].item())} is out of bounds.")


def _nll_terms(input: Tensor, target: Tensor, weight: Tensor | None,
               ignore_index: int) -> tuple[Tensor, Tensor]:
    """(per-element weighted -log p[target], per-element class weight), 0 where ignored."""
    cdim = 1 if input.dim() > 1 else 0
    ignored = target == ignore_index
    safe = target.masked_fill(ignored, 0)
    picked = input.gather(cdim, safe.unsqueeze(cdim)).squeeze(cdim)
    w = (~ignored).to(input.dtype)
    if weight is not None:
        w = w * weight.to(input.dtype)[safe]
    return -picked * w, w


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
             size_average: bool | None = None, ignore_index: int = -100,
             reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of class ``target`` in log-probabilities ``input`` (N, C, ...)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _nll_checks(input, target, weight, ignore_index)
    loss, w = _nll_terms(input, target, weight, ignore_index)
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def _class_weight(weight: Tensor, input: Tensor, cdim: int) -> Tensor:
    shape = [1] * input.dim()
    shape[cdim] = weight.shape[0]
    return weight.to(input.dtype).reshape(shape)


def _smooth_term(logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int,
                 reduction: str) -> Tensor:
    """PyTorch's label-smoothing term for class-index targets (before the eps / C factor)."""
    cdim = 1 if logp.dim() > 1 else 0
    per_class = logp if weight is None else logp * _class_weight(weight, logp, cdim)
    ignored = target == ignore_index
    smooth = (-per_class.sum(dim=cdim)).masked_fill(ignored, 0.0)
    if reduction != "mean":
        return _reduce(smooth, reduction)
    if weight is None:
        return smooth.sum() / (~ignored).sum().to(logp.dtype)
    return smooth.sum() / _nll_terms(logp, target, weight, ignore_index)[1].sum()


def _cross_entropy_probs(logp: Tensor, target: Tensor, weight: Tensor | None, reduction: str,
                         label_smoothing: float) -> Tensor:
    cdim = 1 if logp.dim() > 1 else 0
    C = logp.shape[cdim]
    if tuple(target.shape) != tuple(logp.shape):
        raise ValueError(f"cross_entropy: class-probability target must have the input's shape "
                         f"{tuple(logp.shape)}, got {tuple(target.shape)}")
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / C
    terms = logp * target
    if weight is not None:
        terms = terms * _class_weight(weight, logp, cdim)
    if reduction == "none":
        return -terms.sum(dim=cdim)
    total = -terms.sum()
    return total / (logp.numel() // C) if reduction == "mean" else total


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  size_average: bool | None = None, ignore_index: int = -100,
                  reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """log_softmax over dim 1 (dim 0 of 1-D input) then NLL; ``target`` holds class indices
    (N, ...) or class probabilities (the input's shape)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if input.dim() == 0:
        raise ValueError("cross_entropy: expected input of shape (C,), (N, C) or (N, C, d1, ...), "
                         "got a 0-d tensor")
    logp = input.log_softmax(1 if input.dim() > 1 else 0)
    if target.dtype.category >= D.FLOAT:
        return _cross_entropy_probs(logp, target, weight, reduction, label_smoothing)
    nll = nll_loss(logp, target, weight, None, ignore_index, None, reduction)
    if label_smoothing == 0.0:
        return nll
    C = logp.shape[1 if logp.dim() > 1 else 0]
    smooth = _smooth_term(logp, target, weight, ignore_index, reduction)
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / C)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average: bool | None = None,
                                     reduce: bool | None = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """-[pos_weight * t * log sigmoid(x) + (1 - t) * log(1 - sigmoid(x))], stably:
    (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")
    sp = _softplus(-input)
    if pos_weight is not None:
        sp = sp * ((pos_weight - 1) * target + 1)
    loss = (1 - target) * input + sp
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)
