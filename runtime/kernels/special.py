"""Reference kernels of special functions (torch.special and the top-level gamma/erfinv/Bessel
family), on SciPy's ``special`` (``cupyx.scipy.special`` for CuPy arrays).

Inputs arrive as ``run_kernel`` leaves them: float16/bfloat16 already in float32 (the ops
are ``UPCAST``), integers and bools as they are; each kernel computes in the floating dtype
PyTorch promotes its inputs to (``compute_dtype``), and ``run_kernel`` rounds the result to
the op's dtype. The orthogonal polynomials are PyTorch's own recurrences (ATen's
``Math.h``), run in that dtype, so that values for ``|x| > 1`` and large ``n`` (overflow,
NaN once the recurrence meets ``inf - inf``) come out as PyTorch's do.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.ops.rules import promote
from scriptmod.ir.ops.special import OWN_HALF, POLYNOMIALS, UNARY
from ..arrays import NP_DTYPE
from . import kernel, operand
from .special_bessel import bessel
from .special_polynomials import RECURRENCES


def scipy_special(xp: Any) -> Any:
    """SciPy's ``special`` for NumPy arrays, CuPy's for CuPy arrays (imported on first use)."""
    if xp is np:
        import scipy.special as sp
    else:
        import cupyx.scipy.special as sp  # type: ignore
    return sp


_HALF_DTYPES = (NP_DTYPE[D.float16], NP_DTYPE[D.bfloat16])


def compute_dtype(*xs: Any) -> np.dtype:
    """The floating dtype PyTorch computes ``xs`` in: their promoted dtype, integers and bools
    as the default float, half types (already widened) as float32."""
    d = D.to_float(promote([operand(x) for x in xs], {}))
    return np.dtype(np.float32) if d in (D.float16, D.bfloat16) else NP_DTYPE[d]


def as_float(xp: Any, x: Any, dt: np.dtype) -> Any:
    """``x`` (an array or a Python number) as an array of ``dt``."""
    return xp.asarray(x, dtype=dt)


def _on_host(xp: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn`` (a NumPy function of PyTorch's forms) of ``args``, copied to the host and back
    for CuPy arrays."""
    if xp is np:
        return fn(*args)
    return xp.asarray(fn(*[a.get() if hasattr(a, "get") else a for a in args]))


def _quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``fn`` without NumPy's warnings: poles and overflow give inf/NaN as in PyTorch."""
    def run(xp: Any, *args: Any, **attrs: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(xp, *args, **attrs)
    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


# the Taylor series PyTorch uses for sin(x)/x below 0.5: coefficients of x^12, x^10, ..., x^2
_J0_SERIES = (1 / 6227020800.0, -1 / 39916800.0, 1 / 362880.0, -1 / 5040.0, 1 / 120.0, -1 / 6.0)


def _spherical_bessel_j0(sp: Any, xp: Any, x: Any) -> Any:
    """``sin(x) / x`` with PyTorch's Taylor series below 0.5 (so j0(0) = 1) and 0 at +-inf."""
    ft, x2 = x.dtype.type, x * x
    series = xp.full_like(x, ft(_J0_SERIES[0]))
    for c in _J0_SERIES[1:]:
        series = ft(c) + x2 * series
    out = xp.where(xp.abs(x) < 0.5, ft(1) + x2 * series, xp.sin(x) / x)
    return xp.where(xp.isinf(x), ft(0), out)


# Cephes' rational approximations of Ai, as PyTorch's ``airy_ai_forward`` holds them
_AIRY_AN = (3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
            1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
            1.40264691163389668864e+01, 9.99999999999999995305e-01)
_AIRY_AD = (5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
            1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
            1.40959135607834029598e+01, 1.00000000000000000470e+00)
_AIRY_AFN = (-1.31696323418331795333e-01, -6.26456544431912369773e-01,
             -6.93158036036933542233e-01, -2.79779981545119124951e-01,
             -4.91900132609500318020e-02, -4.06265923594885404393e-03,
             -1.59276496239262096340e-04, -2.77649108155232920844e-06,
             -1.67787698489114633780e-08)
_AIRY_AFD = (1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
             9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
             4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07)
_AIRY_AGN = (1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
             9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
             5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
             8.11789239554389293311e-08, 3.41551784765923618484e-10)
_AIRY_AGD = (9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
             5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
             4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
             4.91834570062930015649e-09)


def _horner(coefs: tuple[float, ...], z: Any) -> Any:
    ft = z.dtype.type
    out = z * 0
    for c in coefs:
        out = out * z + ft(c)
    return out


def _airy_ai(sp: Any, xp: Any, x: Any) -> Any:
    """PyTorch's ``airy_ai`` (Cephes' ``airy``, in ``x``'s dtype): the oscillating asymptotic
    form below -2.09, the decaying one from 2.09, the Maclaurin series between, 0 beyond
    103.892 and NaN at +-inf."""
    ft = x.dtype.type
    with np.errstate(all="ignore"):
        neg = -x
        zeta = ft(2) * x * xp.sqrt(x) / ft(3)
        z = ft(1) / (ft(-2) * x * xp.sqrt(neg) / ft(3))
        zz = z * z
        t = ft(-2) * x * xp.sqrt(neg) / ft(3) + ft(0.25) * ft(np.pi)
        oscillating = ft(5.64189583547756286948e-01) / xp.sqrt(xp.sqrt(neg)) * (
            xp.sin(t) * (ft(1) + zz * _horner(_AIRY_AFN, zz) / _horner(_AIRY_AFD, zz))
            - xp.cos(t) * (z * _horner(_AIRY_AGN, zz) / _horner(_AIRY_AGD, zz)))
        inv = ft(1) / zeta
        decaying = ft(5.64189583547756286948e-01) * (
            _horner(_AIRY_AN, inv) / _horner(_AIRY_AD, inv)) / (
            ft(2) * xp.sqrt(xp.sqrt(x)) * xp.exp(zeta))
        inside = (x >= -2.09) & (x < 2.09)
        series = _airy_series(xp, xp.where(inside, x, ft(0)))
    return choose(xp, [(xp.isinf(x) | xp.isnan(x), np.nan), (x > 103.892, ft(0)), (x < -2.09, oscillating),
                       (x >= 2.09, decaying)], series)


def _airy_series(xp: Any, x: Any) -> Any:
    """Ai's Maclaurin series ``c1 f(x) - c2 g(x)``, summed until its terms fall below eps."""
    ft = x.dtype.type
    eps = np.finfo(x.dtype).eps
    f, g, k = xp.ones_like(x), x.copy(), xp.ones_like(x)
    m, n, z = xp.ones_like(x), x.copy(), x * x * x
    live = xp.ones(x.shape, bool)
    while live.any():
        k1 = k + 1
        m_next = m * z / k1
        k2 = k1 + 1
        n_next = n * z / k2
        m_next = m_next / k2
        k3 = k2 + 1
        m, f = xp.where(live, m_next, m), xp.where(live, f + m_next, f)
        n, g = xp.where(live, n_next / k3, n), xp.where(live, g + n_next / k3, g)
        k = xp.where(live, k3, k)
        live &= xp.abs(m / f) > eps
    return ft(0.355028053887817239260) * f - ft(0.258819403792806798405) * g


def _digamma(sp: Any, xp: Any, x: Any) -> Any:
    """SciPy's ``psi``, with PyTorch's pole at zero: ``-inf`` at +0, ``+inf`` at -0."""
    out = sp.psi(x)
    return xp.where(x == 0, xp.copysign(xp.asarray(np.inf, x.dtype), -x), out)


def _entr(sp: Any, xp: Any, x: Any) -> Any:
    """``-x log(x)``: 0 at 0, -inf below, NaN at NaN. A float16/bfloat16 ``x`` computes in
    float32 with ``log(x)`` rounded to its type first, as PyTorch's half kernel does."""
    log = xp.log(xp.where(x > 0, x, 1).astype(np.float32 if x.dtype.itemsize < 4 else x.dtype))
    if x.dtype.itemsize < 4:
        x, log = x.astype(np.float32), log.astype(x.dtype).astype(np.float32)
    ft = x.dtype.type
    inner = -x * log
    return xp.where(x < 0, ft(-np.inf), xp.where(x == 0, ft(0), inner))


def _lgamma(sp: Any, xp: Any, x: Any) -> Any:
    """``log|gamma(x)|``: ``inf`` at the poles and at ``-inf``, as PyTorch's ``lgamma``."""
    return xp.where(xp.isneginf(x), xp.asarray(np.inf, x.dtype), sp.gammaln(x))


# how each unary op of ``ir.ops.special.UNARY`` computes: f(sp, xp, x)
_UNARY_FORMULAS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "airy_ai": _airy_ai,
    **{f"bessel_{k}": (lambda k: lambda sp, xp, x: _on_host(xp, bessel, k, x))(k)
       for k in ("j0", "j1", "y0", "y1")},
    "modified_bessel_i0": lambda sp, xp, x: sp.i0(x),
    "modified_bessel_i1": lambda sp, xp, x: sp.i1(x),
    "modified_bessel_k0": lambda sp, xp, x: sp.k0(x),
    "modified_bessel_k1": lambda sp, xp, x: sp.k1(x),
    "scaled_modified_bessel_k0": lambda sp, xp, x: sp.k0e(x),
    "scaled_modified_bessel_k1": lambda sp, xp, x: sp.k1e(x),
    "spherical_bessel_j0": _spherical_bessel_j0,
    "i0": lambda sp, xp, x: sp.i0(x),
    "i0e": lambda sp, xp, x: sp.i0e(x),
    "i1": lambda sp, xp, x: sp.i1(x),
    "i1e": lambda sp, xp, x: sp.i1e(x),
    "erfcx": lambda sp, xp, x: sp.erfcx(x),
    "erfinv": lambda sp, xp, x: sp.erfinv(x),
    "log_ndtr": lambda sp, xp, x: sp.log_ndtr(x),
    "ndtri": lambda sp, xp, x: sp.ndtri(x),
    "lgamma": _lgamma,
    "entr": _entr,
    "digamma": _digamma,
}


def _unary_kernel(name: str) -> Callable[..., Any]:
    formula = _UNARY_FORMULAS[name]

    def run(xp: Any, x: Any) -> Any:
        keep = name in OWN_HALF and getattr(x, "dtype", None) in _HALF_DTYPES
        x = x if keep else as_float(xp, x, compute_dtype(x))
        return formula(scipy_special(xp), xp, x)
    run.__name__ = name
    run.__doc__ = f"``{name}`` of a real floating array (PyTorch's {name})."
    return _quiet(run)


for _name in UNARY:
    kernel(_name)(_unary_kernel(_name))


def choose(xp: Any, cases: list[tuple[Any, Any]], default: Any) -> Any:
    """Per element, the value of the first case whose condition holds, else ``default``."""
    out = default
    for where, value in reversed(cases):
        out = xp.where(where, value, out)
    return out


def _trigamma(xp: Any, x: Any) -> Any:
    """PyTorch's ``trigamma`` in ``x``'s dtype: reflection below 1/2 (huge, not inf, at the
    poles), six steps of the recurrence, then the asymptotic series."""
    ft = x.dtype.type
    small = x < 0.5
    sin_pi_x = xp.sin(ft(np.pi) * x)
    result = xp.where(small, -(ft(np.pi) * ft(np.pi)) / (sin_pi_x * sin_pi_x), ft(0))
    x = xp.where(small, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    tail = ixx * (ft(1 / 6) - ixx * (ft(1 / 30) - ixx * ft(1 / 42)))
    result = result + (1 + 1 / (2 * x) + tail) / x
    return xp.where(small, -result, result)


@kernel("polygamma")
@_quiet
def _polygamma(xp: Any, x: Any, *, n: int) -> Any:
    """The ``n``-th derivative of digamma as PyTorch computes it: ``digamma``, ``trigamma``,
    then ``(-1)^(n+1) n! zeta(n + 1, x)`` with zeta in float64."""
    x = as_float(xp, x, compute_dtype(x))
    if n == 0:
        return _digamma(scipy_special(xp), xp, x)
    if n == 1:
        return _trigamma(xp, x)
    ft = x.dtype.type
    scale = ft(1 if n % 2 else -1) * xp.exp(ft(math.lgamma(n + 1)))
    return scale * _hurwitz(xp, xp.asarray(float(n + 1)), x.astype(np.float64)).astype(x.dtype)


def _hurwitz(xp: Any, x: Any, q: Any) -> Any:
    """SciPy's zeta(x, q) with PyTorch's NaN where its series meets ``inf * 0``: an infinite
    ``q`` (x > 1), and an infinite ``x`` with ``q`` past SciPy's asymptotic branch (1e8)."""
    out = scipy_special(xp).zeta(x, q)
    return xp.where(((q == np.inf) & (x > 1)) | ((x == np.inf) & (q > 1e8)), np.nan, out)


@kernel("zeta")
@_quiet
def _zeta(xp: Any, x: Any, q: Any) -> Any:
    """Hurwitz's zeta ``sum_k (k + q)^-x``, in float64 as PyTorch accumulates it."""
    dt = compute_dtype(x, q)
    return _hurwitz(xp, as_float(xp, x, np.float64), as_float(xp, q, np.float64)).astype(dt)


def _incomplete_gamma(upper: bool) -> Callable[..., Any]:
    """P(a, x) (or Q = 1 - P) with PyTorch's cases first: NaN for a negative argument,
    the limits at a = 0, x = 0 and infinite a or x, then SciPy's ``gammainc(c)``."""
    lo, hi = (1.0, 0.0) if upper else (0.0, 1.0)      # the value at x = 0 and at x = inf

    def run(xp: Any, a: Any, x: Any) -> Any:
        dt = compute_dtype(a, x)
        a, x = xp.broadcast_arrays(as_float(xp, a, dt), as_float(xp, x, dt))
        sp = scipy_special(xp)
        value = sp.gammaincc(a, x) if upper else sp.gammainc(a, x)
        return choose(xp, [((x < 0) | (a < 0), np.nan), (a == 0, xp.where(x > 0, hi, np.nan)),
                           (x == 0, lo), (xp.isinf(a), xp.where(xp.isinf(x), np.nan, lo)),
                           (xp.isinf(x), hi)], value).astype(dt)
    run.__name__ = "igammac" if upper else "igamma"
    run.__doc__ = f"The regularized {'upper' if upper else 'lower'} incomplete gamma function."
    return _quiet(run)


kernel("igamma")(_incomplete_gamma(False))
kernel("igammac")(_incomplete_gamma(True))


def _polynomial_kernel(name: str) -> Callable[..., Any]:
    recurrence = RECURRENCES[name]

    def run(xp: Any, x: Any, n: Any) -> Any:
        dt = compute_dtype(x, n)
        x, n = xp.broadcast_arrays(as_float(xp, x, dt), as_float(xp, n, dt))
        if xp is not np:          # the recurrences run on the host, element by element
            return xp.asarray(recurrence(x.get(), n.get()))
        return recurrence(np.array(x, order="C"), n)
    run.__name__ = name
    run.__doc__ = f"PyTorch's ``{name}(x, n)``: its recurrence in the inputs' dtype."
    return _quiet(run)


for _name in POLYNOMIALS:
    kernel(_name)(_polynomial_kernel(_name))
