"""PyTorch's orthogonal polynomials ``P(x, n)``, element by element as ATen's ``Math.h`` computes
them, vectorized over the elements still iterating.

Each polynomial is a list of special cases tried in order (``n < 0`` gives 0, ``|x| == 1``
a closed form, large ``n`` inside ``(-1, 1)`` a trigonometric form, ...) and a three-term
recurrence for the rest, run in the inputs' floating dtype with PyTorch's operation order.
PyTorch's CPU build contracts each step ``a * q - c`` into one fused multiply-add (``a * q``
is not rounded, so it neither loses bits nor overflows on its own); ``fms`` does the same in
a wider float. Its float32 ``acos``/``cos``/``sin`` are the C library's ``acosf``/``cosf``/
``sinf`` (an ulp in ``acos`` becomes ``n`` ulps in ``n * acos(x)``). Like PyTorch, the Chebyshev, Laguerre and Legendre recurrences stop once a value is NaN (a
large ``n`` with ``|x| > 1`` overflows to ``inf`` and then ``inf - inf``), and Hermite's give
NaN beyond degree 128 (float32) or 512 (float64). ``n`` is truncated to an integer as
``static_cast<int64_t>`` does; NaN, infinite and out-of-range degrees count as negative.

    >>> chebyshev(np.array([0.5, 2.0]), np.array([3.0, 3.0]), "t", False)
    array([-1., 26.])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

Array = np.ndarray
Cases = list[tuple[Array, Array]]       # (where, value), the first that holds wins


_WIDER = {np.dtype(np.float32): np.float64, np.dtype(np.float64): np.longdouble}


def fms(a: Array, q: Array, c: Array) -> Array:
    """``a * q - c`` rounded once, as a fused multiply-add computes it (the product in a
    wider float: exact for float32, 64 bits and a wide exponent range for float64)."""
    wide = _WIDER[a.dtype]
    return (a.astype(wide) * q.astype(wide) - c.astype(wide)).astype(a.dtype)


def _c_float_function(name: str) -> Callable[[Array], Array] | None:
    """The C library's single-precision ``name`` (``acosf``, ``cosf``, ``sinf``) over an
    array, or None where there is no C math library to load."""
    import ctypes
    import ctypes.util
    path = ctypes.util.find_library("m")
    if path is None:
        return None
    fn = getattr(ctypes.CDLL(path), name, None)
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    each = np.frompyfunc(fn, 1, 1)
    return lambda a: each(a).astype(np.float32)


_FLOAT_LIBM: dict[str, Callable[[Array], Array] | None] = {}


def _libm(fn: Callable[[Array], Array], a: Array) -> Array:
    """``fn`` (np.arccos, np.cos or np.sin) of ``a``; for float32 the C library's ``acosf``/
    ``cosf``/``sinf``, which PyTorch's CPU kernels call (NumPy's own float32 loops and the
    correctly rounded values each differ from them by an ulp somewhere), else the value
    computed in float64 and rounded."""
    if a.dtype != np.float32:
        return fn(a)
    if fn is not np.arccos:
        return fn(a.astype(np.float64)).astype(np.float32)
    name = "acosf"
    if name not in _FLOAT_LIBM:
        _FLOAT_LIBM[name] = _c_float_function(name)
    c_fn = _FLOAT_LIBM[name]
    if c_fn is None or a.size == 0:
        return fn(a.astype(np.float64)).astype(np.float32)
    return c_fn(a)


def degree(n: Array) -> Array:
    """``static_cast<int64_t>(n)`` (truncation); a degree no int64 holds becomes -1."""
    ok = np.isfinite(n) & (np.abs(n) < 2.0 ** 63)
    return np.where(ok, np.trunc(np.where(ok, n, 0)), -1).astype(np.int64)


@dataclass(frozen=True)
class Recurrence:
    """``r = step(x, k, p, q); p, q = q, r`` for ``k = first, first + stride, ...`` while
    ``k <= last(n)`` (and, if ``nan_stops``, while ``q`` is not NaN); the result is ``q``."""

    first: int
    stride: int
    last: Callable[[Array], Array]
    nan_stops: bool
    step: Callable[[Array, Array, Array, Array], Array]


def _run(rec: Recurrence, x: Array, n: Array, q0: Array) -> Array:
    """The recurrence over flat arrays; the elements still iterating are kept packed (an
    element leaves when its degree is reached or, if ``nan_stops``, its value is NaN)."""
    ft = x.dtype.type
    out, last = q0.copy(), rec.last(n)
    k = rec.first
    live = np.flatnonzero(k <= last)
    if rec.nan_stops:
        live = live[~np.isnan(q0[live])]
    xs, ls, p, q = x[live], last[live], np.ones(live.size, x.dtype), q0[live]
    while live.size:
        p, q = q, rec.step(xs, ft(k), p, q)
        k += rec.stride
        going = k <= ls
        if rec.nan_stops:
            going &= ~np.isnan(q)
        if not going.all():
            done = ~going
            out[live[done]] = q[done]
            live, xs, ls, p, q = live[going], xs[going], ls[going], p[going], q[going]
    return out


def _evaluate(x: Array, n: Array, cases: Cases, rec: Recurrence, q0: Array) -> Array:
    """The first matching case of each element, else the recurrence from ``q0``."""
    out = np.empty_like(x)
    todo = np.ones(x.shape, bool)
    for where, value in cases:
        hit = todo & where
        out[hit] = np.broadcast_to(value, x.shape)[hit]
        todo &= ~hit
    if todo.any():
        out[todo] = _run(rec, x[todo], n[todo], q0[todo])
    return out


def _signed(even: Array, value: Array) -> Array:
    return np.where(even, value, -value)


# Chebyshev T/U/V/W: the value at y = 1, its magnitude at y = -1 (signed by n's parity),
# and the degree above which PyTorch uses the trigonometric form (unshifted, shifted)
_AT_ONE = {"t": lambda n: 1, "u": lambda n: n + 1, "v": lambda n: 1, "w": lambda n: 2 * n + 1}
_AT_MINUS_ONE = {"t": lambda n: 1, "u": lambda n: n + 1, "v": lambda n: 2 * n + 1, "w": lambda n: 1}
_TRIG_FROM = {"t": (6, 6), "u": (8, 6), "v": (8, 6), "w": (8, 4)}
_FIRST = {"t": 0, "u": 0, "v": -1, "w": 1}      # P_1 = (1 or 2) y + this
_CHEBYSHEV = Recurrence(2, 1, lambda n: n, True, lambda y, k, p, q: fms(y + y, q, p))


def _trig(kind: str, y: Array, n: Array, nf: Array, even: Array, x: Array, shifted: bool) -> Array:
    """The closed forms in ``cos``/``sin`` of ``acos(y)`` PyTorch uses for large n."""
    ft = y.dtype.type
    a = _libm(np.arccos, y)
    cos, sin = (lambda v: _libm(np.cos, v)), (lambda v: _libm(np.sin, v))
    if kind == "t":
        return cos(nf * a)
    n1 = (n + 1).astype(y.dtype)
    if kind == "u":
        s = sin(a)
        return np.where(s != 0, sin(n1 * a) / s, n1 * cos(n1 * a) / y)
    half = (nf + ft(0.5)) * a
    odd_form = _signed(even, (2 * n + 1).astype(y.dtype))
    if kind == "v":
        return np.where(sin(a / ft(2)) != 1, cos(half) / cos(a / ft(2)), odd_form)
    parity = _signed(even, np.ones_like(y))
    edge = parity if shifted else np.where(x > 0, (2 * n + 1).astype(y.dtype), parity)
    return np.where(cos(a / ft(2)) != 1, sin(half) / sin(a / ft(2)), edge)


def chebyshev(x: Array, n_in: Array, kind: str, shifted: bool) -> Array:
    """Chebyshev polynomials of the first to fourth kind (``shifted``: of ``2x - 1``)."""
    ft = x.dtype.type
    n = degree(n_in)
    nf, even = n.astype(x.dtype), n % 2 == 0
    y = x + x - ft(1) if shifted else x
    if shifted:
        plus, minus = x == 1, x == 0
    else:
        plus, minus = (np.abs(x) == 1) & (x > 0), (np.abs(x) == 1) & ~(x > 0)
    trig = (n > _TRIG_FROM[kind][shifted]) & (np.abs(y) < 1)
    closed = np.zeros_like(x)      # the trigonometric form, where it is taken
    closed[trig] = _trig(kind, y[trig], n[trig], nf[trig], even[trig], x[trig], shifted)
    cases: Cases = [
        (n < 0, np.zeros_like(x)),
        (plus, np.asarray(_AT_ONE[kind](n), x.dtype)),
        (minus, _signed(even, np.asarray(_AT_MINUS_ONE[kind](n), x.dtype))),
        (trig, closed),
        (n == 0, np.ones_like(x))]
    q0 = y if kind == "t" else y + y if kind == "u" else y + y + ft(_FIRST[kind])
    return _evaluate(y, n, cases, _CHEBYSHEV, q0)


_HERMITE_LIMIT = {np.dtype(np.float32): 128, np.dtype(np.float64): 512}
_HERMITE_H = Recurrence(2, 2, lambda n: 2 * n - 1, False,
                        lambda x, k, p, q: fms(x + x, q, k * p))
_HERMITE_HE = Recurrence(1, 1, lambda n: n - 1, False, lambda x, k, p, q: fms(x, q, k * p))


def hermite(x: Array, n_in: Array, probabilists: bool) -> Array:
    """The physicists' (H) or probabilists' (He) Hermite polynomial; NaN above PyTorch's
    degree limit."""
    n = degree(n_in)
    q0 = x if probabilists else x + x
    cases: Cases = [(n < 0, np.zeros_like(x)), (n == 0, np.ones_like(x)), (n == 1, q0),
                    (n > _HERMITE_LIMIT[x.dtype], np.full_like(x, np.nan))]
    return _evaluate(x, n, cases, _HERMITE_HE if probabilists else _HERMITE_H, q0)


_LAGUERRE = Recurrence(1, 1, lambda n: n - 1, True,
                       lambda x, k, p, q: fms(k + k + (1 - x), q, k * p) / (k + 1))
_LEGENDRE = Recurrence(1, 1, lambda n: n - 1, True,
                       lambda x, k, p, q: fms((k + k + 1) * x, q, k * p) / (k + 1))


def laguerre(x: Array, n_in: Array) -> Array:
    """The Laguerre polynomial L_n(x) (1 at x = 0 for every n >= 0)."""
    n = degree(n_in)
    one = np.ones_like(x)
    cases: Cases = [(n < 0, np.zeros_like(x)), (x == 0, one), (n == 0, one)]
    return _evaluate(x, n, cases, _LAGUERRE, one - x)


def legendre(x: Array, n_in: Array) -> Array:
    """The Legendre polynomial P_n(x) (+-1 at x = +-1)."""
    n = degree(n_in)
    edge = _signed((x > 0) | (n % 2 == 0), np.ones_like(x))
    cases: Cases = [(n < 0, np.zeros_like(x)), (np.abs(x) == 1, edge), (n == 0, np.ones_like(x))]
    return _evaluate(x, n, cases, _LEGENDRE, x)


# op name -> f(x, n) on NumPy arrays of one floating dtype and one shape
RECURRENCES: dict[str, Callable[[Array, Array], Array]] = {
    **{f"chebyshev_polynomial_{k}": (lambda k: lambda x, n: chebyshev(x, n, k, False))(k)
       for k in "tuvw"},
    **{f"shifted_chebyshev_polynomial_{k}": (lambda k: lambda x, n: chebyshev(x, n, k, True))(k)
       for k in "tuvw"},
    "hermite_polynomial_h": lambda x, n: hermite(x, n, False),
    "hermite_polynomial_he": lambda x, n: hermite(x, n, True),
    "laguerre_polynomial_l": laguerre,
    "legendre_polynomial_p": legendre,
}
