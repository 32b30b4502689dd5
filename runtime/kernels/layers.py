"""Reference kernels of embedding bags, padding modes, distances and other layer primitives.

An embedding bag's ``sum``/``mean`` is a sparse (bags x rows) matrix times the weight: each
used index adds its row with a factor (its per-sample weight, 1 / the bag's count for a
mean, 0 at ``padding_idx``), so on NumPy one ``scipy.sparse`` CSR product computes it without
gathering the picked rows, and the weight's gradient is the transposed product. ``max`` is a
segment reduction of the gathered rows (``maximum.reduceat`` over the bags' starts). Array
modules without ``reduceat`` (CuPy) take ``ufunc.at`` on the bags' ids instead. Bags with no
counted row are zeros. No Python loop runs over bags or indices.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from scriptmod.ir.errors import ArgumentValueError, ShapeError
from scriptmod.ir.ops.layers import check_bag_mode
from . import kernel


class _Bags(NamedTuple):
    """Where each bag's rows are: ``starts`` (B,), the bag id of each used index position
    ``bag`` (used,), the used indices ``idx`` and whether each counts (``keep``: not
    ``padding_idx``), and the number of kept rows per bag ``count`` (B,)."""

    starts: Any
    bag: Any
    idx: Any
    keep: Any
    count: Any


def _check_offsets(offsets: Any, n: int) -> None:
    """torch's checks: the first bag starts at 0, none past the input, none goes back."""
    if offsets.shape[0] and int(offsets[0]) != 0:
        raise ArgumentValueError(f"embedding_bag: offsets[0] has to be 0, i.e., the first "
                                 f"sequence in the mini-batch has to start from position 0. "
                                 f"However, got {int(offsets[0])}")
    if offsets.shape[0] and int(offsets[-1]) > n:
        raise ArgumentValueError(f"embedding_bag: offsets[-1] can not be greater than input's "
                                 f"length {n} but got offsets[-1] of {int(offsets[-1])}")
    if offsets.shape[0] > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        raise ArgumentValueError("embedding_bag: offsets must be non-decreasing")


def _bags(xp: Any, weight: Any, indices: Any, offsets: Any, include_last_offset: bool,
          padding_idx: int | None) -> _Bags:
    """The bags of ``indices`` cut at ``offsets`` (with ``include_last_offset`` the last
    offset ends the last bag, else the input's end does)."""
    if indices.ndim != 1 or offsets.ndim != 1:
        raise ShapeError(f"embedding_bag: expected 1-D indices and offsets, got shapes "
                         f"{tuple(indices.shape)} and {tuple(offsets.shape)}")
    offsets = offsets.astype(np.int64)
    _check_offsets(offsets, indices.shape[0])
    starts = offsets[:-1] if include_last_offset else offsets
    used = int(offsets[-1]) if include_last_offset and offsets.shape[0] else \
        indices.shape[0] if starts.shape[0] else 0
    idx, rows = indices[:used].astype(np.int64), weight.shape[0]
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= rows):
        bad = idx[(idx < 0) | (idx >= rows)][0]
        raise IndexError(f"embedding_bag: index {int(bad)} is out of range for a table of "
                         f"{rows} rows")
    sizes = xp.diff(xp.concatenate([starts, xp.asarray([used], dtype=np.int64)]))
    bag = xp.repeat(xp.arange(starts.shape[0]), sizes)
    keep = xp.ones(used, dtype=bool) if padding_idx is None else idx != padding_idx
    count = xp.bincount(bag[keep], minlength=starts.shape[0])
    return _Bags(starts, bag, idx, keep, count)


def _check_mode(mode: str, indices: Any, per_sample_weights: Any) -> None:
    check_bag_mode(mode, per_sample_weights is not None)
    if per_sample_weights is None:
        return
    if per_sample_weights.shape != indices.shape:
        raise ShapeError(f"embedding_bag: per_sample_weights of shape "
                         f"{tuple(per_sample_weights.shape)} must have the shape of the "
                         f"indices {tuple(indices.shape)}")


def _factors(xp: Any, b: _Bags, mode: str, per_sample_weights: Any, dtype: Any) -> Any:
    """Each used index's factor in its bag's sum: 0 at padding_idx, its per-sample weight,
    over the bag's count for a mean."""
    factor = b.keep.astype(dtype)
    if per_sample_weights is not None:
        factor = factor * per_sample_weights[:b.idx.shape[0]].astype(dtype)
    if mode == "mean":
        factor = factor / xp.maximum(b.count, 1)[b.bag].astype(dtype)
    return factor


def _bag_sum(xp: Any, factor: Any, table: Any, b: _Bags, num_embeddings: int,
             transpose: bool = False) -> Any:
    """sum over used positions i of factor[i] * table[idx[i]] into bag[i]'s row (B, D); with
    ``transpose``, of factor[i] * table[bag[i]] into idx[i]'s row (num_embeddings, D)."""
    bags, width = b.starts.shape[0], table.shape[1]
    if xp is np:
        if table.dtype not in (np.float32, np.float64):     # half floats: sparse has none
            table, factor = table.astype(np.float32), factor.astype(np.float32)
        indptr = np.append(b.starts, b.idx.shape[0])
        from scipy import sparse   # on first use: importing scriptmod never loads scipy
        matrix = sparse.csr_matrix((factor, b.idx, indptr), shape=(bags, num_embeddings))
        return np.asarray(matrix.T @ table if transpose else matrix @ table)
    into, take = (b.idx, b.bag) if transpose else (b.bag, b.idx)
    out = xp.zeros((num_embeddings if transpose else bags, width), dtype=factor.dtype)
    xp.add.at(out, into, table[take] * factor[:, None])
    return out


def _segment(xp: Any, ufunc: str, rows: Any, b: _Bags, identity: Any) -> Any:
    """``ufunc``-reduce ``rows`` (used, D; rows not kept already ``identity``) per bag."""
    out = xp.full((b.starts.shape[0], rows.shape[1]), identity, dtype=rows.dtype)
    if xp is np:     # bags that start before the end; reduceat runs each to the next start
        inside = int(np.searchsorted(b.starts, rows.shape[0]))
        if inside:
            out[:inside] = getattr(np, ufunc).reduceat(rows, b.starts[:inside], axis=0)
        return out
    getattr(xp, ufunc).at(out, b.bag, rows)
    return out


def _bag_max(xp: Any, weight: Any, b: _Bags) -> tuple[Any, Any]:
    """(the picked rows with -inf at padding, each bag's max: -inf where none counts)."""
    rows = weight[b.idx]
    rows[~b.keep] = -np.inf
    return rows, _segment(xp, "maximum", rows, b, -np.inf)


@kernel("embedding_bag")
def _embedding_bag(xp: Any, weight: Any, indices: Any, offsets: Any, per_sample_weights: Any,
                   mode: str = "sum", include_last_offset: bool = False,
                   padding_idx: int | None = None, scale_grad_by_freq: bool = False) -> Any:
    _check_mode(mode, indices, per_sample_weights)
    b = _bags(xp, weight, indices, offsets, include_last_offset, padding_idx)
    if mode == "max":
        best = _bag_max(xp, weight, b)[1]
        return xp.where((b.count > 0)[:, None], best, 0).astype(weight.dtype)
    factor = _factors(xp, b, mode, per_sample_weights, weight.dtype)
    return _bag_sum(xp, factor, weight, b, weight.shape[0]).astype(weight.dtype)


@kernel("embedding_bag_grad")
def _embedding_bag_grad(xp: Any, grad: Any, weight: Any, indices: Any, offsets: Any,
                        per_sample_weights: Any, mode: str = "sum",
                        include_last_offset: bool = False, padding_idx: int | None = None,
                        scale_grad_by_freq: bool = False) -> Any:
    b = _bags(xp, weight, indices, offsets, include_last_offset, padding_idx)
    if mode == "max":       # to the first winning row of each feature (torch: no freq scaling)
        return _max_grad(xp, grad, weight, b)
    factor = _factors(xp, b, mode, per_sample_weights, grad.dtype)
    if scale_grad_by_freq:
        freq = xp.bincount(b.idx, minlength=weight.shape[0])
        factor = factor / freq[b.idx].astype(grad.dtype)
    return _bag_sum(xp, factor, grad, b, weight.shape[0], transpose=True).astype(grad.dtype)


def _max_grad(xp: Any, grad: Any, weight: Any, b: _Bags) -> Any:
    rows, best = _bag_max(xp, weight, b)
    used = rows.shape[0]
    won = (rows == best[b.bag]) & b.keep[:, None]
    position = xp.where(won, xp.arange(used)[:, None], used)
    first = _segment(xp, "minimum", position, b, used)
    full = b.count > 0
    feature = xp.broadcast_to(xp.arange(weight.shape[1]), first.shape)
    out = xp.zeros(weight.shape, dtype=grad.dtype)
    xp.add.at(out, (b.idx[first[full]], feature[full]), grad[full])
    return out


@kernel("embedding_bag_sample_weights_grad")
def _embedding_bag_sample_weights_grad(xp: Any, grad: Any, weight: Any, indices: Any,
                                       offsets: Any, include_last_offset: bool = False,
                                       padding_idx: int | None = None) -> Any:
    b = _bags(xp, weight, indices, offsets, include_last_offset, padding_idx)
    out = xp.zeros(indices.shape, dtype=grad.dtype)
    dots = (grad[b.bag] * weight[b.idx].astype(grad.dtype)).sum(axis=1)
    out[:b.idx.shape[0]] = xp.where(b.keep, dots, xp.asarray(0, dtype=dots.dtype))
    return out
