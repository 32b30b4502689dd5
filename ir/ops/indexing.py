"""Schemas of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique.

Only the ops whose result has a shape known before they run are rows here: the scatter
writes (``scatter``: every ``scatter*``/``index_add``/``index_copy``/``index_fill``/
``index_reduce`` is one of its reductions), ``searchsorted`` (``bucketize`` too), ``isin``,
``histc``/``histogram`` and ``nonzero_static``. ``take``, ``put``, ``take_along_dim``,
``masked_scatter``, ``unravel_index`` and ``count_nonzero`` are decompositions; ``nonzero``,
``masked_select``, ``unique``, ``bincount`` and ``histogramdd`` have data-dependent shapes,
run eagerly and are refused by the tracer (``scriptmod._ops_indexing``).
"""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from ..schema import NONDIFF, op
from ..types import Shape

# ``scatter``'s reductions: "none" writes (later duplicates win), the others combine every
# value sent to a position (with the position's own value unless ``include_self=False``)
SCATTER_REDUCTIONS = ("none", "sum", "prod", "mean", "amax", "amin")


def _searchsorted_dtype(ops: Sequence[Any], attrs: dict) -> Any:
    return D.int32 if attrs.get("out_int32") else D.int64


def _searchsorted_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return ops[1][1] if R.is_tensor(ops[1]) else ()


def _histogram_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    edges = ops[2][1] if R.is_tensor(ops[2]) else None
    if edges is not None:
        n = edges[0] if edges else None
        return ((None if n is None or not isinstance(n, int) else n - 1,), edges)
    bins = attrs.get("bins", 100)
    return ((bins,), (bins + 1,))


op("scatter(Tensor self, Tensor index, Tensor src, *, int dim, str reduce='none', "
   "bool include_self=True) -> Tensor", R.same, R.same_shape)
# the sorted rows are ``sorted_sequence`` (1-d: one row for every value) ordered by
# ``sorter`` when given; ``self`` is the values to place (a tensor or a Python number)
op("searchsorted(Tensor sorted_sequence, Tensor|Scalar self, Tensor? sorter=None, *, "
   "bool right=False, bool out_int32=False) -> Tensor", _searchsorted_dtype,
   _searchsorted_shape, NONDIFF)
op("isin(Tensor|Scalar elements, Tensor|Scalar test_elements, *, bool assume_unique=False, "
   "bool invert=False) -> Tensor", R.to_bool,
   lambda ops, attrs, values: ops[0][1] if R.is_tensor(ops[0]) else (), NONDIFF)
# ``min == max`` (both 0 by default): the data's own minimum and maximum
op("histc(Tensor self, *, int bins=100, float min=0.0, float max=0.0) -> Tensor", R.same,
   lambda ops, attrs, values: (attrs.get("bins", 100),), NONDIFF)
# ``edges`` given: they are the bins; else ``bins`` equal bins over ``range`` (None: the
# data's minimum and maximum). Results: the counts (or densities) and the bin edges
op("histogram(Tensor self, Tensor? weight=None, Tensor? edges=None, *, int bins=100, "
   "float[]? range=None, bool density=False) -> (Tensor, Tensor)",
   lambda ops, attrs: (R.same(ops, attrs),) * 2, _histogram_shape, NONDIFF)
op("nonzero_static(Tensor self, *, int size, int fill_value=-1) -> Tensor", R.to_int64,
   lambda ops, attrs, values: (attrs["size"], len(ops[0][1]) if ops[0][1] is not None else None),
   NONDIFF)
