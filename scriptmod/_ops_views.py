"""Functions and Tensor methods of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views: each published once with ``@public``.

Views (``diagonal``, ``unfold``, ``as_strided``, ``real``/``imag``, ``view_as_real``, the
splits, ``broadcast_to``, ``meshgrid``) share memory with their input as PyTorch's do: a write
through one shows in the base. Everything else is a decomposition over existing ops (``cat``,
``narrow``, ``index_put``, ``expand``), so it traces, differentiates and exports.

    >>> import scriptmod as sm
    >>> x = sm.zeros(2, 2)
    >>> _ = x.diagonal().fill_(1)
    >>> x
    tensor([[1., 0.],
            [0., 1.]])
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

import numpy as np

from scriptmod import _creation as C
from scriptmod._dispatch import TRACERS, dispatch
from scriptmod._public import public
from scriptmod._shape_ops import cat, index_put, stack
from scriptmod._traced_int import fixed, sym_min
from scriptmod.autograd import grad_mode
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import KernelDTypeError
from scriptmod.ir.ops.rules import norm_dim
from scriptmod.ir.ops.views import diagonal_dims
from scriptmod.runtime.kernels.views import (held_positions, offset_in_storage, positions,
                                               storage_of, storage_size)
from scriptmod.tensor import Tensor, _assign, _check_leaf

_ALL = ("slice", None, None, None)


def _tensor_list(tensors: Sequence[Any], name: str) -> list[Tensor]:
    """``f(a, b)`` and ``f([a, b])`` both mean the tensors a, b."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tensors[0]
    if not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError(f"{name}(): expected Tensors, got "
                        f"{[type(t).__name__ for t in tensors]}")
    return list(tensors)


def _int_list(v: Any) -> list[int]:
    return [int(v)] if isinstance(v, (int, np.integer, Tensor)) else [int(i) for i in v]


# ---- diagonals ---------------------------------------------------------------------------
@public(out=False)
def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The ``offset`` diagonal over ``dim1``/``dim2`` as a new last dim: a view (writes show
    in ``input``).

        >>> scriptmod.arange(4).reshape(2, 2).diagonal()
        tensor([0, 3])
    """
    return dispatch("diagonal", (input,), {"offset": int(offset), "dim1": int(dim1),
                                           "dim2": int(dim2)})


_diagonal_view = diagonal


@public(method=False)
def diagonal_copy(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """``diagonal`` as a new tensor."""
    return diagonal(input, offset, dim1, dim2).clone()


@public(out=False)
def diagonal_scatter(input: Tensor, src: Tensor, offset: int = 0, dim1: int = 0,
                     dim2: int = 1) -> Tensor:
    """A copy of ``input`` whose ``offset`` diagonal over ``dim1``/``dim2`` is ``src``."""
    d1, d2 = diagonal_dims(input.dim(), dim1, dim2)
    want = diagonal(input, offset, d1, d2).shape
    if tuple(src.shape) != tuple(want):
        raise RuntimeError(f"diagonal_scatter: expected src to have a size equal to the "
                           f"diagonal of the input, got {list(src.shape)} for a diagonal of "
                           f"shape {list(want)}")
    moved = input.movedim((d1, d2), (-2, -1))
    n = want[-1]
    rows = C.arange(n, device=input.device) + max(-int(offset), 0)
    cols = C.arange(n, device=input.device) + max(int(offset), 0)
    out = index_put(moved, src, rows, cols,
                    spec=(("ellipsis",), ("tensor", 0), ("tensor", 1)))
    return out.movedim((-2, -1), (d1, d2))


@public(out=False)
def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Each last-dim vector of ``input`` on the ``offset`` diagonal of a zero matrix over the
    new dims ``dim1``/``dim2``."""
    d1, d2 = diagonal_dims(input.dim() + 1, dim1, dim2)
    n = (input.shape[-1] if input.dim() else 1) + abs(int(offset))
    shape = list(input.shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, n)
    zeros = C.zeros(*shape, dtype=input.dtype, device=input.device)
    return diagonal_scatter(zeros, input.reshape(1) if input.dim() == 0 else input,
                            offset, d1, d2)


@public()
def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A vector on the ``diagonal`` of a square matrix, or a matrix's ``diagonal`` (a copy)."""
    if input.dim() == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.dim() == 2:
        return _diagonal_view(input, diagonal).clone()
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.dim()}D")


@public(out=False)
def diagflat(input: Tensor, offset: int = 0) -> Tensor:
    """``input`` flattened, on the ``offset`` diagonal of a square matrix."""
    return diag_embed(input.reshape(-1), offset, 0, 1)


# ---- scatters into a view's place ----------------------------------------------------------
def _check_scatter(name: str, src: Tensor, view: Tensor) -> None:
    if tuple(src.shape) != tuple(view.shape):
        raise RuntimeError(f"{name}: expected src to have a size equal to the slice of self. "
                           f"src size = {list(src.shape)}, slice size = {list(view.shape)}")


@public(out=False)
def select_scatter(input: Tensor, src: Tensor, dim: int, index: int) -> Tensor:
    """A copy of ``input`` with ``input.select(dim, index)`` replaced by ``src``."""
    d = norm_dim(dim, input.dim(), "select_scatter")
    n = input.shape[d]
    if isinstance(n, int) and not -n <= int(index) < n:
        raise IndexError(f"select_scatter(): index {index} out of range for tensor of size "
                         f"{list(input.shape)} at dimension {d}")
    _check_scatter("select_scatter", src, input.select(d, index))
    return index_put(input, src, spec=(_ALL,) * d + (("int", int(index)),))


@public()
def slice_scatter(input: Tensor, src: Tensor, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> Tensor:
    """A copy of ``input`` with ``input[..., start:end:step, ...]`` (at ``dim``) set to ``src``."""
    d = norm_dim(dim, input.dim(), "slice_scatter")
    if step <= 0:
        raise RuntimeError(f"slice_scatter: slice step must be positive, got {step}")
    part = ("slice", start, end, int(step))
    _check_scatter("slice_scatter", src, input[(slice(None),) * d + (slice(start, end, step),)])
    return index_put(input, src, spec=(_ALL,) * d + (part,))


# ---- strided views -----------------------------------------------------------------------
@public(out=False)
def as_strided(input: Tensor, size: Sequence[int], stride: Sequence[int],
               storage_offset: int | None = None) -> Tensor:
    """A view of ``input``'s storage with ``size`` and ``stride`` (in elements) from
    ``storage_offset`` (default: ``input``'s own)."""
    offset = 0 if storage_offset is None else int(storage_offset) - offset_in_storage(input._data)
    return dispatch("as_strided", (input,), {"size": _int_list(size), "stride": _int_list(stride),
                                             "offset": offset})


@public(method=False)
def as_strided_copy(input: Tensor, size: Sequence[int], stride: Sequence[int],
                    storage_offset: int | None = None) -> Tensor:
    return as_strided(input, size, stride, storage_offset).clone()


@public(out=False)
def as_strided_scatter(input: Tensor, src: Tensor, size: Sequence[int], stride: Sequence[int],
                       storage_offset: int | None = None) -> Tensor:
    """A copy of ``input`` whose elements that ``input.as_strided(size, stride,
    storage_offset)`` views are ``src``: both laid into ``input``'s storage, read back."""
    _check_scatter("as_strided_scatter", src, as_strided(input, size, stride, storage_offset))
    x, spec = input._data, (("tensor", 0),)
    start = offset_in_storage(x) if storage_offset is None else int(storage_offset)
    held = C.tensor(held_positions(x).reshape(-1), device=input.device)
    read = C.tensor(positions(_int_list(size), _int_list(stride), start).reshape(-1),
                    device=input.device)
    cells = C.zeros(storage_size(x), dtype=input.dtype, device=input.device)
    cells = index_put(index_put(cells, input.reshape(-1), held, spec=spec), src.reshape(-1),
                      read, spec=spec)
    return cells[held].reshape(input.shape)


def _unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Windows of ``size`` every ``step`` along ``dimension``, as a new last dim: a view.

        >>> scriptmod.arange(5).unfold(0, 2, 2)
        tensor([[0, 1],
                [2, 3]])
    """
    return dispatch("unfold", (self,), {"dimension": int(dimension), "size": int(size),
                                        "step": int(step)})


Tensor.unfold = _unfold


@public(method=False)
def unfold_copy(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    return _unfold(input, dimension, size, step).clone()


def _as_strided_(self: Tensor, size: Sequence[int], stride: Sequence[int],
                 storage_offset: int | None = None) -> Tensor:
    """``self`` made the ``as_strided`` view of its own storage, in place."""
    if self.requires_grad and grad_mode.is_grad_enabled():
        raise RuntimeError("as_strided_(): in-place restriding of a tensor that requires grad "
                           "is not supported; use as_strided()")
    _check_leaf(self)
    self._data = as_strided(self, size, stride, storage_offset)._data
    return self


Tensor.as_strided_ = _as_strided_


@public(function=False)
def storage_offset(self: Tensor) -> int:
    """Elements from the start of the tensor's storage to its first element."""
    return offset_in_storage(self._data)


# ---- copies of views -----------------------------------------------------------------------
def _copy_of(view_fn: Any, name: str, method: bool = False) -> Any:
    """``<view>_copy``: the view as a new tensor (``out=`` as PyTorch's)."""
    def copy(input: Tensor, *args: Any, **kwargs: Any) -> Any:
        out = view_fn(input, *args, **kwargs)
        return out.clone() if isinstance(out, Tensor) else tuple(t.clone() for t in out)
    copy.__name__ = copy.__qualname__ = name
    copy.__doc__ = f"``{view_fn.__name__}`` as a new tensor."
    return public(name, method=method)(copy)


_copy_of(Tensor.expand, "expand_copy")
_copy_of(Tensor.permute, "permute_copy")
_copy_of(Tensor.squeeze, "squeeze_copy")
_copy_of(Tensor.t, "t_copy")
_copy_of(Tensor.transpose, "transpose_copy")
_copy_of(Tensor.unsqueeze, "unsqueeze_copy")
_copy_of(Tensor.view, "view_copy")
_copy_of(Tensor.unbind, "unbind_copy")
_copy_of(Tensor.narrow, "narrow_copy", method=True)
_copy_of(Tensor.select, "select_copy")
_copy_of(Tensor.detach, "detach_copy")
_copy_of(lambda x: x, "alias_copy")


def _slice(input: Tensor, dim: int = 0, start: int | None = None, end: int | None = None,
           step: int = 1) -> Tensor:
    return input[(slice(None),) * norm_dim(dim, input.dim(), "slice") + (slice(start, end, step),)]


_copy_of(_slice, "slice_copy")


# ---- layout changed in place ---------------------------------------------------------------
def _in_place(view: Any, name: str) -> None:
    """``Tensor.<name>``: ``self`` becomes ``view(self, ...)`` (new sizes and strides over
    the same storage), with the view's autograd history."""
    def inplace(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        _check_leaf(self)
        out = view(self, *args, **kwargs)
        self._data = out._data
        if out.grad_fn is not None:
            self._set_grad_fn(out.grad_fn, out._output_nr)
        if TRACERS:
            TRACERS[-1].on_inplace(self, out)
        return self
    inplace.__name__ = name
    setattr(Tensor, name, inplace)


for _name in ("squeeze", "unsqueeze", "t", "transpose", "swapdims", "swapaxes"):
    _in_place(getattr(Tensor, _name), _name + "_")


@public(out=False)
def moveaxis(input: Tensor, source: Any, destination: Any) -> Tensor:
    """``movedim``: the dims ``source`` moved to ``destination`` (a view)."""
    return input.movedim(source, destination)


public("swapaxes", method=False, out=False)(Tensor.transpose)
public("swapdims", method=False, out=False)(Tensor.transpose)
Tensor.is_same_size = lambda self, other: tuple(self.shape) == tuple(other.shape)
Tensor.share_memory_ = lambda self: self        # host memory is shared already


def _fill_diagonal_(self: Tensor, fill_value: Any, wrap: bool = False) -> Tensor:
    """Write ``fill_value`` on the main diagonal, in place (all dims equal above 2-d;
    ``wrap``: a tall matrix's diagonal restarts every ``columns + 1`` rows, as NumPy's)."""
    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.dim() > 2 and len({int(n) for n in self.shape}) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    marks = np.zeros(tuple(int(n) for n in self.shape), bool)
    np.fill_diagonal(marks, True, wrap=bool(wrap))
    value = C.tensor(fill_value, dtype=self.dtype, device=self.device)
    return _assign(self, dispatch("where", (C.tensor(marks, device=self.device), value, self)))


Tensor.fill_diagonal_ = _fill_diagonal_


# ---- broadcasting --------------------------------------------------------------------------
@public(method=False, out=False)
def broadcast_shapes(*shapes: Any) -> Any:
    """The shape tensors of ``shapes`` broadcast to (NumPy's rules).

        >>> scriptmod.broadcast_shapes((2, 1), (3,))
        scriptmod.Size([2, 3])
    """
    from scriptmod.tensor import Size
    dims = [[int(s)] if isinstance(s, (int, np.integer)) else [int(n) for n in s] for s in shapes]
    out = [1] * max((len(s) for s in dims), default=0)
    for k, s in enumerate(dims):
        for i, n in enumerate(reversed(s)):
            if n < 0:
                raise RuntimeError(f"Trying to create tensor with negative dimension {n}: {s}")
            have = out[-1 - i]
            if n != 1 and have != 1 and n != have:
                raise RuntimeError(f"Shape mismatch: objects cannot be broadcast to a single "
                                   f"shape.  Mismatch is between arg {k} and an earlier one "
                                   f"(size {n} against {have} at dim {len(out) - 1 - i}).")
            out[-1 - i] = have if n == 1 else n
    return Size(out)


@public(out=False)
def broadcast_to(input: Tensor, size: Sequence[int]) -> Tensor:
    """``input`` expanded to ``size`` (-1 keeps a dim): a view."""
    return input.expand(*size)


@public(method=False, out=False)
def broadcast_tensors(*tensors: Tensor) -> tuple[Tensor, ...]:
    """The tensors expanded to their common shape (views)."""
    ts = _tensor_list(tensors, "broadcast_tensors")
    shape = broadcast_shapes(*(t.shape for t in ts)) if not TRACERS else \
        _traced_broadcast([t.shape for t in ts])
    return tuple(t.expand(*shape) for t in ts)


def _traced_broadcast(shapes: list[Any]) -> list[Any]:
    """The broadcast shape keeping traced sizes (a dim of 1 takes the other's size)."""
    out: list[Any] = [1] * max(len(s) for s in shapes)
    for s in shapes:
        for i, n in enumerate(reversed(list(s))):
            if not (type(n) is int and n == 1):
                out[-1 - i] = n
    return out


@public(function=False)
def sum_to_size(self: Tensor, *size: Any) -> Tensor:
    """The sum of ``self`` over the dims that broadcasting ``size`` to its shape expanded."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (list, tuple)) else size
    lead = self.dim() - len(size)
    if lead < 0 or any(n != 1 and n != m for n, m in zip(size, self.shape[lead:])):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size "
                           f"{{{list(self.shape)}}}.")
    dims = list(range(lead)) + [lead + i for i, n in enumerate(size)
                                if n == 1 and self.shape[lead + i] != 1]
    out = self.sum(dim=dims, keepdim=True) if dims else self
    return out.reshape(*size) if lead else out


# ---- flips, rolls, rotations -------------------------------------------------------------
@public(out=False)
def fliplr(input: Tensor) -> Tensor:
    """``input`` flipped left-right (dim 1)."""
    if input.dim() < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return input.flip(1)


@public(out=False)
def flipud(input: Tensor) -> Tensor:
    """``input`` flipped up-down (dim 0)."""
    if input.dim() < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return input.flip(0)


@public(out=False)
def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    """Elements shifted by ``shifts`` along ``dims`` (wrapping around); with no ``dims``,
    over the flattened tensor.

        >>> scriptmod.roll(scriptmod.arange(4), 1)
        tensor([3, 0, 1, 2])
    """
    shifts = _int_list(shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: shifts and dimensions must align. shifts: "
                               f"{len(shifts)}, dims: 0")
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    dims = _int_list(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims: {len(dims)}")
    out = input
    for s, d in zip(shifts, dims):
        d = norm_dim(d, input.dim(), "roll")
        n = input.shape[d]
        if type(n) is int and (n == 0 or s % n == 0):
            continue
        s = s % n
        out = cat([out.narrow(d, n - s, s), out.narrow(d, 0, n - s)], d)
    return out if out is not input else input.clone()


@public(out=False)
def rot90(input: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """``input`` rotated by ``k`` quarter turns in the plane ``dims`` (from the first dim
    towards the second)."""
    dims = _int_list(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.dim() < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.dim()}")
    a, b = (norm_dim(d, input.dim(), "rot90") for d in dims)
    if a == b:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {a} and "
                           f"dim1 = {b}")
    k = int(k) % 4
    if k == 1:
        return input.flip(b).transpose(a, b)
    if k == 2:
        return input.flip([a, b])
    if k == 3:
        return input.flip(a).transpose(a, b)
    return input.clone()


@public(out=False)
def ravel(input: Tensor) -> Tensor:
    """``input`` as 1-d (a view where its layout allows)."""
    return input.reshape(-1)


# ---- stacks and splits -------------------------------------------------------------------
def _atleast(tensors: Sequence[Any], rank: int, name: str) -> Any:
    single = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    out = []
    for t in _tensor_list(tensors, name):
        if t.dim() < rank:
            shape = {0: [1] * rank, 1: [1, *t.shape] + [1] * (rank - 2),
                     2: [*t.shape, 1]}[t.dim()]
            t = t.reshape(*shape[:rank] if t.dim() else shape)
        out.append(t)
    return out[0] if single else tuple(out)


@public(method=False, out=False)
def atleast_1d(*tensors: Any) -> Any:
    """Each tensor with at least 1 dim (a 0-d one as shape (1,)); one tensor in, one out."""
    return _atleast(tensors, 1, "atleast_1d")


@public(method=False, out=False)
def atleast_2d(*tensors: Any) -> Any:
    """Each tensor with at least 2 dims (a vector as one row)."""
    return _atleast(tensors, 2, "atleast_2d")


@public(method=False, out=False)
def atleast_3d(*tensors: Any) -> Any:
    """Each tensor with at least 3 dims (NumPy's: (n,) -> (1, n, 1), (m, n) -> (m, n, 1))."""
    return _atleast(tensors, 3, "atleast_3d")


def _seq(tensors: Any, name: str) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError(f"{name}(): argument 'tensors' must be a tuple of Tensors")
    if not tensors:
        raise RuntimeError(f"{name} expects a non-empty TensorList")
    return list(tensors)


@public(method=False)
def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenation along dim 1 (dim 0 for 1-d tensors)."""
    ts = [atleast_1d(t) for t in _seq(tensors, "hstack")]
    return cat(ts, 0 if ts[0].dim() == 1 else 1)


@public(method=False, aliases=("row_stack",))
def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenation along dim 0 of the tensors made at least 2-d."""
    return cat([atleast_2d(t) for t in _seq(tensors, "vstack")], 0)


@public(method=False)
def dstack(tensors: Sequence[Tensor]) -> Tensor:
    """Concatenation along dim 2 of the tensors made at least 3-d."""
    return cat([atleast_3d(t) for t in _seq(tensors, "dstack")], 2)


@public(method=False)
def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    """The tensors side by side as columns (0-d and 1-d ones become one column)."""
    ts = _seq(tensors, "column_stack")
    return cat([t.reshape(t.numel(), 1) if t.dim() < 2 else t for t in ts], 1)


@public(out=False)
def tensor_split(input: Tensor, indices_or_sections: Any = None, dim: int = 0, *,
                 sections: Any = None, indices: Any = None,
                 tensor_indices_or_sections: Any = None) -> tuple[Tensor, ...]:
    """Views of ``input`` split along ``dim``: into ``n`` nearly equal parts (the first
    ``size % n`` one longer), or at the given indices.

        >>> [t.tolist() for t in scriptmod.arange(5).tensor_split(2)]
        [[0, 1, 2], [3, 4]]
    """
    if input.dim() == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    d = norm_dim(dim, input.dim(), "tensor_split")
    n = input.shape[d]
    spec = next((v for v in (indices_or_sections, sections, indices,
                             tensor_indices_or_sections) if v is not None), None)
    if spec is None:
        raise TypeError("tensor_split() missing required argument 'indices_or_sections'")
    if isinstance(spec, Tensor):
        if spec.dtype.category != D.INT or spec.dim() > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to be a "
                               "zero-dimensional or one-dimensional tensor of int64, but got "
                               f"a tensor with {spec.dim()} dims of {spec.dtype.name}")
        spec = int(spec) if spec.dim() == 0 else [int(i) for i in spec.tolist()]
    if isinstance(spec, (int, np.integer)):
        if spec <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {spec}")
        base, extra = n // int(spec), n % int(spec)    # symbolic for a traced size
        starts = [i * base + sym_min(i, extra) for i in range(int(spec) + 1)]
        return _split_at(input, d, starts[:-1], starts[1:])
    idx = [int(i) for i in spec]
    return _split_at(input, d, [0] + idx, idx + [n])


def _split_at(input: Tensor, d: int, starts: list[Any], stops: list[Any]) -> tuple[Tensor, ...]:
    """Views ``input[start:stop]`` along ``d`` for each pair (Python's slice clamping)."""
    index = (slice(None),) * d
    return tuple(input[index + (slice(a, b),)] for a, b in zip(starts, stops))


def _split_dim(name: str, input: Tensor, sections: Any, dim: int, rank: int) -> tuple:
    if input.dim() < rank:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {rank} dimension, "
                           f"but got a tensor with {input.dim()} dimensions!")
    if isinstance(sections, (int, np.integer)) and (
            sections == 0 or input.shape[dim] % int(sections)):
        raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but "
                               f"the size of the dimension {input.shape[dim]} is not "
                               f"divisible by the split_size {sections}!")
    return tensor_split(input, sections, dim)


@public(out=False)
def hsplit(input: Tensor, sections: Any) -> tuple[Tensor, ...]:
    """``tensor_split`` along dim 1 (dim 0 of a 1-d tensor); an int must divide the size."""
    return _split_dim("hsplit", input, sections, 0 if input.dim() == 1 else 1, 1)


@public(out=False)
def vsplit(input: Tensor, sections: Any) -> tuple[Tensor, ...]:
    """``tensor_split`` along dim 0 of a tensor of at least 2 dims."""
    return _split_dim("vsplit", input, sections, 0, 2)


@public(out=False)
def dsplit(input: Tensor, sections: Any) -> tuple[Tensor, ...]:
    """``tensor_split`` along dim 2 of a tensor of at least 3 dims."""
    return _split_dim("dsplit", input, sections, 2, 3)


@public(out=False)
def split_with_sizes(input: Tensor, split_sizes: Sequence[int], dim: int = 0) -> tuple:
    """Views of ``input`` of the given lengths along ``dim`` (they must sum to its size)."""
    return input.split(list(split_sizes), dim)


_copy_of(split_with_sizes, "split_with_sizes_copy")
Tensor.unsafe_split_with_sizes = split_with_sizes


# PyTorch's forms without view tracking: the same parts here
public("unsafe_split", out=False)(Tensor.split)
public("unsafe_chunk", out=False)(Tensor.chunk)


@public(method=False, out=False)
def block_diag(*tensors: Tensor) -> Tensor:
    """The tensors (0-d, 1-d as a row, or 2-d) as the blocks of a block-diagonal matrix."""
    ts = [t.reshape(1, -1) if t.dim() < 2 else t for t in tensors]
    for i, t in enumerate(ts):
        if t.dim() != 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.dim()} dimensions")
    if not ts:
        return C.zeros(1, 0)
    dtype = ts[0].dtype
    for t in ts[1:]:
        dtype = D.promote_types(dtype, t.dtype)
    width = sum(t.shape[1] for t in ts)
    rows, left = [], 0
    for t in ts:
        right = width - left - t.shape[1]
        parts = [C.zeros(t.shape[0], left, dtype=dtype, device=t.device), t.to(dtype),
                 C.zeros(t.shape[0], right, dtype=dtype, device=t.device)]
        rows.append(cat(parts, 1))
        left += t.shape[1]
    return cat(rows, 0)


# ---- grids and index sets ----------------------------------------------------------------
@public(method=False, out=False)
def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 0-d or 1-d tensors, as views: ``indexing='ij'`` (matrix: dim k
    follows tensor k) or ``'xy'`` (Cartesian: the first two swapped)."""
    ts = _tensor_list(tensors, "meshgrid")
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    if any(t.dim() > 1 for t in ts):
        raise RuntimeError("torch.meshgrid: Expected 0D or 1D tensor in the tensor list")
    if len({t.dtype for t in ts}) > 1 or len({t.device for t in ts}) > 1:
        raise RuntimeError("torch.meshgrid: expects all tensors to have the same dtype and "
                           "device")
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        order[0], order[1] = 1, 0
    shape = [ts[k].reshape(-1).shape[0] for k in order]
    out = []
    for k, t in enumerate(ts):
        view = [1] * len(ts)
        view[order.index(k)] = -1
        out.append(t.reshape(*view).expand(*shape))
    return tuple(out)


@public(method=False, out=False)
def cartesian_prod(*tensors: Tensor) -> Tensor:
    """Every combination of one element of each 1-d tensor, as rows (one tensor: itself)."""
    ts = _tensor_list(tensors, "cartesian_prod")
    if any(t.dim() != 1 for t in ts):
        raise RuntimeError("Expect a 1D vector, but got shape "
                           f"{[list(t.shape) for t in ts if t.dim() != 1][0]}")
    if len(ts) == 1:
        return ts[0]
    grids = meshgrid(*ts, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1)


@public(method=False, out=False)
def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of a 1-d tensor's elements, as rows (in order)."""
    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return C.zeros(0, dtype=input.dtype, device=input.device)
    pick = itertools.combinations_with_replacement if with_replacement \
        else itertools.combinations
    rows = list(pick(range(fixed(input.shape[0], "the rows combinations() returns")), r))
    index = C.tensor(rows, dtype=D.int64, device=input.device).reshape(len(rows), r)
    return input[index]


@public(out=False)
def repeat_interleave(input: Tensor, repeats: Any = None, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Each element repeated ``repeats`` times along ``dim`` (flattened when None);
    ``repeats`` an int or a tensor of one count per element. A tensor of counts without
    ``output_size`` gives a size that depends on its values: eager only.

        >>> scriptmod.repeat_interleave(scriptmod.tensor([1, 2]), 2)
        tensor([1, 1, 2, 2])
    """
    if repeats is None:                 # repeat_interleave(counts): arange repeated
        repeats, input = input, C.arange(input.shape[0] if input.dim() else 1,
                                         device=input.device)
        dim = 0
    x = input.reshape(-1) if dim is None else input
    d = norm_dim(0 if dim is None else dim, max(x.dim(), 1), "repeat_interleave")
    x = x.reshape(1) if x.dim() == 0 else x
    if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats.dim() <= 1 \
            and x.shape[d] != 1 and not TRACERS:
        repeats = int(repeats)
    if not isinstance(repeats, Tensor):
        if int(repeats) < 0:
            raise RuntimeError("repeats can not be negative")
        shape = list(x.shape)
        return x.unsqueeze(d + 1).expand(*shape[:d + 1], int(repeats), *shape[d + 1:]) \
            .flatten(d, d + 1)
    if repeats.dim() > 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (D.int32, D.int64):
        raise KernelDTypeError(f"\"repeat_interleave_cpu\" not implemented for "
                               f"'{repeats.dtype.short}'")
    if output_size is None and TRACERS:
        raise RuntimeError("repeat_interleave: with a tensor of repeats, the output size "
                           "depends on its values and cannot be traced; pass output_size=")
    if output_size is None:
        counts = repeats._data
        if counts.shape[0] != x.shape[d]:
            raise RuntimeError("repeats must have the same size as input along dim")
        if counts.size and counts.min() < 0:
            raise RuntimeError("repeats can not be negative")
        index = C.tensor(np.repeat(np.arange(counts.shape[0]), counts.astype(np.int64)),
                         device=x.device)
    else:
        ends = repeats.cumsum(0)
        at = C.arange(int(output_size), device=x.device)
        index = (at.unsqueeze(1) >= ends.unsqueeze(0)).sum(1)
    return x.index_select(d, index)


@public(method=False, out=False)
def constant_pad_nd(input: Tensor, pad: Sequence[int], value: Any = 0) -> Tensor:
    """``input`` padded with ``value`` (``pad`` as ``F.pad``'s: last dim first; negative
    amounts crop)."""
    from scriptmod.nn.functional import pad as pad_fn
    return pad_fn(input, list(pad), value=value)


def _resize(self: Tensor, *sizes: Any, memory_format: Any = None) -> Tensor:
    """Give ``self`` the shape ``sizes`` in place, contiguous over its storage from its
    offset, as PyTorch: shrinking keeps the storage (a later grow sees the old elements
    again), growing past its end copies it into a larger one (new elements are zero).
    Refused on a tensor that requires grad."""
    shape = _int_list(sizes[0] if len(sizes) == 1 and not isinstance(sizes[0], int) else sizes)
    if any(n < 0 for n in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {shape}")
    if self.requires_grad and grad_mode.is_grad_enabled():
        raise RuntimeError("cannot resize variables that require grad")
    _check_leaf(self)
    if tuple(shape) == tuple(self.shape):
        return self
    start, n = offset_in_storage(self._data), math.prod(shape)
    storage = storage_of(self._data).ravel(order="K")     # a view of an owning array
    if not self._data.flags.c_contiguous:      # its elements, in order, at its offset
        storage = storage.copy()
        storage[start:start + self._data.size] = self._data.reshape(-1)
    if start + n > storage.size:
        grown = self._xp().zeros(start + n, dtype=storage.dtype)
        grown[:storage.size] = storage
        storage = grown
    self._data = storage[start:start + n].reshape(shape)
    self._vc[0] += 1
    return self


Tensor.resize_ = _resize


@public(out=False)
def resize_as_(input: Tensor, the_template: Tensor) -> Tensor:
    """``input.resize_(the_template.shape)``."""
    return _resize(input, list(the_template.shape))


# ---- complex views and parts ---------------------------------------------------------------
def _real(input: Tensor) -> Tensor:
    """The real part (a view of complex storage; a real tensor itself)."""
    return dispatch("real", (input,)) if input.is_complex() else input


def _imag(input: Tensor) -> Tensor:
    """The imaginary part, a view (complex tensors only, as in PyTorch)."""
    if not input.is_complex():
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return dispatch("imag", (input,))


def _set_part(part: Any) -> Any:
    def setter(self: Tensor, value: Any) -> None:
        part(self).copy_(value if isinstance(value, Tensor) else C.tensor(value))
    return setter


public("real", method=False, out=False)(_real)
public("imag", method=False, out=False)(_imag)
Tensor.real = property(_real, _set_part(_real))
Tensor.imag = property(_imag, _set_part(_imag))


@public(method=False, out=False)
def view_as_real(input: Tensor) -> Tensor:
    """A complex tensor's storage as real pairs, a view of shape ``(*input.shape, 2)``."""
    if not input.is_complex():
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return dispatch("view_as_real", (input,))


_copy_of(view_as_real, "view_as_real_copy")


@public(method=False, out=False)
def view_as_complex(input: Tensor) -> Tensor:
    """A float tensor whose last dim holds (real, imaginary) pairs, viewed as complex."""
    return dispatch("view_as_complex", (input,))


_copy_of(view_as_complex, "view_as_complex_copy")


@public("complex", method=False)
def _complex(real: Tensor, imag: Tensor) -> Tensor:
    """``real + imag * 1j`` elementwise (exactly: an infinite part stays alone)."""
    return dispatch("complex", (real, imag))


@public(method=False)
def polar(abs: Tensor, angle: Tensor) -> Tensor:
    """The complex numbers of magnitude ``abs`` and phase ``angle``."""
    if abs.dtype.category != D.FLOAT or angle.dtype.category != D.FLOAT:
        raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got "
                           f"{abs.dtype.short} and {angle.dtype.short}")
    if abs.dtype is not angle.dtype:
        raise RuntimeError(f"Expected object of scalar type {abs.dtype.short} but got scalar "
                           f"type {angle.dtype.short} for second argument")
    return _complex(abs * angle.cos(), abs * angle.sin())


@public(inplace=True)
def conj_physical(input: Tensor) -> Tensor:
    """The complex conjugate as a new tensor (a real tensor's copy)."""
    return dispatch("conj_physical", (input,)) if input.is_complex() else input.clone()


@public(out=False)
def conj(input: Tensor) -> Tensor:
    """The complex conjugate (a real tensor itself). PyTorch returns a lazy view with its
    conjugate bit set; here it is computed: writes into it do not reach ``input``."""
    return conj_physical(input) if input.is_complex() else input


@public()
def angle(input: Tensor) -> Tensor:
    """The argument of each element: ``atan2(imag, real)``; for real input pi where
    negative, 0 elsewhere, NaN kept."""
    if input.is_complex():
        return _imag(input).atan2(_real(input))
    x = input if input.dtype.category == D.FLOAT else input.to(D.get_default_dtype())
    half_turn = (x < 0).to(x.dtype) * math.pi
    return dispatch("where", (x != x, x, half_turn))   # NaN stays NaN


@public(out=False, aliases=("resolve_neg",))
def resolve_conj(input: Tensor) -> Tensor:
    """``input`` (no tensor here carries PyTorch's lazy conjugate or negative bit)."""
    return input


Tensor.is_conj = lambda self: False
Tensor.is_neg = lambda self: False


def _adjoint(self: Tensor) -> Tensor:
    """The conjugate transpose of the last two dims."""
    if self.dim() < 2:
        raise RuntimeError("tensor.mH is only supported on matrices or batches of matrices. "
                           f"Got {self.dim()}-D tensor.")
    return conj(self.transpose(-2, -1))


def _h(self: Tensor) -> Tensor:
    if self.dim() not in (0, 2):
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.dim()}-D tensor.")
    return self if self.dim() == 0 else _adjoint(self)


public("adjoint", out=False)(_adjoint)
Tensor.mH = property(_adjoint)
Tensor.H = property(_h)
Tensor.cfloat = lambda self, memory_format=None: self.to(D.complex64)
Tensor.cdouble = lambda self, memory_format=None: self.to(D.complex128)


def _chalf(self: Tensor, memory_format: Any = None) -> Tensor:
    raise TypeError("chalf(): complex32 (ComplexHalf) is not supported: NumPy has no "
                    "complex32 dtype; use cfloat()")


Tensor.chalf = _chalf
