"""``op_cases`` rows of losses (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders).

CTC's reference enumerates every alignment (C^T paths of a tiny problem), collapses each
(repeats merged, blanks dropped) and sums the probabilities of those that spell the target:
independent of the kernels' alpha/beta recursions."""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from op_cases import Gen, Sample, case


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _ctc_samples(g: Gen) -> list[Sample]:
    """(T, N, C) = (4, 3, 3); padded and concatenated targets, an empty target, a shorter
    input, a repeated label (needs a blank between) and an impossible one (loss inf)."""
    lp = _log_softmax(g.arr((4, 3, 3), -2.0, 2.0).astype(np.float64)).astype(g.dtype)
    padded = np.array([[1, 2, 0], [2, 2, 0], [1, 0, 0]], dtype=np.int64)
    lengths = np.array([2, 2, 0], dtype=np.int64)
    steps = np.array([4, 3, 4], dtype=np.int64)
    concat = np.array([1, 2, 2, 2], dtype=np.int64)
    short = np.array([4, 2, 4], dtype=np.int64)         # (2, 2) needs 3 steps: inf
    other = np.array([[1, 0, 2], [0, 0, 2], [1, 2, 2]], dtype=np.int64)    # labels 0 and 1
    return [Sample("padded", (lp, padded, steps, lengths)),
            Sample("concatenated", (lp, concat, steps, lengths)),
            Sample("blank-2", (lp, other, steps, lengths), {"blank": 2}),
            Sample("impossible", (lp, padded, short, lengths)),
            Sample("zero-infinity", (lp, padded, short, lengths), {"zero_infinity": True})]


def _rows(targets: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    if targets.ndim == 2:
        return [list(targets[n, :k]) for n, k in enumerate(lengths)]
    starts = np.cumsum(lengths) - lengths
    return [list(targets[s:s + k]) for s, k in zip(starts, lengths)]


def _collapse(path: tuple[int, ...], blank: int) -> list[int]:
    merged = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
    return [c for c in merged if c != blank]


def _ctc_paths(lp: np.ndarray, target: list[int], blank: int) -> tuple[float, np.ndarray]:
    """(probability of ``target``, the expected count of each (t, c) in its alignments)."""
    total, occupancy = 0.0, np.zeros(lp.shape)
    for path in itertools.product(range(lp.shape[1]), repeat=lp.shape[0]):
        if _collapse(path, blank) == [int(c) for c in target]:
            p = float(np.exp(sum(lp[t, c] for t, c in enumerate(path))))
            total += p
            occupancy[np.arange(lp.shape[0]), list(path)] += p
    return total, occupancy


def _ctc_ref(lp: np.ndarray, targets: np.ndarray, input_lengths: np.ndarray,
             target_lengths: np.ndarray, blank: int = 0, zero_infinity: bool = False) -> Any:
    out = []
    for n, target in enumerate(_rows(targets, target_lengths)):
        p, _ = _ctc_paths(lp[:input_lengths[n], n], target, blank)
        nll = -np.log(p) if p > 0 else np.inf
        out.append(0.0 if zero_infinity and np.isinf(nll) else nll)
    return np.array(out)


def _ctc_grad_samples(g: Gen) -> list[Sample]:
    out = []
    for s in _ctc_samples(g):
        grad = g.arr((3,), 0.5, 1.5)
        out.append(Sample(s.label, (grad,) + s.inputs, s.attrs))
    return out


def _ctc_grad_ref(grad: np.ndarray, lp: np.ndarray, targets: np.ndarray,
                  input_lengths: np.ndarray, target_lengths: np.ndarray, blank: int = 0,
                  zero_infinity: bool = False) -> np.ndarray:
    """PyTorch's CTC gradient: exp(lp) minus the alignments' posterior occupancy of (t, c),
    times the incoming gradient, 0 past the input length (and for an infinite loss under
    zero_infinity; NaN there without it, as torch)."""
    out = np.zeros(lp.shape)
    for n, target in enumerate(_rows(targets, target_lengths)):
        steps = input_lengths[n]
        p, occupancy = _ctc_paths(lp[:steps, n], target, blank)
        if p == 0:
            out[:steps, n] = 0.0 if zero_infinity else np.nan
            continue
        out[:steps, n] = (np.exp(lp[:steps, n]) - occupancy / p) * grad[n]
    return out


case("ctc_loss", _ctc_samples, _ctc_ref, ("float32", "float64"), grad=False)
case("ctc_loss_grad", _ctc_grad_samples, _ctc_grad_ref, ("float32", "float64"), grad=False)
