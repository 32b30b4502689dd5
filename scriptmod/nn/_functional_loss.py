"""Losses with PyTorch's signatures and ``reduction``s, re-exported by
``scriptmod.nn.functional``."""
from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod._dispatch import dispatch
from scriptmod._creation import arange, tensor as _const
from scriptmod._tensor_ops import where
from scriptmod.autograd import grad_mode
from scriptmod.nn._functional_activation import _logsigmoid, _softplus, _tracing
from scriptmod.nn._functional_distance import pairwise_distance
from scriptmod.nn._functional_layers import linear

__all__ = [
    "mse_loss", "l1_loss", "nll_loss", "cross_entropy", "binary_cross_entropy_with_logits",
    "binary_cross_entropy", "kl_div", "smooth_l1_loss", "huber_loss", "soft_margin_loss",
    "multilabel_soft_margin_loss", "poisson_nll_loss", "gaussian_nll_loss",
    "linear_cross_entropy", "margin_ranking_loss", "hinge_embedding_loss",
    "cosine_embedding_loss", "multi_margin_loss", "multilabel_margin_loss",
    "triplet_margin_loss", "triplet_margin_with_distance_loss", "ctc_loss",
]


# ---- losses ---------------------------------------------------------------------------------
_REDUCTIONS = ("none", "mean", "sum")


def _legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str,
                      allowed: tuple[str, ...] = _REDUCTIONS) -> str:
    """``reduction``, or the one the deprecated ``size_average``/``reduce`` pair names."""
    if size_average is None and reduce is None:
        if reduction not in allowed:
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


def _weighted_reduce(loss: Tensor, weight: Tensor | None, input: Tensor,
                     reduction: str) -> Tensor:
    """mse/l1's ``weight``: same size as the input; its mean is the weighted average
    sum(w loss) / sum(w), as torch's."""
    if weight is None:
        return _reduce(loss, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    return loss.sum() / weight.sum() if reduction == "mean" else _reduce(loss, reduction)


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
             reduce: bool | None = None, reduction: str = "mean",
             weight: Tensor | None = None) -> Tensor:
    """Mean squared error: reduce((x - y)^2)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "mse_loss")
    if weight is None:
        return dispatch("mse_loss", (input, target), {"reduction": reduction})
    diff = input - target
    return _weighted_reduce(diff * diff, weight, input, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
            reduce: bool | None = None, reduction: str = "mean",
            weight: Tensor | None = None) -> Tensor:
    """Mean absolute error: reduce(|x - y|)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "l1_loss")
    return _weighted_reduce((input - target).abs(), weight, input, reduction)


def _nll_shapes(input: Tensor, target: Tensor, weight: Tensor | None) -> None:
    want = (input.shape[0],) + tuple(input.shape[2:]) if input.dim() > 1 else ()
    if input.dim() >= 2 and target.dim() >= 1 and input.shape[0] != target.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                         f"batch_size ({target.shape[0]}).")
    if input.dim() == 0 or tuple(target.shape) != want:
        raise ShapeError(f"nll_loss: expected target of shape {want} for input of shape "
                         f"{tuple(input.shape)}, got {tuple(target.shape)}")
    C = input.shape[1] if input.dim() > 1 else input.shape[0]
    if weight is not None and tuple(weight.shape) != (C,):
        raise ShapeError(f"nll_loss: weight tensor should be defined either for all {C} "
                         f"classes or no classes but got weight tensor of shape: "
                         f"{list(weight.shape)}")


def _nll_checks(input: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int) -> None:
    _nll_shapes(input, target, weight)
    if target.dtype not in (D.int64, D.uint8):   # torch refuses int32/int16/bool targets too
        raise DTypeError(f"nll_loss: expected target dtype to be Long or Byte (class indices), "
                         f"got {target.dtype.name}")
    if weight is not None and weight.dtype is not input.dtype:
        raise DTypeError(f"nll_loss: expected scalar type {input.dtype.short} but found "
                         f"{weight.dtype.short} (weight)")
    if input.dtype.category < D.FLOAT:
        raise DTypeError(f"nll_loss: expected a floating point input, got {input.dtype.name}")
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
    # Ignored places are masked after the gather so that their gradient is 0 even where the
    # mean's total weight is 0 (0 * inf would be NaN; PyTorch never writes them).
    picked = input.gather(cdim, safe.unsqueeze(cdim)).squeeze(cdim).masked_fill(ignored, 0.0)
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
    return weight.reshape(shape)   # class-probability targets promote, as in torch


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
        raise ShapeError(f"cross_entropy: class-probability target must have the input's shape "
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
        raise ArgumentValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if input.dim() == 0:
        raise ShapeError("cross_entropy: expected input of shape (C,), (N, C) or (N, C, d1, ...), "
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


# ---- regression and probabilistic losses (decompositions) -----------------------------------
def _detached_clamp(x: Tensor, lo: float) -> Tensor:
    """``x`` clamped below at ``lo`` with the gradient of ``x`` itself, as torch clamps in
    place under ``no_grad``."""
    return where(x < lo, (x - x.detach()) + lo, x)     # x - x.detach(): 0, gradient 1


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """-w [t log(x) + (1 - t) log(1 - x)] for probabilities ``input``, each log clamped
    below at -100 as in torch (so 0 and 1 give finite losses).

    >>> F.binary_cross_entropy(scriptmod.tensor([0.5]), scriptmod.tensor([1.0]))
    tensor(0.6931)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input "
                         f"size ({input.shape}) is deprecated. Please ensure they have the same "
                         "size.")
    for name, probs in (("input", input), ("target", target)):
        if not _tracing() and probs.numel() and (~((probs >= 0) & (probs <= 1))).any().item():
            raise ArgumentValueError(f"binary_cross_entropy: all elements of {name} should be "
                                     "between 0 and 1")
    loss = _bce_terms(input, target)
    return _reduce(loss if weight is None else loss * weight, reduction)


def _bce_terms(x: Tensor, t: Tensor) -> Tensor:
    """torch's value (t - 1) max(log(1 - x), -100) - t max(log(x), -100) with torch's
    gradient for x, (x - t) / max(x (1 - x), 1e-12), finite at 0 and 1 where the clamped
    logs' own gradient is 0/0: the value is of a detached x, the gradient rides on a term
    that is exactly 0 (first order; torch's target gradient comes from the value)."""
    fixed = x.detach()
    value = (t - 1) * (-fixed).log1p().clamp(min=-100.0) - t * fixed.log().clamp(min=-100.0)
    slope = (fixed - t) / ((1 - fixed) * fixed).clamp(min=1e-12)
    return value + (x - fixed) * slope.detach()


def kl_div(input: Tensor, target: Tensor, size_average: bool | None = None,
           reduce: bool | None = None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """Pointwise KL divergence of log-probabilities ``input`` from ``target`` (probabilities,
    or log-probabilities with ``log_target``); ``'batchmean'`` divides the sum by the batch.

    >>> F.kl_div(scriptmod.tensor([-0.5, -1.0]).log_softmax(0), scriptmod.tensor([0.5, 0.5]),
    ...          reduction="sum")
    tensor(0.0309)
    """
    legacy = size_average is not None or reduce is not None
    reduction = _legacy_reduction(size_average, reduce, reduction,
                                  _REDUCTIONS + ("batchmean",))
    if reduction == "mean" and not legacy:
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", stacklevel=2)
    if log_target:
        loss = target.exp() * (target - input)
    else:        # xlogy(t, t) - t x: 0 where t == 0 (log of 1 there keeps gradients finite)
        loss = target * target.masked_fill(target == 0, 1.0).log() - target * input
    if reduction != "batchmean":
        return _reduce(loss, reduction)
    total = loss.sum()
    return total / input.shape[0] if input.dim() != 0 else total


def _broadcast_pair(input: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """torch.broadcast_tensors of a loss's two operands, after torch's size warning."""
    _check_same_size(input, target, "")
    shape = list((input - target).shape)
    return input.expand(shape), target.expand(shape)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
                   reduce: bool | None = None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); L1 at
    beta 0.

    >>> F.smooth_l1_loss(scriptmod.tensor([0.5, 3.0]), scriptmod.tensor([0.0, 0.0]))
    tensor(1.3125)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise ArgumentValueError("smooth_l1_loss does not support negative values for beta.")
    input, target = _broadcast_pair(input, target)
    d = (input - target).abs()
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), optionally weighted.

    >>> F.huber_loss(scriptmod.tensor([0.5, 3.0]), scriptmod.tensor([0.0, 0.0]), delta=2.0)
    tensor(2.0625)
    """
    reduction = _legacy_reduction(None, None, reduction)
    if delta <= 0:
        raise ArgumentValueError("huber_loss does not support non-positive values for delta.")
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    input, target = _broadcast_pair(input, target)
    d = (input - target).abs()
    loss = where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduce(loss if weight is None else loss * weight, reduction)


def soft_margin_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
                     reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """log(1 + exp(-target * input)) for targets of +-1, stably.

    >>> F.soft_margin_loss(scriptmod.tensor([0.0]), scriptmod.tensor([1.0]))
    tensor(0.6931)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if target.requires_grad and grad_mode.is_grad_enabled():
        raise ArgumentValueError("The function 'soft_margin_loss' is not differentiable with "
                                 "respect to argument 'target'. This input cannot have "
                                 "requires_grad True.")
    return _reduce(_softplus(-target * input), reduction)


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                size_average: bool | None = None, reduce: bool | None = None,
                                reduction: str = "mean") -> Tensor:
    """Per-class binary cross-entropy of logits ``input`` against 0/1 ``target``, averaged
    over the classes (the last dimension).

    >>> x, t = scriptmod.tensor([[0.0, 0.0]]), scriptmod.tensor([[1.0, 0.0]])
    >>> F.multilabel_soft_margin_loss(x, t)
    tensor(0.6931)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = -(target * _logsigmoid(input) + (1 - target) * _logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.dim() - 1
    return _reduce(loss.sum(dim=class_dim) / input.shape[class_dim], reduction)


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     size_average: bool | None = None, eps: float = 1e-8,
                     reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Poisson negative log likelihood: exp(x) - t x of log-rates, x - t log(x + eps) of
    rates; ``full`` adds Stirling's t log t - t + log(2 pi t) / 2 where t > 1.

    >>> F.poisson_nll_loss(scriptmod.tensor([0.0]), scriptmod.tensor([1.0]))
    tensor(1.)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        safe = target.masked_fill(target <= 1, 1.0)     # Stirling's term is 0 for t <= 1
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + stirling.masked_fill(target <= 1, 0.0)
    return _reduce(loss, reduction)


def _gaussian_var(input: Tensor, var: Tensor) -> Tensor:
    """``var`` shaped to broadcast against ``input`` by torch's rules: the same size, one
    dimension short (homoscedastic: unsqueezed), or one mismatched dimension of size 1."""
    if tuple(var.shape) == tuple(input.shape):
        return var
    if tuple(input.shape[:-1]) == tuple(var.shape):
        return var.unsqueeze(-1)
    if input.dim() == var.dim() and \
            sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1:
        return var
    raise ValueError("var is of incorrect size")


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor | float, full: bool = False,
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """Gaussian negative log likelihood 0.5 (log var + (input - target)^2 / var) with the
    variance clamped below at ``eps`` (the clamp passes gradients, as torch's does).

    >>> one, zero = scriptmod.tensor([1.0]), scriptmod.tensor([0.0])
    >>> F.gaussian_nll_loss(one, zero, one)
    tensor(0.5000)
    """
    if not isinstance(var, Tensor):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = input.new_zeros(tuple(input.shape)) + float(var)
    elif not _tracing() and (var < 0).any().item():
        raise ValueError("var has negative entry/entries")
    var = _gaussian_var(input, var)
    if reduction not in _REDUCTIONS:
        raise ValueError(reduction + " is not valid")
    var = _detached_clamp(var, eps)
    diff = input - target
    loss = 0.5 * (var.log() + diff * diff / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def linear_cross_entropy(input: Tensor, linear_weight: Tensor, target: Tensor, *,
                         linear_bias: Tensor | None = None, weight: Tensor | None = None,
                         reduction: str = "mean", ignore_index: int | None = None,
                         label_smoothing: float = 0.0, options: object = None) -> Tensor:
    """``cross_entropy(linear(input, linear_weight, linear_bias), target)``; a weight of shape
    (C, *out_features, in_features) gives a K-dimensional loss. ``options`` (torch's chunking
    of the classes, a memory saving) computes the same value here, unchunked.

    >>> w = scriptmod.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> F.linear_cross_entropy(scriptmod.tensor([[2.0, 0.0]]), w, scriptmod.tensor([0]))
    tensor(0.1269)
    """
    if input.dim() not in (1, 2):
        raise ShapeError(f"expected input with dimensionality 1 or 2, got {input.dim()}")
    if linear_weight.dim() < 2:
        raise ShapeError(f"expected linear_weight with dimensionality at least 2, got "
                         f"{linear_weight.dim()}")
    batch, in_features = tuple(input.shape[:-1]), input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise ShapeError(f"expected equal input and linear_weight last dimensions "
                         f"(in_features), got {in_features} and {linear_weight.shape[-1]}, "
                         "respectively")
    classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (classes, *out_features):
        raise ShapeError(f"expected linear_bias shape {(classes, *out_features)}, got "
                         f"{tuple(linear_bias.shape)}")
    if out_features and not batch:
        raise ShapeError(f"K-dimensional loss defined by linear_weight shape "
                         f"{tuple(linear_weight.shape)} requires batched input, "
                         f"(N, {in_features}), got unbatched input with shape "
                         f"{tuple(input.shape)}")
    logits_shape = (*batch, classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise ArgumentValueError("ignore_index cannot be specified when target contains "
                                 "probabilities")
    rows = math.prod(out_features) * classes
    bias = None if linear_bias is None else linear_bias.reshape(rows)
    logits = linear(input, linear_weight.reshape(rows, in_features), bias)
    return cross_entropy(logits.reshape(logits_shape), target, weight, None,
                         -100 if ignore_index is None else ignore_index, None, reduction,
                         label_smoothing)


# ---- margin and embedding losses (decompositions) -------------------------------------------
def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                        size_average: bool | None = None, reduce: bool | None = None,
                        reduction: str = "mean") -> Tensor:
    """max(0, -target (input1 - input2) + margin) for targets of +-1.

    >>> one, two = scriptmod.tensor([1.0]), scriptmod.tensor([2.0])
    >>> F.margin_ranking_loss(one, two, one)
    tensor(1.)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise ShapeError(f"margin_ranking_loss : All input tensors should have same dimension "
                         f"but got sizes: input1: {input1.shape}, input2: {input2.shape}, "
                         f"target: {target.shape} ")
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """``input`` where target is 1, max(0, margin - input) where it is -1 (torch's sum of
    both for any other target value).

    >>> F.hinge_embedding_loss(scriptmod.tensor([0.3, 0.3]), scriptmod.tensor([1.0, -1.0]))
    tensor(0.5000)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    below_margin = where(target != 1, (margin - input).clamp(min=0), 0.0)
    return _reduce(below_margin + where(target != -1, input, 0.0), reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                          size_average: bool | None = None, reduce: bool | None = None,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1; the
    cosine over the last dimension, each squared norm plus 1e-12 as in torch.

    >>> F.cosine_embedding_loss(scriptmod.tensor([[1.0, 0.0]]), scriptmod.tensor([[0.0, 1.0]]),
    ...                         scriptmod.tensor([1.0]))
    tensor(1.)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if target.dim() > 1:
        raise ShapeError("0D or 1D target tensor expected, multi-target not supported")
    want = 2 if target.dim() == 1 else 1
    if input1.dim() != want or input2.dim() != want:
        raise ShapeError(f"{target.dim()}D target tensor expects {want}D input tensors, but "
                         f"found inputs with sizes {list(input1.shape)} and "
                         f"{list(input2.shape)}.")
    dim = target.dim()
    dot = (input1 * input2).sum(dim)
    sq1 = (input1 * input1).sum(dim) + 1e-12
    sq2 = (input2 * input2).sum(dim) + 1e-12
    cos = dot / (sq1 * sq2).sqrt()
    loss = where(target == 1, 1 - cos, 0.0) + where(target == -1, (cos - margin).clamp(min=0), 0.0)
    return _reduce(loss, reduction)


def _margin_frames(input: Tensor, name: str) -> tuple[int, int]:
    """(frames, classes) of a multi-margin loss's (C,), (N, C) or 0-d ``input``."""
    if not (input.dim() == 0 or (input.dim() in (1, 2) and input.shape[-1] != 0)):
        raise ShapeError(f"{name}: Expected non-empty vector or matrix with optional 0-dim "
                         f"batch size, but got: {list(input.shape)}")
    if input.dim() <= 1:
        return 1, 1 if input.dim() == 0 else input.shape[0]
    return input.shape[0], input.shape[1]


def _check_class_range(target: Tensor, lo: int, classes: int, name: str) -> None:
    if not _tracing() and target.numel() and ((target < lo) | (target >= classes)).any().item():
        raise ArgumentValueError(f"{name}: target out of range, expected class indices in "
                                 f"[{lo}, {classes})")


def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0,
                      weight: Tensor | None = None, size_average: bool | None = None,
                      reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Multi-class hinge loss: sum over classes j != y of w[y] max(0, margin - x[y] + x[j])^p,
    divided by the number of classes, for each frame.

    >>> F.multi_margin_loss(scriptmod.tensor([[0.1, 0.8, 0.3]]), scriptmod.tensor([1]))
    tensor(0.2667)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    frames, classes = _margin_frames(input, "multi_margin_loss")
    if target.dim() > 1 or target.numel() != frames:
        raise ShapeError(f"multi_margin_loss: inconsistent target size, expected {frames} but "
                         f"got {list(target.shape)}")
    if weight is not None and weight.numel() != classes:
        raise ShapeError(f"multi_margin_loss: inconsistent weight size, expected {classes} but "
                         f"got {list(weight.shape)}")
    _check_class_range(target, 0, classes, "multi_margin_loss")
    x, t = input.reshape(frames, classes), target.reshape(frames, 1)
    z = (margin - x.gather(1, t) + x).clamp(min=0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight[t]
    own_class = arange(classes) == t
    loss = z.masked_fill(own_class, 0.0).sum(1) / classes
    return _reduce(loss.reshape(tuple(target.shape)), reduction)


def multilabel_margin_loss(input: Tensor, target: Tensor, size_average: bool | None = None,
                           reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Multi-label hinge loss: ``target`` lists each frame's classes, ended by the first -1;
    the sum over listed j and unlisted i of max(0, 1 - (x[j] - x[i])), divided by C.

    >>> F.multilabel_margin_loss(scriptmod.tensor([[0.1, 0.2, 0.4, 0.8]]),
    ...                          scriptmod.tensor([[3, 0, -1, 1]]))
    tensor(0.8500)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    frames, classes = _margin_frames(input, "multilabel_margin_loss")
    want = (frames, classes) if input.dim() == 2 else None
    if (want is None and (target.dim() > 1 or target.numel() != classes)) or \
            (want is not None and tuple(target.shape) != want):
        raise ShapeError(f"multilabel_margin_loss: inconsistent target size: "
                         f"{list(target.shape)} for input of size: {list(input.shape)}")
    _check_class_range(target, -1, classes, "multilabel_margin_loss")
    x, t = input.reshape(frames, classes), target.reshape(frames, classes)
    listed = (t < 0).to(D.int64).cumsum(1) == 0              # the places before the first -1
    t = t.masked_fill(~listed, 0)
    is_target = ((t.unsqueeze(2) == arange(classes)) & listed.unsqueeze(2)).any(1)
    z = (1 - x.gather(1, t).unsqueeze(2) + x.unsqueeze(1)).clamp(min=0)   # (frame, j, i)
    counted = listed.unsqueeze(2) & ~is_target.unsqueeze(1)
    loss = z.masked_fill(~counted, 0.0).sum((1, 2)) / classes
    if reduction == "none":      # torch: one loss per frame of a 2-D input, else a 0-d one
        return loss if target.dim() > 1 else loss.reshape(())
    return _reduce(loss, reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor,
                        margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average: bool | None = None,
                        reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """max(0, margin + d(a, p) - d(a, n)) with d the ``p``-norm pairwise distance; ``swap``
    uses min(d(a, n), d(p, n)).

    >>> z = scriptmod.tensor([[0.0, 0.0]])
    >>> F.triplet_margin_loss(z, z, scriptmod.tensor([[3.0, 4.0]]), margin=6.0, eps=0.0)
    tensor(1.)
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    return triplet_margin_with_distance_loss(
        anchor, positive, negative, margin=margin, swap=swap, reduction=reduction,
        distance_function=lambda a, b: pairwise_distance(a, b, p, eps))


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function: Callable[[Tensor, Tensor], Tensor]
                                      | None = None, margin: float = 1.0, swap: bool = False,
                                      reduction: str = "mean") -> Tensor:
    """The triplet margin loss for any ``distance_function`` (default: pairwise_distance)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.dim() == positive.dim() == negative.dim():
        raise ShapeError(f"The anchor, positive, and negative tensors are expected to have the "
                         f"same number of dimensions, but got: anchor {anchor.dim()}D, positive "
                         f"{positive.dim()}D, and negative {negative.dim()}D inputs")
    distance = pairwise_distance if distance_function is None else distance_function
    d_pos, d_neg = distance(anchor, positive), distance(anchor, negative)
    if swap:
        d_neg = d_neg.minimum(distance(positive, negative))
    return _reduce((margin + d_pos - d_neg).clamp(min=0), reduction)


# ---- CTC (a registry op: the alpha/beta recursions are not a decomposition) -----------------
def _as_lengths(lengths: Tensor | Sequence[int] | int, name: str) -> Tensor:
    if isinstance(lengths, Tensor):
        if lengths.dtype.category >= D.FLOAT or lengths.dtype is D.bool_:
            raise DTypeError(f"ctc_loss: {name} must be integral, got {lengths.dtype.name}")
        return lengths.to(D.int64)
    return _const(list(lengths) if isinstance(lengths, (tuple, list)) else [int(lengths)],
                  dtype=D.int64)


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Tensor | Sequence[int],
             target_lengths: Tensor | Sequence[int], blank: int = 0, reduction: str = "mean",
             zero_infinity: bool = False) -> Tensor:
    """Connectionist Temporal Classification loss of (T, N, C) (or unbatched (T, C))
    log-probabilities against padded (N, S) or concatenated targets; ``'mean'`` divides each
    sequence's loss by its target length (at least 1) before averaging, as torch does.

    >>> lp = scriptmod.tensor([[[0.0, -50.0]], [[-50.0, 0.0]]])    # T=2, N=1: blank then 1
    >>> F.ctc_loss(lp, scriptmod.tensor([[1]]), [2], [1], reduction="sum")
    tensor(0.)
    """
    reduction = _legacy_reduction(None, None, reduction)
    if log_probs.dtype.category < D.FLOAT:
        raise DTypeError(f"ctc_loss: expected floating point log_probs, got "
                         f"{log_probs.dtype.name}")
    if targets.dtype.category >= D.FLOAT:
        raise DTypeError(f"ctc_loss: expected integral targets, got {targets.dtype.name}")
    batched = log_probs.dim() == 3
    if not batched and log_probs.dim() != 2:
        raise ShapeError(f"ctc_loss: expected (T, N, C) or (T, C) log_probs, got shape "
                         f"{tuple(log_probs.shape)}")
    lp = log_probs if batched else log_probs.unsqueeze(1)
    lengths = _as_lengths(target_lengths, "target_lengths")
    loss = dispatch("ctc_loss", (lp, targets, _as_lengths(input_lengths, "input_lengths"),
                                 lengths), {"blank": blank, "zero_infinity": zero_infinity})
    if reduction == "mean":
        return (loss / lengths.reshape(-1).clamp(min=1).to(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss if batched else loss.squeeze(0)
