"""Functions PyTorch exposes at its top level from its operator library (ATen), which model
code and export tools call directly: ``native_batch_norm``, ``native_layer_norm``,
``native_group_norm`` (the normalization and the statistics the backward saves) and
``grid_sampler_2d``/``grid_sampler_3d`` (``grid_sample`` with integer modes). Each is a
composition of the ``nn.functional`` forms, so it traces, fuses and differentiates as they do.

    >>> import scriptmod as sm
    >>> out, mean, rstd = sm.native_layer_norm(sm.tensor([[1.0, 3.0]]), [2], None, None, 1e-5)
    >>> mean
    tensor([[2.]])
"""
from __future__ import annotations

from typing import Sequence

from scriptmod._public import public
from scriptmod.tensor import Tensor

_GRID_MODES = ("bilinear", "nearest", "bicubic")
_GRID_PADDING = ("zeros", "border", "reflection")


def _stats(x: Tensor, dims: list[int], eps: float) -> tuple[Tensor, Tensor]:
    """Mean and 1 / sqrt(biased variance + eps) over ``dims``, kept as size-1 dims."""
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, correction=0, keepdim=True)
    return mean, (var + eps).rsqrt()


@public(method=False)
def native_batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None,
                      running_mean: Tensor | None, running_var: Tensor | None, training: bool,
                      momentum: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(output, save_mean, save_invstd)``: ``F.batch_norm``'s output (running statistics
    updated in training), and in training the batch's mean and inverse standard deviation
    per channel; in evaluation both are empty, as PyTorch's."""
    from scriptmod.nn import functional as F
    out = F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
    if not training:
        empty = input.new_zeros((0,))
        return out, empty, empty.clone()
    dims = [d for d in range(input.dim()) if d != 1]
    mean, rstd = _stats(input, dims, eps)
    return out, mean.reshape(-1), rstd.reshape(-1)


@public(method=False)
def native_layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None,
                      bias: Tensor | None, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(output, mean, rstd)``: ``F.layer_norm``'s output and the statistics over the
    normalized dims, of shape ``input.shape[:-len(normalized_shape)] + (1,) * len(...)``."""
    from scriptmod.nn import functional as F
    out = F.layer_norm(input, normalized_shape, weight, bias, eps)
    n = len(normalized_shape)
    mean, rstd = _stats(input, list(range(input.dim() - n, input.dim())), eps)
    return out, mean, rstd


@public(method=False)
def native_group_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, N: int,
                      C: int, HxW: int, group: int, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(output, mean, rstd)``: ``F.group_norm``'s output and each (sample, group)'s
    statistics, of shape (N, group)."""
    from scriptmod.nn import functional as F
    if tuple(input.shape[:2]) != (N, C) or input.numel() != N * C * HxW:
        raise RuntimeError(f"native_group_norm: expected input of N={N}, C={C}, HxW={HxW}, "
                           f"got size {list(input.shape)}")
    out = F.group_norm(input, group, weight, bias, eps)
    mean, rstd = _stats(input.reshape(N, group, -1), [2], eps)
    return out, mean.reshape(N, group), rstd.reshape(N, group)


def _grid_sampler(input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,
                  align_corners: bool) -> Tensor:
    from scriptmod.nn import functional as F
    for name, value, names in (("interpolation_mode", interpolation_mode, _GRID_MODES),
                               ("padding_mode", padding_mode, _GRID_PADDING)):
        if not isinstance(value, int) or not 0 <= value < len(names):
            raise ValueError(f"grid_sampler: expected {name} to be an int in "
                             f"[0, {len(names) - 1}] ({', '.join(names)}), got {value!r}")
    return F.grid_sample(input, grid, _GRID_MODES[interpolation_mode],
                         _GRID_PADDING[padding_mode], bool(align_corners))


@public(method=False)
def grid_sampler_2d(input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> Tensor:
    """``F.grid_sample`` of a 4-d input, with modes as integers: interpolation 0 bilinear,
    1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection."""
    if input.dim() != 4:
        raise RuntimeError(f"grid_sampler_2d(): expected 4D input, got {input.dim()}D")
    return _grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)


@public(method=False)
def grid_sampler_3d(input: Tensor, grid: Tensor, interpolation_mode: int, padding_mode: int,
                    align_corners: bool) -> Tensor:
    """``grid_sampler_2d`` for a 5-d input (bilinear means trilinear)."""
    if input.dim() != 5:
        raise RuntimeError(f"grid_sampler_3d(): expected 5D input, got {input.dim()}D")
    return _grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)
