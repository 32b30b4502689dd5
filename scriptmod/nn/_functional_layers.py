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
from scriptmod.ir.errors import DTypeError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _apply, _tracing

__all__ = ["linear", "dropout", "normalize", "embedding", "one_hot", "pad"]


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


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero elements with probability ``p`` and scale the rest by 1/(1-p) when ``training``.
    ``training`` is an input of the op (not a constant) so traced models honour train/eval."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return _apply(input, lambda x: dispatch("dropout", (x, bool(training)), {"p": float(p)}),
                  inplace)


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
