"""Reference kernels of losses that are not decompositions: CTC.

The forward is the alpha recursion of Graves et al. (2006) in log space over the extended
label sequence (blank, l1, blank, l2, ..., blank), one time step at a time and vectorized over
the batch; the backward runs the beta recursion the same way and gives PyTorch's gradient
(``exp(lp) - exp(log(sum of alpha * beta over the places of each class) + nll - lp)``, 0 past
each input length).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scriptmod.ir.errors import ArgumentValueError, ShapeError
from . import kernel

_NEG_INF = -np.inf


@dataclass
class _Lattice:
    """One batch's CTC problem: per entry its lengths and the extended labels ``ext`` (N, L)
    with L = 2 max(target_lengths) + 1, and the emissions
    ``emit[t, n, s] = lp[t, n, ext[n, s]]``."""

    input_lengths: Any      # (N,) int64
    target_lengths: Any     # (N,) int64
    ext: Any                # (N, L) int64
    skip: Any               # (N, L) bool: s - 2 -> s is allowed (a label unlike the one before)
    valid: Any              # (N, L) bool: s < 2 target_length + 1
    emit: Any               # (T, N, L) in the working dtype


def _padded_targets(xp: Any, targets: Any, target_lengths: Any, batch: int) -> Any:
    """(N, max target length) class indices from padded (N, S) or concatenated targets."""
    longest = int(target_lengths.max()) if batch else 0
    if targets.ndim == 2:
        if targets.shape[0] != batch or targets.shape[1] < longest:
            raise ShapeError(f"ctc_loss: expected padded targets of shape (N={batch}, "
                             f"S>={longest}), got {tuple(targets.shape)}")
        return targets[:, :longest].astype(np.int64)
    if targets.ndim != 1 or targets.shape[0] < int(target_lengths.sum()):
        raise ShapeError(f"ctc_loss: expected concatenated targets of length at least "
                         f"sum(target_lengths) = {int(target_lengths.sum())}, got shape "
                         f"{tuple(targets.shape)}")
    starts = xp.cumsum(target_lengths) - target_lengths
    place = starts[:, None] + xp.arange(longest)[None, :]
    inside = xp.arange(longest)[None, :] < target_lengths[:, None]
    return xp.where(inside, targets[xp.where(inside, place, 0)], 0).astype(np.int64)


def _lengths(xp: Any, values: Any, batch: int, name: str) -> Any:
    values = xp.asarray(values).reshape(-1).astype(np.int64)
    if values.shape[0] != batch:
        raise ShapeError(f"ctc_loss: {name} must be of size batch_size {batch}, got "
                         f"{values.shape[0]}")
    return values


def _lattice(xp: Any, log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
             blank: int) -> _Lattice:
    steps, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise ArgumentValueError(f"ctc_loss: blank must be in label range [0, {classes}), "
                                 f"got {blank}")
    il = _lengths(xp, input_lengths, batch, "input_lengths")
    tl = _lengths(xp, target_lengths, batch, "target_lengths")
    if batch and (int(il.max()) > steps or int(il.min()) < 0 or int(tl.min()) < 0):
        raise ArgumentValueError(f"ctc_loss: expected input_lengths in [0, {steps}] and "
                                 f"non-negative target_lengths, got {il.tolist()} and "
                                 f"{tl.tolist()}")
    labels = _padded_targets(xp, targets, tl, batch)
    width = 2 * labels.shape[1] + 1
    ext = xp.full((batch, width), blank, dtype=np.int64)
    ext[:, 1::2] = labels
    skip = xp.zeros((batch, width), dtype=bool)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    valid = xp.arange(width)[None, :] < (2 * tl + 1)[:, None]
    emit = _working(log_probs)[:, xp.arange(batch)[:, None], ext]
    return _Lattice(il, tl, ext, skip, valid, emit)


def _working(x: Any) -> Any:
    """float32 or float64 as given (torch's CPU kernel computes in the input's dtype; the
    same order of operations keeps float32 results within rounding of torch's)."""
    return x if x.dtype.itemsize >= 4 else x.astype(np.float32)


def _exp(xp: Any, x: Any) -> Any:
    """exp rounded once to ``x``'s dtype (as C's expf; NumPy's float32 SIMD exp may differ
    by an ulp, which the cancellations of the gradient magnify)."""
    return xp.exp(x.astype(np.float64)).astype(x.dtype)


def _log(xp: Any, x: Any) -> Any:
    return xp.log(x.astype(np.float64)).astype(x.dtype)


def _logsumexp3(xp: Any, a: Any, b: Any, c: Any) -> Any:
    top = xp.maximum(xp.maximum(a, b), c)
    top = xp.where(xp.isneginf(top), 0.0, top).astype(a.dtype)
    return _log(xp, _exp(xp, a - top) + _exp(xp, b - top) + _exp(xp, c - top)) + top


def _logaddexp(xp: Any, a: Any, b: Any) -> Any:
    top = xp.maximum(a, b)
    top = xp.where(xp.isneginf(top), 0.0, top).astype(a.dtype)
    return _log(xp, _exp(xp, a - top) + _exp(xp, b - top)) + top


def _shift(xp: Any, x: Any, by: int) -> Any:
    """``x`` moved ``by`` places along its last axis (right if positive), -inf filled."""
    out = xp.full_like(x, _NEG_INF)
    if by > 0:
        out[:, by:] = x[:, :-by]
    else:
        out[:, :by] = x[:, -by:]
    return out


def _alpha(xp: Any, lat: _Lattice) -> Any:
    """log alpha (T, N, L): the log probability of the prefixes ending in place s at t."""
    steps, width = lat.emit.shape[0], lat.ext.shape[1]
    alpha = xp.full(lat.emit.shape, _NEG_INF, dtype=lat.emit.dtype)
    first = xp.full(lat.ext.shape, _NEG_INF, dtype=lat.emit.dtype)
    first[:, :min(2, width)] = lat.emit[0, :, :min(2, width)]
    alpha[0] = xp.where(lat.valid, first, _NEG_INF)
    for t in range(1, steps):
        prev = alpha[t - 1]
        jump = xp.where(lat.skip, _shift(xp, prev, 2), _NEG_INF)
        step = _logsumexp3(xp, prev, _shift(xp, prev, 1), jump) + lat.emit[t]
        alpha[t] = xp.where(lat.valid, step, _NEG_INF)
    return alpha


def _beta(xp: Any, lat: _Lattice) -> Any:
    """log beta (T, N, L): the log probability of the suffixes from place s at t (this
    step's emission included, as in alpha), -inf past each input length."""
    steps, batch, width = lat.emit.shape
    beta = xp.full(lat.emit.shape, _NEG_INF, dtype=lat.emit.dtype)
    places = xp.arange(width)[None, :]
    ends = (places == 2 * lat.target_lengths[:, None]) | \
        (places == 2 * lat.target_lengths[:, None] - 1)
    skip_next = xp.zeros_like(lat.skip)
    skip_next[:, :-2] = lat.skip[:, 2:]
    nxt = xp.full((batch, width), _NEG_INF, dtype=lat.emit.dtype)
    for t in range(steps - 1, -1, -1):
        jump = xp.where(skip_next, _shift(xp, nxt, -2), _NEG_INF)
        step = _logsumexp3(xp, nxt, _shift(xp, nxt, -1), jump) + lat.emit[t]
        last = (t == lat.input_lengths - 1)[:, None]
        inside = (t < lat.input_lengths - 1)[:, None]
        here = xp.where(last & ends, lat.emit[t], xp.where(inside, step, _NEG_INF))
        beta[t] = nxt = xp.where(lat.valid, here, _NEG_INF)
    return beta


def _nll(xp: Any, lat: _Lattice, alpha: Any) -> Any:
    """-log p(target | input) per batch entry: the last blank or label at the last step."""
    batch = lat.ext.shape[0]
    rows = xp.arange(batch)
    at = xp.maximum(lat.input_lengths - 1, 0)
    blank_end = alpha[at, rows, 2 * lat.target_lengths]
    label_end = xp.where(lat.target_lengths > 0,
                         alpha[at, rows, xp.maximum(2 * lat.target_lengths - 1, 0)], _NEG_INF)
    nll = -_logaddexp(xp, blank_end, label_end)
    empty = lat.input_lengths == 0        # no steps: only the empty target has probability 1
    return xp.where(empty, xp.where(lat.target_lengths == 0, 0.0, np.inf), nll).astype(nll.dtype)


@kernel("ctc_loss")
def _ctc_loss(xp: Any, log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
              blank: int = 0, zero_infinity: bool = False) -> Any:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lat = _lattice(xp, log_probs, targets, input_lengths, target_lengths, blank)
        nll = _nll(xp, lat, _alpha(xp, lat))
    if zero_infinity:
        nll = xp.where(xp.isposinf(nll), 0.0, nll)
    return nll.astype(log_probs.dtype)


def _class_sums(xp: Any, lat: _Lattice, both: Any, classes: int) -> Any:
    """log of the sum of alpha * beta over the places of each class: (T, N, C), -inf for a
    class with no place. Accumulated place by place from the last, as torch's loop does."""
    steps, batch, width = both.shape
    lcab = xp.full((steps, batch, classes), _NEG_INF, dtype=both.dtype)
    times, rows = xp.arange(steps)[:, None], xp.arange(batch)[None, :]
    for s in range(width - 1, -1, -1):
        cls = lat.ext[:, s][None, :]
        acc, add = lcab[times, rows, cls], both[:, :, s]
        lcab[times, rows, cls] = xp.where(xp.isneginf(acc), add, _logaddexp(xp, acc, add))
    return lcab


@kernel("ctc_loss_grad")
def _ctc_loss_grad(xp: Any, grad: Any, log_probs: Any, targets: Any, input_lengths: Any,
                   target_lengths: Any, blank: int = 0, zero_infinity: bool = False) -> Any:
    steps, _, classes = log_probs.shape
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lat = _lattice(xp, log_probs, targets, input_lengths, target_lengths, blank)
        alpha = _alpha(xp, lat)
        nll = _nll(xp, lat, alpha)
        lcab = _class_sums(xp, lat, alpha + _beta(xp, lat), classes)
        lp = _working(log_probs)
        out = (_exp(xp, lp) - _exp(xp, lcab + nll[None, :, None] - lp)) * \
            _working(grad)[None, :, None]
    live = xp.arange(steps)[:, None] < lat.input_lengths[None, :]
    if zero_infinity:
        live = live & ~xp.isposinf(nll)[None, :]
    return xp.where(live[:, :, None], out, 0.0).astype(log_probs.dtype)
