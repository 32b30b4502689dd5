"""Pooling of ``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

from typing import Any

from scriptmod._dispatch import dispatch
from scriptmod.ir.errors import ArgumentValueError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_activation import _pair
from scriptmod.nn._functional_conv import _positive

__all__ = ["max_pool2d", "avg_pool2d"]


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
