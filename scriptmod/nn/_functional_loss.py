"""Losses with PyTorch's signatures and ``reduction``s, re-exported by
``scriptmod.nn.functional``."""
from __future__ import annotations

import warnings


from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod._dispatch import dispatch
from scriptmod.nn._functional_activation import _softplus, _tracing

__all__ = ["mse_loss", "l1_loss", "nll_loss", "cross_entropy", "binary_cross_entropy_with_logits"]


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
    if weight is None:
        return dispatch("mse_loss", (input, target), {"reduction": reduction})
    diff = input - target
    return _reduce(diff * diff * weight, reduction)


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
