"""Vectorizable math from primitives: no libm calls, only +, *, fma, selects and bit tricks.

Every function takes a ``Num`` (emitter bound to float32 or float64) and a value, and is
branch-free so that LLVM's loop vectorizer turns it into packed code. Accuracy (tested in
``tests/codegen/test_vmath_accuracy.py`` against float64/mpmath-grade references):
float32 relative error <= 4e-6 where the exact result is normal; float64 ~1e-14 (pow with
large ``|b*log(a)|`` ~1e-13, erf/erfc 1e-13 deep in the tail). sin/cos reduce with a
4-part pi/2 below ``2**20`` and by Payne-Hanek (a 2/pi table, exact products) above, over
the whole float range (``tests/codegen/test_trig_range.py``: <= 2 ulp); float32 sin/cos/pow
run in float64 internally. An emitter with a full-range library ``trig`` (the C source:
CUDA's and libc's sin/cos) gets those calls for sin and cos instead.

    >>> from scriptmod.codegen.c_source import CEmitter
    >>> from scriptmod.codegen.emitter import Num
    >>> emitter = CEmitter()                  # C statements; the LLVM emitter works alike
    >>> y = exp(Num(emitter, D.float32), "x")
    >>> print(emitter.lines[0])               # clamp, then polynomial arithmetic: no expf call
        float t1 = fmaxf(x, (-0x1.a000000000000p+6f));
    >>> any("expf" in line for line in emitter.lines)
    False
"""
from __future__ import annotations

import functools
import math
from functools import lru_cache
from typing import Callable

from .emitter import Num, V, int_of
from scriptmod.ir import dtypes as D

# ---- constants ------------------------------------------------------------------------
_LN2 = {False: (0.693145751953125, 1.428606765330187045e-06),
        True: (6.93147180369123816490e-01, 1.90821492927058770002e-10)}
_LOG2E = 1.4426950408889634
_FRAC = {False: (23, 127), True: (52, 1023)}          # mantissa bits, exponent bias
_EXP_DEG = {False: 7, True: 13}
# float32 e**r = 1 + q, q = r P(r) for |r| <= ln2/2: P minimax for the relative error of q
# (expm1(r): 4.4e-7; of 1 + q: 1.8e-7), so that tanh can use q where 1 - e**-2|x| cancels
_EXPQ_F32 = (0.9999999403953552, 0.49999377131462097, 0.1666693538427353, 0.041875194758176804,
             0.00833332072943449)
_EXPM1_DEG = {False: 7, True: 13}
_LOG_TERMS = {False: 5, True: 11}
_ERF_TERMS = {False: 7, True: 13}
_INV_FACT = [1.0 / math.factorial(k) for k in range(20)]

# Chebyshev coefficients of erfcx(x) = exp(x*x) * erfc(x) in u, where t = (x-3)/(x+3) is
# mapped linearly from [t(0.5), t(XMAX)] to [-1, 1]. Fitted against mpmath (40 digits):
# max relative error 9e-9 (float32, x in [0.5, 10]) and 1.2e-14 (float64, x in [0.5, 27]).
_ERFC_K = 3.0
_ERFC_XMAX = {False: 10.0, True: 27.0}
_ERFCX_CHEB = {
    False: (0.271167374960697, -0.2679450926179971, 0.06310889882400852, -0.011675169326475946,
            0.0016333532296688104, -0.00015507447223484902, 6.141090691312943e-06,
            6.617922153803747e-07, -1.0075055422055552e-07),
    True: (0.23899444076295487, -0.2802644180242124, 0.07639074571109156, -0.016787990827980326,
           0.0028785915605886257, -0.0003532712885487429, 2.2614867153020648e-05,
           1.2969277406806192e-06, -4.2245034326260504e-07, 1.5659239681728547e-08,
           5.724746539250024e-09, -5.603853819681949e-10, -8.613312410688882e-11,
           1.3180968483294157e-11, 1.6551218179381014e-12, -2.929821768428128e-13,
           -4.132414317744148e-14, 6.24573886231165e-15, 1.2872204912166246e-15,
           -1.269090625143151e-16, -3.625973214694718e-17, -3.172726562857878e-17,
           -3.625973214694717e-17, 3.625973214694717e-17, 3.625973214694717e-17),
}
# pi/2 in four parts; the first three have 33 significant bits, so k*part is exact for
# |k| < 2**20 (fdlibm's pio2_1, pio2_2, pio2_3, pio2_3t).
_TRIG_MAX = 2.0 ** 20      # from here on, Payne-Hanek (``_reduce_large``)
_PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11,
         2.02226624871116645580e-21, 8.47842766036889956997e-32)
_PIO2_DD = (1.5707963267948966, 6.123233995736766e-17)     # pi/2 = hi + lo (double-double)


# ---- exponentials ---------------------------------------------------------------------
def _scale(m: Num, k: V) -> V:
    """2**k as a float, for an int k in the normal exponent range."""
    bits, bias = _FRAC[m.f64]
    return m.e.bitcast(m.iop("shl", m.iop("add", k, m.int_const(bias)), m.int_const(bits)),
                       int_of(m.dt), m.dt)


def _ldexp(m: Num, p: V, kf: V, k: V | None = None) -> V:
    """p * 2**kf (kf an integral float with |kf| < 2**30; ``k`` the same as an int if the
    caller has it), right down to subnormal results and up to inf: one hardware scale where
    the emitter has one (``ldexp``: AVX-512 ``vscalef``), else two exact power-of-two
    multiplies."""
    k = m.to_int(kf) if k is None else k
    fast = getattr(m.e, "ldexp", None)
    y = fast(p, k, m.dt) if fast is not None else None
    if y is not None:
        return y
    k1 = m.iop("ashr", k, m.int_const(1))
    k2 = m.iop("sub", k, k1)
    return m.mul(m.mul(p, _scale(m, k1)), _scale(m, k2))


def _round_ln2(m: Num, x: V) -> tuple[V, V | None]:
    """k = rint(x / ln2) as a float, and as an int where the emitter converts with rounding
    in one step (``lrint``: then the float is the int converted back, no separate round)."""
    y = m.mul(x, m.c(_LOG2E))
    lrint = getattr(m.e, "lrint", None)
    ki = lrint(y, m.dt) if lrint is not None else None
    if ki is None:
        return m.call("rint", y), None
    return m.e.convert(ki, D.int32, m.dt), ki


def _reduce_ln2(m: Num, x: V) -> tuple[V, V]:
    """x = k*ln2 + r with |r| <= ln2/2 (Cody-Waite, k returned as an integral float)."""
    hi, lo = _LN2[m.f64]
    k = m.call("rint", m.mul(x, m.c(_LOG2E)))
    r = m.fma(m.neg(k), m.c(hi), x)
    return k, m.fma(m.neg(k), m.c(lo), r)


def _exp_core(m: Num, x: V, tail: V | None = None) -> V:
    """e**(x + tail) for x already clamped to the finite range (not NaN) and a ``tail`` far
    below ulp(x)/2 added after the reduction, so that x + tail need not be representable."""
    return _exp_parts(m, x, tail)[0]


def _exp_parts(m: Num, x: V, tail: V | None = None) -> tuple[V, V | None, V]:
    """(e**(x + tail), q, k): x + tail = k ln2 + r, e**r = 1 + q (q only for float32: an
    expm1(r) accurate to 4.4e-7 relative). float32 reduces with one fma by ln2 rounded to
    float32: the error k * 1.9e-9 stays below 3e-7 over the whole range (|k| <= 160)."""
    k, ki = _round_ln2(m, x)
    if m.f64:
        hi, lo = _LN2[True]
        r = m.fma(m.neg(k), m.c(lo), m.fma(m.neg(k), m.c(hi), x))
    else:
        r = m.fma(m.neg(k), m.c(math.log(2.0)), x)
    if tail is not None:
        r = m.add(r, tail)
    if m.f64:
        return _ldexp(m, m.poly(r, _INV_FACT[:_EXP_DEG[True] + 1]), k, ki), None, k
    q = m.mul(r, m.poly(r, _EXPQ_F32))
    return _ldexp(m, m.add(q, m.c(1.0)), k, ki), q, k


def exp(m: Num, x: V) -> V:
    """e**x."""
    lo, hi = (-746.0, 710.0) if m.f64 else (-104.0, 89.0)
    return m.keep_nan(x, _exp_core(m, m.clamp(x, lo, hi)))


# exp_softmax: k from one fma with this shifter; its bits shifted left by 23 are (k + 127) << 23
_SHIFTER_F32 = 1.5 * 2.0 ** 23 + 127.0
_SOFTMAX_LO_F32 = -88.0           # k = -127 from here down: the scale's bits are 0, so e**x is 0


def exp_softmax(m: Num, x: V) -> V:
    """e**x for the x <= 0 (or NaN) that softmax exponentiates (``x - max`` of a row):
    float32 only, about half the work of ``exp``. No upper clamp and no NaN select (NaN
    passes the lower clamp and the arithmetic), k and 2**k from one fma with a shifter
    (no round, no convert), one scale instead of two. Results below 2**-126.5 (x < -87.68,
    where k = -127) are 0 rather than subnormal, an absolute error under 8.4e-39; ``-inf`` (a
    masked score) gives exactly 0. x > 88.7 would be wrong, which softmax never passes."""
    assert not m.f64, "exp_softmax is float32 only"
    lo = m.c(_SOFTMAX_LO_F32)
    x = m.sel(m.cmp("lt", x, lo), lo, x)                # NaN stays NaN (the compare is false)
    y = m.fma(x, m.c(_LOG2E), m.c(_SHIFTER_F32))        # 1.5 * 2**23 + 127 + rint(x log2 e)
    k = m.sub(y, m.c(_SHIFTER_F32))
    r = m.fma(m.neg(k), m.c(math.log(2.0)), x)
    p = m.fma(r, m.poly(r, _EXPQ_F32), m.c(1.0))
    scale = m.e.bitcast(m.iop("shl", m.e.bitcast(y, m.dt, int_of(m.dt)), m.int_const(23)),
                        int_of(m.dt), m.dt)
    return m.mul(p, scale)


def _exp_neg_abs(m: Num, x: V) -> tuple[V, V | None, V]:
    """``_exp_parts`` of -|x| (NaN gives finite values: callers keep NaN themselves).
    ``sigmoid`` and ``tanh`` of the same value emit it identically, so LLVM computes it
    once for both."""
    return _exp_parts(m, m.call("maxnum", m.neg(m.call("fabs", x)), m.c(-104.0)))


def exp2(m: Num, x: V) -> V:
    """2**x (reduced by integer part, so large x keep full accuracy)."""
    lo, hi = (-1076.0, 1025.0) if m.f64 else (-151.0, 129.0)
    xc = m.clamp(x, lo, hi)
    k = m.call("rint", xc)
    r = m.mul(m.sub(xc, k), m.c(math.log(2.0)))
    y = _ldexp(m, m.poly(r, _INV_FACT[:_EXP_DEG[m.f64] + 1]), k)
    return m.keep_nan(x, y)


def expm1(m: Num, x: V) -> V:
    """e**x - 1 without cancellation near 0: 2**k * (1 + p) - 1 with p = expm1(r)."""
    lo, hi = (-60.0, 710.0) if m.f64 else (-30.0, 89.0)
    k, r = _reduce_ln2(m, m.clamp(x, lo, hi))
    p = m.mul(r, m.poly(r, _INV_FACT[1:_EXPM1_DEG[m.f64] + 1]))
    half = _scale(m, m.iop("sub", m.to_int(k), m.int_const(1)))     # 2**(k-1)
    t = m.add(half, half)
    small = m.fma(t, p, m.sub(t, m.c(1.0)))
    large = m.sub(m.mul(m.fma(half, p, half), m.c(2.0)), m.c(1.0))
    y = m.sel(m.cmp("gt", k, m.c(60.0)), large, small)
    y = m.sel(m.cmp("eq", k, m.c(0.0)), p, y)
    return m.keep_nan(x, m.sel(m.cmp("eq", x, m.c(0.0)), x, y))


# below this float32 x, PyTorch's 1 / (1 + e**-x) is 1 / inf = 0: e**-x overflows float32
SIGMOID_ZERO_BELOW = -88.72283172607422


def sigmoid(m: Num, x: V) -> V:
    """1 / (1 + e**-x): exact limits 0 and 1, no overflow trouble. float32 from
    E = e**-|x| (shared with ``tanh``): 1 / (1 + E) for x >= 0, E / (1 + E) below, and 0
    below ``SIGMOID_ZERO_BELOW`` as in PyTorch (E alone would go on into subnormals)."""
    if m.f64:
        return m.div(m.c(1.0), m.add(m.c(1.0), exp(m, m.neg(x))))
    e = _exp_neg_abs(m, x)[0]
    num = m.sel(m.cmp("lt", x, m.c(0.0)), e, m.c(1.0))
    num = m.sel(m.cmp("lt", x, m.c(SIGMOID_ZERO_BELOW)), m.c(0.0), num)
    return m.keep_nan(x, m.div(num, m.add(m.c(1.0), e)))


def tanh(m: Num, x: V) -> V:
    """copysign(q / (q + 2), x) with q = expm1(2|x|): accurate near 0, saturates to 1.
    float32: (1 - E^2) / (1 + E^2) with E = e**-|x| = 2**k (1 + q) (shared with ``sigmoid``);
    where k = 0 (|x| < ln2/2) 1 - E^2 cancels and is computed as -q (2 + q) instead."""
    ax = m.call("fabs", x)
    if not m.f64:
        e, q, k = _exp_neg_abs(m, x)
        e2 = m.mul(e, e)
        num = m.sel(m.cmp("eq", k, m.c(0.0)), m.neg(m.fma(q, q, m.add(q, q))),
                    m.sub(m.c(1.0), e2))
        return m.keep_nan(x, m.call("copysign", m.div(num, m.add(m.c(1.0), e2)), x))
    cap = 20.0
    ax = m.sel(m.cmp("gt", ax, m.c(cap)), m.c(cap), ax)
    q = expm1(m, m.add(ax, ax))
    return m.call("copysign", m.div(q, m.add(q, m.c(2.0))), x)


# ---- logarithms -----------------------------------------------------------------------
def _log_parts(m: Num, x: V) -> tuple[V, V]:
    """x = 2**e * mant with mant in [sqrt(.5), sqrt(2)); returns (e as float, log(mant))."""
    bits, bias = _FRAC[m.f64]
    it = int_of(m.dt)
    tiny = m.cmp("lt", x, m.c(2.0 ** (1 - bias)))                # subnormal: scale up first
    xs = m.sel(tiny, m.mul(x, m.c(2.0 ** (bits + 1))), x)
    ix = m.e.bitcast(xs, m.dt, it)
    e = m.iop("sub", m.iop("lshr", ix, m.int_const(bits)), m.int_const(bias))
    mant_bits = m.iop("and", ix, m.int_const((1 << bits) - 1))
    mant = m.e.bitcast(m.iop("or", mant_bits, m.int_const(bias << bits)), it, m.dt)
    big = m.cmp("gt", mant, m.c(math.sqrt(2.0)))
    mant = m.sel(big, m.mul(mant, m.c(0.5)), mant)
    ef = m.e.convert(e, it, m.dt)
    ef = m.add(ef, m.sel(big, m.c(1.0), m.c(0.0)))
    ef = m.sub(ef, m.sel(tiny, m.c(float(bits + 1)), m.c(0.0)))
    s = m.div(m.sub(mant, m.c(1.0)), m.add(mant, m.c(1.0)))       # log(mant) = 2 atanh(s)
    z = m.mul(s, s)
    coeffs = [2.0 / (2 * k + 1) for k in range(_LOG_TERMS[m.f64])]
    return ef, m.fma(m.mul(s, z), m.poly(z, coeffs[1:]), m.add(s, s))


def _log_special(m: Num, x: V, y: V) -> V:
    y = m.sel(m.cmp("eq", x, m.c(math.inf)), x, y)
    y = m.sel(m.cmp("eq", x, m.c(0.0)), m.c(-math.inf), y)
    y = m.sel(m.cmp("lt", x, m.c(0.0)), m.c(math.nan), y)
    return m.keep_nan(x, y)


def log(m: Num, x: V) -> V:
    """Natural log; log(0) = -inf, log(x<0) = nan."""
    hi, lo = _LN2[m.f64]
    ef, lg = _log_parts(m, x)
    return _log_special(m, x, m.fma(ef, m.c(hi), m.fma(ef, m.c(lo), lg)))


def log2(m: Num, x: V) -> V:
    """Base-2 log (exact for powers of two)."""
    ef, lg = _log_parts(m, x)
    return _log_special(m, x, m.fma(lg, m.c(_LOG2E), ef))


def log1p(m: Num, x: V) -> V:
    """log(1 + x) with the rounding of 1 + x corrected: log(u) - ((u - 1) - x) / u."""
    u = m.add(m.c(1.0), x)
    y = m.sub(log(m, u), m.div(m.sub(m.sub(u, m.c(1.0)), x), u))
    y = m.sel(m.cmp("eq", u, m.c(1.0)), x, y)
    y = m.sel(m.cmp("eq", x, m.c(math.inf)), x, y)
    return m.sel(m.cmp("eq", x, m.c(-1.0)), m.c(-math.inf), y)


# ---- roots, powers ----------------------------------------------------------------------
def sqrt(m: Num, x: V) -> V:
    """IEEE square root (an LLVM intrinsic / a hardware instruction)."""
    return m.call("sqrt", x)


def rsqrt(m: Num, x: V) -> V:
    """1 / sqrt(x), correctly rounded twice (no approximate rsqrt instruction)."""
    return m.div(m.c(1.0), m.call("sqrt", x))


def powi(m: Num, x: V, n: int) -> V:
    """x**n for a constant integer n, as multiplies (binary exponentiation)."""
    if n < 0:
        return m.div(m.c(1.0), powi(m, x, -n)) if m.dt.is_floating_point else powi(m, x, -n)
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else m.mul(result, base)
        n >>= 1
        if n:
            base = m.mul(base, base)
    return m.c(1) if result is None else result


def pow(m: Num, a: V, b: V) -> V:
    """a**b for float a, b with C99 special cases (computed as exp(b*log|a|))."""
    if not m.f64:
        w = Num(m.e, D.float64)
        r = pow(w, m.e.convert(a, m.dt, D.float64), m.e.convert(b, m.dt, D.float64))
        return m.e.convert(r, D.float64, m.dt)
    r = exp(m, m.mul(b, log(m, m.call("fabs", a))))
    b_int = m.cmp("eq", m.call("trunc", b), b)
    b_odd = m.both(b_int, m.cmp("ne", m.call("trunc", m.mul(b, m.c(0.5))), m.mul(b, m.c(0.5))))
    r = m.sel(m.both(m.signbit(a), b_odd), m.neg(r), r)
    neg_finite = m.both(m.cmp("lt", a, m.c(0.0)), m.cmp("gt", a, m.c(-math.inf)))
    not_int = m.e.bits("xor", b_int, m.e.const(True, D.bool_), D.bool_)
    r = m.sel(m.both(neg_finite, not_int), m.c(math.nan), r)
    unit = m.either(m.cmp("eq", b, m.c(0.0)), m.cmp("eq", a, m.c(1.0)))
    unit = m.either(unit, m.both(m.cmp("eq", a, m.c(-1.0)),
                                 m.cmp("eq", m.call("fabs", b), m.c(math.inf))))
    return m.sel(unit, m.c(1.0), r)


# ---- error function ---------------------------------------------------------------------
def _erf_small(m: Num, x: V) -> V:
    """Taylor series of erf for |x| <= 0.5."""
    c = [2.0 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
         for n in range(_ERF_TERMS[m.f64])]
    return m.mul(x, m.poly(m.mul(x, x), c))


def _exp_neg_square(m: Num, a: V) -> V:
    """e**(-a*a) without the rounding error of a*a: split a = ah + al with ah*ah exact."""
    it = int_of(m.dt)
    drop = 27 if m.f64 else 12
    ah = m.e.bitcast(m.iop("and", m.e.bitcast(a, m.dt, it), m.int_const(-(1 << drop))), it, m.dt)
    al = m.sub(a, ah)
    return m.mul(exp(m, m.neg(m.mul(ah, ah))), exp(m, m.neg(m.mul(al, m.add(a, ah)))))


def _erfc_big(m: Num, ax: V) -> V:
    """erfc(ax) for ax >= 0.5: e**(-ax^2) * erfcx(ax), erfcx from a Chebyshev series."""
    xmax = _ERFC_XMAX[m.f64]
    a = m.sel(m.cmp("lt", ax, m.c(0.5)), m.c(0.5), m.call("minnum", ax, m.c(xmax)))
    tlo, thi = (0.5 - _ERFC_K) / (0.5 + _ERFC_K), (xmax - _ERFC_K) / (xmax + _ERFC_K)
    t = m.div(m.sub(a, m.c(_ERFC_K)), m.add(a, m.c(_ERFC_K)))
    u = m.fma(t, m.c(2.0 / (thi - tlo)), m.c(-(thi + tlo) / (thi - tlo)))
    y = m.mul(_exp_neg_square(m, a), _clenshaw(m, u, _ERFCX_CHEB[m.f64]))
    return m.sel(m.cmp("gt", ax, m.c(xmax)), m.c(0.0), y)


def _clenshaw(m: Num, u: V, c: tuple[float, ...]) -> V:
    """sum c[k] T_k(u) for u in [-1, 1] (stable Chebyshev evaluation)."""
    u2 = m.add(u, u)
    b1, b2 = m.c(0.0), m.c(0.0)
    for ck in reversed(c[1:]):
        b1, b2 = m.add(m.fma(u2, b1, m.c(ck)), m.neg(b2)), b1
    return m.add(m.fma(u, b1, m.c(c[0])), m.neg(b2))


# float32 erfc(a) = Q(t) e**(-a^2), t = 1 / (1 + a/2), for 0 <= a <= 10.5 (erfc is below
# the smallest subnormal beyond): Q a minimax polynomial of erfcx (degree 7, relative error
# 4.4e-7 with these float32 coefficients; fitted with scipy's erfcx on 6000 points).
_ERFC_F32_P = 0.5
_ERFC_F32_AMAX = 10.5
_ERFC_F32 = (-3.5655408282764256e-05, 0.28300318121910095, 0.2725093364715576,
             0.301399290561676, -0.005979072768241167, 0.4438384175300598,
             -0.39246484637260437, 0.09772975742816925)


def _erfc_pos_f32(m: Num, ax: V) -> V:
    """float32 erfc(ax) for ax >= 0 (NaN gives a finite value): one division, one exp.
    e**(-a^2) is e**(hi + lo) with hi + lo = -a^2 exactly (fma), so the tail keeps full
    relative accuracy although a^2 reaches 110."""
    a = m.call("minnum", ax, m.c(_ERFC_F32_AMAX))
    t = m.div(m.c(1.0), m.fma(a, m.c(_ERFC_F32_P), m.c(1.0)))
    na = m.neg(a)
    hi = m.mul(na, a)
    lo = m.fma(na, a, m.neg(hi))
    return m.mul(m.poly(t, _ERFC_F32), _exp_core(m, hi, lo))


def erf(m: Num, x: V) -> V:
    """erf(x): Taylor series below 0.5, 1 - erfc(|x|) above."""
    ax = m.call("fabs", x)
    c = _erfc_big(m, ax) if m.f64 else _erfc_pos_f32(m, ax)
    big = m.call("copysign", m.sub(m.c(1.0), c), x)
    return m.keep_nan(x, m.sel(m.cmp("lt", ax, m.c(0.5)), _erf_small(m, x), big))


def erfc(m: Num, x: V) -> V:
    """erfc(x) with full relative accuracy in the right tail (no 1 - erf cancellation)."""
    ax = m.call("fabs", x)
    if not m.f64:
        c = _erfc_pos_f32(m, ax)
        return m.keep_nan(x, m.sel(m.cmp("lt", x, m.c(0.0)), m.sub(m.c(2.0), c), c))
    c = _erfc_big(m, ax)
    big = m.sel(m.cmp("lt", x, m.c(0.0)), m.sub(m.c(2.0), c), c)
    small = m.sub(m.c(1.0), _erf_small(m, x))
    return m.keep_nan(x, m.sel(m.cmp("lt", ax, m.c(0.5)), small, big))


# ---- trigonometry -----------------------------------------------------------------------
def _sin_quadrant(m: Num, x: V, shift: int) -> V:
    """sin(x + shift*pi/2), computed in float64: x = k*pi/2 + r by Cody-Waite below
    ``_TRIG_MAX``, by ``_reduce_large`` (Payne-Hanek) at and above it. That costs 4-6x the
    fast path, so an emitter with ``skip_rare`` (LLVM kernels) may leave it out and run
    the elements that need it again in full."""
    if not m.f64:
        w = Num(m.e, D.float64)
        return m.e.convert(_sin_quadrant(w, m.e.convert(x, m.dt, D.float64), shift),
                           D.float64, m.dt)
    k = m.clamp(m.call("rint", m.mul(x, m.c(2.0 / math.pi))), -2.0 ** 30, 2.0 ** 30)
    r = x
    for part in _PIO2:
        r = m.sub(r, m.mul(k, m.c(part)))
    big = m.both(m.cmp("ge", m.call("fabs", x), m.c(_TRIG_MAX)),
                 m.cmp("lt", m.call("fabs", x), m.c(math.inf)))
    skip = getattr(m.e, "skip_rare", None)
    if skip is None or not skip(big):
        outline = getattr(m.e, "outline", None)
        large = outline and outline("sm_reduce_large", lambda e, args: _reduce_large(
            Num(e, D.float64), args[0]), [x], D.float64, 2)
        k_big, r_big = large or _reduce_large(m, x)
        k, r = m.sel(big, k_big, k), m.sel(big, r_big, r)
    z = m.mul(r, r)
    s = m.fma(m.mul(r, z), m.poly(z, [(-1) ** (n + 1) * _INV_FACT[2 * n + 3] for n in range(7)]), r)
    c = m.poly(z, [(-1) ** n * _INV_FACT[2 * n] for n in range(10)])
    q = m.iop("add", m.to_int(k), m.int_const(shift))
    odd = m.e.cmp("ne", m.iop("and", q, m.int_const(1)), m.int_const(0), int_of(m.dt))
    neg = m.e.cmp("ne", m.iop("and", q, m.int_const(2)), m.int_const(0), int_of(m.dt))
    y = m.sel(odd, c, s)
    y = m.sel(neg, m.neg(y), y)
    y = m.sel(m.cmp("eq", m.call("fabs", x), m.c(math.inf)), m.c(math.nan), y)
    return m.keep_nan(x, y)


def _trig(fn: str, m: Num, x: V) -> V | None:
    """``fn`` from the target's own math library where the emitter offers one (C: CUDA's
    and libc's sin/cos are accurate over the whole range), else None."""
    native = getattr(m.e, "trig", None)
    return native(fn, x, m.dt) if native is not None else None


def sin(m: Num, x: V) -> V:
    """sin(x); sin(-0) = -0."""
    y = _trig("sin", m, x)
    if y is not None:
        return y
    y = _sin_quadrant(m, x, 0)
    return m.sel(m.cmp("eq", x, m.c(0.0)), x, y)


def cos(m: Num, x: V) -> V:
    """cos(x)."""
    y = _trig("cos", m, x)
    return y if y is not None else _sin_quadrant(m, x, 1)


# ---- Payne-Hanek reduction ------------------------------------------------------------
# x = xs * 2**e0 with e0 = 16*b a multiple of 16 below x's exponent e, so xs < 2**16. Bits of
# 2/pi worth 2**-j with j <= e0 - 54 only add multiples of 4 to x*2/pi (x is a multiple of
# 2**(e-52)): they are dropped, and the rest G_b = (2/pi mod 2**(54-e0)) * 2**e0 < 2**54 is
# kept in _PH_CHUNKS doubles of 53 bits each (truncated, so non-overlapping), enough for
# 2**-105 absolute in x*2/pi mod 4 over the whole float64 range.
_PH_CHUNKS = 4
_PH_BUCKETS = 64                    # b = e >> 4 for e in [0, 1023]


def _two_over_pi_bits(n: int) -> int:
    """floor(2/pi * 2**n), from Machin's formula in integers (n + 32 guard bits)."""
    one = 1 << (n + 32)

    def arctan_inv(q: int) -> int:
        total, term, k, sign = 0, one // q, 1, 1
        while term:
            total += sign * (term // k)
            term //= q * q
            k, sign = k + 2, -sign
        return total
    pi = 16 * arctan_inv(5) - 4 * arctan_inv(239)
    return (2 * one * one // pi) >> 32


@lru_cache(maxsize=None)
def _ph_table() -> tuple[float, ...]:
    """G_b's chunks, bucket-major: ``_PH_CHUNKS`` doubles for each of ``_PH_BUCKETS``."""
    n = 1100 + 53 * _PH_CHUNKS                       # 2/pi * 2**n as an integer
    bits, out = _two_over_pi_bits(n), []
    for b in range(_PH_BUCKETS):
        e0 = 16 * b
        g = bits % (1 << (n + 54 - e0)) if e0 > 54 else bits    # G_b = g * 2**(e0 - n)
        for _ in range(_PH_CHUNKS):
            drop = max(g.bit_length() - 53, 0)
            chunk = (g >> drop) << drop
            out.append(math.ldexp(chunk >> drop, drop + e0 - n))
            g -= chunk
    return tuple(out)


def _mod4(m: Num, a: V) -> V:
    """a - 4*rint(a/4), exact for any double a (|result| <= 2)."""
    return m.sub(a, m.mul(m.call("rint", m.mul(a, m.c(0.25))), m.c(4.0)))


def _reduce_large(m: Num, x: V) -> tuple[V, V]:
    """(k, r) with x = k*pi/2 + r (mod 2*pi), |r| <= pi/4 + tiny, for finite float64 x
    (Payne-Hanek: exact products of x with the bits of 2/pi that matter, summed mod 4).
    Branch-free, so the loop still vectorizes (the table reads become gathers)."""
    it = int_of(m.dt)
    e = m.iop("sub", m.iop("and", m.iop("lshr", m.e.bitcast(x, m.dt, it), m.int_const(52)),
                           m.int_const(0x7FF)), m.int_const(1023))
    b = m.iop("ashr", m.e.select(m.e.cmp("lt", e, m.int_const(0), it), m.int_const(0), e, it),
              m.int_const(4))
    b = m.e.select(m.e.cmp("gt", b, m.int_const(_PH_BUCKETS - 1), it),
                   m.int_const(_PH_BUCKETS - 1), b, it)                  # inf, NaN
    xs = m.mul(x, _scale(m, m.iop("mul", b, m.int_const(-16))))         # exact: x * 2**-e0
    first = m.iop("mul", b, m.int_const(_PH_CHUNKS))
    terms = []
    for j in range(_PH_CHUNKS):
        g = m.e.table("sm_two_over_pi", _ph_table(), m.iop("add", first, m.int_const(j)), m.dt)
        p = m.mul(xs, g)
        err = m.call("fma_exact", xs, g, m.neg(p))                         # xs*g = p + err
        terms += [_mod4(m, p), _mod4(m, err)] if j < 2 else [p, err]
    hi, lo = terms[0], m.c(0.0)
    for t in terms[1:]:                                     # compensated sum (TwoSum)
        s = m.add(hi, t)
        bv = m.sub(s, hi)
        lo = m.add(lo, m.add(m.sub(hi, m.sub(s, bv)), m.sub(t, bv)))
        hi = s
    k = m.call("rint", hi)
    f = m.sub(hi, k)                                        # exact
    fh = m.add(f, lo)
    fl = m.sub(lo, m.sub(fh, f))
    hi_pi, lo_pi = _PIO2_DD
    r = m.call("fma_exact", fh, m.c(hi_pi), m.fma(fh, m.c(lo_pi), m.mul(fl, m.c(hi_pi))))
    return _mod4(m, k), r


def _atan_reduced(m: Num, a: V) -> V:
    """atan(a) for a in [0, 1]: pi/4 + atan((a-1)/(a+1)) above tan(pi/8), Taylor series."""
    mid = m.cmp("gt", a, m.c(math.tan(math.pi / 8)))
    t = m.sel(mid, m.div(m.sub(a, m.c(1.0)), m.add(a, m.c(1.0))), a)
    terms = 9
    if m.f64:   # one argument halving: atan(t) = 2 atan(t / (1 + sqrt(1 + t^2)))
        t = m.div(t, m.add(m.c(1.0), m.call("sqrt", m.fma(t, t, m.c(1.0)))))
        terms = 12
    z = m.mul(t, t)
    y = m.fma(m.mul(t, z), m.poly(z, [(-1) ** (n + 1) / (2 * n + 3) for n in range(terms)]), t)
    if m.f64:
        y = m.add(y, y)
    return m.add(m.sel(mid, m.c(math.pi / 4), m.c(0.0)), y)


def atan2(m: Num, y: V, x: V) -> V:
    """atan2(y, x) with the C99 special cases for zeros and infinities."""
    ax, ay = m.call("fabs", x), m.call("fabs", y)
    hi, lo = m.call("maxnum", ax, ay), m.call("minnum", ax, ay)
    a = m.div(lo, hi)
    a = m.sel(m.cmp("eq", hi, m.c(0.0)), m.c(0.0), a)
    inf = m.c(math.inf)
    a = m.sel(m.both(m.cmp("eq", ax, inf), m.cmp("eq", ay, inf)), m.c(1.0), a)
    r = _atan_reduced(m, a)
    r = m.sel(m.cmp("gt", ay, ax), m.sub(m.c(math.pi / 2), r), r)
    r = m.sel(m.signbit(x), m.sub(m.c(math.pi), r), r)
    r = m.call("copysign", r, y)
    return m.keep_nan(x, m.keep_nan(y, r))


# ---- inverse trigonometry, hyperbolic functions, log10, hypot ----------------------------
# These are a few primitives each, over ``exp``/``log1p``/``atan2``. Where the float32 form
# would lose bits (cancellation in e**x - e**-x, x*x overflowing), float32 computes them in
# float64 and rounds once, as ``pow`` and ``sin`` do.
_LN2_F64 = math.log(2.0)
_HYPER_BIG = 22.0            # e**-x / 2 is below 2**-63 of e**x / 2 from here on
_ASINH_BIG = 2.0 ** 28       # asinh(x) = log(2x) to float64 precision from here on
# log10(2) in two parts (hi with 32 significant bits, so ef * hi is exact for |ef| < 2**20)
_LOG10_2 = (3.01029995663611771306e-01, 3.69423907715893078616e-13)
_LOG10_E = 0.4342944819032518


def _in_f64(fn: Callable[..., V]) -> Callable[..., V]:
    """``fn`` evaluated in float64 for a float32 ``Num`` (its result rounded once)."""
    @functools.wraps(fn)
    def wide(m: Num, *xs: V) -> V:
        if m.f64:
            return fn(m, *xs)
        w = Num(m.e, D.float64)
        y = fn(w, *(m.e.convert(x, m.dt, D.float64) for x in xs))
        return m.e.convert(y, D.float64, m.dt)
    return wide


@_in_f64
def tan(m: Num, x: V) -> V:
    """sin(x) / cos(x), each to about 1 ulp in float64: tan to ~3 ulp, poles included."""
    return m.div(sin(m, x), cos(m, x))


def atan(m: Num, x: V) -> V:
    """atan(x) = atan2(x, 1)."""
    return atan2(m, x, m.c(1.0))


def _cos_of_asin(m: Num, x: V) -> V:
    """sqrt(1 - x*x) as sqrt((1 - x)(1 + x)): no cancellation near |x| = 1; NaN for |x| > 1."""
    return m.call("sqrt", m.mul(m.sub(m.c(1.0), x), m.add(m.c(1.0), x)))


def asin(m: Num, x: V) -> V:
    """asin(x) = atan2(x, sqrt(1 - x*x)); NaN outside [-1, 1]."""
    return atan2(m, x, _cos_of_asin(m, x))


def acos(m: Num, x: V) -> V:
    """acos(x) = atan2(sqrt(1 - x*x), x); NaN outside [-1, 1]."""
    return atan2(m, _cos_of_asin(m, x), x)


def _half_exp(m: Num, ax: V) -> V:
    """e**ax / 2 = e**(ax - ln2) for ax >= 0 (float64), without overflowing before e**ax
    / 2 does: ln2's high part has 32 bits, so ax - hi is exact; its low part is the tail."""
    hi, lo = _LN2[True]
    h = m.call("minnum", m.sub(ax, m.c(hi)), m.c(710.0))
    return _exp_core(m, h, m.c(-lo))


@_in_f64
def sinh(m: Num, x: V) -> V:
    """sinh(x): (u + u / (u + 1)) / 2 with u = expm1(|x|) (exact near 0), e**|x| / 2 for
    large |x|; the sign of x (sinh(-0) = -0)."""
    ax = m.call("fabs", x)
    u = expm1(m, m.call("minnum", ax, m.c(_HYPER_BIG)))
    small = m.mul(m.c(0.5), m.add(u, m.div(u, m.add(u, m.c(1.0)))))
    y = m.sel(m.cmp("gt", ax, m.c(_HYPER_BIG)), _half_exp(m, ax), small)
    return m.keep_nan(x, m.call("copysign", y, x))


@_in_f64
def cosh(m: Num, x: V) -> V:
    """cosh(x): e**|x| / 2 + e**-|x| / 2, the second term dropped for large |x|."""
    ax = m.call("fabs", x)
    e = exp(m, m.call("minnum", ax, m.c(_HYPER_BIG)))
    small = m.fma(m.c(0.5), e, m.div(m.c(0.5), e))
    return m.keep_nan(x, m.sel(m.cmp("gt", ax, m.c(_HYPER_BIG)), _half_exp(m, ax), small))


def _log_2x(m: Num, ax: V) -> V:
    """log(2 ax) for large ax (no overflow in 2 ax)."""
    return m.add(log(m, ax), m.c(_LN2_F64))


@_in_f64
def asinh(m: Num, x: V) -> V:
    """asinh(x) = sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) (exact near 0), log(2|x|)
    for large |x|."""
    ax = m.call("fabs", x)
    a = m.call("minnum", ax, m.c(_ASINH_BIG))
    a2 = m.mul(a, a)
    small = log1p(m, m.add(a, m.div(a2, m.add(m.c(1.0), m.call("sqrt", m.add(m.c(1.0), a2))))))
    y = m.sel(m.cmp("gt", ax, m.c(_ASINH_BIG)), _log_2x(m, ax), small)
    return m.keep_nan(x, m.call("copysign", y, x))


@_in_f64
def acosh(m: Num, x: V) -> V:
    """acosh(x) = log1p(t + sqrt(2t + t^2)) with t = x - 1 (exact near 1), log(2x) for large
    x; NaN below 1."""
    t = m.sub(m.call("minnum", x, m.c(_ASINH_BIG)), m.c(1.0))
    small = log1p(m, m.add(t, m.call("sqrt", m.fma(t, t, m.add(t, t)))))
    y = m.sel(m.cmp("gt", x, m.c(_ASINH_BIG)), _log_2x(m, x), small)
    return m.keep_nan(x, m.sel(m.cmp("lt", x, m.c(1.0)), m.c(math.nan), y))


@_in_f64
def atanh(m: Num, x: V) -> V:
    """atanh(x) = sign(x) log1p(2|x| / (1 - |x|)) / 2: exact near 0 and near |x| = 1 (where
    1 - |x| is exact); +-inf at +-1, NaN beyond."""
    ax = m.call("fabs", x)
    y = m.mul(m.c(0.5), log1p(m, m.div(m.add(ax, ax), m.sub(m.c(1.0), ax))))
    return m.keep_nan(x, m.call("copysign", y, x))


def log10(m: Num, x: V) -> V:
    """Base-10 log: e log10(2) + log(mant) log10(e), with log10(2) in two parts."""
    ef, lg = _log_parts(m, x)
    hi, lo = _LOG10_2
    y = m.fma(ef, m.c(hi), m.fma(ef, m.c(lo), m.mul(lg, m.c(_LOG10_E))))
    return _log_special(m, x, y)


@_in_f64
def hypot(m: Num, a: V, b: V) -> V:
    """sqrt(a^2 + b^2) as hi sqrt(1 + (lo/hi)^2) (no overflow); inf if either is infinite,
    even with a NaN on the other side (C99)."""
    ax, ay = m.call("fabs", a), m.call("fabs", b)
    hi, lo = m.call("maxnum", ax, ay), m.call("minnum", ax, ay)
    r = m.div(lo, hi)
    y = m.mul(hi, m.call("sqrt", m.fma(r, r, m.c(1.0))))
    y = m.sel(m.cmp("eq", hi, m.c(0.0)), m.c(0.0), y)
    y = m.keep_nan(a, m.keep_nan(b, y))
    inf = m.c(math.inf)
    return m.sel(m.either(m.cmp("eq", ax, inf), m.cmp("eq", ay, inf)), inf, y)
