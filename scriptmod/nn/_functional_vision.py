"""Resampling and rearranging of images of ``scriptmod.nn.functional`` (interpolate, grid
sampling, pixel and channel shuffles; re-exported by it).

``interpolate`` is one registry op, ``upsample``, for every mode and rank: a size given as
a scale factor is computed by the op from the input's size when it runs, so a traced
``interpolate(x, scale_factor=2)`` follows the image size. ``grid_sample`` and
``affine_grid`` are ops too; the shuffles are reshapes and permutes.

    >>> F.interpolate(scriptmod.ones(1, 1, 2, 2), scale_factor=2, mode="bilinear").shape
    scriptmod.Size([1, 1, 4, 4])
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from scriptmod._dispatch import dispatch
from scriptmod.ir.errors import ArgumentValueError, ShapeError
from scriptmod.tensor import Tensor

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "grid_sample",
           "affine_grid", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
           "native_channel_shuffle"]

_MODES = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"
# torch's mode -> (the op's mode, the input rank it needs; None: 3-D to 5-D)
_OP_MODES: dict[str, tuple[str, int | None]] = {
    "nearest": ("nearest", None), "nearest-exact": ("nearest-exact", None),
    "area": ("area", None), "linear": ("linear", 3), "bilinear": ("linear", 4),
    "trilinear": ("linear", 5), "bicubic": ("cubic", 4), "lanczos": ("lanczos", 4)}
_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to "
                  "align_corners=False since 1.3.0. Please specify align_corners=True if the "
                  "old behavior is desired. See the documentation of grid_sample for details.")


def _is_integer(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _spatial_size(input: Tensor, size: Any, dim: int) -> list[Any]:
    """``size`` as one int per spatial dim (sizes read from a traced shape stay traced)."""
    if not isinstance(size, (list, tuple)):
        return [size] * dim
    if len(size) != dim:
        raise ValueError(
            "Input and output must have the same number of spatial dimensions, but got input "
            f"with spatial dimensions of {list(input.shape[2:])} and output size of {size}. "
            "Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
            "(o1, o2, ...,oK) format.")
    if not all(_is_integer(v) for v in size):
        raise TypeError("expected size to be one of int or Tuple[int] or Tuple[int, int] or "
                        f"Tuple[int, int, int], but got size with types "
                        f"{[type(v) for v in size]}")
    return list(size)


def _scale_factors(input: Tensor, scale_factor: Any, dim: int) -> list[float]:
    if not isinstance(scale_factor, (list, tuple)):
        return [float(scale_factor)] * dim
    if len(scale_factor) != dim:
        raise ValueError(
            "Input and scale_factor must have the same number of spatial dimensions, but got "
            f"input with spatial dimensions of {list(input.shape[2:])} and scale_factor of "
            f"shape {scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) "
            "format and scale_factor in (s1, s2, ...,sK) format.")
    return [float(s) for s in scale_factor]


def _check_mode(input: Tensor, mode: str, align_corners: bool | None, antialias: bool) -> str:
    """The op's mode for torch's ``mode`` at this rank; torch's errors for the others."""
    rank = input.dim()
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and rank == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos "
                         "modes and requires a 4-D tensor as input")
    if mode not in _OP_MODES or rank not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported "
                                  f"(got {rank}D) for the modes: {_MODES} (got {mode})")
    op_mode, needs = _OP_MODES[mode]
    if needs is not None and needs != rank:
        raise NotImplementedError(f"Got {rank}D input, but {mode} mode needs {needs}D input")
    if mode == "lanczos" and align_corners:
        raise ValueError("Lanczos mode does not support align_corners=True")
    if mode == "lanczos" and not antialias:
        raise ValueError("Lanczos mode requires antialias=True")
    return op_mode


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resamples the spatial dims of an (N, C, *spatial) input to ``size`` or by
    ``scale_factor``, as ``torch.nn.functional.interpolate`` (every mode, including
    antialiased bilinear/bicubic/lanczos downsampling).

        >>> F.interpolate(scriptmod.arange(4.0).view(1, 1, 4), size=2, mode="linear")
        tensor([[[0.5000, 2.5000]]])
    """
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.dim() - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is None and scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    out_size = [] if size is None else _spatial_size(input, size, dim)
    scales = None if scale_factor is None else _scale_factors(input, scale_factor, dim)
    op_mode = _check_mode(input, mode, align_corners, antialias)
    return dispatch("upsample", (input, out_size), {
        "mode": op_mode, "scale_factor": scales,
        "recompute_scale_factor": bool(recompute_scale_factor) or mode == "area",
        "align_corners": bool(align_corners), "antialias": bool(antialias)})


def upsample(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """Deprecated alias of ``interpolate`` (warns, as torch)."""
    warnings.warn("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Deprecated: ``interpolate(..., mode='nearest')`` (warns, as torch)."""
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Deprecated: ``interpolate(..., mode='bilinear', align_corners=True)`` (warns)."""
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use "
                  "`nn.functional.interpolate` instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---- sampling at grid points ----------------------------------------------------------------
def _check_grid(input: Tensor, grid: Tensor, mode: str) -> None:
    n = input.dim()
    if n not in (4, 5) or grid.dim() != n:
        raise ShapeError(f"grid_sampler(): expected {n}D input and grid with same number of "
                         f"dimensions, but got input with sizes {list(input.shape)} and grid "
                         f"with sizes {list(grid.shape)}")
    if input.shape[0] != grid.shape[0]:
        raise ShapeError(f"grid_sampler(): expected grid and input to have same batch size, but "
                         f"got input with sizes {list(input.shape)} and grid with sizes "
                         f"{list(grid.shape)}")
    if grid.shape[-1] != n - 2:
        raise ShapeError(f"grid_sampler(): expected grid to have size {n - 2} in last dimension, "
                         f"but got grid with sizes {list(grid.shape)}")
    for d in range(2, n):
        if input.shape[d] == 0:
            raise ShapeError(f"grid_sampler(): expected input to have non-empty spatial "
                             f"dimensions, but input has sizes {list(input.shape)} with "
                             f"dimension {d} being empty")
    if mode == "bicubic" and n != 4:
        raise ShapeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if input.dtype != grid.dtype:
        raise ArgumentValueError(f"grid_sampler(): expected input and grid to have the same "
                                 f"dtype, got {input.dtype} and {grid.dtype}")


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """Samples ``input`` (N, C, H, W) or (N, C, D, H, W) at the normalized points of
    ``grid`` (N, H', W', 2) or (N, D', H', W', 3): (x, y[, z]) in [-1, 1] span the image.

        >>> F.grid_sample(scriptmod.ones(1, 1, 2, 2), scriptmod.zeros(1, 1, 1, 2),
        ...               align_corners=False)
        tensor([[[[1.]]]])
    """
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    _check_grid(input, grid, mode)
    return dispatch("grid_sampler", (input, grid), {"mode": mode, "padding_mode": padding_mode,
                                                    "align_corners": bool(align_corners)})


def affine_grid(theta: Tensor, size: Sequence[int], align_corners: bool | None = None) -> Tensor:
    """The sampling grid of a batch of affine transforms ``theta`` (N, 2, 3) or (N, 3, 4)
    for images of ``size`` (N, C, H, W) or (N, C, D, H, W), for ``grid_sample``.

        >>> F.affine_grid(scriptmod.eye(2, 3).unsqueeze(0), [1, 1, 1, 2], align_corners=False)
        tensor([[[[-0.5000,  0.0000],
                  [ 0.5000,  0.0000]]]])
    """
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = list(size)
    if len(size) not in (4, 5):
        raise NotImplementedError("affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    n = len(size) - 2
    if theta.dim() != 3 or tuple(theta.shape[-2:]) != (n, n + 1):
        raise ValueError(f"Expected a batch of {n}D affine matrices of shape Nx{n}x{n + 1} for "
                         f"size {size}. Got {theta.shape}.")
    if align_corners and min(size[2:]) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size "
                      "grids when align_corners=True. This is not an intended use case of "
                      "affine_grid. See the documentation of affine_grid for details.",
                      stacklevel=2)
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    return dispatch("affine_grid", (theta, size), {"align_corners": bool(align_corners)})


# ---- rearranging: reshapes and permutes ---------------------------------------------------
def _positive_factor(factor: Any, name: str, what: str) -> int:
    if not _is_integer(factor):
        raise TypeError(f"{name}(): argument '{what}' must be int, not {type(factor).__name__}")
    if factor <= 0:
        raise ArgumentValueError(f"{name} expects a positive {what}, but got {factor}")
    return factor


def _at_least_3d(input: Tensor, name: str) -> None:
    if input.dim() < 3:
        raise ShapeError(f"{name} expects input to have at least 3 dimensions, but got input "
                         f"with {input.dim()} dimension(s)")


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) -> (*, C, H r, W r): each group of r^2 channels becomes an r x r block.

        >>> F.pixel_shuffle(scriptmod.arange(4.0).view(1, 4, 1, 1), 2).view(2, 2)
        tensor([[0., 1.],
                [2., 3.]])
    """
    _at_least_3d(input, "pixel_shuffle")
    r = _positive_factor(upscale_factor, "pixel_shuffle", "upscale_factor")
    *lead, c, h, w = input.shape
    if c % (r * r) != 0:
        raise ShapeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible "
                         f"by the square of upscale_factor, but input.size(-3)={c} is not "
                         f"divisible by {r * r}")
    k = len(lead)
    blocks = input.reshape(*lead, c // (r * r), r, r, h, w)
    order = list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2]
    return blocks.permute(*order).reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of ``pixel_shuffle``.

        >>> F.pixel_unshuffle(scriptmod.arange(4.0).view(1, 1, 2, 2), 2).flatten()
        tensor([0., 1., 2., 3.])
    """
    _at_least_3d(input, "pixel_unshuffle")
    r = _positive_factor(downscale_factor, "pixel_unshuffle", "downscale_factor")
    *lead, c, h, w = input.shape
    for what, n, axis in (("height", h, -2), ("width", w, -1)):
        if n % r != 0:
            raise ShapeError(f"pixel_unshuffle expects {what} to be divisible by "
                             f"downscale_factor, but input.size({axis})={n} is not divisible "
                             f"by {r}")
    k = len(lead)
    blocks = input.reshape(*lead, c, h // r, r, w // r, r)
    order = list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3]
    return blocks.permute(*order).reshape(*lead, c * r * r, h // r, w // r)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """(N, C, *) -> (N, C, *) with the channels of ``groups`` groups interleaved: channel
    ``g * (C // groups) + i`` moves to ``i * groups + g``.

        >>> F.channel_shuffle(scriptmod.arange(4.0).view(1, 4, 1), 2).flatten()
        tensor([0., 2., 1., 3.])
    """
    if input.dim() <= 2:
        raise ShapeError(f"channel_shuffle expects input with > 2 dims, but got input with "
                         f"sizes {list(input.shape)}")
    if not _is_integer(groups) or groups <= 0:
        raise ArgumentValueError(f"Number of groups to divide channels in must be positive. "
                                 f"Value of groups:{groups}")
    n, c, *rest = input.shape
    if c % groups != 0:
        raise ShapeError(f"Number of channels must be divisible by groups. Got {c} channels and "
                         f"{groups} groups.")
    grouped = input.reshape(n, groups, c // groups, *rest)
    return grouped.transpose(1, 2).reshape(n, c, *rest)


native_channel_shuffle = channel_shuffle
