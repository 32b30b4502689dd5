"""Linear, convolution, pooling, regularization, normalization, embedding and padding of
``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from scriptmod._creation import arange, full, tensor as _const
from scriptmod._dispatch import dispatch
from scriptmod._tensor_ops import where
from scriptmod._traced_int import fixed
from scriptmod.ir import dtypes
from scriptmod.linalg import vector_norm
from scriptmod.autograd import grad_mode
from scriptmod.ir.errors import DTypeError, ShapeError
from scriptmod.ir.ops.layers import check_bag_mode
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _apply, _tracing

__all__ = ["linear", "bilinear", "dropout", "normalize", "embedding", "embedding_bag",
           "one_hot", "pad"]


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


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor,
             bias: Tensor | None = None) -> Tensor:
    """y_k = x1^T A_k x2 + b_k over matching leading dims: ``input1`` (*, in1), ``input2``
    (*, in2), ``weight`` (out, in1, in2), ``bias`` (out). One GEMM of ``input1`` by the
    weight laid out as (in1, out * in2), then a product with ``input2`` summed over in2.

        >>> F.bilinear(scriptmod.ones(2, 3), scriptmod.ones(2, 4), scriptmod.ones(5, 3, 4)).shape
        scriptmod.Size([2, 5])
    """
    _check_bilinear(input1, input2, weight, bias)
    out_f, in1, in2 = weight.shape
    table = weight.permute(1, 0, 2).reshape(in1, out_f * in2)
    rows = input1.matmul(table).unflatten(-1, (out_f, in2))    # (*, out, in2)
    out = (rows * input2.unsqueeze(-2)).sum(dim=-1)
    return out if bias is None else out + bias


def _check_bilinear(x1: Tensor, x2: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """torch's argument checks of ``F.bilinear``."""
    if weight.dim() != 3:
        raise ShapeError(f"bilinear(): weight must be three-dimensional, got shape "
                         f"{tuple(weight.shape)}")
    if x1.dim() != x2.dim():
        raise ShapeError(f"bilinear(): input dimensions do not match: got {x1.dim()} and "
                         f"{x2.dim()}")
    for d in range(x1.dim() - 1):
        if x1.shape[d] != x2.shape[d]:
            raise ShapeError(f"bilinear(): input batch dimensions do not match at dim {d}: "
                             f"got {x1.shape[d]} and {x2.shape[d]}")
    for i, (x, wd) in enumerate(((x1, 1), (x2, 2)), start=1):
        if x.dim() == 0 or x.shape[-1] != weight.shape[wd]:
            raise ShapeError(f"bilinear(): input{i} size does not match weight size: got "
                             f"{x.shape[-1] if x.dim() else 'a 0-d tensor'} but expected "
                             f"{weight.shape[wd]}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        raise ShapeError(f"bilinear(): bias size does not match weight size: got "
                         f"{tuple(bias.shape)} but expected ({weight.shape[0]},)")


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero elements with probability ``p`` and scale the rest by 1/(1-p) when ``training``.
    ``training`` is an input of the op (not a constant) so traced models honour train/eval."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    return _apply(input, lambda x: dispatch("dropout", (x, bool(training)), {"p": float(p)}),
                  inplace)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: Any = None) -> Tensor:
    """x / max(||x||_p, eps) along ``dim``, torch's formula: the norm is the registry's
    ``linalg_vector_norm`` for every p (negative, fractional, 0 and inf included), whose
    gradient is 0 at a zero vector.

        >>> F.normalize(scriptmod.tensor([[3.0, 4.0]]))
        tensor([[0.6000, 0.8000]])
    """
    if out is not None:
        raise NotImplementedError("normalize: out= is not supported")
    norm = vector_norm(input, p, dim, keepdim=True)
    return input / norm.clamp(min=eps)


def _embedding_renorm_(weight: Tensor, idx: Tensor, max_norm: float, norm_type: float) -> None:
    """torch's ``embedding_renorm_``: the rows ``idx`` picks whose ``norm_type``-norm exceeds
    ``max_norm`` are scaled in place to norm ``max_norm`` (over ``max_norm / (norm + 1e-7)``)."""
    with grad_mode.no_grad():
        flat = idx.reshape(-1)
        rows = weight.index_select(0, flat)
        norms = vector_norm(rows, norm_type, 1, keepdim=True)
        scale = where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).to(weight.dtype)
        weight[flat] = rows * scale


def _padding_index(padding_idx: int | None, n: int, fn: str) -> int | None:
    """``padding_idx`` in [0, n) (a negative one counts from the end), or None."""
    if padding_idx is None:
        return None
    if not -n <= padding_idx < n:
        raise ValueError(f"{fn}: padding_idx must be within num_embeddings ({n}), got "
                         f"{padding_idx}")
    return padding_idx % n


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` picked by the integer ``input``: shape ``input.shape + (dim,)``.

    ``padding_idx``'s row gets no gradient; ``max_norm`` first renormalizes the picked rows of
    ``weight`` in place (their ``norm_type``-norm at most ``max_norm``), as torch does;
    ``scale_grad_by_freq`` divides each row's gradient by how often its index occurs in
    ``input`` (the ``embedding_bag`` op over bags of one index). ``sparse=True`` is accepted
    and gives the same gradient, dense (scriptmod has no sparse tensors).

        >>> F.embedding(scriptmod.tensor([[0, 2]]), scriptmod.eye(3)).shape
        scriptmod.Size([1, 2, 3])
    """
    if weight.dim() != 2:
        raise ShapeError(f"embedding: 'weight' must be 2-D, got shape {tuple(weight.shape)}")
    padding_idx = _padding_index(padding_idx, weight.shape[0], "embedding")
    if max_norm is not None:
        _embedding_renorm_(weight, input, max_norm, norm_type)
    if not scale_grad_by_freq:
        return dispatch("embedding", (weight, input), {"padding_idx": padding_idx})
    flat = input.reshape(-1)
    rows = dispatch("embedding_bag", (weight, flat, arange(flat.shape[0], device=flat.device),
                                      None), {"mode": "sum", "padding_idx": padding_idx,
                                              "scale_grad_by_freq": True})
    if padding_idx is not None:     # the padding row itself (a bag of it alone is zeros)
        plain = dispatch("embedding", (weight, flat), {"padding_idx": padding_idx})
        rows = where((flat == padding_idx).unsqueeze(-1), plain, rows)
    return rows.reshape(*input.shape, weight.shape[1])


def _bags_of(input: Tensor, offsets: Tensor | None,
             per_sample_weights: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """torch's two input layouts as 1-D indices plus offsets: a 2-D input is one bag per
    row (``offsets`` must be None), a 1-D one needs 1-D ``offsets``."""
    if per_sample_weights is not None and tuple(per_sample_weights.shape) != tuple(input.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({tuple(per_sample_weights.shape)}"
                         f") is not None, then it must have the same shape as the input "
                         f"({tuple(input.shape)})")
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: if input is 2D, then offsets has to be None, as "
                             "input is treated is a mini-batch of fixed length sequences. "
                             f"However, found offsets of type {type(offsets).__name__}")
        starts = arange(input.shape[0], device=input.device) * input.shape[1]
        flat_weights = None if per_sample_weights is None else per_sample_weights.reshape(-1)
        return input.reshape(-1), starts, flat_weights
    if input.dim() != 1:
        raise ValueError(f"embedding_bag: input has to be 1D or 2D Tensor, but got Tensor of "
                         f"dimension {input.dim()}")
    if offsets is None or offsets.dim() != 1:
        got = "None" if offsets is None else f"a {offsets.dim()}D Tensor"
        raise ValueError(f"embedding_bag: offsets has to be a 1D Tensor but got {got}")
    return input, offsets, per_sample_weights


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None,
                  max_norm: float | None = None, norm_type: float = 2.0,
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """Sums, means or maxima of bags of ``weight``'s rows, without the (N, dim) rows between.

    ``input`` is 2-D (B, L): B bags of L indices; or 1-D with ``offsets``, each bag's start
    (with ``include_last_offset`` the last offset ends the last bag). ``per_sample_weights``
    (``mode='sum'`` only) scales each picked row; indices equal to ``padding_idx`` are left
    out (a mean divides by the rest; an empty bag is zeros). ``max_norm``,
    ``scale_grad_by_freq`` and ``sparse`` as in ``embedding``. One registry op,
    ``embedding_bag``.

        >>> w = scriptmod.arange(6.0).reshape(3, 2)
        >>> F.embedding_bag(scriptmod.tensor([0, 2, 1]), w, scriptmod.tensor([0, 2]), mode="sum")
        tensor([[4., 6.],
                [2., 3.]])
    """
    if weight.dim() != 2:
        raise ValueError(f"embedding_bag: weight has to be a 2D Tensor, but got Tensor of "
                         f"dimension {weight.dim()}")
    check_bag_mode(mode, per_sample_weights is not None)
    indices, starts, sample_weights = _bags_of(input, offsets, per_sample_weights)
    include_last_offset = bool(include_last_offset) and input.dim() == 1   # 2-D: torch's too
    if include_last_offset and starts.shape[0] < 1:
        raise ValueError("embedding_bag: include_last_offset: number of offset should be at "
                         "least 1")
    if max_norm is not None:
        _embedding_renorm_(weight, indices, max_norm, norm_type)
    return dispatch("embedding_bag", (weight, indices, starts, sample_weights), {
        "mode": mode, "include_last_offset": include_last_offset,
        "padding_idx": _padding_index(padding_idx, weight.shape[0], "embedding_bag"),
        "scale_grad_by_freq": bool(scale_grad_by_freq)})


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``tensor`` (int64 class indices) as a last dim of 0/1 of length ``num_classes``
    (-1: one more than the largest index, read from the values: a trace bakes it in).

        >>> F.one_hot(scriptmod.tensor([0, 2]), 3)
        tensor([[1, 0, 0],
                [0, 0, 1]])
    """
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
        if not tensor.numel():
            raise ShapeError("one_hot: can not infer the total number of classes from an empty "
                             "tensor; pass num_classes")
        num_classes = int(tensor.max().item()) + 1
    return (tensor.unsqueeze(-1) == arange(num_classes, device=tensor.device)).long()


# ---- padding --------------------------------------------------------------------------------
_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    """Source index of each output position along one dim of size ``n``, for the non-constant
    modes; a negative side crops (torch's kernels: reflection about the input's ends,
    circular padding wraps the cropped core)."""
    if mode == "circular":
        core = np.arange(max(-lo, 0), n - max(-hi, 0))
        return core[np.arange(-max(lo, 0), len(core) + max(hi, 0)) % max(len(core), 1)]
    pos = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(pos, 0, n - 1)
    period = 2 * (n - 1) if n > 1 else 1
    m = np.abs(pos) % period
    return np.where(m >= n, period - m, m)


def _pad_edges(x: Tensor, d: int, lo: int, hi: int, mode: str) -> Tensor:
    """Non-constant padding of dim ``d`` by amounts >= 0 that fit in it: ``x`` between the
    slices each mode copies (slices of a traced size stay symbolic)."""
    n = x.shape[d]

    def side(amount: int, left: bool) -> Tensor:
        if mode == "replicate":
            edge = x.narrow(d, 0 if left else n - 1, 1)
            return edge.expand(*[amount if i == d else -1 for i in range(x.dim())])
        if mode == "reflect":
            return x.narrow(d, 1 if left else n - 1 - amount, amount).flip(d)
        return x.narrow(d, n - amount if left else 0, amount)     # circular

    parts = ([side(lo, True)] if lo else []) + [x] + ([side(hi, False)] if hi else [])
    return parts[0] if len(parts) == 1 else dispatch("cat", tuple(parts), {"dim": d})


def _pad_mode(x: Tensor, d: int, lo: int, hi: int, mode: str) -> Tensor:
    """Reflect, replicate or circular padding of dim ``d`` (negative amounts crop first)."""
    n = x.shape[d]
    if mode == "circular" and (lo > n or hi > n):
        raise ShapeError("pad: padding value causes wrapping around more than once "
                         f"(padding ({lo}, {hi}) of a dimension of size {n})")
    if mode == "reflect" and (lo >= n or hi >= n):
        raise ShapeError(f"pad: padding size should be less than the corresponding input "
                         f"dimension for reflect padding, but got padding ({lo}, {hi}) of a "
                         f"dimension of size {n}")
    if n + lo + hi < 1:
        raise ShapeError(f"pad: input of size {n} at dimension {d} is too small for padding "
                         f"({lo}, {hi}): the output size would be {n + lo + hi}")
    cut_lo, cut_hi, add_lo, add_hi = max(-lo, 0), max(-hi, 0), max(lo, 0), max(hi, 0)
    core = n - cut_lo - cut_hi
    reach = core - 1 if mode == "reflect" else core    # how far the copied slices may reach
    if core >= 1 and (mode == "replicate" or max(add_lo, add_hi) <= reach):
        if cut_lo or cut_hi:
            x = x.narrow(d, cut_lo, core)
        return _pad_edges(x, d, add_lo, add_hi, mode)
    # the padding reaches into the cropped part: gather by index (the size is fixed)
    index = _pad_index(fixed(n, "the size of a dim that pad crops and pads"), lo, hi, mode)
    return x.index_select(d, _const(index, device=x.device))


def _pad_constant(x: Tensor, d: int, lo: int, hi: int, value: float) -> Tensor:
    if lo < 0 or hi < 0:    # negative padding crops
        start, stop = max(-lo, 0), x.shape[d] - max(-hi, 0)
        if stop < start:
            raise ShapeError(f"pad: padding ({lo}, {hi}) crops more than the {x.shape[d]} "
                             f"elements of dimension {d}")
        x = x.narrow(d, start, stop - start)
    parts = [x]
    for amount, at in ((lo, 0), (hi, 1)):
        if amount > 0:
            shape = list(x.shape)
            shape[d] = amount
            side = full(shape, value, dtype=x.dtype, device=x.device)
            parts.insert(0 if at == 0 else len(parts), side)
    return parts[0] if len(parts) == 1 else dispatch("cat", tuple(parts), {"dim": d})


def _check_pad(input: Tensor, pad: Sequence[int], mode: str, value: float | None) -> list[int]:
    """torch's argument checks of ``F.pad``; the amounts as Python ints."""
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"pad: unrecognised padding mode {mode!r}; expected one of "
                                  f"{', '.join(map(repr, _PAD_MODES))}")
    if any(isinstance(p, (bool, float)) for p in pad):
        raise TypeError(f"pad(): argument 'pad' must be a tuple of ints, got {tuple(pad)}")
    # a traced size (an int subclass) stays one: padding computed from x.shape follows x
    amounts = [p if isinstance(p, int) else operator.index(p) for p in pad]
    if len(amounts) % 2:
        raise ShapeError(f"pad: padding length must be divisible by 2, got {len(amounts)}")
    if len(amounts) > 2 * input.dim():
        raise ShapeError(f"pad: padding length should be less than or equal to two times the "
                         f"input dimension but got padding length {len(amounts)} and input of "
                         f"dimension {input.dim()}")
    if mode == "constant":
        return amounts
    if value:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    k = len(amounts) // 2
    if k not in (1, 2, 3) or input.dim() not in (k + 1, k + 2):
        raise NotImplementedError(f"pad: padding size {len(amounts)} is not supported for "
                                  f"{input.dim()}D input tensor in mode {mode!r} (padding "
                                  f"(left, right, ...) of k dims takes a (k+1)-D or (k+2)-D input)")
    if mode != "circular" and 0 in tuple(input.shape)[-k - 1:]:   # all but a batch dim
        raise ShapeError(f"pad: expected a tensor with possibly 0 batch size and other non-zero "
                         f"dimensions for {mode} padding, got shape {tuple(input.shape)}")
    return amounts


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims: ``pad = (left, right, top, bottom, ...)``;
    negative amounts crop. ``mode``: ``'constant'`` (``value``, default 0) on any rank,
    ``'reflect'``, ``'replicate'`` and ``'circular'`` on 1 to 3 dims of a batched or
    unbatched input, as torch. A decomposition: ``cat`` of the input with constant blocks
    or with (flipped) slices of itself, so it traces (a traced size stays symbolic) and
    differentiates.

        >>> F.pad(scriptmod.tensor([[1.0, 2.0, 3.0]]), (2, 1), mode="reflect")
        tensor([[3., 2., 1., 2., 3., 2.]])
    """
    amounts = _check_pad(input, pad, mode, value)
    out = input
    for i in range(len(amounts) // 2):
        d, lo, hi = input.dim() - 1 - i, amounts[2 * i], amounts[2 * i + 1]
        if mode == "constant":
            out = _pad_constant(out, d, lo, hi, 0.0 if value is None else value)
        elif lo or hi:
            out = _pad_mode(out, d, lo, hi, mode)
    return out
