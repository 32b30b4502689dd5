"""Reference kernels of embedding bags, padding modes, distances and other layer primitives.

An embedding bag is a segment reduction of the picked rows: ``ufunc.reduceat`` over the
bags' start positions on NumPy (one pass, no Python loop over bags), ``ufunc.at`` on the
bags' ids elsewhere (CuPy). Rows at ``padding_idx`` take the reduction's identity, so they
change no sum or max; bags with no row left are zeros.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from scriptmod.ir.errors import ArgumentValueError, ShapeError
from scriptmod.ir.ops.layers import EMBEDDING_BAG_MODES
from . import kernel

_IDENTITY = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf}


class _Bags(NamedTuple):
    """Where each bag's rows are: ``starts`` (B,), the bag id of each used index position
    ``bag`` (used,), the used indices ``idx`` and whether each counts (``keep``: not
    ``padding_idx``), and the number of kept rows per bag ``count`` (B,)."""

    starts: Any
    bag: Any
    idx: Any
    keep: Any
    count: Any


def _bags(xp: Any, weight: Any, indices: Any, offsets: Any, include_last_offset: bool,
          padding_idx: int | None) -> _Bags:
    """The bags of ``indices`` cut at ``offsets``, after torch's checks."""
    if indices.ndim != 1 or offsets.ndim != 1:
        raise ShapeError(f"embedding_bag: expected 1-D indices and offsets, got shapes "
                         f"{tuple(indices.shape)} and {tuple(offsets.shape)}")
    n, rows = indices.shape[0], weight.shape[0]
    offsets = offsets.astype(np.int64)
    if offsets.shape[0] and int(offsets[0]) != 0:
        raise ArgumentValueError(f"embedding_bag: offsets[0] has to be 0, i.e., the first "
                                 f"sequence in the mini-batch has to start from position 0. "
                                 f"However, got {int(offsets[0])}")
    if offsets.shape[0] and int(offsets[-1]) > n:
        raise ArgumentValueError(f"embedding_bag: offsets[-1] can not be greater than input's "
                                 f"length {n} but got offsets[-1] of {int(offsets[-1])}")
    if offsets.shape[0] > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        raise ArgumentValueError("embedding_bag: offsets must be non-decreasing")
    starts = offsets[:-1] if include_last_offset else offsets
    ends = offsets[1:] if include_last_offset else xp.concatenate(
        [offsets[1:], xp.asarray([n], dtype=np.int64)])
    used = int(ends[-1]) if ends.shape[0] else 0
    idx = indices[:used].astype(np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= rows):
        bad = idx[(idx < 0) | (idx >= rows)][0]
        raise IndexError(f"embedding_bag: index {int(bad)} is out of range for a table of "
                         f"{rows} rows")
    bag = xp.repeat(xp.arange(starts.shape[0]), ends - starts)
    keep = xp.ones(used, dtype=bool) if padding_idx is None else idx != padding_idx
    count = xp.bincount(bag[keep], minlength=starts.shape[0]) if used else \
        xp.zeros(starts.shape[0], dtype=np.int64)
    return _Bags(starts, bag, idx, keep, count)


def _segments(xp: Any, ufunc: str, rows: Any, b: _Bags) -> Any:
    """``ufunc``-reduce ``rows`` (used, D) per bag into (B, D); rows not kept and empty bags
    give the identity."""
    identity = _IDENTITY[ufunc]
    rows = xp.where(b.keep[:, None], rows, xp.asarray(identity, dtype=rows.dtype))
    if xp is np:     # one identity row past the end: a bag may start there
        ext = np.concatenate([rows, np.full((1, rows.shape[1]), identity, rows.dtype)])
        out = getattr(np, ufunc).reduceat(ext, b.starts, axis=0) if b.starts.shape[0] else \
            ext[:0]
        return np.where((b.count > 0)[:, None], out, identity).astype(rows.dtype)
    out = xp.full((b.starts.shape[0], rows.shape[1]), identity, dtype=rows.dtype)
    getattr(xp, ufunc).at(out, b.bag, rows)
    return out


def _check_mode(mode: str, per_sample_weights: Any) -> None:
    if mode not in EMBEDDING_BAG_MODES:
        raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}')")


def _picked(xp: Any, weight: Any, b: _Bags, per_sample_weights: Any) -> Any:
    rows = weight[b.idx]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:b.idx.shape[0], None]
    return rows


def _max_winners(xp: Any, rows: Any, out: Any, b: _Bags) -> Any:
    """Position (into the used indices) of the row that gave each (bag, feature) its max:
    the first such row, as torch; for bags with no kept row, anything."""
    won = (rows == out[b.bag]) & b.keep[:, None]
    pos = xp.where(won, xp.arange(rows.shape[0])[:, None], rows.shape[0])
    first = _segments(xp, "minimum", pos.astype(np.float64), b)
    return xp.minimum(first, max(rows.shape[0] - 1, 0)).astype(np.int64)


@kernel("embedding_bag")
def _embedding_bag(xp: Any, weight: Any, indices: Any, offsets: Any, per_sample_weights: Any,
                   mode: str = "sum", include_last_offset: bool = False,
                   padding_idx: int | None = None, scale_grad_by_freq: bool = False) -> Any:
    _check_mode(mode, per_sample_weights)
    if per_sample_weights is not None and per_sample_weights.shape != indices.shape:
        raise ShapeError(f"embedding_bag: per_sample_weights of shape "
                         f"{tuple(per_sample_weights.shape)} must have the shape of the "
                         f"indices {tuple(indices.shape)}")
    b = _bags(xp, weight, indices, offsets, include_last_offset, padding_idx)
    rows = _picked(xp, weight, b, per_sample_weights)
    if mode == "max":
        best = _segments(xp, "maximum", rows, b)
        return xp.where((b.count > 0)[:, None], best, 0).astype(weight.dtype)
    out = _segments(xp, "add", rows, b)
    if mode == "mean":
        out = out / xp.maximum(b.count, 1)[:, None].astype(out.dtype)
    return out.astype(weight.dtype)


@kernel("embedding_bag_grad")
def _embedding_bag_grad(xp: Any, grad: Any, weight: Any, indices: Any, offsets: Any,
                        per_sample_weights: Any, mode: str = "sum",
                        include_last_offset: bool = False, padding_idx: int | None = None,
                        scale_grad_by_freq: bool = False) -> Any:
    b = _bags(xp, weight, indices, offsets, include_last_offset, padding_idx)
    out = xp.zeros(weight.shape, dtype=grad.dtype)
    if mode == "max":       # to the winning row of each feature (torch: no freq scaling)
        rows = _picked(xp, weight, b, None)
        best = _segments(xp, "maximum", rows, b)
        win, full = _max_winners(xp, rows, best, b), b.count > 0
        feature = xp.broadcast_to(xp.arange(weight.shape[1]), win.shape)
        xp.add.at(out, (b.idx[win[full]], feature[full]), grad[full])
        return out
    rows = grad[b.bag]
    if mode == "mean":
        rows = rows / xp.maximum(b.count, 1)[b.bag][:, None].astype(rows.dtype)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:b.idx.shape[0], None]
    if scale_grad_by_freq:
        freq = xp.bincount(b.idx, minlength=weight.shape[0])
        rows = rows / freq[b.idx][:, None].astype(rows.dtype)
    rows = xp.where(b.keep[:, None], rows, xp.asarray(0, dtype=rows.dtype))
    xp.add.at(out, b.idx, rows)
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
