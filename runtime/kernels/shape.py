"""Reference kernels of shape, data-movement, indexing and factory ops."""
from __future__ import annotations

from typing import Any, Sequence

import ml_dtypes
import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.ops.rules import norm_dim
from scriptmod.ir.ops.shape import infer_reshape, spec_value
from .. import arrays
from .. import random as rng
from ..arrays import NP_DTYPE
from . import kernel
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError


@kernel("reshape")
def _reshape(xp: Any, x: Any, shape: Sequence[int]) -> Any:
    return xp.reshape(x, infer_reshape(tuple(x.shape), [int(s) for s in shape]))


@kernel("expand")
def _expand(xp: Any, x: Any, size: Sequence[int]) -> Any:
    from scriptmod.ir.ops.shape import _expand as rule
    target = rule([(None, tuple(x.shape))], {}, [None, [int(s) for s in size]])
    if int(np.prod(target)) == x.size:   # no element repeated: a writable view, as in torch
        return xp.reshape(x, target)
    return xp.broadcast_to(x, target)


@kernel("permute")
def _permute(xp: Any, x: Any, dims: Sequence[int]) -> Any:
    axes = [norm_dim(d, x.ndim, "permute") for d in dims]
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"permute: dims {tuple(dims)} are not a permutation of the "
                         f"{x.ndim} dims of a tensor of shape {tuple(x.shape)}")
    return xp.transpose(x, axes)


@kernel("transpose")
def _transpose(xp: Any, x: Any, dim0: int, dim1: int) -> Any:
    if x.ndim == 0:
        return x
    return xp.swapaxes(x, norm_dim(dim0, x.ndim, "transpose"), norm_dim(dim1, x.ndim, "transpose"))


kernel("unsqueeze")(lambda xp, x, dim: xp.expand_dims(x, norm_dim(dim, x.ndim + 1, "unsqueeze")))


@kernel("squeeze")
def _squeeze(xp: Any, x: Any, dim: Any = None) -> Any:
    if x.ndim == 0:
        return x
    dims = range(x.ndim) if dim is None else [norm_dim(d, x.ndim, "squeeze")
                                              for d in ((dim,) if isinstance(dim, int) else dim)]
    axes = tuple(d for d in dims if x.shape[d] == 1)
    return xp.squeeze(x, axis=axes) if axes else x


@kernel("narrow")
def _narrow(xp: Any, x: Any, start: int, length: int, dim: int) -> Any:
    d = norm_dim(dim, x.ndim, "narrow")
    n, start, length = x.shape[d], int(start), int(length)
    s = start + n if start < 0 else start
    if not 0 <= s <= n or length < 0 or s + length > n:
        raise ShapeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                         f"({n}) of dim {dim}")
    idx = (slice(None),) * d + (slice(s, s + length),)
    return x[idx]


kernel("contiguous")(lambda xp, x: xp.ascontiguousarray(x) if x.ndim else x.copy())  # keeps 0-d
kernel("clone")(lambda xp, x: x.copy())
kernel("detach")(lambda xp, x: x)


def _common(xp: Any, tensors: Sequence[Any]) -> list[Any]:
    """PyTorch's promotion (NumPy cannot promote float16 with bfloat16, nor bfloat16 with int)."""
    if len({t.dtype for t in tensors}) == 1:
        return list(tensors)
    dt = arrays.from_np_dtype(tensors[0].dtype)
    for t in tensors[1:]:
        dt = D.promote_types(dt, arrays.from_np_dtype(t.dtype))
    dt = NP_DTYPE[dt]
    return [t.astype(dt, copy=False) for t in tensors]


@kernel("cat")
def _cat(xp: Any, *tensors: Any, dim: int = 0) -> Any:
    if not tensors:
        raise ShapeError("cat: expected a non-empty list of tensors")
    ts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    if any(t.ndim == 0 for t in ts):
        raise ShapeError("cat: zero-dimensional tensors cannot be concatenated")
    d = norm_dim(dim, ts[0].ndim, "cat")
    for i, t in enumerate(ts):
        if t.ndim != ts[0].ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, ts[0].shape)) if k != d):
            raise ShapeError(f"cat: sizes of tensors must match except in dimension {d}; expected "
                             f"{tuple(ts[0].shape)} (except dim {d}) but got {tuple(t.shape)} for tensor {i}")
    return xp.concatenate(_common(xp, ts), axis=d)


@kernel("stack")
def _stack(xp: Any, *tensors: Any, dim: int = 0) -> Any:
    if not tensors:
        raise ShapeError("stack: expected a non-empty list of tensors")
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise ShapeError(f"stack: expects each tensor to be equal size, but got "
                             f"{tuple(tensors[0].shape)} at entry 0 and {tuple(t.shape)} at entry {i}")
    return xp.stack(_common(xp, tensors), axis=norm_dim(dim, tensors[0].ndim + 1, "stack"))


@kernel("gather")
def _gather(xp: Any, x: Any, index: Any, dim: int) -> Any:
    """PyTorch's gather: a 0-d input or index counts as 1-d of one element, an empty index
    gives an empty result whatever its rank, indices count from 0 (no negative ones)."""
    d = norm_dim(dim, max(x.ndim, 1), "gather")
    if index.dtype.kind not in "iu":
        raise DTypeError(f"gather(): Expected dtype int32/int64 for index, got {index.dtype}")
    if not index.size:
        return xp.empty(index.shape, dtype=x.dtype)
    if max(index.ndim, 1) != max(x.ndim, 1):
        raise ShapeError("Index tensor must have the same number of dimensions as input tensor")
    src, idx = x.reshape(x.shape or (1,)), index.reshape(index.shape or (1,))
    for k in range(src.ndim):
        if k != d and idx.shape[k] > src.shape[k]:
            raise ShapeError(f"Size does not match at dimension {k} expected index "
                             f"{list(idx.shape)} to be no larger than self {list(src.shape)} "
                             f"apart from dimension {d}")
    if idx.min() < 0 or idx.max() >= src.shape[d]:
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        raise ShapeError(f"index {bad} is out of bounds for dimension {d} with size "
                         f"{src.shape[d]}")
    src = src[tuple(slice(0, idx.shape[k]) if k != d else slice(None) for k in range(src.ndim))]
    return xp.take_along_axis(src, idx.astype(np.int64, copy=False), axis=d).reshape(index.shape)


def build_index(spec: Sequence[tuple], tensors: Sequence[Any], shape: Sequence[int]) -> tuple:
    """An index ``spec`` (see ``ir.ops.shape``) plus its operands (index tensors and run-time
    ints, see ``spec_value``) -> a NumPy index."""
    out: list[Any] = []
    for entry in spec:
        kind = entry[0]
        if kind == "int":
            out.append(_int_at(entry[1], tensors))
        elif kind == "slice":
            start, stop, step = (_int_at(v, tensors) for v in entry[1:])
            if step is not None and step <= 0:
                raise ValueError(f"step must be greater than zero, got {step}")
            out.append(slice(start, stop, step))
        elif kind == "none":
            out.append(None)
        elif kind == "ellipsis":
            out.append(Ellipsis)
        elif kind == "tensor":
            t = tensors[entry[1]]
            if t.dtype.kind not in "biu":
                raise IndexError(f"tensors used as indices must be long, int, byte or bool "
                                 f"tensors, got {t.dtype}")
            out.append(t)
        else:
            raise ValueError(f"index: unknown index entry {entry!r}")
    return tuple(out)


def _int_at(v: Any, operands: Sequence[Any]) -> Any:
    v = spec_value(v, operands)
    return None if v is None else int(v)


@kernel("index")
def _index(xp: Any, x: Any, *tensors: Any, spec: Sequence[tuple]) -> Any:
    idx = build_index(spec, tensors, x.shape)
    try:
        out = x[idx]
    except IndexError as e:
        raise IndexError(f"index: {e} (tensor of shape {tuple(x.shape)})") from None
    return out if hasattr(out, "shape") else xp.asarray(out)


@kernel("index_put")
def _index_put(xp: Any, x: Any, values: Any, *tensors: Any, spec: Sequence[tuple],
               accumulate: bool = False) -> Any:
    idx = build_index(spec, tensors, x.shape)
    out = x.copy()
    vals = values.astype(x.dtype, copy=False)
    try:
        if accumulate:   # duplicates add up: an unbuffered add (CuPy: cupyx.scatter_add)
            if hasattr(xp.add, "at"):
                xp.add.at(out, idx, vals)
            else:
                import cupyx
                cupyx.scatter_add(out, idx, vals)
        else:
            out[idx] = vals
    except (IndexError, ValueError) as e:
        kind = IndexError if isinstance(e, IndexError) else ShapeError   # torch: RuntimeError
        raise kind(f"index_put: {e} (tensor of shape {tuple(x.shape)}, values of shape "
                   f"{tuple(values.shape)})") from None
    return out


kernel("to_device")(lambda xp, x, device: arrays.to_device(x, device))


@kernel("size")
def _size(xp: Any, x: Any, dim: int) -> int:
    return int(x.shape[norm_dim(dim, x.ndim, "size")])


def _dt(dtype: Any) -> Any:
    return NP_DTYPE[dtype if dtype is not None else D.get_default_dtype()]


def _shape(size: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(s) for s in size)
    if any(s < 0 for s in shape):
        raise ShapeError(f"negative dimension in size {shape}")
    return shape


@kernel("full")
def _full(xp: Any, size: Sequence[int], fill_value: Any, dtype: Any = None, device: str = "cpu") -> Any:
    return xp.full(_shape(size), fill_value, dtype=_dt(dtype))


@kernel("rand")
def _rand(xp: Any, size: Sequence[int], dtype: Any = None, device: str = "cpu") -> Any:
    out = rng.generator(device).random(_shape(size), dtype=np.float64).astype(_dt(dtype))
    below_one = 1 - ml_dtypes.finfo(out.dtype).epsneg   # rounding must not reach 1 (bf16, f16)
    return xp.minimum(out, out.dtype.type(below_one))


@kernel("randn")
def _randn(xp: Any, size: Sequence[int], dtype: Any = None, device: str = "cpu") -> Any:
    return rng.generator(device).standard_normal(_shape(size)).astype(_dt(dtype))


@kernel("randint")
def _randint(xp: Any, size: Sequence[int], low: int, high: int, dtype: Any = None,
             device: str = "cpu") -> Any:
    if high <= low:
        raise ArgumentValueError(f"randint: expected low < high, got low={low}, high={high}")
    out = rng.generator(device).integers(low, high, _shape(size))
    return out.astype(NP_DTYPE[dtype or D.int64])


@kernel("randperm")
def _randperm(xp: Any, n: int, dtype: Any = None, device: str = "cpu") -> Any:
    if n < 0:
        raise ArgumentValueError(f"randperm(): argument 'n' must be non-negative, got {n}")
    g = rng.generator(device)
    perm = g.permutation(n) if hasattr(g, "permutation") else xp.argsort(g.random(n))
    return perm.astype(NP_DTYPE[dtype or D.int64])


@kernel("arange")
def _arange(xp: Any, start: float, end: float, step: float = 1, dtype: Any = None,
            device: str = "cpu") -> Any:
    if step == 0:
        raise ArgumentValueError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise ArgumentValueError(f"arange: upper bound and larger bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    import math
    n = max(math.ceil((end - start) / step), 0)
    return (start + step * xp.arange(n, dtype=np.float64)).astype(_dt(dtype))


@kernel("linspace")
def _linspace(xp: Any, start: float, end: float, steps: int, dtype: Any = None,
              device: str = "cpu") -> Any:
    if steps < 0:
        raise ArgumentValueError(f"linspace: number of steps must be non-negative, got {steps}")
    return xp.linspace(start, end, steps, dtype=np.float64).astype(_dt(dtype))


kernel("eye")(lambda xp, n, m, dtype=None, device="cpu": xp.eye(n, m, dtype=_dt(dtype)))
