"""Derivatives of image resampling (rows of ``autograd.derivatives``' table).

``upsample`` and ``grid_sampler`` are first order (their ``_grad`` ops have no derivative),
as convolution and pooling are; ``affine_grid`` is linear in ``theta`` and its derivative is
written with differentiable ops (the identity grid times the gradient)."""
from __future__ import annotations

from typing import Any

from scriptmod._creation import eye
from scriptmod._shape_ops import cat
from scriptmod.autograd.derivative_table import _op, derivative
from scriptmod.tensor import Tensor


@derivative("upsample")
def _upsample(ctx: Any, g: Tensor) -> tuple:
    """The adjoint of the forward's gathers; the input's size is read at run time in a
    compiled backward, the output's is the gradient's own."""
    a = ctx.attrs
    scales = None if a["recompute_scale_factor"] or a["scale_factor"] is None \
        else list(a["scale_factor"])
    return (_op("upsample_grad", g, list(ctx.input_meta[0][0]), mode=a["mode"], scales=scales,
                align_corners=a["align_corners"], antialias=a["antialias"]), None)


@derivative("grid_sampler", saves=(0, 1))
def _grid_sampler(ctx: Any, g: Tensor) -> tuple:
    x, grid = ctx.inputs
    return _op("grid_sampler_grad", g, x, grid, **ctx.attrs)


@derivative("affine_grid")
def _affine_grid(ctx: Any, g: Tensor) -> tuple:
    """``grid[n, p] = theta[n] @ (base[p], 1)``: d theta[n] = g[n]^T @ (base, 1), with
    ``base`` the grid of the identity transform."""
    n = g.shape[-1]
    rows = g.reshape(g.shape[0], -1, n)
    identity = eye(n, n + 1, dtype=g.dtype, device=g.device).reshape(1, n, n + 1)
    base = _op("affine_grid", identity, [1, 1] + list(g.shape[1:-1]),
               align_corners=ctx.attrs["align_corners"]).reshape(1, -1, n)
    return (cat([rows.transpose(1, 2) @ base, rows.sum(1).unsqueeze(-1)], dim=2), None)
