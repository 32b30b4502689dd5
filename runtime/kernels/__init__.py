"""Reference kernels: the living definition of what every op in ``ir.ops`` means.

``KERNELS[name](xp, *inputs, **attrs)`` computes op ``name`` with array module ``xp``.
``run_kernel`` is the one entry point (eager, interpreter and tests use it): it applies the
op's dtype rule, so every path agrees on result dtypes by construction, and computes
float16/bfloat16 in float32 as the compiled paths do.

    >>> run_kernel("add", [np.ones(2, np.int32), 2.5], {})
    array([3.5, 3.5], dtype=float32)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

import scriptmod.ir.ops  # noqa: F401  (fills the schema registry)
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError
from scriptmod.ir.ops.rules import promote, real_of, to_bool
from scriptmod.ir.schema import (COMMUTATIVE, ELEMENTWISE, FACTORY, OWN_DTYPES, REGISTRY,
                                  SCALAR_OPMATH, OpSchema, upcasts)
from .. import arrays
from ..arrays import NP_DTYPE, from_np_dtype
from scriptmod.ir.dtypes import checked_float, checked_int

Kernel = Callable[..., Any]
NEGATIVE_POWER = "pow: Integers to negative integer powers are not allowed."   # PyTorch's
KERNELS: dict[str, Kernel] = {}
_HALF = (D.float16, D.bfloat16)
_F32 = NP_DTYPE[D.float32]


def kernel(name: str) -> Callable[[Kernel], Kernel]:
    """Register the reference kernel of op ``name`` (declared in ``ir.ops``)."""
    def deco(fn: Kernel) -> Kernel:
        if name not in REGISTRY:
            raise KeyError(f"kernel for undeclared op {name!r}")
        if name in KERNELS:
            raise ValueError(f"kernel for {name!r} registered twice")
        KERNELS[name] = fn
        return fn
    return deco


def operand(x: Any) -> Any:
    """What the schema rules see: (dtype, shape) for arrays, the type for Python numbers."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return (from_np_dtype(x.dtype), shape)
    t = type(x)
    return t if t in (bool, int, float, complex) else None


class _Plan:
    """Per-op facts looked up once, so the per-call path stays a few dict reads."""

    __slots__ = ("schema", "fn", "ew", "upcast", "n_out", "own_dtypes", "promotes", "opmath",
                 "commutative")

    def __init__(self, schema: OpSchema, fn: Kernel) -> None:
        self.schema, self.fn = schema, fn
        self.ew = ELEMENTWISE in schema.flags
        self.upcast = upcasts(schema)
        self.n_out = schema.n_outputs
        self.own_dtypes = OWN_DTYPES in schema.flags
        self.opmath = SCALAR_OPMATH in schema.flags
        self.commutative = COMMUTATIVE in schema.flags
        # the result dtype is not the compute dtype: comparisons compare in their inputs'
        # promoted dtype, abs(complex) computes in complex
        self.promotes = schema.dtype_rule in (to_bool, real_of)


_PLANS: dict[str, _Plan] = {}


def _plan(name: str) -> _Plan:
    p = _PLANS.get(name)
    if p is None:
        if name not in KERNELS:
            raise NotImplementedError(f"no reference kernel for op {name!r}")
        p = _PLANS[name] = _Plan(REGISTRY[name], KERNELS[name])
    return p


def _cast(x: Any, dt: np.dtype) -> Any:
    return x.astype(dt) if getattr(x, "dtype", dt) != dt else x


_ND = np.ndarray
_DEFAULT = D._default_float
_SCALARS = (bool, int, float, complex)
# (op, operand signature) -> (kernel, per-input cast or None, result dtype): elementwise ops
# without attributes on NumPy inputs skip the type rule after their first call
_EW_CACHE: dict[tuple, tuple] = {}


def run_kernel(name: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """Run op ``name`` on arrays/scalars ``inputs`` with bound ``attrs``.

    Returns one array, or a tuple for multi-output ops, with the dtype(s) the schema says.
    """
    n = len(inputs)
    key = None
    if not attrs and 0 < n < 3:
        # an operand's signature is what the type rule depends on: (dtype, is 0-dim) of an
        # array, the type of a number; written inline because this is the eager hot path
        a = inputs[0]
        sa = (a.dtype, a.ndim == 0) if type(a) is _ND else type(a)
        if n == 1:
            key = (name, _DEFAULT[0], sa)   # the default dtype takes part in promotion
        else:
            b = inputs[1]
            key = (name, _DEFAULT[0], sa, (b.dtype, b.ndim == 0) if type(b) is _ND else type(b))
        hit = _EW_CACHE.get(key)
        if hit is not None:
            fn, casts, want = hit
            if casts is not None:
                out = fn(np, *[x if c is None else _apply_cast(x, c) for x, c in zip(inputs, casts)])
            else:   # positional, not *inputs: a star-call costs more than the add itself
                out = fn(np, a) if n == 1 else fn(np, a, b)
            if type(out) is not _ND:
                return np.asarray(out, dtype=want)
            return out if out.dtype == want else _narrow(out, want)
    return _run(name, inputs, attrs, key)


def _apply_cast(x: Any, dt: np.dtype) -> Any:
    return _wrap_int(x, dt) if type(x) is int else x.astype(dt)


def _remember(key: tuple, p: "_Plan", before: Sequence[Any], after: Sequence[Any],
              out_dt: D.DType) -> None:
    """Cache an elementwise call's casts if every input is a NumPy array or a number."""
    if not all(type(x) is _ND or (type(x) in _SCALARS and y is x) for x, y in zip(before, after)):
        return
    dts = {x.dtype for x in before if type(x) is _ND and x.dtype != bool}
    if len(dts) > 1 and dts & _HALF_NP:
        return         # may be rounded to the half dtype first: two casts, not cached as one
    casts = tuple(None if a is b else np.dtype(getattr(a, "dtype", type(a))) for b, a in zip(before, after))
    _EW_CACHE[key] = (p.fn, None if all(c is None for c in casts) else casts, NP_DTYPE[out_dt])


def _run(name: str, inputs: Sequence[Any], attrs: dict[str, Any], key: tuple | None) -> Any:
    p = _plan(name)
    out_dt = p.schema.dtype_rule([operand(x) for x in inputs], attrs)
    if p.schema.has(FACTORY):
        xp = arrays.module_for_device(attrs.get("device") or "cpu")
    else:
        xp = arrays.array_module(*inputs)
    if p.ew:
        if out_dt in _HALF and name == "clamp":     # bounds checked as PyTorch converts them
            for bound in (attrs.get("min"), attrs.get("max")):   # (70000 overflows float16)
                if bound is not None:
                    checked_float(bound, out_dt, "clamp")
        before, inputs = inputs, _elementwise_inputs(p, inputs, out_dt)
        if key is not None and p.n_out == 1 and xp is np:
            _remember(key, p, before, inputs, out_dt)
    elif p.upcast:
        inputs = [_cast(x, _F32) if getattr(x, "dtype", None) in _HALF_NP else x for x in inputs]
    out = p.fn(xp, *inputs, **attrs)
    if p.n_out == 1:
        return _finish(xp, out, out_dt)
    return tuple(_finish(xp, o, d) for o, d in zip(out, out_dt))


_HALF_NP = {NP_DTYPE[D.float16], NP_DTYPE[D.bfloat16]}


def _elementwise_inputs(p: _Plan, inputs: Sequence[Any], out_dt: D.DType) -> list[Any]:
    """Cast array inputs to the dtype the op computes in (half types compute in float32)."""
    if p.own_dtypes:
        return list(inputs)
    if p.promotes:
        out_dt = promote([operand(x) for x in inputs], {})
    compute = _F32 if out_dt in _HALF else NP_DTYPE[out_dt]
    if out_dt in _HALF:
        if p.schema.name == "pow" and type(inputs[1]) in (int, float):
            checked_float(inputs[1], out_dt, "pow")     # converted with PyTorch's check
        # every operand meets a half tensor rounded to it, as in PyTorch (int64 max is inf),
        # but a scalar `other` of a SCALAR_OPMATH op (mul, div) stays float32
        keep = _opmath_scalar(p, inputs) if p.opmath else None
        inputs = [x if i == keep else _to_half(x, NP_DTYPE[out_dt]) for i, x in enumerate(inputs)]
    if compute.kind in "iu":   # Python ints wrap into the int dtype, as in PyTorch (int8 + 1000)
        name = p.schema.name
        if name == "pow" and type(inputs[1]) is int:      # checked before it wraps (uint8: 255)
            if inputs[1] < 0:
                raise ArgumentValueError(NEGATIVE_POWER)
            checked_int(inputs[1], out_dt, name)
        elif name == "where":       # PyTorch converts where's values with an overflow check
            for x in inputs[1:]:
                if type(x) is int:
                    checked_int(x, out_dt, name)
        inputs = [_wrap_int(x, compute) if type(x) is int else x for x in inputs]
    if p.schema.name == "where":
        return [inputs[0]] + [_cast(x, compute) for x in inputs[1:]]
    return [_cast(x, compute) for x in inputs]


def _opmath_scalar(p: _Plan, inputs: Sequence[Any]) -> int | None:
    """The input a ``SCALAR_OPMATH`` op reads unrounded in float32: ``other`` when it is a
    Python number or a 0-d array, or a Python number ``self`` of a commutative op (``mul(2.5,
    x)`` is ``mul(x, 2.5)``, as ``2.5 * x`` is in PyTorch); None otherwise."""
    if getattr(inputs[1], "ndim", 0) == 0:
        return 1
    return 0 if p.commutative and type(inputs[0]) in _SCALARS else None


def _to_half(x: Any, half: np.dtype) -> Any:
    """``x`` rounded to the half dtype ``half`` (a Python number becomes a float; overflow
    gives inf, quietly)."""
    dt = getattr(x, "dtype", None)
    if dt == half or dt == bool:
        return x
    with np.errstate(over="ignore"):
        return float(half.type(x)) if dt is None else x.astype(half)


def _wrap_int(x: int, dt: np.dtype) -> Any:
    """``x`` (a Python int that an int64 or uint64 holds) wrapped into ``dt``."""
    return np.array(x - (1 << 64) if x >> 63 == 1 else x, dtype=np.int64).astype(dt)[()]


def _finish(xp: Any, out: Any, dt: D.DType | None) -> Any:
    if dt is None:
        return out
    want = NP_DTYPE[dt]
    if type(out) is not np.ndarray and not arrays.is_cupy(out):   # NumPy returns scalars for 0-d
        return xp.asarray(out, dtype=want)
    if out.dtype != want:
        return _narrow(out, want)
    return out


def _narrow(out: Any, want: np.dtype) -> Any:
    """``out`` cast to ``want``; a float32 result beyond a half dtype's range becomes inf
    quietly, as in PyTorch (NumPy would warn)."""
    if want in _HALF_NP:
        with np.errstate(over="ignore"):
            return out.astype(want)
    return out.astype(want)


from . import (conv, elementwise, layers, loss, nn, norm, pooling, reduction,  # noqa: E402,F401
               scalar, script, shape, vision)  # noqa: E402,F401,F811
from . import (fft, indexing, linalg, math, products, rnn, scans, special,  # noqa: E402,F401,F811
               views)

__all__ = ["KERNELS", "kernel", "run_kernel", "operand"]
