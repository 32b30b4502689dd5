"""``op_cases`` rows of embedding bags, padding, distances and other layers (imported by
``op_cases`` at its end; build rows with its ``case`` and sample builders).

The embedding-bag references are float64 loops over the bags, written from the definition
(each bag's kept rows reduced, an empty bag zeros; the weight gradient adds each kept row's
share of its bag's gradient back, the max's to the first winning row), not from the
kernels' segment reductions.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from op_cases import Gen, Sample, case

_F = ("float32", "float64")


def _bag_members(idx: np.ndarray, off: np.ndarray, include_last_offset: bool,
                 padding_idx: int | None) -> Iterator[list[int]]:
    """The positions (into ``idx``) of each bag's kept indices."""
    bounds = list(off) + ([] if include_last_offset else [len(idx)])
    for start, end in zip(bounds[:-1], bounds[1:]):
        yield [k for k in range(start, end) if idx[k] != padding_idx]


def _bag_ref(w: np.ndarray, idx: np.ndarray, off: np.ndarray, psw: Any, mode: str = "sum",
             include_last_offset: bool = False, padding_idx: int | None = None,
             scale_grad_by_freq: bool = False) -> np.ndarray:
    out = []
    for members in _bag_members(idx, off, include_last_offset, padding_idx):
        rows = [w[idx[k]] * (1.0 if psw is None else psw[k]) for k in members]
        reduce = {"sum": np.sum, "mean": np.mean, "max": np.max}[mode]
        out.append(reduce(rows, axis=0) if rows else np.zeros(w.shape[1]))
    return np.array(out).reshape(-1, w.shape[1])


def _bag_grad_ref(g: np.ndarray, w: np.ndarray, idx: np.ndarray, off: np.ndarray, psw: Any,
                  mode: str = "sum", include_last_offset: bool = False,
                  padding_idx: int | None = None, scale_grad_by_freq: bool = False) -> np.ndarray:
    out = np.zeros(w.shape)
    freq = np.bincount(idx, minlength=w.shape[0])
    for b, members in enumerate(_bag_members(idx, off, include_last_offset, padding_idx)):
        if mode == "max":
            for d in range(w.shape[1]):
                if members:
                    winner = max(members, key=lambda k: (w[idx[k], d], -k))
                    out[idx[winner], d] += g[b, d]
            continue
        for k in members:
            share = g[b] / (len(members) if mode == "mean" else 1.0)
            share = share * (1.0 if psw is None else psw[k])
            out[idx[k]] += share / (freq[idx[k]] if scale_grad_by_freq else 1.0)
    return out


def _sample_weights_grad_ref(g: np.ndarray, w: np.ndarray, idx: np.ndarray, off: np.ndarray,
                             include_last_offset: bool = False,
                             padding_idx: int | None = None) -> np.ndarray:
    out = np.zeros(idx.shape)
    for b, members in enumerate(_bag_members(idx, off, include_last_offset, padding_idx)):
        for k in members:
            out[k] = g[b] @ w[idx[k]]
    return out


def _bag_samples(g: Gen) -> list[Sample]:
    w, grad = g.arr((6, 3)), g.grad_of(0)
    idx = np.array([1, 4, 4, 0, 2, 5, 1])
    off = np.array([0, 3, 3, 5])
    psw = g.arr((7,))
    return [Sample("sum", (w, idx, off, None), {"mode": "sum"}, grad),
            Sample("mean-padding", (w, idx, off, None), {"mode": "mean", "padding_idx": 4}, grad),
            Sample("max", (w, idx, off, None), {"mode": "max"}, grad),
            Sample("max-padding", (w, idx, off, None), {"mode": "max", "padding_idx": 1}, grad),
            Sample("weights", (w, idx, off, psw), {"mode": "sum", "padding_idx": 0},
                   g.grad_of(0, 3)),
            Sample("last-offset", (w, idx, np.array([0, 2, 6]), None),
                   {"mode": "mean", "include_last_offset": True}, grad),
            Sample("freq", (w, idx, off, None), {"mode": "sum", "scale_grad_by_freq": True}),
            Sample("int32-empty-trailing", (w, idx.astype(np.int32), np.array([0, 7, 7]), None),
                   {"mode": "sum"}, grad),
            Sample("no-bags", (w, idx, np.array([0]), None),
                   {"mode": "sum", "include_last_offset": True})]


def _bag_grad_samples(g: Gen) -> list[Sample]:
    return [Sample(s.label, (g.arr((len(s.inputs[2]) - s.attrs.get("include_last_offset", 0),
                                    3)), *s.inputs), s.attrs)
            for s in _bag_samples(g)]


def _sample_weights_grad_samples(g: Gen) -> list[Sample]:
    w, idx = g.arr((6, 3)), np.array([1, 4, 4, 0, 2, 5, 1])
    return [Sample("plain", (g.arr((3, 3)), w, idx, np.array([0, 3, 3]))),
            Sample("padding-last-offset", (g.arr((2, 3)), w, idx, np.array([0, 2, 5])),
                   {"include_last_offset": True, "padding_idx": 4})]


case("embedding_bag", _bag_samples, _bag_ref, _F)
case("embedding_bag_grad", _bag_grad_samples, _bag_grad_ref, _F, grad=False)
case("embedding_bag_sample_weights_grad", _sample_weights_grad_samples,
     _sample_weights_grad_ref, _F, grad=False)
