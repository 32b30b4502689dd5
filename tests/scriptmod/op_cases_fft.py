"""``op_cases`` rows of torch.fft's three transform families (imported by ``op_cases`` at its
end; build rows with its ``case`` and sample builders).

The references are the DFT written as a matrix product in complex128, one dim at a time
(``exp(-+2 pi i j k / n)``), independent of pocketfft: ``fft_r2c`` keeps the first
``n // 2 + 1`` entries of the full transform, ``fft_c2r`` completes its one-sided input by
Hermitian symmetry (``X[n - k] = conj(X[k])``) and takes the real part of the inverse.
Sizes are small, odd and even; float64 samples of real inputs carry a gradcheck.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from op_cases import COMPLEX, Gen, Sample, case

REAL = ("float32", "float64")
_SCALE = {"none": lambda n: 1.0, "by_root_n": lambda n: 1 / np.sqrt(n), "by_n": lambda n: 1 / n}


def dft(x: np.ndarray, axis: int, forward: bool) -> np.ndarray:
    """The unnormalized DFT of ``x`` along ``axis`` as a matrix product (sign by direction)."""
    n = x.shape[axis]
    k = np.arange(n)
    m = np.exp((-2j if forward else 2j) * np.pi * np.outer(k, k) / n)
    return np.moveaxis(np.tensordot(m, np.moveaxis(x, axis, 0), axes=(1, 0)), 0, axis)


def _scaled(y: np.ndarray, sizes: Sequence[int], normalization: str) -> np.ndarray:
    return y * _SCALE[normalization](int(np.prod(sizes)))


def ref_c2c(x: np.ndarray, dim: Sequence[int], normalization: str,
            forward: bool) -> np.ndarray:
    y = x.astype(np.complex128)
    for d in dim:
        y = dft(y, d, forward)
    return _scaled(y, [x.shape[d] for d in dim], normalization)


def ref_r2c(x: np.ndarray, dim: Sequence[int], normalization: str,
            forward: bool) -> np.ndarray:
    y = ref_c2c(x, dim, normalization, True)
    last = dim[-1]
    y = np.take(y, np.arange(x.shape[last] // 2 + 1), axis=last)
    return y if forward else np.conj(y)


def ref_c2r(x: np.ndarray, dim: Sequence[int], normalization: str, forward: bool,
            last_dim_size: int) -> np.ndarray:
    y = np.conj(x) if forward else x.astype(np.complex128)
    for d in dim[:-1]:
        y = dft(y, d, False)
    last, n = dim[-1], last_dim_size
    k = np.arange(n)
    mirrored = np.where(k < y.shape[last], k, (n - k) % n)
    full = np.take(y, mirrored, axis=last)
    conj = (k >= y.shape[last]).reshape((-1,) + (1,) * (y.ndim - 1 - last % y.ndim))
    full = np.where(conj, np.conj(full), full)
    sizes = [x.shape[d] for d in dim[:-1]] + [n]
    return _scaled(dft(full, last, False).real, sizes, normalization)


def _c2c_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("1d-even", (g.arr((3, 8)),), dict(dim=[-1], normalization="none",
                                                     forward=True), gr),
            Sample("1d-odd-inverse", (g.arr((2, 5)),), dict(dim=[1], normalization="by_n",
                                                            forward=False), gr),
            Sample("2d-ortho", (g.arr((2, 3, 4)),), dict(dim=[0, 2], normalization="by_root_n",
                                                         forward=True), gr),
            Sample("noncontig", (g.arr((4, 3), noncontig=True),),
                   dict(dim=[0], normalization="by_n", forward=True), gr),
            Sample("length-1", (g.arr((2, 1)),), dict(dim=[-1], normalization="by_root_n",
                                                      forward=False), gr)]


def _r2c_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("1d-even", (g.arr((3, 8)),), dict(dim=[-1], normalization="none",
                                                     forward=True), gr),
            Sample("1d-odd", (g.arr((2, 7)),), dict(dim=[1], normalization="by_n",
                                                    forward=True), gr),
            Sample("ihfft", (g.arr((2, 6)),), dict(dim=[-1], normalization="by_n",
                                                   forward=False), gr),
            Sample("2d-ortho", (g.arr((3, 4, 5)),), dict(dim=[0, 1], normalization="by_root_n",
                                                         forward=True), gr),
            Sample("noncontig", (g.arr((5, 3), noncontig=True),),
                   dict(dim=[0], normalization="none", forward=False), gr)]


def _c2r_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("1d-even", (g.arr((3, 5)),), dict(dim=[-1], normalization="by_n",
                                                     forward=False, last_dim_size=8), gr),
            Sample("1d-odd", (g.arr((2, 4)),), dict(dim=[1], normalization="none",
                                                    forward=False, last_dim_size=7), gr),
            Sample("hfft", (g.arr((2, 4)),), dict(dim=[-1], normalization="none",
                                                  forward=True, last_dim_size=6), gr),
            Sample("2d-ortho", (g.arr((3, 2, 3)),), dict(dim=[0, 2], normalization="by_root_n",
                                                         forward=False, last_dim_size=5), gr),
            Sample("noncontig", (g.arr((3, 4), noncontig=True),),
                   dict(dim=[0], normalization="by_n", forward=True, last_dim_size=4), gr)]


case("fft_c2c", _c2c_samples, ref_c2c, REAL + COMPLEX)
case("fft_r2c", _r2c_samples, ref_r2c, REAL)
case("fft_c2r", _c2r_samples, ref_c2r, REAL + COMPLEX)
