"""Functions and Tensor methods of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique: each published once with ``@public``.

Every write along a dim is the ``scatter`` op with one of its reductions: ``index_add``,
``index_copy``, ``index_fill`` and ``index_reduce`` expand their vector index along the
source's other dims and scatter, so they trace (the output has the input's shape), run
compiled and differentiate through ``scatter``'s derivative. ``take``, ``put``,
``take_along_dim``, ``masked_scatter``, ``unravel_index`` and ``count_nonzero`` are
decompositions into indexing, gather and elementwise ops.

Ops whose result's shape depends on the input's values run eagerly; ``nonzero``,
``argwhere``, ``where(cond)``, ``masked_select``, and ``unique``/``unique_consecutive``
without ``dim``, trace and script as a boolean mask index (whose length the compiled program
binds at run time); ``unique``/``unique_consecutive`` along a ``dim``, ``bincount`` and
``histogramdd`` are refused while tracing: a trace would record the one shape it saw.
``nonzero_static`` is their fixed-shape form.

    >>> import scriptmod as sm
    >>> sm.zeros(3).index_add(0, sm.tensor([0, 0, 2]), sm.ones(3))
    tensor([2., 0., 1.])
"""
from __future__ import annotations

import warnings
from collections import namedtuple
from typing import Any, Sequence

import numpy as np

from scriptmod._creation import full, tensor
from scriptmod._dispatch import TRACERS, TracingError, dispatch
from scriptmod._public import public
from scriptmod._shape_ops import index_put as _index_put_op
from scriptmod._tensor_ops import where
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import (ArgumentValueError, DTypeError, IndexRangeError,
                                  KernelDTypeError, ShapeError)
from scriptmod.ir.ops.rules import broadcast_shapes, norm_dim
from scriptmod.tensor import Tensor, wrap

_REDUCE_MESSAGE = "reduce argument must be either sum, prod, mean, amax or amin, got {}"


class DataDependentShapeError(TracingError):
    """An op whose result's shape depends on the input's values, met while tracing (a
    scripted program's call of it runs eagerly when reached instead)."""


def refuse_traced(op: str) -> None:
    """Refuse a data-dependent-shape op under ``jit.trace``: the graph would bake in the
    one result shape this input gave."""
    if TRACERS:
        raise DataDependentShapeError(
            f"{op}(): the shape of its result depends on the input's values, which a trace "
            f"cannot record (it would bake in this input's shape); call it outside the traced "
            f"code, or use a fixed-shape form (nonzero_static, where(mask, x, y), histc)")


def _is_traced() -> bool:
    return bool(TRACERS)


# ---- scatter ---------------------------------------------------------------------------
def _scatter(self: Tensor, dim: int, index: Tensor, src: Any, reduce: str,
             include_self: bool = True) -> Tensor:
    """``scatter`` with ``src`` a tensor or a number (broadcast to ``index``'s shape)."""
    if not isinstance(index, Tensor) or index.dtype.category > D.INT or index.dtype is D.bool_:
        raise DTypeError("scatter(): Expected dtype int32/int64 for index")
    if not isinstance(src, Tensor):
        src = full(list(index.shape), src, dtype=self.dtype, device=self.device)
    return dispatch("scatter", (self, index, src),
                    {"dim": int(dim), "reduce": reduce, "include_self": bool(include_self)})


@public(inplace=True)
def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, value: Any = None, *,
            reduce: str | None = None) -> Tensor:
    """``input`` with ``src`` (a tensor, or the number ``value``) written along ``dim`` at
    ``index``; ``reduce='add'``/``'multiply'`` combine instead of writing.

    >>> scriptmod.zeros(3).scatter(0, scriptmod.tensor([2, 0]), 5.0)
    tensor([5., 0., 5.])
    """
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() missing 1 required positional argument: 'src' or 'value'")
    if reduce is None:
        return _scatter(input, dim, index, src, "none")
    if reduce not in ("add", "multiply"):
        raise ArgumentValueError("reduce argument must be either add or multiply.")
    if isinstance(src, Tensor):
        warnings.warn("The reduce argument of torch.scatter with Tensor src is deprecated and "
                      "will be removed in a future PyTorch release. Use torch.scatter_reduce "
                      "instead for more reduction options.", UserWarning, stacklevel=2)
    return _scatter(input, dim, index, src, "sum" if reduce == "add" else "prod")


@public(inplace=True)
def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """``input`` with ``src`` added along ``dim`` at ``index`` (duplicates add up)."""
    return _scatter(input, dim, index, src, "sum")


@public(inplace=True)
def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """``input`` with ``src`` reduced into it along ``dim`` at ``index`` by ``reduce``
    ('sum', 'prod', 'mean', 'amax', 'amin'); ``include_self=False`` leaves ``input``'s own
    value out of the positions that receive any."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise ArgumentValueError(_REDUCE_MESSAGE.format(reduce))
    return _scatter(input, dim, index, src, reduce, include_self)


# ---- index_* ---------------------------------------------------------------------------
def _vector_index(self: Tensor, dim: int, index: Tensor, op: str) -> int:
    """Check a vector index along ``dim``; returns ``dim`` made non-negative."""
    if index.dim() > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector, but got dim: "
                         f"{index.dim()} with type: {index.dtype.name} and size: "
                         f"{list(index.shape)}")
    if index.dtype not in (D.int32, D.int64):
        raise DTypeError(f"{op}(): Expected dtype int32/int64 for index but got: "
                         f"{index.dtype.name}")
    return norm_dim(dim, max(self.dim(), 1), op)


def _check_bounds(index: Tensor, size: int, d: int, op: str, negative: bool = False) -> None:
    """PyTorch's IndexError for an index out of range (eager only: a trace reads no values;
    the kernel checks again at run time)."""
    if _is_traced() or not index.numel() or not isinstance(size, int):
        return
    lo, hi = int(index.min().item()), int(index.max().item())
    if hi >= size or lo < (-size if negative else 0):
        bad = hi if hi >= size else lo
        if op in ("index_add", "index_reduce"):
            raise IndexRangeError("index out of range in self")
        prefix = "" if op == "index_fill" else f"{op}_(): "
        raise IndexError(f"{prefix}index {bad} is out of bounds for dimension {d} with size "
                         f"{size}")


def _along(self: Tensor, d: int, index: Tensor, source: Tensor, op: str) -> Tensor:
    """``index`` expanded to ``source``'s shape along the other dims (scatter's index); a 0-d
    ``self`` or ``source`` counts as 1-d of one element."""
    n, count = (source.shape[d] if source.dim() else 1), index.numel()
    if count != n:
        if op == "index_copy":
            raise IndexError(f"index_copy_(): Number of indices ({count}) should be equal to "
                             f"source.size(dim) ({n})")
        raise ShapeError(f"{op}_(): Number of indices ({count}) should be equal to "
                         f"source.size(dim): ({n}), for dim: {d}")
    mixed = self.dim() != source.dim() and (op != "index_copy" or self.dim() and source.dim())
    if mixed or self.dim() and source.dim() and any(
            k != d and self.shape[k] != source.shape[k] for k in range(self.dim())):
        raise ShapeError(f"source tensor shape must match self tensor shape, excluding the "
                         f"specified dimension. Got self.shape = {list(self.shape)} "
                         f"source.shape = {list(source.shape)}")
    view = [1] * max(source.dim(), 1)
    view[d] = -1
    return index.reshape(view).expand(list(source.shape) or [1])


def _index_write(self: Tensor, dim: int, index: Tensor, source: Tensor, op: str, reduce: str,
                 include_self: bool = True) -> Tensor:
    d = _vector_index(self, dim, index, op)
    if source.dtype is not self.dtype:
        raise DTypeError(f"{op}_(): self ({self.dtype.name}) and source ({source.dtype.name}) "
                         f"must have the same scalar type")
    _check_bounds(index, self.shape[d] if self.dim() else 1, d, op)
    idx = _along(self, d, index, source, op)
    flat = self.reshape(1) if self.dim() == 0 else self
    out = _scatter(flat, d, idx, source.reshape(1) if source.dim() == 0 else source, reduce,
                   include_self)
    return out.reshape(()) if self.dim() == 0 else out


@public(inplace=True)
def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *,
              alpha: Any = 1) -> Tensor:
    """``input`` with ``alpha * source[i]`` added at ``index[i]`` along ``dim``.

    >>> scriptmod.zeros(3).index_add(0, scriptmod.tensor([0, 0]), scriptmod.ones(2))
    tensor([2., 0., 0.])
    """
    if alpha != 1:     # an integer tensor takes alpha as its own type (1.5 -> 1)
        source = source * (alpha if source.dtype.category > D.INT else int(alpha))
    return _index_write(input, dim, index, source, "index_add", "sum")


@public(inplace=True)
def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """``input`` with ``source[i]`` written at ``index[i]`` along ``dim``."""
    return _index_write(input, dim, index, source, "index_copy", "none")


@public(inplace=True)
def index_reduce(input: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *,
                 include_self: bool = True) -> Tensor:
    """``input`` with ``source[i]`` reduced into ``index[i]`` along ``dim`` by ``reduce``
    ('prod', 'mean', 'amax', 'amin')."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ArgumentValueError(f"index_reduce(): Expected reduce to be one of prod, mean, "
                                 f"amax or amin but got {reduce}.")
    return _index_write(input, dim, index, source, "index_reduce", reduce, include_self)


@public(inplace=True)
def index_fill(input: Tensor, dim: int, index: Tensor, value: Any) -> Tensor:
    """``input`` with ``value`` (a number or a 0-d tensor) written at ``index`` along
    ``dim``; negative indices count from the end."""
    if index.dim() > 1:
        raise ShapeError("Index has to be a vector/scalar")
    if isinstance(value, Tensor) and value.dim():
        raise ShapeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                         f"tensor with {value.dim()} dimension(s).")
    d = _vector_index(input, dim, index, "index_fill")
    n = input.shape[d] if input.dim() else 1
    _check_bounds(index, n, d, "index_fill", negative=True)
    index = where(index < 0, index + n, index)
    shape = list(input.shape) or [1]
    shape[d] = index.numel()
    v = value.to(input.dtype) if isinstance(value, Tensor) else \
        tensor(value, device=input.device).to(input.dtype)
    return _index_write(input, dim, index.reshape(-1), v.expand(shape if input.dim() else []),
                        "index_fill", "none")


@public(inplace=True)
def index_put(input: Tensor, indices: Sequence[Any], values: Any,
              accumulate: bool = False) -> Tensor:
    """``input[indices] = values`` (``+=`` with ``accumulate=True``: duplicates add up);
    ``indices`` is a tuple of index tensors, None for a whole dim."""
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"index_put(): argument 'indices' must be tuple of Tensors, not "
                        f"{type(indices).__name__}")
    if not isinstance(values, Tensor):       # a number: a 0-d tensor of input's dtype
        values = tensor(values, dtype=input.dtype, device=input.device)
    if values.dtype is not input.dtype:
        raise DTypeError(f"Index put requires the source and destination dtypes match, got "
                         f"{input.dtype.name.capitalize()} for the destination and "
                         f"{values.dtype.name.capitalize()} for the source.")
    spec: list[tuple] = []
    tensors: list[Tensor] = []
    for t in indices:
        if t is None:
            spec.append(("slice", None, None, None))
        else:
            spec.append(("tensor", len(tensors)))
            tensors.append(t)
    return _index_put_op(input, values, *tensors, spec=tuple(spec), accumulate=bool(accumulate))


@public("index_put_", method=False, out=False)
def _index_put_function(input: Tensor, indices: Sequence[Any], values: Any,
                        accumulate: bool = False) -> Tensor:
    """``torch.index_put_``: ``input.index_put_(indices, values, accumulate)``."""
    return input.index_put_(indices, values, accumulate)


# ---- take / put / take_along_dim / masked_scatter ---------------------------------------
def _flat_index(input: Tensor, index: Tensor, op: str) -> Tensor:
    """``index`` into ``input.reshape(-1)``, negative from the end, bounds checked eagerly."""
    n = input.numel()
    if not _is_traced() and index.numel():
        lo, hi = int(index.min().item()), int(index.max().item())
        if hi >= n or lo < -n:
            raise IndexError(f"out of range: tried to access index {hi if hi >= n else lo} on "
                             f"a tensor of {n} elements.")
    return where(index < 0, index + n, index).reshape(-1)


@public()
def take(input: Tensor, index: Tensor) -> Tensor:
    """``input`` read as 1-d at ``index`` (the result has ``index``'s shape).

    >>> scriptmod.tensor([[1, 2], [3, 4]]).take(scriptmod.tensor([0, -1]))
    tensor([1, 4])
    """
    if index.dtype is not D.int64:
        raise DTypeError(f"take(): Expected a long tensor for index, but got "
                         f"{index.dtype.name.capitalize()}")
    flat = _flat_index(input, index, "take")
    return dispatch("index", (input.reshape(-1), flat), {"spec": (("tensor", 0),)}) \
        .reshape(index.shape)


@public(inplace=True)
def put(input: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
    """``input`` with ``source`` written (added with ``accumulate``) at the 1-d positions
    ``index``."""
    if index.dtype is not D.int64:
        raise DTypeError(f"put_(): Expected a long tensor for index, but got "
                         f"{index.dtype.name.capitalize()}")
    if index.numel() != source.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of "
                         f"elements, but got source.numel() = {source.numel()}, "
                         f"index.numel() = {index.numel()}")
    if source.dtype is not input.dtype:
        raise DTypeError(f"put_(): self ({input.dtype.name}) and source ({source.dtype.name}) "
                         f"must have the same scalar type")
    flat = _flat_index(input, index, "put")
    out = _index_put_op(input.reshape(-1), source.reshape(-1), flat, spec=(("tensor", 0),),
                        accumulate=bool(accumulate))
    return out.reshape(input.shape)


@public()
def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    """``gather`` along ``dim`` after broadcasting ``input`` and ``indices`` over the other
    dims (``dim=None``: along the flattened input)."""
    if indices.dtype is not D.int64:
        raise DTypeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                         f"{indices.dtype.name.capitalize()}")
    if dim is None:     # PyTorch's flat form is a plain gather: no negative indices
        return dispatch("gather", (input.reshape(-1), indices.reshape(-1)), {"dim": 0})
    if input.dim() != indices.dim():
        raise ShapeError(f"torch.take_along_dim(): input and indices should have the same "
                         f"number of dimensions, but got {input.dim()} dimensions for input, "
                         f"and {indices.dim()} dimensions for indices")
    d = norm_dim(dim, max(input.dim(), 1), "take_along_dim")
    if input.dim() == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    n = input.shape[d]
    indices = where(indices < 0, indices + n, indices)   # negative ones count from the end
    sizes = list(input.shape)
    sizes[d] = indices.shape[d]
    shape = list(broadcast_shapes(tuple(sizes), tuple(indices.shape)))
    idx = indices.expand(shape)
    shape[d] = input.shape[d]
    return dispatch("gather", (input.expand(shape), idx), {"dim": d})



def _broadcast_pair(input: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    shape = list(broadcast_shapes(tuple(input.shape), tuple(mask.shape)))
    return input.expand(shape), mask.expand(shape)


@public(inplace=True)
def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``input`` with the leading elements of ``source`` written, in order, where the bool
    ``mask`` (broadcast with ``input``) is True. A fixed-shape decomposition: the k-th True
    reads ``source.reshape(-1)[k]``, found by a cumulative sum of the mask."""
    if mask.dtype is not D.bool_:
        raise DTypeError(f"masked_scatter_ only supports boolean masks, but got mask with "
                         f"dtype {mask.dtype.name.capitalize()}")
    if source.dtype is not input.dtype:
        raise DTypeError(f"masked_scatter_: expected self and source to have same dtypes but "
                         f"got {input.dtype.name.capitalize()} and "
                         f"{source.dtype.name.capitalize()}")
    x, m = _broadcast_pair(input, mask)
    if not _is_traced() and int(m.sum().item()) > source.numel():
        raise ShapeError("Number of elements of source < number of ones in mask")
    if source.numel() == 0 or x.numel() == 0:
        return x.clone()
    k = m.reshape(-1).to(D.int64).cumsum(0) - 1
    picked = dispatch("index", (source.reshape(-1), where(k < 0, 0, k)),
                      {"spec": (("tensor", 0),)})
    return where(m, picked.reshape(x.shape), x)


@public()
def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """The elements of ``input`` where the bool ``mask`` (broadcast with it) is True, as a
    1-d tensor (differentiable; refused while tracing: its length depends on the mask)."""
    if mask.dtype is not D.bool_:
        raise DTypeError("masked_select: expected BoolTensor for mask")
    x, m = _broadcast_pair(input, mask)
    return x.reshape(-1)[m.reshape(-1)]     # a mask index: its length is bound at run time


# ---- nonzero ---------------------------------------------------------------------------
@public()
def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:
    """The indices of the non-zero elements: an (n, input.dim()) int64 tensor, or with
    ``as_tuple`` one 1-d tensor per dim (a 0-d input counts as 1-d). Traced and scripted, it
    is the rows of the input's index grid its non-zero mask selects (``_nonzero_traced``),
    whose count is bound at run time as a boolean mask index's is."""
    if TRACERS:
        return _nonzero_traced(input, as_tuple)
    arr = input._data
    if as_tuple:
        return tuple(wrap(i.astype(np.int64)) for i in input._xp().nonzero(arr.reshape(arr.shape or (1,))))
    return wrap(input._xp().argwhere(arr).astype(np.int64))


def _nonzero_traced(input: Tensor, as_tuple: bool) -> Any:
    """``nonzero`` from traceable ops: every element's index (row-major, as NumPy's
    ``argwhere`` orders them) as a row of a ``(numel, ndim)`` grid, the rows where the
    input is non-zero picked by a boolean mask."""
    from scriptmod._creation import arange
    from scriptmod._shape_ops import stack
    shape = list(input.shape) if input.dim() else ([1] if as_tuple else [])
    flat = arange(input.numel(), device=input.device)
    cols, inner = [], 1
    for n in reversed(shape):             # flat index -> each dim's coordinate
        cols.append((flat // inner) % n)
        inner = inner * n
    keep = (input != 0).reshape(-1)
    if not cols:
        return arange(0, device=input.device).reshape(1, 0)[keep] if not as_tuple else ()
    grid = stack(cols[::-1], 1)[keep]
    return tuple(grid[:, d] for d in range(len(shape))) if as_tuple else grid


@public(out=False)
def argwhere(input: Tensor) -> Tensor:
    """``nonzero(input)``."""
    return nonzero(input)


@public()
def nonzero_static(input: Tensor, *, size: int, fill_value: int = -1) -> Tensor:
    """The first ``size`` rows of ``nonzero(input)``, padded with ``fill_value``: a fixed
    shape, so it traces."""
    return dispatch("nonzero_static", (input,), {"size": int(size), "fill_value": int(fill_value)})


@public(out=False)
def count_nonzero(input: Tensor, dim: Any = None) -> Tensor:
    """The number of non-zero elements (along ``dim``: an int or a tuple of ints)."""
    nz = input != 0
    if dim is None:
        return nz.sum()
    dims = [dim] if isinstance(dim, int) else list(dim)
    if len({norm_dim(d, max(input.dim(), 1), "count_nonzero") for d in dims}) != len(dims):
        raise ArgumentValueError(f"dim {dims} appears multiple times in the list of dims")
    return nz.sum(dim=dims) if dims else nz.sum()


# ---- searchsorted / bucketize / isin ------------------------------------------------------
@public(method=False)
def searchsorted(sorted_sequence: Tensor, input: Any, *, out_int32: bool = False,
                 right: bool = False, side: str | None = None,
                 sorter: Tensor | None = None) -> Tensor:
    """Where each of ``input`` goes in the sorted last dim of ``sorted_sequence`` (the first
    position whose value is >= it, or > it with ``right``/``side='right'``).

    >>> scriptmod.searchsorted(scriptmod.tensor([1, 3, 5]), scriptmod.tensor([3, 6]))
    tensor([1, 3])
    """
    if side is not None:
        if side not in ("left", "right"):
            raise ArgumentValueError(f"torch.searchsorted(): side can only be 'left' or 'right' "
                                     f"but got {side}")
        if right and side == "left":
            raise ArgumentValueError("torch.searchsorted(): side and right can't be set to "
                                     "opposites, got side of left while right was True")
        right = side == "right"
    if sorter is not None and sorter.dtype is not D.int64:
        raise DTypeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got "
                         f"dtype {sorter.dtype.name.capitalize()}")
    if sorted_sequence.dim() == 0:
        raise ShapeError("torch.searchsorted(): boundaries tensor should have positive "
                         "dimension, but got 0 dimension")
    return dispatch("searchsorted", (sorted_sequence, input, sorter),
                    {"right": bool(right), "out_int32": bool(out_int32)})


@public(method=False)
def bucketize(input: Any, boundaries: Tensor, *, out_int32: bool = False,
              right: bool = False) -> Tensor:
    """The bucket of each of ``input`` among the sorted 1-d ``boundaries``: ``i`` such that
    ``boundaries[i-1] < x <= boundaries[i]`` (``<= x <`` with ``right``)."""
    if boundaries.dim() != 1:
        raise ShapeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return dispatch("searchsorted", (boundaries, input, None),
                    {"right": bool(right), "out_int32": bool(out_int32)})



@public(method=False)
def isin(elements: Any, test_elements: Any, *, assume_unique: bool = False,
         invert: bool = False) -> Tensor:
    """Whether each of ``elements`` is in ``test_elements`` (either may be a number)."""
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin() received an invalid combination of arguments: at least one "
                        "of elements and test_elements must be a Tensor")
    return dispatch("isin", (elements, test_elements),
                    {"assume_unique": bool(assume_unique), "invert": bool(invert)})


# ---- histograms and counts ------------------------------------------------------------
histogram_result = namedtuple("histogram", ["hist", "bin_edges"])
histogramdd_result = namedtuple("histogramdd", ["hist", "bin_edges"])


@public()
def histc(input: Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Tensor:
    """Counts of ``input`` in ``bins`` equal bins over ``[min, max]`` (both 0: the data's
    own range); values outside are not counted. A fixed shape: it traces."""
    return dispatch("histc", (input,), {"bins": int(bins), "min": float(min), "max": float(max)})


@public()
def histogram(input: Tensor, bins: Any = 100, *, range: Sequence[float] | None = None,
              weight: Tensor | None = None, density: bool = False) -> Any:
    """``(hist, bin_edges)``: counts (summed ``weight``s; densities with ``density``) of
    ``input`` in ``bins`` equal bins over ``range`` (default: the data's range), or in the
    bins between the sorted edges ``bins`` when it is a tensor."""
    edges = bins if isinstance(bins, Tensor) else None
    if edges is not None and edges.dim() != 1:
        raise ShapeError(f"torch.histogram(): bins tensor should have one dimension, but got "
                         f"{edges.dim()} dimensions")
    attrs = {"bins": 0 if edges is not None else int(bins), "density": bool(density),
             "range": None if range is None else [float(r) for r in range]}
    hist, bin_edges = dispatch("histogram", (input, weight, edges), attrs)
    return histogram_result(hist, bin_edges)


def _dd_edges(xp: Any, pts: Any, bins: Any, range: Any, dtype: Any) -> list[Any]:
    """Each dim's bin edges for ``histogramdd``: given tensors, or equal bins over the range
    (``range[2k:2k+2]`` or the data's, widened around a constant as ``histogram``'s)."""
    from scriptmod.runtime.kernels.indexing import histogram_range
    ndim = pts.shape[-1]
    if isinstance(bins, (list, tuple)) and bins and isinstance(bins[0], Tensor):
        if len(bins) != ndim:
            raise ShapeError(f"torch.histogramdd(): expected {ndim} sequences of bin edges for "
                             f"each of the {ndim} dimensions of the histogram but got "
                             f"{len(bins)}")
        return [b._data for b in bins]
    counts = [int(bins)] * ndim if isinstance(bins, int) else [int(b) for b in bins]
    if len(counts) != ndim:
        raise ShapeError(f"torch.histogramdd(): expected {ndim} bin counts for each of the "
                         f"{ndim} dimensions of the histogram but got {len(counts)}")
    if range is not None and len(range) != 2 * ndim:
        raise ShapeError(f"torch.histogramdd(): for a {ndim}-dimensional histogram range "
                         f"should have {2 * ndim} elements, but got {len(range)}")
    out = []
    for k, n in enumerate(counts):
        if n <= 0:
            raise ArgumentValueError(f"torch.histogramdd(): bins must be > 0, but got {n} for "
                                     f"dimension {k}")
        lo, hi = histogram_range(pts[:, k], None if range is None else range[2 * k:2 * k + 2], k)
        out.append(xp.linspace(lo, hi, n + 1).astype(dtype))
    return out


@public(method=False, out=False)
def histogramdd(input: Tensor, bins: Any = 10, *, range: Sequence[float] | None = None,
                weight: Tensor | None = None, density: bool = False) -> Any:
    """``(hist, bin_edges)`` of the points ``input[..., :]`` (the last dim is the point's
    coordinates): a ``len(bins)``-dimensional ``histogram``. Eager only."""
    refuse_traced("histogramdd")
    if input.dtype not in (D.float32, D.float64):
        raise KernelDTypeError(f"\"histogramdd\" not implemented for '{input.dtype.short}'")
    xp, arr = input._xp(), input._data
    pts = arr.reshape(-1, arr.shape[-1] if arr.ndim else 1)
    edges = _dd_edges(xp, pts, bins, range, arr.dtype)
    sizes = [e.shape[0] - 1 for e in edges]
    flat, keep = xp.zeros(pts.shape[0], np.int64), xp.ones(pts.shape[0], bool)
    for k, e in enumerate(edges):
        col = pts[:, k]
        pos = xp.minimum(xp.searchsorted(e, col, side="right") - 1, sizes[k] - 1)
        keep &= (col >= e[0]) & (col <= e[-1])
        flat = flat * sizes[k] + xp.clip(pos, 0, None)
    w = None if weight is None else weight._data.reshape(-1)[keep].astype(np.float64)
    hist = xp.bincount(flat[keep], weights=w, minlength=int(np.prod(sizes))).reshape(sizes)
    if density:
        cell = xp.ones(sizes)
        for k, e in enumerate(edges):
            view = [1] * len(sizes)
            view[k] = -1
            cell = cell * xp.diff(e.astype(np.float64)).reshape(view)
        hist = hist / (hist.sum() * cell)
    return histogramdd_result(wrap(hist.astype(arr.dtype)), tuple(wrap(e) for e in edges))


@public(out=False)
def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """How often each value 0..max(input) occurs in the 1-d non-negative integer ``input``
    (summed ``weights`` instead of 1s). Eager only: the length depends on the values."""
    refuse_traced("bincount")
    if minlength < 0:
        raise ArgumentValueError("minlength should be >= 0")
    arr = input._data
    if input.dim() != 1 or input.dtype.category != D.INT or input.dtype is D.bool_ or \
            (arr.size and int(arr.min()) < 0):
        raise ArgumentValueError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != input.shape[0]):
        raise ShapeError("weights should be 1-d and have the same length as input")
    xp = input._xp()
    if weights is None:
        return wrap(xp.bincount(arr, minlength=minlength).astype(np.int64))
    dtype = weights._data.dtype if weights.dtype in (D.float32, D.float64) else np.float64
    out = xp.bincount(arr, weights=weights._data.astype(np.float64), minlength=minlength)
    return wrap(out.astype(dtype))


# ---- unique ----------------------------------------------------------------------------
def _unique_results(values: Any, inverse: Any, counts: Any, return_inverse: bool,
                    return_counts: bool) -> Any:
    out = [wrap(values)]
    if return_inverse:
        out.append(wrap(inverse.astype(np.int64)))
    if return_counts:
        out.append(wrap(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def _runs_traced(input: Tensor, values: Tensor, order: Tensor | None, return_inverse: bool,
                 return_counts: bool) -> Any:
    """``unique``/``unique_consecutive`` from traceable ops: the first element of each run of
    equal ``values`` (a NaN is never equal: each its own run) picked by a boolean mask, so
    the result's length is bound at run time; the inverse is each element's run number
    (put back in input order through ``order``, the sort's permutation, where there is
    one), the counts the distances between the runs' starts."""
    from scriptmod._creation import arange, ones_like, zeros
    from scriptmod._shape_ops import cat
    n = values.numel()
    starts = cat([ones_like(values[:1], dtype=D.bool_), values[1:] != values[:-1]])
    out = [values[starts]]
    if return_inverse:
        run = starts.to(D.int64).cumsum(0) - 1
        if order is not None:
            run = zeros(n, dtype=D.int64, device=input.device).scatter(0, order, run)
        out.append(run.reshape(input.shape))
    if return_counts:
        index = arange(n, device=input.device)
        first = index[starts]
        out.append(cat([first[1:], index[-1:] + 1]) - first)    # (the end: n, from the
        # index itself, so that no size is read in Python)
    return out[0] if len(out) == 1 else tuple(out)


def _moved(arr: Any, dim: int) -> Any:
    """``arr`` with ``dim`` first and each slice along it flattened to one row."""
    rest = int(np.prod([n for k, n in enumerate(arr.shape) if k != dim]))
    return np.moveaxis(arr, dim, 0).reshape(arr.shape[dim], rest)


@public(out=False)
def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None) -> Any:
    """The distinct values of ``input`` (slices along ``dim``), sorted; with the index of
    each element's value (``return_inverse``) and each value's count. NaNs stay distinct.
    Traced or scripted (``dim=None``): ``_runs_traced`` over the sorted values."""
    if TRACERS and dim is None:
        values, order = input.reshape(-1).sort()
        return _runs_traced(input, values, order, return_inverse, return_counts)
    refuse_traced("unique")
    arr = np.asarray(input.cpu()._data) if input.device.type != "cpu" else input._data
    if dim is None:
        vals, inv, cnt = np.unique(arr.reshape(-1), return_inverse=True, return_counts=True,
                                   equal_nan=False)
        out = _unique_results(vals, inv.reshape(arr.shape), cnt, return_inverse, return_counts)
    else:
        d = norm_dim(dim, max(input.dim(), 1), "unique")
        if any(n == 0 for k, n in enumerate(arr.shape) if k != d):
            raise ShapeError("There are 0 sized dimensions, and they aren't selected, so unique "
                             "cannot be applied")
        rows = _moved(arr.reshape(arr.shape or (1,)), d)
        _, first, inv, cnt = np.unique(rows, axis=0, return_index=True, return_inverse=True,
                                       return_counts=True)
        vals = np.take(arr.reshape(arr.shape or (1,)), first, axis=d)
        out = _unique_results(vals, inv.reshape(-1), cnt, return_inverse, return_counts)
    return out if input.device.type == "cpu" else _to_device(out, input.device)


def _to_device(out: Any, device: Any) -> Any:
    return tuple(t.to(device) for t in out) if isinstance(out, tuple) else out.to(device)


@public(out=False)
def unique_consecutive(input: Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None) -> Any:
    """``input`` with each run of equal consecutive values (slices along ``dim``) kept once;
    with each element's run index (``return_inverse``) and each run's length. Traced or
    scripted (``dim=None``): ``_runs_traced`` over the values in order."""
    if TRACERS and dim is None:
        return _runs_traced(input, input.reshape(-1), None, return_inverse, return_counts)
    refuse_traced("unique_consecutive")
    arr = np.asarray(input.cpu()._data) if input.device.type != "cpu" else input._data
    d = None if dim is None else norm_dim(dim, max(input.dim(), 1), "unique_consecutive")
    rows = arr.reshape(-1, 1) if d is None else _moved(arr.reshape(arr.shape or (1,)), d)
    starts = np.ones(rows.shape[0], bool)
    starts[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    first = np.flatnonzero(starts)
    inv = np.cumsum(starts) - 1
    cnt = np.diff(np.append(first, rows.shape[0]))
    if d is None:
        vals, inv = arr.reshape(-1)[first], inv.reshape(arr.shape)
    else:
        vals = np.take(arr.reshape(arr.shape or (1,)), first, axis=d)
    out = _unique_results(vals, inv, cnt, return_inverse, return_counts)
    return out if input.device.type == "cpu" else _to_device(out, input.device)


# ---- unravel_index ---------------------------------------------------------------------
@public(method=False, out=False)
def unravel_index(indices: Tensor, shape: Any) -> tuple:
    """The coordinates in an array of ``shape`` of each flat index in ``indices``, one tensor
    per dim (negative and large indices wrap, as PyTorch's do).

    >>> scriptmod.unravel_index(scriptmod.tensor(5), (2, 3))
    (tensor(1), tensor(2))
    """
    if not isinstance(indices, Tensor):
        indices = tensor(indices)
    if indices.dtype.category != D.INT or indices.dtype is D.bool_:
        raise TypeError(f"expected 'indices' to be integer dtype, but got "
                        f"scriptmod.{indices.dtype.name}")
    sizes = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    if any(s < 0 for s in sizes):
        raise ValueError(f"'shape' cannot have negative values, but got {sizes}")
    coords = []
    rest = indices.to(D.int64)
    for n in reversed(sizes):
        coords.append(rest.remainder(n) if n else rest * 0)
        rest = rest.div(n, rounding_mode="floor") if n else rest * 0
    return tuple(reversed(coords))
