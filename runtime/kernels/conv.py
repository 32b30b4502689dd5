"""Reference kernels of convolution at every spatial rank: the patches of a strided window
view (``windows``) times the weight, one GEMM per group; the backward kernels
(``conv{r}d_grad_input``/``_weight``) through ``col2im``, the adjoint of ``windows``; and the
sliding-block ops ``im2col``/``col2im`` (``F.unfold``/``F.fold``) on the same two helpers.

float32 NumPy arrays take our native kernels after the checks here: the forward the direct
kernel (``runtime.conv_direct``: depthwise, short patches) or the implicit GEMM
(``runtime.conv``), chosen by ``runtime.conv_epilogue.kernel_for``; the backward kernels
``runtime.conv_backward`` (im2col/col2im and our GEMM, the stride-1 input gradient as a
forward convolution). Every other dtype and CuPy runs the NumPy definitions below, which
stay the reference the native kernels are tested against.

``windows`` and ``col2im`` work on the last ``len(kernel)`` dims of any array, so pooling
uses them too (with 2-D kernels on (N, C, H, W) arrays, as before).
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

import numpy as np

from scriptmod.ir.ops.conv import RANKS, _out_size
from scriptmod.ir.errors import ShapeError
from . import kernel

_SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def _lib(xp: Any) -> Any:
    if xp is np:
        return np.lib.stride_tricks
    import cupy.lib.stride_tricks as st  # type: ignore
    return st


def windows(xp: Any, x: Any, k: Sequence[int], s: Sequence[int], p: Sequence[int],
            d: Sequence[int], ceil: bool = False, fill: float = 0.0) -> tuple[Any, tuple[int, ...]]:
    """Strided view (*lead, *out, *k) of the padded last ``len(k)`` dims of ``x`` (an
    (N, C, H, W) input and a 2-D kernel: (N, C, OH, OW, KH, KW)); no copy of the windows."""
    r = len(k)
    lead, sizes = x.shape[:-r], x.shape[-r:]
    out = tuple(_out_size(sizes[i], k[i], s[i], p[i], d[i], ceil) for i in range(r))
    if min(out) <= 0:
        raise ShapeError(f"input of spatial size {_tuple(sizes)} is too small for kernel "
                         f"{_tuple(k)} with padding {_tuple(p)} and dilation {_tuple(d)}: "
                         f"output would be {_tuple(out)}")
    # the right padding reaches the last window (ceil mode may need more than p)
    right = [max((out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - sizes[i] - p[i], p[i])
             for i in range(r)]
    if any(p) or any(right):
        x = xp.pad(x, ((0, 0),) * len(lead) + tuple(zip(p, right)), constant_values=fill)
    st = x.strides[len(lead):]
    view = _lib(xp).as_strided(x, (*lead, *out, *k),
                               (*x.strides[:len(lead)], *(st[i] * s[i] for i in range(r)),
                                *(st[i] * d[i] for i in range(r))))
    return view, out


def _tuple(v: Sequence[int]) -> str:
    """``(3, 3)`` for a 2-D size, ``(3,)`` for a 1-D one (as messages print sizes)."""
    return str(tuple(int(i) for i in v))


def _tap(start: int, n_out: int, s: int, size: int) -> tuple[slice, slice] | None:
    """One kernel tap along a dim: the window positions ``o < n_out`` whose input index
    ``start + o*s`` (``start``: the tap's offset less the padding) lies in ``[0, size)``, as
    (input slice, window slice); None when there are none (the tap only sees padding)."""
    lo = (max(0, -start) + s - 1) // s
    hi = min(n_out - 1, (size - 1 - start) // s)
    if hi < lo:
        return None
    return slice(start + lo * s, start + hi * s + 1, s), slice(lo, hi + 1)


def col2im(xp: Any, cols: Any, x_shape: Sequence[int], k: Sequence[int], s: Sequence[int],
           p: Sequence[int], d: Sequence[int]) -> Any:
    """Adjoint of ``windows``: scatter-add (*lead, *out, *k) back onto ``x_shape``.
    Each tap adds only where it meets the input (not the padding), straight into a
    contiguous result, as PyTorch's gradients are: no padded buffer to slice, whose view
    would be strided at some sizes only (a fused kernel after it would see two layouts)."""
    r = len(k)
    out_sizes, sizes = cols.shape[-2 * r:-r], tuple(x_shape)[-r:]
    out = xp.zeros(tuple(x_shape), dtype=cols.dtype)
    for taps in itertools.product(*(range(ki) for ki in k)):
        spans = [_tap(t * d[i] - p[i], out_sizes[i], s[i], sizes[i]) for i, t in enumerate(taps)]
        if None not in spans:
            out[(..., *(a for a, _ in spans))] += cols[(..., *(b for _, b in spans), *taps)]
    return out


def _conv_check(name: str, x: Any, w: Any, bias: Any, groups: int) -> None:
    r = w.ndim - 2
    if x.ndim != r + 2 or r not in RANKS:
        rank = int(name[4])
        raise ShapeError(f"{name}: expected a {rank + 2}-D input (N, C, {_SPATIAL[rank]}) and "
                         f"weight (O, C/groups, *kernel), got shapes {tuple(x.shape)} and "
                         f"{tuple(w.shape)}")
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ShapeError(f"{name}: input has {x.shape[1]} channels but weight {tuple(w.shape)} "
                         f"with groups={groups} expects {w.shape[1] * groups}")
    if bias is not None and tuple(bias.shape) != (w.shape[0],):
        raise ShapeError(f"{name}: expected bias of shape ({w.shape[0]},), got "
                         f"{tuple(bias.shape)}")


def conv_patches(xp: Any, x: Any, kshape: Sequence[int], stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], groups: int,
                 positions: Sequence[int] | None = None) -> tuple[Any, tuple[int, ...]]:
    """(G, N*P, C/G*prod(kernel)) contiguous patches of an (N, C, *spatial) input, P the
    number of output positions, and the output's spatial size. ``positions``: only the
    first ones per dim (a transposed convolution's ``output_padding`` past its stride adds
    input rows that no window of its input gradient reaches)."""
    view, out = windows(xp, x, kshape, stride, padding, dilation)
    if positions is not None and tuple(positions) != out:
        out = tuple(positions)
        view = view[(slice(None), slice(None), *(slice(0, o) for o in out))]
    n, c, r = x.shape[0], x.shape[1], len(kshape)
    cols = view.reshape(n, groups, c // groups, *out, *kshape)
    cols = cols.transpose(1, 0, *range(3, 3 + r), 2, *range(3 + r, 3 + 2 * r))
    return cols.reshape(groups, n * math.prod(out), c // groups * math.prod(kshape)), out


def _per_group(xp: Any, gy: Any, groups: int) -> Any:
    """(N, O, *out) -> (G, N*P, O/G): the output gradient as one GEMM operand per group."""
    n, o, r = gy.shape[0], gy.shape[1], gy.ndim - 2
    g = gy.reshape(n, groups, o // groups, *gy.shape[2:])
    p = math.prod(gy.shape[2:])
    return g.transpose(1, 0, *range(3, 3 + r), 2).reshape(groups, n * p, o // groups)


def convolution(xp: Any, x: Any, w: Any, bias: Any, stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], groups: int) -> Any:
    """(N, O, *out) cross-correlation of (N, C, *spatial) with (O, C/groups, *kernel)."""
    o, g, n, r = w.shape[0], groups, x.shape[0], w.ndim - 2
    cols, out = conv_patches(xp, x, w.shape[2:], stride, padding, dilation, g)
    wm = w.reshape(g, o // g, -1).transpose(0, 2, 1)                 # (G, K, O/G)
    y = xp.matmul(cols, wm)                                            # (G, N*P, O/G)
    y = y.reshape(g, n, *out, o // g).transpose(1, 0, 2 + r, *range(2, 2 + r))
    y = y.reshape(n, o, *out)
    if bias is not None:
        y = y + bias.astype(x.dtype, copy=False).reshape(1, -1, *(1,) * r)
    return xp.ascontiguousarray(y)


def _native() -> Any:
    """``runtime.conv_backward``, imported on first use: it runs on ``runtime.gemm``, whose
    ``runtime.native`` imports this package (a module-level import would be a cycle)."""
    from .. import conv_backward
    return conv_backward


def conv_grad_input(xp: Any, gy: Any, w: Any, x_shape: Sequence[int], stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int], groups: int) -> Any:
    """The input gradient of a convolution (a transposed convolution of ``gy``): each
    output position's patch gradient, one GEMM per group, scattered back by ``col2im``
    (float32 on the CPU: ``runtime.conv_backward``, native and blocked; depthwise and other
    narrow groups the direct kernel's forward of the flipped weight)."""
    native = _native()
    if xp is np and native.taken(gy, w, x_shape, w.shape, stride, padding, dilation, groups):
        return native.grad_input(gy, w, x_shape, stride, padding, dilation, groups)
    if xp is np and native.narrow_taken(gy, w, x_shape, w.shape, stride, padding, dilation,
                                        groups):
        done = native.narrow_grad_input(gy, w, x_shape, stride, padding, dilation, groups)
        if done is not None:
            return done
    n, o, r, g = gy.shape[0], gy.shape[1], gy.ndim - 2, groups
    k, out, c = w.shape[2:], gy.shape[2:], x_shape[1]
    dcols = xp.matmul(_per_group(xp, gy, g), w.reshape(g, o // g, -1))  # (G, N*P, C/G*K)
    dcols = dcols.reshape(g, n, *out, c // g, *k)
    dcols = dcols.transpose(1, 0, 2 + r, *range(2, 2 + r), *range(3 + r, 3 + 2 * r))
    return col2im(xp, dcols.reshape(n, c, *out, *k), x_shape, k, stride, padding, dilation)


def conv_grad_weight(xp: Any, gy: Any, x: Any, w_shape: Sequence[int], stride: Sequence[int],
                     padding: Sequence[int], dilation: Sequence[int], groups: int) -> Any:
    """The weight gradient of a convolution: patches^T times the output gradient
    (float32 on the CPU: ``runtime.conv_backward``, native and blocked; depthwise and other
    narrow groups per-tap sums over strided views)."""
    native = _native()
    if xp is np and native.taken(gy, x, x.shape, w_shape, stride, padding, dilation, groups):
        return native.grad_weight(gy, x, w_shape, stride, padding, dilation, groups)
    if xp is np and native.narrow_taken(gy, x, x.shape, w_shape, stride, padding, dilation,
                                        groups):
        return native.narrow_grad_weight(gy, x, w_shape, stride, padding, dilation, groups)
    cols, _ = conv_patches(xp, x, w_shape[2:], stride, padding, dilation, groups, gy.shape[2:])
    gw = xp.matmul(cols.transpose(0, 2, 1), _per_group(xp, gy, groups))   # (G, K, O/G)
    return gw.transpose(0, 2, 1).reshape(tuple(w_shape))


def _register(rank: int) -> None:
    """The three kernels of ``conv{rank}d`` (one definition for every rank)."""
    name, one, zero = f"conv{rank}d", (1,) * rank, (0,) * rank

    def forward(xp: Any, x: Any, w: Any, bias: Any, stride: Sequence[int] = one,
                padding: Sequence[int] = zero, dilation: Sequence[int] = one,
                groups: int = 1) -> Any:
        _conv_check(name, x, w, bias, groups)
        if xp is np:               # float32: the direct kernel or the implicit GEMM
            from ..conv_epilogue import kernel_for   # here: its imports lead back here
            run = kernel_for(x, w, bias, stride, padding, dilation, groups)
            if run is not None:
                return run(x, w, bias, stride, padding, dilation, groups)
        return convolution(xp, x, w.astype(x.dtype, copy=False), bias, stride, padding,
                           dilation, groups)

    def grad_input(xp: Any, gy: Any, w: Any, input_size: Sequence[int], stride: Sequence[int],
                   padding: Sequence[int], dilation: Sequence[int], groups: int) -> Any:
        return conv_grad_input(xp, gy, w.astype(gy.dtype, copy=False), tuple(input_size),
                               stride, padding, dilation, groups)

    def grad_weight(xp: Any, gy: Any, x: Any, weight_size: Sequence[int],
                    stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                    groups: int) -> Any:
        return conv_grad_weight(xp, gy, x.astype(gy.dtype, copy=False), tuple(weight_size),
                                stride, padding, dilation, groups)

    fns: dict[str, Callable[..., Any]] = {name: forward, f"{name}_grad_input": grad_input,
                                          f"{name}_grad_weight": grad_weight}
    for op_name, fn in fns.items():
        fn.__name__ = fn.__qualname__ = f"_{op_name}"
        kernel(op_name)(fn)


for _rank in RANKS:
    _register(_rank)


def _blocks_check(name: str, x: Any, k: Sequence[int], *args: Sequence[int]) -> None:
    if x.ndim != len(k) + 2:
        raise ShapeError(f"{name}: expected a {len(k) + 2}-D input, got shape {tuple(x.shape)}")
    for arg, v in zip(("dilation", "padding", "stride"), args):
        if len(v) != len(k):
            raise ShapeError(f"{name}: expected {arg} of {len(k)} ints, got {list(v)}")


@kernel("im2col")
def _im2col(xp: Any, x: Any, kernel_size: Sequence[int], dilation: Sequence[int],
            padding: Sequence[int], stride: Sequence[int]) -> Any:
    """(N, C, *spatial) -> (N, C*prod(kernel), L): each block a column, channel-major."""
    _blocks_check("im2col", x, kernel_size, dilation, padding, stride)
    view, out = windows(xp, x, kernel_size, stride, padding, dilation)
    r = len(kernel_size)
    cols = view.transpose(0, 1, *range(2 + r, 2 + 2 * r), *range(2, 2 + r))
    n, c = x.shape[:2]
    return xp.ascontiguousarray(cols).reshape(n, c * math.prod(kernel_size), math.prod(out))


@kernel("col2im")
def _col2im(xp: Any, x: Any, output_size: Sequence[int], kernel_size: Sequence[int],
            dilation: Sequence[int], padding: Sequence[int], stride: Sequence[int]) -> Any:
    """(N, C*prod(kernel), L) -> (N, C, *output_size): overlapping blocks summed."""
    size, k, r = tuple(output_size), tuple(kernel_size), len(kernel_size)
    out = tuple(_out_size(size[i], k[i], stride[i], padding[i], dilation[i]) for i in range(r))
    kk = math.prod(k)
    if x.ndim != 3 or x.shape[1] % kk or x.shape[2] != math.prod(out) or min(out) <= 0:
        raise ShapeError(f"col2im: expected an input of shape (N, C*{kk}, {math.prod(out)}) "
                         f"for output_size={list(size)}, kernel_size={list(k)}, "
                         f"dilation={list(dilation)}, padding={list(padding)}, "
                         f"stride={list(stride)}; got {tuple(x.shape)}")
    n, c = x.shape[0], x.shape[1] // kk
    cols = x.reshape(n, c, *k, *out).transpose(0, 1, *range(2 + r, 2 + 2 * r), *range(2, 2 + r))
    return col2im(xp, cols, (n, c, *size), k, stride, padding, dilation)
