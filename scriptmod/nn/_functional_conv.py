"""Convolution and sliding blocks of ``scriptmod.nn.functional`` (re-exported by it):
``conv1d``/``conv2d``/``conv3d``, ``conv_transpose1d``/``2d``/``3d``, ``unfold`` and ``fold``.

One implementation serves every spatial rank. A transposed convolution is the registry's
``conv{r}d_grad_input`` (the adjoint of a convolution) plus the bias; ``unfold``/``fold``
are the ``im2col``/``col2im`` ops, each the other's derivative.

    >>> F.conv1d(scriptmod.ones(1, 1, 4), scriptmod.ones(1, 1, 2))
    tensor([[[2., 2., 2.]]])
    >>> F.conv_transpose1d(scriptmod.ones(1, 1, 2), scriptmod.ones(1, 1, 2))
    tensor([[[1., 2., 1.]]])
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod._dispatch import dispatch
from scriptmod._traced_int import TracedInt
from scriptmod.ir.errors import ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_layers import pad

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "unfold", "fold"]

_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def _ntuple(v: Any, n: int, name: str, op: str) -> tuple[int, ...]:
    """``3`` or a sequence of 1 or ``n`` ints -> ``n`` ints; the error names the argument. A
    traced size stays one (``output_padding`` from ``ConvTranspose2d(..., output_size=
    x.shape[-2:])`` follows the input; ``int()`` would bake it in without a guard)."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (_int(v),) * n
    if isinstance(v, (tuple, list)) and len(v) in (1, n) \
            and all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in v):
        return tuple(_int(i) for i in v) * (n if len(v) == 1 else 1)
    raise TypeError(f"{op}: expected {name} to be a single integer value or a list of {n} "
                    f"values to match the convolution dimensions, but got {name}={v!r}")


def _int(v: Any) -> int:
    return v if isinstance(v, TracedInt) else int(v)


def _at_least(v: tuple[int, ...], low: int, arg: str, op: str, what: str) -> None:
    if min(v) < low:
        raise ShapeError(f"{op}: {what}, got {arg}={v}")


def _positive(v: tuple[int, ...], arg: str, op: str, what: str) -> None:
    """Every item of ``v`` at least 1 (pooling checks its sizes with it too)."""
    _at_least(v, 1, arg, op, what)


def _batched(input: Tensor, rank: int, op: str) -> tuple[Tensor, bool]:
    """``input`` with a batch dim (added to an unbatched one), and whether it had one."""
    if input.dim() not in (rank + 1, rank + 2):
        sp = _SPATIAL[rank]
        raise ShapeError(f"{op}: expected {rank + 1}-D (C, {sp}) or {rank + 2}-D (N, C, {sp}) "
                         f"input, got shape {tuple(input.shape)}")
    batched = input.dim() == rank + 2
    return (input if batched else input.unsqueeze(0)), batched


def _same_padding(x: Tensor, weight: Tensor, stride: tuple[int, ...],
                  dilation: tuple[int, ...], op: str) -> tuple[Tensor, tuple[int, ...]]:
    """'same': equal padding where it splits evenly, the extra position at the end of a
    dim (padded here, beforehand), as PyTorch does."""
    if any(s != 1 for s in stride):
        raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
    sym = tuple(t // 2 for t in total)
    extra: list[int] = []
    for t, s in zip(reversed(total), reversed(sym)):     # F.pad lists the last dim first
        extra += [0, t - 2 * s]
    if any(extra):
        x = pad(x, tuple(extra))
    return x, sym


def _conv_args(op: str, rank: int, stride: Any, dilation: Any,
               groups: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    st, dil = _ntuple(stride, rank, "stride", op), _ntuple(dilation, rank, "dilation", op)
    _positive(st, "stride", op, "non-positive stride is not supported")
    _positive(dil, "dilation", op, "dilation should be greater than zero")
    if int(groups) < 1:
        raise ShapeError(f"{op}: non-positive groups is not supported, got groups={groups}")
    return st, dil, int(groups)


def _conv(rank: int, input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any,
          padding: Any, dilation: Any, groups: int) -> Tensor:
    op = f"conv{rank}d"
    x, batched = _batched(input, rank, op)
    st, dil, groups = _conv_args(op, rank, stride, dilation, groups)
    if padding == "valid":
        pd = (0,) * rank
    elif padding == "same":
        x, pd = _same_padding(x, weight, st, dil, op)
    elif isinstance(padding, str):
        raise ValueError(f"{op}: invalid padding string {padding!r}, should be one of "
                         "{'valid', 'same'}")
    else:
        pd = _ntuple(padding, rank, "padding", op)
        _at_least(pd, 0, "padding", op, "negative padding is not supported")
    out = dispatch(op, (x, weight, bias), {"stride": st, "padding": pd, "dilation": dil,
                                           "groups": groups})
    return out if batched else out.squeeze(0)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D cross-correlation of a (N, C, L) or (C, L) input with an (O, C/groups, K) weight;
    ``padding`` may be ``'same'`` or ``'valid'``."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation of a (N, C, H, W) or (C, H, W) input."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """3-D cross-correlation of a (N, C, D, H, W) or (C, D, H, W) input."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


def _transposed_size(x: Tensor, weight: Tensor, st: Sequence[int], pd: Sequence[int],
                     out_pd: Sequence[int], dil: Sequence[int], groups: int,
                     op: str) -> list[Any]:
    """(N, C_out, *spatial) of a transposed convolution: per dim
    ``(in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1``
    (traced sizes stay traced, so a trace follows the input's size)."""
    size = [x.shape[0], weight.shape[1] * groups]
    for i in range(len(st)):
        n = (x.shape[2 + i] - 1) * st[i] - 2 * pd[i] + dil[i] * (weight.shape[2 + i] - 1) \
            + out_pd[i] + 1
        if n <= 0:
            raise ShapeError(f"{op}: input of spatial size {tuple(x.shape[2:])} gives a "
                             f"non-positive output size {n} along spatial dim {i}")
        size.append(n)
    return size


def _check_transposed(op: str, x: Tensor, weight: Tensor, bias: Tensor | None, rank: int,
                      groups: int) -> None:
    if weight.dim() != rank + 2:
        raise ShapeError(f"{op}: expected a {rank + 2}-D weight (C_in, C_out/groups, *kernel), "
                         f"got shape {tuple(weight.shape)}")
    if x.shape[1] != weight.shape[0] or weight.shape[0] % groups:
        raise ShapeError(f"{op}: input has {x.shape[1]} channels but weight "
                         f"{tuple(weight.shape)} with groups={groups} expects {weight.shape[0]}")
    for t, what in ((weight, "weight"), (bias, "bias")):
        if t is not None and t.dtype != x.dtype:
            raise TypeError(f"{op}: Input type ({x.dtype}) and {what} type ({t.dtype}) should "
                            "be the same")
    if bias is not None and tuple(bias.shape) != (weight.shape[1] * groups,):
        raise ShapeError(f"{op}: expected bias of shape ({weight.shape[1] * groups},), got "
                         f"{tuple(bias.shape)}")


def _conv_transpose(rank: int, input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any,
                    padding: Any, output_padding: Any, groups: int, dilation: Any) -> Tensor:
    op = f"conv_transpose{rank}d"
    x, batched = _batched(input, rank, op)
    st, dil, groups = _conv_args(op, rank, stride, dilation, groups)
    pd = _ntuple(padding, rank, "padding", op)
    out_pd = _ntuple(output_padding, rank, "output_padding", op)
    _at_least(pd, 0, "padding", op, "negative padding is not supported")
    _at_least(out_pd, 0, "output_padding", op, "negative output_padding is not supported")
    if any(o >= s and o >= d for o, s, d in zip(out_pd, st, dil)):
        raise ShapeError(f"{op}: output padding must be smaller than either stride or "
                         f"dilation, got output_padding={out_pd}, stride={st}, dilation={dil}")
    _check_transposed(op, x, weight, bias, rank, groups)
    size = _transposed_size(x, weight, st, pd, out_pd, dil, groups, op)
    out = dispatch(f"conv{rank}d_grad_input", (x, weight, size),
                   {"stride": st, "padding": pd, "dilation": dil, "groups": groups})
    if bias is not None:
        out = out + bias.reshape(-1, *(1,) * rank)
    return out if batched else out.squeeze(0)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
    """1-D transposed convolution ("deconvolution") of a (N, C_in, L) or (C_in, L) input
    with a (C_in, C_out/groups, K) weight: the input gradient of ``conv1d``."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
    """2-D transposed convolution of a (N, C_in, H, W) or (C_in, H, W) input."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                     groups: int = 1, dilation: Any = 1) -> Tensor:
    """3-D transposed convolution of a (N, C_in, D, H, W) or (C_in, D, H, W) input."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def _blocks(op: str, kernel_size: Any, dilation: Any, padding: Any,
            stride: Any) -> dict[str, tuple[int, ...]]:
    """unfold's and fold's four pairs, checked as PyTorch's im2col/col2im check them."""
    out = {name: _ntuple(v, 2, name, op) for name, v in (
        ("kernel_size", kernel_size), ("dilation", dilation), ("padding", padding),
        ("stride", stride))}
    for name, low in (("kernel_size", 1), ("dilation", 1), ("padding", 0), ("stride", 1)):
        _at_least(out[name], low, name, op, f"{name} should be at least {low}")
    return out


def unfold(input: Tensor, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
           stride: Any = 1) -> Tensor:
    """Sliding local blocks of a (N, C, H, W) or (C, H, W) input as columns:
    (N, C * kh * kw, L), L the number of blocks.

        >>> F.unfold(scriptmod.arange(4.0).reshape(1, 1, 2, 2), 1).shape
        scriptmod.Size([1, 1, 4])
    """
    attrs = _blocks("unfold", kernel_size, dilation, padding, stride)
    if input.dim() not in (3, 4) or 0 in tuple(input.shape)[-3:]:
        raise ShapeError(f"unfold: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input with "
                         f"non-zero C, H, W, got shape {tuple(input.shape)}")
    x, batched = _batched(input, 2, "unfold")
    out = dispatch("im2col", (x,), attrs)
    return out if batched else out.squeeze(0)


def fold(input: Tensor, output_size: Any, kernel_size: Any, dilation: Any = 1, padding: Any = 0,
         stride: Any = 1) -> Tensor:
    """Sum sliding local blocks (N, C * kh * kw, L) or (C * kh * kw, L) into a
    (N, C, *output_size) or (C, *output_size) tensor: the adjoint of ``unfold``.

        >>> F.fold(scriptmod.ones(1, 4, 4), (3, 3), 2).sum().item()
        16.0
    """
    attrs = _blocks("fold", kernel_size, dilation, padding, stride)
    size = list(_ntuple(output_size, 2, "output_size", "fold"))
    if input.dim() not in (2, 3):
        raise ShapeError(f"fold: expected a 2-D (C * prod(kernel_size), L) or 3-D (N, C * "
                         f"prod(kernel_size), L) input, got shape {tuple(input.shape)}")
    batched = input.dim() == 3
    out = dispatch("col2im", (input if batched else input.unsqueeze(0), size), attrs)
    return out if batched else out.squeeze(0)
