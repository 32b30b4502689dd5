"""Pooling of ``scriptmod.nn.functional`` (re-exported by it): max, average, power-average
(LP), adaptive and fractional pools over 1, 2 or 3 trailing dims, and max unpooling.

    >>> F.max_pool2d(sm.arange(16.).reshape(1, 1, 4, 4), 2)
    tensor([[[[ 5.,  7.],
              [13., 15.]]]])

Inputs are ``(N, C, *S)`` or unbatched ``(C, *S)``, as in PyTorch; indices are flat into
``S`` of each plane. LP pooling is a composite of ``avg_pool`` (PyTorch's formula, so its
gradients are PyTorch's too); an adaptive average to size 1 is a mean.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from scriptmod._creation import rand
from scriptmod._dispatch import dispatch
from scriptmod.ir.errors import ArgumentValueError, ShapeError
from scriptmod.tensor import Tensor

__all__ = [f"{name}{n}d" for n in (1, 2, 3) for name in (
    "max_pool", "avg_pool", "lp_pool", "adaptive_avg_pool", "adaptive_max_pool", "max_unpool")]
__all__ += [f"max_pool{n}d_with_indices" for n in (1, 2, 3)]
__all__ += [f"adaptive_max_pool{n}d_with_indices" for n in (1, 2, 3)]
__all__ += ["fractional_max_pool2d", "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
            "fractional_max_pool3d_with_indices"]


def _ntuple(v: Any, n: int, arg: str, name: str) -> tuple[int, ...]:
    """``3`` or ``(3, 2)`` -> n ints (a 1-tuple repeats); the error names the argument."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * n
    if isinstance(v, (tuple, list)) and len(v) in (1, n) and all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in v):
        return tuple(int(i) for i in v) * (n if len(v) == 1 else 1)
    raise TypeError(f"{name}: {arg} must be an int or a tuple of {n} ints, got {v!r}")


def _check_input(input: Tensor, n: int, name: str) -> None:
    if input.dim() not in (n + 1, n + 2):
        raise ShapeError(f"{name}: expected a {n + 1}-D or {n + 2}-D input (unbatched or "
                         f"batched), got shape {tuple(input.shape)}")
    if any(int(s) == 0 for s in input.shape[-n - 1:]):
        raise ShapeError(f"{name}: expected an input with non-zero channel and spatial sizes, "
                         f"got shape {tuple(input.shape)}")


def _window(n: int, name: str, kernel_size: Any, stride: Any, padding: Any,
            dilation: Any = 1) -> dict[str, Any]:
    """The window attributes of a pool: stride defaults to the kernel size."""
    k = _ntuple(kernel_size, n, "kernel_size", name)
    no_stride = stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0)
    s = k if no_stride else _ntuple(stride, n, "stride", name)
    p, d = _ntuple(padding, n, "padding", name), _ntuple(dilation, n, "dilation", name)
    if min(s) == 0:         # first: a zero kernel_size is a zero default stride too
        raise ShapeError(f"{name}: stride should not be zero, got stride={s}")
    for arg, v, what in (("stride", s, "stride should be greater than zero"),
                         ("kernel_size", k, "kernel size should be greater than zero"),
                         ("dilation", d, "dilation should be greater than zero")):
        if min(v) <= 0:
            raise ShapeError(f"{name}: {what}, got {arg}={v}")
    if min(p) < 0 or any(2 * p[i] > k[i] for i in range(n)):
        raise ShapeError(f"{name}: pad should be at most half of effective kernel size, got "
                         f"padding={p} and kernel_size={k}")
    return {"kernel_size": k, "stride": s, "padding": p, "dilation": d}


# ---- max pooling -----------------------------------------------------------------------
def _max_pool(n: int, input: Tensor, kernel_size: Any, stride: Any, padding: Any,
              dilation: Any, ceil_mode: bool, return_indices: bool) -> Any:
    name = f"max_pool{n}d"
    _check_input(input, n, name)
    attrs = _window(n, name, kernel_size, stride, padding, dilation)
    attrs["ceil_mode"] = bool(ceil_mode)
    if return_indices:
        return tuple(dispatch(f"{name}_with_indices", (input,), attrs))
    return dispatch(name, (input,), attrs)


def max_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Max over windows of the last dim; with ``return_indices`` also where each max is."""
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Max over windows of the last 2 dims; with ``return_indices`` also where each max is."""
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Max over windows of the last 3 dims; with ``return_indices`` also where each max is."""
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool1d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None,
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = False) -> tuple[Tensor, Tensor]:
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None,
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = False) -> tuple[Tensor, Tensor]:
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input: Tensor, kernel_size: Any, stride: Any = None,
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False,
                            return_indices: bool = False) -> tuple[Tensor, Tensor]:
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, True)


# ---- average and power-average pooling -----------------------------------------------------
def _avg_pool(n: int, input: Tensor, kernel_size: Any, stride: Any, padding: Any,
              ceil_mode: bool, count_include_pad: bool, divisor_override: Any) -> Tensor:
    name = f"avg_pool{n}d"
    _check_input(input, n, name)
    attrs = _window(n, name, kernel_size, stride, padding)
    del attrs["dilation"]
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, int):
            raise TypeError(f"{name}: divisor_override must be an int, got {divisor_override!r}")
        if divisor_override == 0:
            raise ArgumentValueError(f"{name}: divisor must be not zero")
    attrs.update(ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad),
                 divisor_override=divisor_override)
    return dispatch(name, (input,), attrs)


def avg_pool1d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over windows of the last dim (padding counted with ``count_include_pad``)."""
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """Mean over windows of the last 2 dims; ``divisor_override`` replaces the tap count."""
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """Mean over windows of the last 3 dims; ``divisor_override`` replaces the tap count."""
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def _lp_pool(n: int, input: Tensor, norm_type: float, kernel_size: Any, stride: Any,
             ceil_mode: bool) -> Tensor:
    """PyTorch's composite: ``(sign(a) * relu(|a|) * prod(k)) ** (1/p)`` of the average ``a``
    of ``x ** p`` (the sign and relu keep its gradients PyTorch's)."""
    k = _ntuple(kernel_size, n, "kernel_size", f"lp_pool{n}d")
    out = _avg_pool(n, input.pow(norm_type), k, stride, 0, ceil_mode, True, None)
    return (out.sign() * out.abs().relu()).mul(math.prod(k)).pow(1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over the last dim: ``(sum of x**p over a window) ** (1/p)``."""
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over the last 2 dims."""
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input: Tensor, norm_type: float, kernel_size: Any, stride: Any = None,
              ceil_mode: bool = False) -> Tensor:
    """Power-average pooling over the last 3 dims."""
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


# ---- adaptive pooling --------------------------------------------------------------------
def _output_size(input: Tensor, n: int, output_size: Any, name: str) -> tuple[int, ...]:
    """``output_size`` as n ints: an int repeats, None keeps the input's size in that dim."""
    if isinstance(output_size, (list, tuple)) and len(output_size) == n:
        sizes = [int(input.shape[-n + i]) if v is None else v for i, v in enumerate(output_size)]
    else:
        sizes = [output_size] * n if not isinstance(output_size, (list, tuple)) else output_size
    out = _ntuple(list(sizes), n, "output_size", name)
    if min(out) < 0:
        raise ShapeError(f"{name}: output_size must be non-negative, got {out}")
    return out


def _adaptive_avg(n: int, input: Tensor, output_size: Any) -> Tensor:
    name = f"adaptive_avg_pool{n}d"
    _check_input(input, n, name)
    size = _output_size(input, n, output_size, name)
    if size == (1,) * n:         # global average pooling, as in every torchvision CNN
        return input.mean(dim=tuple(range(-n, 0)), keepdim=True)
    return dispatch(name, (input,), {"output_size": size})


def adaptive_avg_pool1d(input: Tensor, output_size: Any) -> Tensor:
    """Average over ``output_size`` near-equal windows of the last dim."""
    return _adaptive_avg(1, input, output_size)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Average over near-equal windows of the last 2 dims to ``output_size``."""
    return _adaptive_avg(2, input, output_size)


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    """Average over near-equal windows of the last 3 dims to ``output_size``."""
    return _adaptive_avg(3, input, output_size)


def _adaptive_max(n: int, input: Tensor, output_size: Any, return_indices: bool) -> Any:
    name = f"adaptive_max_pool{n}d"
    _check_input(input, n, name)
    values, indices = dispatch(name, (input,),
                               {"output_size": _output_size(input, n, output_size, name)})
    return (values, indices) if return_indices else values


def adaptive_max_pool1d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """Max over near-equal windows of the last dim (and, asked, where each max is)."""
    return _adaptive_max(1, input, output_size, return_indices)


def adaptive_max_pool2d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """Max over near-equal windows of the last 2 dims (and, asked, where each max is)."""
    return _adaptive_max(2, input, output_size, return_indices)


def adaptive_max_pool3d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """Max over near-equal windows of the last 3 dims (and, asked, where each max is)."""
    return _adaptive_max(3, input, output_size, return_indices)


def adaptive_max_pool1d_with_indices(input: Tensor, output_size: Any,
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    return _adaptive_max(1, input, output_size, True)


def adaptive_max_pool2d_with_indices(input: Tensor, output_size: Any,
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    return _adaptive_max(2, input, output_size, True)


def adaptive_max_pool3d_with_indices(input: Tensor, output_size: Any,
                                     return_indices: bool = False) -> tuple[Tensor, Tensor]:
    return _adaptive_max(3, input, output_size, True)


# ---- fractional max pooling ----------------------------------------------------------------
def _fractional(n: int, input: Tensor, kernel_size: Any, output_size: Any, output_ratio: Any,
                return_indices: bool, _random_samples: Tensor | None) -> Any:
    name = f"fractional_max_pool{n}d"
    _check_input(input, n, name)
    k = _ntuple(kernel_size, n, "kernel_size", name)
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if output_size is None:
        ratio = output_ratio if isinstance(output_ratio, (list, tuple)) else [output_ratio] * n
        if len(ratio) != n:
            raise TypeError(f"{name}: output_ratio must be a float or {n} floats, got "
                            f"{output_ratio!r}")
        size = tuple(int(int(input.shape[-n + i]) * float(ratio[i])) for i in range(n))
    else:
        size = _ntuple(output_size, n, "output_size", name)
    if _random_samples is None:
        batch = 1 if input.dim() == n + 1 else int(input.shape[0])
        _random_samples = rand(batch, int(input.shape[-n - 1]), n, dtype=input.dtype,
                               device=input.device)
    elif _random_samples.dtype != input.dtype:
        raise ArgumentValueError(f"{name}: Expect _random_samples to have the same dtype as "
                                 f"input, got {_random_samples.dtype.name} and "
                                 f"{input.dtype.name}")
    values, indices = dispatch(name, (input, _random_samples),
                               {"kernel_size": k, "output_size": size})
    return (values, indices) if return_indices else values


def fractional_max_pool2d(input: Tensor, kernel_size: Any, output_size: Any = None,
                          output_ratio: Any = None, return_indices: bool = False,
                          _random_samples: Tensor | None = None) -> Any:
    """Max over pseudo-random overlapping windows of the last 2 dims (Graham, 2014)."""
    return _fractional(2, input, kernel_size, output_size, output_ratio, return_indices,
                       _random_samples)


def fractional_max_pool3d(input: Tensor, kernel_size: Any, output_size: Any = None,
                          output_ratio: Any = None, return_indices: bool = False,
                          _random_samples: Tensor | None = None) -> Any:
    """Max over pseudo-random overlapping windows of the last 3 dims."""
    return _fractional(3, input, kernel_size, output_size, output_ratio, return_indices,
                       _random_samples)


def fractional_max_pool2d_with_indices(
        input: Tensor, kernel_size: Any, output_size: Any = None, output_ratio: Any = None,
        return_indices: bool = False, _random_samples: Tensor | None = None) -> Any:
    return _fractional(2, input, kernel_size, output_size, output_ratio, True, _random_samples)


def fractional_max_pool3d_with_indices(
        input: Tensor, kernel_size: Any, output_size: Any = None, output_ratio: Any = None,
        return_indices: bool = False, _random_samples: Tensor | None = None) -> Any:
    return _fractional(3, input, kernel_size, output_size, output_ratio, True, _random_samples)


# ---- max unpooling -------------------------------------------------------------------------
def _unpool_size(input: Tensor, n: int, k: Sequence[int], s: Sequence[int], p: Sequence[int],
                 output_size: Any, name: str) -> list[Any]:
    """PyTorch's ``_unpool_output_size``: ``(in - 1) * s - 2p + k``, or a given size within
    one stride of it (a size of n + 2 dims drops the first two)."""
    default = [(input.shape[-n + i] - 1) * s[i] + k[i] - 2 * p[i] for i in range(n)]
    if output_size is None:
        return default
    want = list(output_size)
    if len(want) == n + 2:
        want = want[2:]
    if len(want) != n:
        raise ValueError(f"{name}: output_size should be a sequence containing {n} or {n + 2} "
                         f"elements, but it has a length of '{len(want)}'")
    for i in range(n):
        if not default[i] - s[i] < want[i] < default[i] + s[i]:
            raise ValueError(f"{name}: invalid output_size {tuple(want)} (dim {i} must be "
                             f"between {default[i] - s[i]} and {default[i] + s[i]})")
    return want


def _max_unpool(n: int, input: Tensor, indices: Tensor, kernel_size: Any, stride: Any,
                padding: Any, output_size: Any) -> Tensor:
    name = f"max_unpool{n}d"
    _check_input(input, n, name)
    w = _window(n, name, kernel_size, stride, padding)
    if indices.dtype.name != "int64":
        raise TypeError(f"{name}: expected indices to have dtype int64, got {indices.dtype.name}")
    size = _unpool_size(input, n, w["kernel_size"], w["stride"], w["padding"], output_size, name)
    return dispatch(name, (input, indices, size), {})


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> Tensor:
    """The inverse of ``max_pool1d``: each value back at its index, zeros elsewhere."""
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> Tensor:
    """The inverse of ``max_pool2d``: each value back at its index, zeros elsewhere."""
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size: Any, stride: Any = None,
                 padding: Any = 0, output_size: Any = None) -> Tensor:
    """The inverse of ``max_pool3d``: each value back at its index, zeros elsewhere."""
    return _max_unpool(3, input, indices, kernel_size, stride, padding, output_size)
