"""``op_cases`` rows of special functions (torch.special and the top-level gamma/erfinv/Bessel
family; imported by ``op_cases`` at its end; build rows with its ``case`` and sample
builders). References are SciPy's ``special`` in float64, and plain float64 three-term
recurrences for the orthogonal polynomials SciPy lacks (Chebyshev V and W)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.special as sps

from op_cases import FLOATS, Gen, Sample, SampleFn, case, unary

_HALF_OK = FLOATS + ("int32", "int64", "bool")
_NO_HALF = ("float32", "float64", "int64")


def _in_float(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Integer and bool inputs are computed in floating point, as the ops promote them."""
    def ref(*xs: Any, **attrs: Any) -> Any:
        return fn(*[np.asarray(x, np.float64) for x in xs], **attrs)
    return ref


# op -> (reference, sample range, PyTorch has a half kernel, differentiable)
_UNARY: dict[str, tuple[Callable[[Any], Any], float, float, bool, bool]] = {
    "airy_ai": (lambda x: sps.airy(x)[0], -2.0, 2.0, False, False),
    # PyTorch's Bessel forms are within 1e-10 of SciPy's away from the functions' zeros
    # (tests/scriptmod/ops/test_special.py compares them with torch everywhere)
    "bessel_j0": (sps.j0, -2.0, 2.0, False, False),
    "bessel_j1": (sps.j1, -3.0, 3.0, False, False),
    "bessel_y0": (sps.y0, 1.2, 3.5, False, False),
    "bessel_y1": (sps.y1, 0.5, 2.0, False, False),
    "modified_bessel_i0": (sps.i0, -5.0, 5.0, False, False),
    "modified_bessel_i1": (sps.i1, -5.0, 5.0, False, False),
    "modified_bessel_k0": (sps.k0, 0.5, 5.0, False, False),
    "modified_bessel_k1": (sps.k1, 0.5, 5.0, False, False),
    "scaled_modified_bessel_k0": (sps.k0e, 0.5, 5.0, False, False),
    "scaled_modified_bessel_k1": (sps.k1e, 0.5, 5.0, False, False),
    "spherical_bessel_j0": (lambda x: np.sinc(x / np.pi), -6.0, 6.0, False, False),
    "i0": (sps.i0, -5.0, 5.0, True, True),
    "i0e": (sps.i0e, -5.0, 5.0, True, True),
    "i1": (sps.i1, -5.0, 5.0, True, True),
    "i1e": (sps.i1e, -5.0, 5.0, True, True),
    "erfcx": (sps.erfcx, -2.0, 4.0, False, True),
    "erfinv": (sps.erfinv, -0.9, 0.9, True, True),
    "log_ndtr": (sps.log_ndtr, -5.0, 3.0, False, True),
    "ndtri": (sps.ndtri, 0.05, 0.95, False, True),
    "lgamma": (sps.gammaln, 0.2, 5.0, True, True),
    "digamma": (sps.psi, 0.3, 5.0, True, True),
    "entr": (sps.entr, 0.1, 3.0, True, True),
}
for _op, (_ref, _lo, _hi, _half, _diff) in _UNARY.items():
    _dts = _HALF_OK if _half else _NO_HALF
    if _hi - _lo < 1:        # no integer in the range
        _dts = tuple(d for d in _dts if d in FLOATS)
    case(_op, unary(_lo, _hi), _in_float(_ref), _dts, grad=_diff)


def _polygamma_samples(g: Gen) -> list[Sample]:
    """Each order 0..3, 2-d and 0-d, and an empty input."""
    gr = g.grad_of(0)
    out = [Sample(f"n{n}", (g.arr((2, 3), 0.3, 4.0),), {"n": n}, gr) for n in range(4)]
    return out + [Sample("0d", (g.arr((), 0.3, 4.0),), {"n": 1}, gr),
                  Sample("empty", (g.arr((0, 3), 0.3, 4.0),), {"n": 2})]


def _trigamma(x: Any) -> Any:
    """PyTorch's trigamma (its polygamma for n = 1), accurate to ~1e-9: the reflection below
    1/2, six steps of the recurrence, then four terms of the asymptotic series (SciPy's is
    exact to 1e-15)."""
    small = x < 0.5
    return np.where(small, (np.pi / np.sin(np.pi * x)) ** 2 - _trigamma_series(1 - x),
                    _trigamma_series(x))


def _trigamma_series(x: Any) -> Any:
    out = np.zeros_like(x)
    for _ in range(6):
        out, x = out + 1 / (x * x), x + 1
    ixx = 1 / (x * x)
    return out + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx / 42))) / x


case("polygamma", _polygamma_samples,
     _in_float(lambda x, n: _trigamma(x) if n == 1 else sps.polygamma(n, x)),
     FLOATS + ("int64",), grad=True)


def _second_only(lo: float, hi: float, lo_b: float, hi_b: float) -> SampleFn:
    """Binary samples differentiated in the second input only (the first has no derivative)."""
    def make(g: Gen) -> list[Sample]:
        A = lambda s, **k: g.arr(s, lo, hi, **k)     # noqa: E731
        B = lambda s, **k: g.arr(s, lo_b, hi_b, **k)     # noqa: E731
        gr = g.grad_of(1)
        return [Sample("same", (A((2, 3)), B((2, 3))), {}, gr),
                Sample("broadcast", (A((3, 1)), B((4,))), {}, gr),
                Sample("0d-other", (A((2, 3)), B(())), {}),
                Sample("empty", (A((0, 3)), B((3,))), {}),
                Sample("noncontig", (A((2, 3), noncontig=True), B((2, 3), noncontig=True)), {}, gr),
                Sample("scalar-left", (round(float(lo + 0.5), 3), B((2, 3))), {}, gr),
                Sample("scalar-right", (A((2, 3)), round(float(lo_b + 0.5), 3)), {})]
    return make


case("zeta", _second_only(1.5, 4.0, 0.5, 3.0), _in_float(sps.zeta), ("float32", "float64", "int64"))
case("igamma", _second_only(0.5, 3.0, 0.2, 4.0), _in_float(sps.gammainc), FLOATS)
case("igammac", _second_only(0.5, 3.0, 0.2, 4.0), _in_float(sps.gammaincc), FLOATS)


def _three_term(first: Callable[[float], float], step: Callable[[float, int, float, float], float]
                ) -> Callable[[Any, Any], Any]:
    """The float64 reference ``P(x, n)`` of a polynomial with ``P_0 = 1``, ``P_1 = first(x)``
    and ``P_{k+1} = step(x, k, P_{k-1}, P_k)``; 0 for n < 0."""
    def one(x: float, n: float) -> float:
        n = int(n)
        if n < 0:
            return 0.0
        p, q = 1.0, first(x)
        if n == 0:
            return p
        for k in range(1, n):
            p, q = q, step(x, k, p, q)
        return q

    def ref(x: Any, n: Any) -> Any:
        return np.vectorize(one, otypes=[np.float64])(np.asarray(x, np.float64),
                                                      np.asarray(n, np.float64))
    return ref


def _chebyshev(offset: float, scale: float, shifted: bool) -> Callable[[Any, Any], Any]:
    """Chebyshev T (scale 1), U (2), V (2, -1), W (2, +1): ``P_1 = scale y + offset``."""
    y = (lambda x: 2 * x - 1) if shifted else (lambda x: x)
    return _three_term(lambda x: scale * y(x) + offset,
                       lambda x, k, p, q: 2 * y(x) * q - p)


_POLYNOMIALS = {
    "chebyshev_polynomial_t": (_chebyshev(0, 1, False), -1.5, 1.5),
    "chebyshev_polynomial_u": (_chebyshev(0, 2, False), -1.5, 1.5),
    "chebyshev_polynomial_v": (_chebyshev(-1, 2, False), -1.5, 1.5),
    "chebyshev_polynomial_w": (_chebyshev(1, 2, False), -1.5, 1.5),
    "shifted_chebyshev_polynomial_t": (_chebyshev(0, 1, True), -0.2, 1.2),
    "shifted_chebyshev_polynomial_u": (_chebyshev(0, 2, True), -0.2, 1.2),
    "shifted_chebyshev_polynomial_v": (_chebyshev(-1, 2, True), -0.2, 1.2),
    "shifted_chebyshev_polynomial_w": (_chebyshev(1, 2, True), -0.2, 1.2),
    "hermite_polynomial_h": (lambda x, n: np.where(n < 0, 0.0, sps.eval_hermite(
        np.maximum(n, 0).astype(np.int64), x)), -2.0, 2.0),
    "hermite_polynomial_he": (lambda x, n: np.where(n < 0, 0.0, sps.eval_hermitenorm(
        np.maximum(n, 0).astype(np.int64), x)), -2.0, 2.0),
    "laguerre_polynomial_l": (_three_term(lambda x: 1 - x, lambda x, k, p, q:
                                          ((2 * k + 1 - x) * q - k * p) / (k + 1)), -2.0, 4.0),
    "legendre_polynomial_p": (_three_term(lambda x: x, lambda x, k, p, q:
                                          ((2 * k + 1) * x * q - k * p) / (k + 1)), -1.5, 1.5),
}


def _polynomial_samples(lo: float, hi: float) -> SampleFn:
    """Degrees as an int tensor, a float tensor, a Python int (past the trigonometric
    threshold too), a negative degree; broadcast, 0-d, empty and non-contiguous inputs."""
    def make(g: Gen) -> list[Sample]:
        X = lambda s, **k: g.arr(s, lo, hi, **k)     # noqa: E731
        N = lambda s: g.arr(s, 0, 9, dtype="int64")    # noqa: E731
        return [Sample("int-n", (X((2, 3)), N((2, 3)))),
                Sample("float-n", (X((2, 3)), N((2, 3)).astype(np.float64))),
                Sample("broadcast", (X((3, 1)), N((4,)))),
                Sample("scalar-n", (X((2, 3)), 3)),
                Sample("scalar-n-large", (X((5,)), 11)),
                Sample("negative-n", (X((3,)), -1)),
                Sample("scalar-x", (0.25, N((4,)))),
                Sample("0d", (X(()), N(()))),
                Sample("empty", (X((0, 3)), N((3,)))),
                Sample("noncontig", (X((2, 3), noncontig=True), N((2, 3))))]
    return make


for _op, (_ref, _lo, _hi) in _POLYNOMIALS.items():
    case(_op, _polynomial_samples(_lo, _hi), _ref, ("float32", "float64", "int64"), grad=False)
