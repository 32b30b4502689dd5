"""``op_cases`` rows of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders).

The references are NumPy's own views (``np.diagonal``, ``sliding_window_view``,
``as_strided`` over the flattened input, ``.real``/``.imag``) and complex arithmetic.
"""
from __future__ import annotations

import numpy as np

from op_cases import ALL, COMPLEX, Gen, Sample, case

_F = ("float32", "float64")
# views of complex storage: native code has no complex dtype, and their float rows (read as
# complex with a zero imaginary part, for the real-valued gradcheck) are not views
COMPLEX_VIEWS = frozenset({"real", "imag", "view_as_real", "view_as_complex"})


def _diagonal_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("main", (g.arr((3, 4)),), {}, gr),
            Sample("above", (g.arr((3, 4)),), {"offset": 1}, gr),
            Sample("below-3d", (g.arr((2, 3, 4)),), {"offset": -1, "dim1": -1, "dim2": 0}, gr),
            Sample("past-the-edge", (g.arr((2, 2)),), {"offset": 5}),
            Sample("noncontig", (g.arr((3, 3), noncontig=True),), {"dim1": 1, "dim2": 0}, gr)]


def _diagonal_ref(x: np.ndarray, offset: int = 0, dim1: int = 0, dim2: int = 1) -> np.ndarray:
    return np.diagonal(x, offset, dim1 % x.ndim, dim2 % x.ndim).copy()


def _unfold_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("overlapping", (g.arr((2, 7)),), {"dimension": 1, "size": 3, "step": 2}, gr),
            Sample("gaps", (g.arr((7, 2)),), {"dimension": 0, "size": 2, "step": 3}, gr),
            Sample("last-dim", (g.arr((2, 3, 4)),), {"dimension": -1, "size": 4, "step": 1}, gr),
            Sample("0d", (g.arr(()),), {"dimension": 0, "size": 1, "step": 1}, gr),
            Sample("noncontig", (g.arr((3, 4), noncontig=True),),
                   {"dimension": 0, "size": 2, "step": 1}, gr)]


def _unfold_ref(x: np.ndarray, dimension: int, size: int, step: int) -> np.ndarray:
    if x.ndim == 0:
        return x.reshape(size)
    d = dimension % x.ndim
    windows = np.lib.stride_tricks.sliding_window_view(x, size, axis=d)
    return windows[(slice(None),) * d + (slice(None, None, step),)].copy()


def _as_strided_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("overlapping", (g.arr((3, 4)),), {"size": [2, 3], "stride": [1, 2],
                                                      "offset": 1}, gr),
            Sample("broadcast", (g.arr((4,)),), {"size": [3, 2], "stride": [0, 1]}, gr),
            Sample("transpose", (g.arr((2, 3)),), {"size": [3, 2], "stride": [1, 3]}, gr),
            Sample("0d", (g.arr((5,)),), {"size": [], "stride": [], "offset": 4}, gr)]


def _as_strided_ref(x: np.ndarray, size: list, stride: list,
                    offset: int = 0) -> np.ndarray:
    flat = np.ascontiguousarray(x).reshape(-1)[offset:]
    return np.lib.stride_tricks.as_strided(
        flat, tuple(size), tuple(s * flat.itemsize for s in stride)).copy()


def _parts_samples(g: Gen) -> list[Sample]:
    """Complex samples; float64 rows (read as complex with a zero imaginary part) are what
    the real-valued gradcheck differentiates, and other real dtypes get complex64 ones (the
    ops view complex storage)."""
    dt = g.dtype if g.dtype in COMPLEX + ("float64",) else "complex64"
    gr = g.grad_of(0)
    return [Sample("2d", (g.arr((2, 3), dtype=dt),), {}, gr),
            Sample("0d", (g.arr((), dtype=dt),), {}, gr),
            Sample("empty", (g.arr((0, 2), dtype=dt),), {}),
            Sample("noncontig", (g.arr((2, 3), dtype=dt, noncontig=True),), {}, gr)]


def _unary_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("2d", (g.arr((2, 3)),), {}, gr), Sample("0d", (g.arr(()),), {}, gr),
            Sample("empty", (g.arr((0, 2)),), {}),
            Sample("noncontig", (g.arr((2, 3), noncontig=True),), {}, gr)]


def _view_as_complex_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0)
    return [Sample("pairs", (g.arr((3, 2)),), {}, gr),
            Sample("3d", (g.arr((2, 3, 2)),), {}, gr),
            Sample("one", (g.arr((2,)),), {}, gr),
            Sample("every-other-row", (g.arr((4, 2))[::2],), {}, gr)]


def _complex_samples(g: Gen) -> list[Sample]:
    gr = g.grad_of(0, 1)
    return [Sample("same", (g.arr((2, 3)), g.arr((2, 3))), {}, gr),
            Sample("broadcast", (g.arr((3, 1)), g.arr((4,))), {}, gr),
            Sample("0d", (g.arr(()), g.arr(())), {}, gr),
            Sample("inf", (np.array([np.inf, 1.0], g.arr(()).dtype),
                           np.array([np.inf, -np.inf], g.arr(()).dtype)), {})]


def _complex_ref(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), np.complex128)
    out.real, out.imag = re, im
    return out


def _view_as_real_ref(x: np.ndarray) -> np.ndarray:
    return np.stack([np.real(x), np.imag(x)], -1)


def _view_as_complex_ref(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1]


case("diagonal", _diagonal_samples, _diagonal_ref, ALL)
case("unfold", _unfold_samples, _unfold_ref, ALL)
case("as_strided", _as_strided_samples, _as_strided_ref, ALL)
case("real", _parts_samples, lambda x: np.real(x).copy(), COMPLEX + ("float64",))
case("imag", _parts_samples, lambda x: np.imag(x).copy(), COMPLEX + ("float64",))
case("view_as_real", _parts_samples, _view_as_real_ref, COMPLEX + ("float64",))
case("view_as_complex", _view_as_complex_samples, _view_as_complex_ref, _F)
case("complex", _complex_samples, _complex_ref, _F)
case("conj_physical", _unary_samples, lambda x: np.conj(x), ALL)
