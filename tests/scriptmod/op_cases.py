"""The op table: one ``OpCase`` per op of ``ir.schema.REGISTRY``.

A case says how to make sample inputs (NumPy arrays, Python numbers, int lists) and
attributes for a dtype, and what the op means as a float64 NumPy reference. It knows
nothing about how an op is executed: suites pass an ``execute(op, inputs, attrs)`` callable
(eager dispatch, ``run_kernel``, the IR interpreter, the LLVM path, the CUDA shim) to
``run_case`` and get every sample checked against the reference.

    >>> case = CASES["add"]
    >>> for s in case.samples(Gen("float32")):
    ...     check_sample(case, s, "float32", execute)
"""
from __future__ import annotations

import copy
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np
import scipy.special as sps

from scriptmod.ir import dtypes as D
from scriptmod.ir.schema import REGISTRY

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("uint8", "int8", "int16", "int32", "int64")
COMPLEX = ("complex64", "complex128")
REAL = FLOATS + INTS + ("bool",)
NUMERIC = FLOATS + ("uint8", "int32", "int64")
ALL = REAL + COMPLEX

# (rtol, atol) by output dtype: half types compute in float32 and round once
TOLERANCE = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (2e-5, 2e-5),
             "float64": (1e-10, 1e-12), "complex64": (2e-5, 2e-5), "complex128": (1e-10, 1e-12)}


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


@dataclass(frozen=True)
class Sample:
    """One call: ``inputs`` in schema order, ``attrs`` by name, ``grad`` = input positions
    that gradcheck differentiates (floating arrays only)."""

    label: str
    inputs: tuple[Any, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    grad: tuple[int, ...] = ()


class Gen:
    """Deterministic sample data of one dtype."""

    def __init__(self, dtype: str, seed: int = 0) -> None:
        self.dtype = dtype
        self.rng = np.random.default_rng(seed)

    @property
    def floating(self) -> bool:
        return self.dtype in FLOATS

    def arr(self, shape: Sequence[int], lo: float = -2.0, hi: float = 2.0,
            dtype: str | None = None, noncontig: bool = False) -> np.ndarray:
        """Values in [lo, hi]; ``noncontig`` gives a strided view with the same shape."""
        dt = dtype or self.dtype
        if noncontig:
            big = self.arr(tuple(shape[:-1]) + (2 * shape[-1],), lo, hi, dt) if len(shape) < 2 \
                else self.arr(tuple(shape[::-1]), lo, hi, dt).T
            return big[..., ::2] if len(shape) < 2 else big
        shape = tuple(shape)
        if dt == "bool":
            return np.asarray(self.rng.random(shape) < 0.5)
        if dt in INTS:
            lo_i = max(math.ceil(lo), 0) if dt == "uint8" else math.ceil(lo)
            return self.rng.integers(lo_i, math.floor(hi) + 1, shape).astype(dt)
        vals = self.rng.uniform(lo, hi, shape)
        if dt in COMPLEX:
            vals = vals + 1j * self.rng.uniform(lo, hi, shape)
        return np.asarray(vals).astype(np_dtype(dt))

    def scalar(self, lo: float = -2.0, hi: float = 2.0) -> Any:
        """A Python number of the dtype's category (int for int tensors, ...)."""
        if self.dtype == "bool":
            return True
        if self.dtype in INTS:
            return int(self.rng.integers(max(math.ceil(lo), 0), math.floor(hi) + 1))
        if self.dtype in COMPLEX:
            return complex(round(self.rng.uniform(lo, hi), 2), 0.5)
        return round(float(self.rng.uniform(lo, hi)), 3)

    def grad_of(self, *positions: int) -> tuple[int, ...]:
        return positions if self.dtype == "float64" else ()


SampleFn = Callable[[Gen], list[Sample]]
CheckFn = Callable[[Sample, Any], None]


@dataclass(frozen=True)
class OpCase:
    """How to test op ``op``: samples per dtype, a float64 reference, the dtypes that apply.

    ``check`` replaces the reference for ops without a deterministic result (random draws).
    ``grad``: whether gradcheck applies (the op is differentiable in its float inputs).
    ``fd_eps``: finite-difference step for gradcheck.
    """

    op: str
    samples: SampleFn
    ref: Callable[..., Any] | None
    dtypes: tuple[str, ...]
    grad: bool = True
    check: CheckFn | None = None
    fd_eps: float = 1e-6


CASES: dict[str, OpCase] = {}


def case(op: str, samples: SampleFn, ref: Callable[..., Any] | None, dtypes: Sequence[str],
         **kw: Any) -> OpCase:
    if op not in REGISTRY:
        raise KeyError(f"op_cases: {op!r} is not a registry op")
    if op in CASES:
        raise ValueError(f"op_cases: two cases for {op!r}")
    c = CASES[op] = OpCase(op, samples, ref, tuple(dtypes), **kw)
    return c


# ---- sample builders -----------------------------------------------------------------
def unary(lo: float = -2.0, hi: float = 2.0, **attrs: Any) -> SampleFn:
    """Shapes: 2-d, 0-d, empty, size 1, non-contiguous."""
    def make(g: Gen) -> list[Sample]:
        a, gr = attrs, g.grad_of(0)
        return [Sample("2d", (g.arr((3, 4), lo, hi),), a, gr),
                Sample("0d", (g.arr((), lo, hi),), a, gr),
                Sample("empty", (g.arr((0, 3), lo, hi),), a),
                Sample("one", (g.arr((1,), lo, hi),), a, gr),
                Sample("noncontig", (g.arr((2, 3), lo, hi, noncontig=True),), a, gr)]
    return make


def binary(lo: float = -2.0, hi: float = 2.0, lo_b: float | None = None,
           hi_b: float | None = None, scalars: bool = True, ties: bool = False) -> SampleFn:
    """Same shape, broadcast both ways, 0-d, empty, non-contiguous, Python scalars."""
    lb, hb = (lo if lo_b is None else lo_b), (hi if hi_b is None else hi_b)

    def make(g: Gen) -> list[Sample]:
        A = lambda s, **k: g.arr(s, lo, hi, **k)   # noqa: E731
        B = lambda s, **k: g.arr(s, lb, hb, **k)   # noqa: E731
        gr = g.grad_of(0, 1)
        out = [Sample("same", (A((2, 3)), B((2, 3))), {}, gr),
               Sample("broadcast", (A((3, 1)), B((4,))), {}, gr),
               Sample("0d-other", (A((2, 3)), B(())), {}, gr),
               Sample("empty", (A((0, 3)), B((3,))), {}),
               Sample("noncontig", (A((2, 3), noncontig=True), B((2, 3), noncontig=True)), {}, gr)]
        if scalars:
            out += [Sample("scalar-right", (A((2, 3)), g.scalar(lb, hb)), {}, g.grad_of(0)),
                    Sample("scalar-left", (g.scalar(lo, hi), B((2, 3))), {}, g.grad_of(1))]
        if ties:
            a = A((2, 3))
            b = a.copy()
            b[0] = B((3,))
            out.append(Sample("ties", (a, b), {}))
        return out
    return make


def reduce(lo: float = -2.0, hi: float = 2.0, empty_ok: bool = True, dims: bool = True,
           grad_0d: bool = True, **extra: Any) -> SampleFn:
    """All dims, one dim, negative dim, several dims with keepdim, 0-d, empty, non-contiguous."""
    def make(g: Gen) -> list[Sample]:
        X = lambda s, **k: g.arr(s, lo, hi, **k)   # noqa: E731
        gr = g.grad_of(0)
        out = [Sample("all", (X((3, 4)),), dict(extra), gr),
               Sample("0d", (X(()),), dict(extra), gr if grad_0d else ()),
               Sample("noncontig-all", (X((3, 4), noncontig=True),), dict(extra), gr)]
        if dims:
            out += [Sample("dim1", (X((3, 4)),), dict(extra, dim=[1]), gr),
                    Sample("dim-1-keep", (X((2, 3, 4)),), dict(extra, dim=[-1], keepdim=True), gr),
                    Sample("dims02", (X((2, 3, 4)),), dict(extra, dim=[0, 2]), gr),
                    Sample("noncontig", (X((3, 4), noncontig=True),), dict(extra, dim=[0]), gr)]
        if empty_ok:
            out.append(Sample("empty-dim", (X((0, 3)),), dict(extra, dim=[0] if dims else None)))
        return out
    return make


def along(lo: float = -2.0, hi: float = 2.0, **extra: Any) -> SampleFn:
    """Ops along one dim (softmax, cumsum)."""
    def make(g: Gen) -> list[Sample]:
        X = lambda s, **k: g.arr(s, lo, hi, **k)   # noqa: E731
        gr = g.grad_of(0)
        return [Sample("dim1", (X((3, 4)),), dict(extra, dim=1), gr),
                Sample("dim0", (X((3, 4)),), dict(extra, dim=0), gr),
                Sample("dim-1-3d", (X((2, 3, 2)),), dict(extra, dim=-1), gr),
                Sample("0d", (X(()),), dict(extra, dim=0), gr),
                Sample("empty", (X((0, 3)),), dict(extra, dim=1)),
                Sample("noncontig", (X((3, 4), noncontig=True),), dict(extra, dim=1), gr)]
    return make


def _ax(x: np.ndarray, dim: Any) -> tuple[int, ...] | None:
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else (dim,)


# ---- elementwise ---------------------------------------------------------------------
_UNARY_FLOAT = {
    "exp": (np.exp, -2, 2), "log": (np.log, 0.5, 3), "log1p": (np.log1p, -0.5, 2),
    "expm1": (np.expm1, -2, 2), "sqrt": (np.sqrt, 0.5, 3), "rsqrt": (lambda x: 1 / np.sqrt(x), 0.5, 3),
    "sin": (np.sin, -2, 2), "cos": (np.cos, -2, 2), "tanh": (np.tanh, -2, 2),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), -3, 3), "erf": (sps.erf, -2, 2),
    "erfc": (sps.erfc, -2, 2), "reciprocal": (lambda x: 1 / x, 0.5, 3), "log2": (np.log2, 0.5, 3),
    "exp2": (np.exp2, -2, 2)}
_COMPLEX_OK = {"exp", "log", "sqrt", "sin", "cos", "tanh", "reciprocal"}


def _in_float(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Float-only ops compute ints and bools in floating point (NumPy would pick float16)."""
    return lambda x: fn(x if x.dtype.kind in "fc" else x.astype(np.float64))


for _n, (_f, _lo, _hi) in _UNARY_FLOAT.items():
    case(_n, unary(_lo, _hi), _in_float(_f), FLOATS + ("uint8", "int32", "int64", "bool")
         + (COMPLEX if _n in _COMPLEX_OK else ()))

case("neg", unary(), np.negative, FLOATS + ("int8", "int16", "int32", "int64") + COMPLEX)
case("abs", unary(), np.abs, FLOATS + INTS + COMPLEX)
case("sign", unary(), lambda x: x.copy() if x.dtype == bool else np.sign(x), FLOATS + INTS + ("bool",))
case("relu", unary(), lambda x: np.maximum(x, 0).astype(x.dtype), FLOATS + INTS)
for _n, _f in (("floor", np.floor), ("ceil", np.ceil), ("round", np.round), ("trunc", np.trunc)):
    case(_n, unary(-3, 3), _f, FLOATS + INTS)

case("add", binary(), np.add, ALL)
case("sub", binary(), np.subtract, FLOATS + INTS + COMPLEX)
case("mul", binary(), np.multiply, ALL)
case("div", binary(lo_b=0.5, hi_b=2), np.true_divide, FLOATS + NUMERIC + COMPLEX)
case("floor_divide", binary(lo_b=1, hi_b=3), np.floor_divide, FLOATS + INTS[1:], grad=False)
case("remainder", binary(lo_b=1, hi_b=3), np.remainder, FLOATS + INTS[1:])
case("pow", binary(0.5, 2, 0, 3), np.power, FLOATS + ("uint8", "int32", "int64"))
case("maximum", binary(scalars=False), np.maximum, REAL)
case("minimum", binary(scalars=False), np.minimum, REAL)
case("atan2", binary(), np.arctan2, FLOATS + ("int32", "int64"))
for _n, _f in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
               ("gt", np.greater), ("ge", np.greater_equal)):
    case(_n, binary(ties=True), _f, REAL + (COMPLEX if _n in ("eq", "ne") else ()), grad=False)
for _n, _f in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
               ("logical_xor", np.logical_xor)):
    case(_n, binary(-1, 1), _f, REAL, grad=False)
for _n, _f in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
               ("bitwise_xor", np.bitwise_xor)):
    case(_n, binary(-4, 4), _f, INTS + ("bool",), grad=False)
case("logical_not", unary(-1, 1), np.logical_not, REAL, grad=False)
case("bitwise_not", unary(-4, 4), np.invert, INTS + ("bool",), grad=False)


def _specials(g: Gen) -> list[Sample]:
    x = g.arr((2, 3))
    if g.floating:
        x[0, :3] = [np.nan, np.inf, -np.inf]
    return [Sample("special", (x,)), Sample("0d", (g.arr(()),)), Sample("empty", (g.arr((0,)),))]


case("isnan", _specials, np.isnan, REAL, grad=False)
case("isinf", _specials, np.isinf, REAL, grad=False)


def _where(g: Gen) -> list[Sample]:
    c = Gen("bool", 1)
    gr = g.grad_of(1, 2)
    return [Sample("same", (c.arr((2, 3)), g.arr((2, 3)), g.arr((2, 3))), {}, gr),
            Sample("broadcast", (c.arr((3, 1)), g.arr((4,)), g.arr((3, 4))), {}, gr),
            Sample("scalar", (c.arr((2, 3)), g.arr((2, 3)), g.scalar()), {}, g.grad_of(1)),
            Sample("empty", (c.arr((0, 2)), g.arr((0, 2)), g.arr((2,))), {}),
            Sample("noncontig", (c.arr((2, 3), noncontig=True), g.arr((2, 3), noncontig=True),
                                 g.arr(())), {}, gr)]


case("where", _where, np.where, ALL)


def _clamp_samples(g: Gen) -> list[Sample]:
    lo, hi = (-1.0, 1.0) if g.floating else (-1, 1)
    base = unary(-3, 3)(g)
    out = [Sample(s.label, s.inputs, {"min": lo, "max": hi}, s.grad) for s in base]
    return out + [Sample("min-only", base[0].inputs, {"min": lo}, base[0].grad),
                  Sample("max-only", base[0].inputs, {"max": hi}, base[0].grad)]


case("clamp", _clamp_samples,
     lambda x, min=None, max=None: np.clip(x, min, max).astype(x.dtype), FLOATS + INTS[1:])


def _copy_samples(g: Gen) -> list[Sample]:
    """``copy_(self, src)``: src written into self (whose old values must not matter)."""
    return [Sample("2d", (g.arr((2, 3)), g.arr((2, 3))), {}, g.grad_of(1)),
            Sample("0d", (g.arr(()), g.arr(())), {}, g.grad_of(1)),
            Sample("empty", (g.arr((0, 2)), g.arr((0, 2))), {})]


case("copy_", _copy_samples, lambda dst, src: src.astype(dst.dtype), REAL)


def _cast_samples(g: Gen) -> list[Sample]:
    targets = ("float64", "float32", "float16", "int64", "int32", "bool") + (
        ("complex128",) if g.dtype in COMPLEX else ())
    lo = 0 if g.dtype in COMPLEX else -3
    return [Sample(f"to-{t}", (g.arr((2, 3), lo, 3),), {"dtype": D.BY_NAME[t]},
                   g.grad_of(0) if t == "float64" else ())
            for t in targets if not (g.dtype in COMPLEX and t not in COMPLEX + FLOATS[2:])] + \
        [Sample("0d", (g.arr(()),), {"dtype": D.float64}, g.grad_of(0))]


def _cast_ref(x: np.ndarray, dtype: D.DType) -> np.ndarray:
    if x.dtype.kind == "c" and dtype.category < D.COMPLEX:
        x = x.real
    return x.astype(np_dtype(dtype.name))


case("cast", _cast_samples, _cast_ref, ALL)

# ---- reductions ----------------------------------------------------------------------


def _int_acc(x: np.ndarray) -> Any:
    return np.int64 if x.dtype.kind in "biu" else None


case("sum", reduce(), lambda x, dim=None, keepdim=False: np.sum(
    x, axis=_ax(x, dim), keepdims=keepdim, dtype=_int_acc(x)), ALL)
case("prod", reduce(-1.5, 1.5), lambda x, dim=None, keepdim=False: np.prod(
    x, axis=_ax(x, dim), keepdims=keepdim, dtype=_int_acc(x)), FLOATS + ("int32", "int64", "bool"))
case("mean", reduce(), lambda x, dim=None, keepdim=False: np.mean(
    x, axis=_ax(x, dim), keepdims=keepdim), FLOATS + COMPLEX)
case("var", reduce(empty_ok=False, grad_0d=False, correction=1.0), lambda x, dim=None, keepdim=False, correction=1:
     np.var(x, axis=_ax(x, dim), keepdims=keepdim, ddof=correction) if x.ndim else
     np.float64(np.nan) * x, FLOATS)
case("amax", reduce(empty_ok=False), lambda x, dim=None, keepdim=False: np.max(
    x, axis=_ax(x, dim), keepdims=keepdim), REAL)
case("amin", reduce(empty_ok=False), lambda x, dim=None, keepdim=False: np.min(
    x, axis=_ax(x, dim), keepdims=keepdim), REAL)
case("logsumexp", reduce(), lambda x, dim=None, keepdim=False: sps.logsumexp(
    x, axis=_ax(x, dim), keepdims=keepdim), FLOATS + ("int64",))
for _n in ("any", "all"):
    case(_n, reduce(-1, 1), lambda x, dim=None, keepdim=False, _n=_n: getattr(np, _n)(
        x, axis=_ax(x, dim), keepdims=keepdim), REAL, grad=False)


# every ord on every reduce() shape would be 60 samples: ord 2 takes them all, the others a few
_NORM_ORDS = (2.0, 1.0, math.inf, -math.inf, 0.0, 3.0, 1.5, 0.5, -1.0)
_NORM_SHAPES = {"all", "0d", "dims02", "dim-1-keep", "empty-dim"}


def _away_from_zero(x: np.ndarray) -> np.ndarray:
    """|x| >= 0.25: the p < 1 norms' gradients are steep near 0 (finite differences fail)."""
    return np.asarray(x + np.where(x.real >= 0, 0.25, -0.25).astype(x.dtype))


def _vector_norm_samples(g: Gen) -> list[Sample]:
    out = []
    for p in _NORM_ORDS:
        no_identity = p < 0 or p == math.inf    # an empty reduction raises (torch's error)
        for s in reduce(empty_ok=not no_identity, ord=p)(g):
            if p == 2.0 or s.label in _NORM_SHAPES:
                out.append(Sample(f"{s.label}-ord{p:g}", (_away_from_zero(s.inputs[0]),),
                                  s.attrs, s.grad if p != 0 else ()))
    zero = np.zeros((2, 3), np_dtype(g.dtype))
    zero[1] = g.arr((3,))
    out.append(Sample("zero-row", (zero,), {"dim": [1]}, g.grad_of(0)))   # grad 0 there
    return out


def _vector_norm_ref(x: np.ndarray, ord: float = 2.0, dim: Any = None, keepdim: bool = False,
                     dtype: Any = None) -> np.ndarray:
    a = np.abs(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64))
    over = {"axis": _ax(x, dim), "keepdims": keepdim}
    if math.isinf(ord):
        return (np.max if ord > 0 else np.min)(a, **over)
    if ord == 0:
        return np.sum(a != 0, **over).astype(np.float64)
    return np.sum(a ** ord, **over) ** (1 / ord)


case("linalg_vector_norm", _vector_norm_samples, _vector_norm_ref, FLOATS + COMPLEX)


def _matrices(g: Gen, *extra: Any) -> list[Sample]:
    """Wide, tall, batched, non-contiguous and empty matrices (``extra(g, a)``: more inputs)."""
    shapes = [("wide", (3, 4)), ("tall", (4, 3)), ("batched", (2, 3, 3)), ("empty", (0, 3))]
    out = [Sample(label, (g.arr(shape),) + tuple(f(g, g.arr(shape)) for f in extra), {},
                  g.grad_of(0) if label != "empty" else ())
           for label, shape in shapes]
    a = g.arr((2, 5, 3), noncontig=True)
    return out + [Sample("noncontig", (a,) + tuple(f(g, a) for f in extra), {}, g.grad_of(0))]


def _real_of(g: Gen) -> str:
    return {"complex64": "float32", "complex128": "float64"}.get(g.dtype, g.dtype)


def _svdvals_grad_ref(a: np.ndarray, grad: np.ndarray) -> np.ndarray:
    u, _, vh = np.linalg.svd(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64),
                             full_matrices=False)
    return (u * grad.astype(np.float64)[..., None, :]) @ vh


case("linalg_svdvals", _matrices, lambda a: np.linalg.svd(
    a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), compute_uv=False),
    ("float32", "float64") + COMPLEX)
case("linalg_svdvals_grad",
     lambda g: _matrices(g, lambda g, a: g.arr(a.shape[:-2] + (min(a.shape[-2:]),),
                                               dtype=_real_of(g))),
     _svdvals_grad_ref, ("float32", "float64") + COMPLEX, grad=False)


def _select_samples(g: Gen) -> list[Sample]:
    X = lambda s, **k: g.arr(s, -3, 3, **k)   # noqa: E731
    gr = g.grad_of(0)
    return [Sample("dim1", (X((3, 4)),), {"dim": 1}, gr),
            Sample("dim0-keep", (X((3, 4)),), {"dim": 0, "keepdim": True}, gr),
            Sample("dim-1-3d", (X((2, 3, 4)),), {"dim": -1}, gr),
            Sample("0d", (X(()),), {"dim": 0}, gr),
            Sample("noncontig", (X((3, 4), noncontig=True),), {"dim": 1}, gr)]


def _select_ref(fn: str) -> Callable[..., Any]:
    def ref(x: np.ndarray, dim: int, keepdim: bool = False) -> tuple:
        xx = x.reshape(1) if x.ndim == 0 else x
        idx = np.expand_dims(getattr(np, "arg" + fn)(xx, axis=dim), dim)
        val = np.take_along_axis(xx, idx, axis=dim)
        if not keepdim or x.ndim == 0:
            idx, val = np.squeeze(idx, dim), np.squeeze(val, dim)
        return val.reshape(val.shape if x.ndim else ()), idx.reshape(idx.shape if x.ndim else ())
    return ref


case("max_dim", _select_samples, _select_ref("max"), REAL)
case("min_dim", _select_samples, _select_ref("min"), REAL)


def _arg_samples(g: Gen) -> list[Sample]:
    sel = _select_samples(g)
    return sel + [Sample("flat", sel[0].inputs, {}), Sample("flat-keep", sel[0].inputs, {"keepdim": True})]


def _arg_ref(fn: str) -> Callable[..., Any]:
    def ref(x: np.ndarray, dim: int | None = None, keepdim: bool = False) -> np.ndarray:
        if dim is None:
            flat = np.asarray(getattr(np, fn)(x.reshape(-1)))
            return flat.reshape((1,) * x.ndim) if keepdim else flat
        return _select_ref(fn[3:])(x, dim, keepdim)[1]
    return ref


case("argmax", _arg_samples, _arg_ref("argmax"), REAL, grad=False)
case("argmin", _arg_samples, _arg_ref("argmin"), REAL, grad=False)


def _softmax_ref(x: np.ndarray, dim: int, dtype: Any = None) -> np.ndarray:
    if x.ndim == 0:
        return np.ones_like(x)
    e = np.exp(x - x.max(axis=dim, keepdims=True)) if x.size else x
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax_ref(x: np.ndarray, dim: int, dtype: Any = None) -> np.ndarray:
    if x.ndim == 0:
        return np.zeros_like(x)
    return x - sps.logsumexp(x, axis=dim, keepdims=True) if x.size else x


def _cumsum_ref(x: np.ndarray, dim: int, dtype: Any = None) -> np.ndarray:
    if x.ndim == 0:
        return x.astype(np.int64) if x.dtype.kind in "biu" else x
    return np.cumsum(x, axis=dim, dtype=_int_acc(x))


case("softmax", along(), _softmax_ref, FLOATS)
case("log_softmax", along(), _log_softmax_ref, FLOATS)
case("cumsum", along(), _cumsum_ref, FLOATS + ("int32", "int64", "bool") + COMPLEX)


# ---- sorting (stable; NaN is the largest value) ----------------------------------------
def _with_ties(g: Gen, shape: tuple[int, ...]) -> np.ndarray:
    """Few distinct values, so that most of them repeat (and NaN where floating)."""
    x = g.arr(shape, -2, 2)
    x = x.astype(np.float64).round().astype(x.dtype) if g.floating else x
    if g.floating:
        x.reshape(-1)[::5] = np.nan
    return x


def _sort_samples(g: Gen) -> list[Sample]:
    X = lambda s, **k: g.arr(s, -3, 3, **k)   # noqa: E731
    gr = g.grad_of(0)
    return [Sample("dim-1", (X((3, 5)),), {}, gr),
            Sample("dim0-desc", (X((4, 3)),), {"dim": 0, "descending": True}, gr),
            Sample("3d-dim1", (X((2, 4, 3)),), {"dim": 1}, gr),
            Sample("0d", (X(()),), {"dim": 0}, gr),
            Sample("empty", (X((0, 3)),), {"dim": 0}),
            Sample("noncontig", (X((3, 4), noncontig=True),), {"descending": True}, gr),
            Sample("ties", (_with_ties(g, (3, 10)),), {}),
            Sample("ties-desc", (_with_ties(g, (10, 3)),), {"dim": 0, "descending": True})]


def _sort_order_ref(row: np.ndarray, descending: bool) -> list[int]:
    """Python's sort is stable, reversed too: equal values keep their order."""
    key = lambda i: (1, 0.0) if row[i] != row[i] else (0, row[i])   # noqa: E731  (NaN last)
    return sorted(range(len(row)), key=key, reverse=descending)


def _sort_ref(x: np.ndarray, dim: int = -1, descending: bool = False) -> tuple:
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    idx = np.apply_along_axis(lambda r: np.array(_sort_order_ref(r, descending), np.int64), dim, x)
    return np.take_along_axis(x, idx, dim), idx


def _topk_samples(g: Gen) -> list[Sample]:
    X = lambda s, **k: g.arr(s, -3, 3, **k)   # noqa: E731
    gr = g.grad_of(0)
    return [Sample("k2", (X((3, 5)),), {"k": 2}, gr),
            Sample("k3-dim0-smallest", (X((4, 3)),), {"k": 3, "dim": 0, "largest": False}, gr),
            Sample("k-all", (X((2, 3, 4)),), {"k": 3, "dim": 1}, gr),
            Sample("k0", (X((3, 4)),), {"k": 0}),
            Sample("0d", (X(()),), {"k": 1, "dim": 0}, gr),
            Sample("noncontig", (X((3, 4), noncontig=True),), {"k": 2, "sorted": False}, gr),
            Sample("ties", (_with_ties(g, (3, 10)),), {"k": 4}),
            Sample("ties-smallest", (_with_ties(g, (3, 10)),), {"k": 4, "largest": False})]


def _topk_ref(x: np.ndarray, k: int, dim: int = -1, largest: bool = True,
              sorted: bool = True) -> tuple:
    values, idx = _sort_ref(x, dim, descending=largest)
    if x.ndim == 0:
        return values, idx
    return np.take(values, range(k), dim), np.take(idx, range(k), dim)


case("sort", _sort_samples, _sort_ref, REAL)
case("topk", _topk_samples, _topk_ref, REAL)


def _isclose_samples(g: Gen) -> list[Sample]:
    """Pairs equal, near (relative change 1e-3) or far apart (1 step, 0.5) in thirds, so
    that no element sits on a tolerance's edge."""
    a = g.arr((3, 6), 0.5, 2)
    b = a.copy()
    if g.dtype == "bool":
        b[:, ::3] = ~b[:, ::3]
    elif g.floating:
        b[:, 1::3] = (b[:, 1::3].astype(np.float64) * 1.001).astype(b.dtype)
        b[:, ::3] += np.asarray(0.5, b.dtype)
    else:
        b[:, ::3] += np.asarray(1, b.dtype)
    out = [Sample("default", (a, b)), Sample("rtol", (a, b), {"rtol": 0.05, "atol": 0.0}),
           Sample("atol", (a, b), {"rtol": 0.0, "atol": 1.5}),
           Sample("exact", (a, b), {"rtol": 0.0, "atol": 0.0}),
           Sample("broadcast", (a, b[0]), {"rtol": 0.05}),
           Sample("scalar", (a, g.scalar(0.5, 2)), {"atol": 0.5}),
           Sample("0d-self", (np.array(a[0, 0]), b[0]), {"rtol": 0.05}),
           Sample("empty", (a[:0], b[:0]))]
    if g.floating:
        n = a.copy()
        n[0] = np.nan
        m = n.copy()
        m[0, ::2] = 1
        out += [Sample("nan", (n, m)), Sample("equal-nan", (n, m), {"equal_nan": True})]
    return out


def _isclose_ref(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
                 equal_nan: bool = False) -> np.ndarray:
    wide = lambda x: np.asarray(x, np.complex128 if np.iscomplexobj(x) else np.float64)  # noqa: E731
    return np.isclose(wide(a), wide(b), rtol=rtol, atol=atol, equal_nan=equal_nan)


case("isclose", _isclose_samples, _isclose_ref, REAL + COMPLEX, grad=False)


def _randperm_check(s: Sample, got: Any) -> None:
    n = s.inputs[0]
    assert got.dtype == np_dtype(s.attrs["dtype"].name), (got.dtype, s.attrs["dtype"])
    np.testing.assert_array_equal(np.sort(got.astype(np.int64)), np.arange(n))


def _randperm_samples(g: Gen) -> list[Sample]:
    attrs = {"dtype": D.BY_NAME[g.dtype], "device": "cpu"}
    return [Sample(label, (n,), attrs) for label, n in (("ten", 10), ("one", 1), ("empty", 0))]


case("randperm", _randperm_samples, None, FLOATS + ("int32", "int64"), grad=False,
     check=_randperm_check)


# ---- shape and data movement ---------------------------------------------------------
def _shaped(make_attrs: Callable[[Gen], list[tuple[str, tuple, tuple, dict]]]) -> SampleFn:
    """Samples from (label, input shape, extra inputs, attrs) rows; input 0 is an array."""
    def make(g: Gen) -> list[Sample]:
        out = []
        for label, shape, extra, attrs in make_attrs(g):
            nc = label.startswith("noncontig")
            x = g.arr(shape, noncontig=nc)
            out.append(Sample(label, (x,) + extra, attrs, g.grad_of(0) if x.size else ()))
        return out
    return make


def _reshape_rows(g: Gen) -> list:
    return [("2d-3d", (2, 6), ([3, 2, 2],), {}), ("infer", (2, 6), ([-1, 3],), {}),
            ("to-0d", (1,), ([],), {}), ("from-0d", (), ([1, 1],), {}),
            ("empty", (0, 3), ([3, 0],), {}), ("noncontig", (3, 4), ([-1],), {})]


def _expand_rows(g: Gen) -> list:
    return [("lead", (3,), ([2, 3],), {}), ("ones", (3, 1), ([3, 4],), {}),
            ("keep", (3, 1), ([-1, 2],), {}), ("0d", (), ([2, 2],), {}),
            ("noncontig", (1, 3), ([2, 1, 3],), {})]


case("reshape", _shaped(_reshape_rows), lambda x, s: np.reshape(x, s), ALL)
case("expand", _shaped(_expand_rows),
     lambda x, s: np.broadcast_to(x, [x.shape[i - len(s) + x.ndim] if v == -1 else v
                                      for i, v in enumerate(s)]), ALL)
case("permute", _shaped(lambda g: [("3d", (2, 3, 4), (), {"dims": [2, 0, 1]}),
                                   ("neg", (2, 3), (), {"dims": [-1, 0]}),
                                   ("0d", (), (), {"dims": []}),
                                   ("noncontig", (3, 2), (), {"dims": [1, 0]})]),
     lambda x, dims: np.transpose(x, dims), ALL)
case("transpose", _shaped(lambda g: [("2d", (2, 3), (), {"dim0": 0, "dim1": 1}),
                                     ("3d-neg", (2, 3, 4), (), {"dim0": -1, "dim1": 0}),
                                     ("same", (2, 3), (), {"dim0": 1, "dim1": 1}),
                                     ("noncontig", (3, 2), (), {"dim0": 0, "dim1": 1})]),
     lambda x, dim0, dim1: np.swapaxes(x, dim0, dim1), ALL)
case("unsqueeze", _shaped(lambda g: [("front", (2, 3), (), {"dim": 0}),
                                     ("back", (2, 3), (), {"dim": -1}),
                                     ("0d", (), (), {"dim": 0}),
                                     ("noncontig", (2, 3), (), {"dim": 1})]),
     lambda x, dim: np.expand_dims(x, dim), ALL)


def _squeeze_ref(x: np.ndarray, dim: Any = None) -> np.ndarray:
    dims = range(x.ndim) if dim is None else [d % x.ndim for d in dim]
    return np.squeeze(x, axis=tuple(d for d in dims if x.shape[d] == 1))


case("squeeze", _shaped(lambda g: [("all", (1, 3, 1), (), {}), ("dim", (1, 3, 1), (), {"dim": [0]}),
                                   ("not-one", (2, 3), (), {"dim": [0]}), ("0d", (), (), {}),
                                   ("dims", (1, 2, 1), (), {"dim": [0, -1]})]),
     _squeeze_ref, ALL)


def _narrow_ref(x: np.ndarray, start: int, length: int, dim: int) -> np.ndarray:
    s = start % x.shape[dim] if start < 0 else start
    return np.take(x, range(s, s + length), axis=dim)


case("narrow", _shaped(lambda g: [("dim0", (4, 3), (1, 2), {"dim": 0}),
                                  ("dim-1", (2, 5), (0, 3), {"dim": -1}),
                                  ("neg-start", (4, 3), (-2, 2), {"dim": 0}),
                                  ("zero-len", (4, 3), (4, 0), {"dim": 0}),
                                  ("noncontig", (4, 3), (1, 2), {"dim": 1})]),
     _narrow_ref, ALL)
_COPY_ROWS = lambda g: [("2d", (2, 3), (), {}), ("0d", (), (), {}), ("empty", (0, 2), (), {}),  # noqa: E731
                        ("noncontig", (2, 3), (), {})]
case("contiguous", _shaped(_COPY_ROWS), lambda x: x, ALL)
case("clone", _shaped(_COPY_ROWS), lambda x: x, ALL)
case("detach", _shaped(_COPY_ROWS), lambda x: x, ALL, grad=False)
case("to_device", _shaped(lambda g: [(r[0], r[1], (), {"device": "cpu"}) for r in _COPY_ROWS(g)]),
     lambda x, device: x, ALL)
case("size", _shaped(lambda g: [("dim0", (2, 3), (), {"dim": 0}), ("neg", (2, 3), (), {"dim": -1}),
                                ("empty", (0, 3), (), {"dim": 0})]),
     lambda x, dim: x.shape[dim], ALL, grad=False)


def _cat_samples(g: Gen) -> list[Sample]:
    A = lambda s, **k: g.arr(s, **k)   # noqa: E731
    gr3 = g.grad_of(0, 1, 2)
    return [Sample("dim0", (A((2, 3)), A((1, 3)), A((3, 3))), {"dim": 0}, gr3),
            Sample("dim-1", (A((2, 1)), A((2, 3))), {"dim": -1}, g.grad_of(0, 1)),
            Sample("one", (A((2, 3)),), {"dim": 1}, g.grad_of(0)),
            Sample("empty-part", (A((0, 3)), A((2, 3))), {"dim": 0}, g.grad_of(1)),
            Sample("legacy-empty", (A((0,)), A((2, 3))), {"dim": 1}, g.grad_of(1)),
            Sample("noncontig", (A((2, 3), noncontig=True), A((2, 2))), {"dim": 1}, g.grad_of(0, 1))]


def _cat_ref(*xs: np.ndarray, dim: int = 0) -> np.ndarray:
    xs = tuple(x for x in xs if x.shape != (0,)) or xs[:1]
    return np.concatenate(xs, axis=dim)


case("cat", _cat_samples, _cat_ref, ALL)


def _stack_samples(g: Gen) -> list[Sample]:
    A = lambda s, **k: g.arr(s, **k)   # noqa: E731
    return [Sample("dim0", (A((2, 3)), A((2, 3))), {"dim": 0}, g.grad_of(0, 1)),
            Sample("dim-1", (A((2, 3)), A((2, 3)), A((2, 3))), {"dim": -1}, g.grad_of(0, 1, 2)),
            Sample("0d", (A(()), A(())), {"dim": 0}, g.grad_of(0, 1)),
            Sample("noncontig", (A((2, 3), noncontig=True), A((2, 3))), {"dim": 1}, g.grad_of(0, 1))]


case("stack", _stack_samples, lambda *xs, dim=0: np.stack(xs, axis=dim), ALL)


def _gather_samples(g: Gen) -> list[Sample]:
    rng = np.random.default_rng(3)
    x = g.arr((3, 4))
    return [Sample("dim1", (x, rng.integers(0, 4, (3, 2))), {"dim": 1}, g.grad_of(0)),
            Sample("dim0-dup", (x, np.array([[0, 0, 2, 1], [2, 2, 0, 0]])), {"dim": 0}, g.grad_of(0)),
            Sample("smaller", (x, rng.integers(0, 3, (2, 2))), {"dim": 0}, g.grad_of(0)),
            Sample("noncontig", (g.arr((3, 4), noncontig=True), rng.integers(0, 4, (3, 4))),
                   {"dim": -1}, g.grad_of(0))]


def _gather_ref(x: np.ndarray, index: np.ndarray, dim: int) -> np.ndarray:
    src = x[tuple(slice(0, index.shape[k]) if k != dim % x.ndim else slice(None) for k in range(x.ndim))]
    return np.take_along_axis(src, index, axis=dim)


case("gather", _gather_samples, _gather_ref, ALL)

_SL = ("slice", None, None, None)
_INDEX_SPECS: list[tuple[str, tuple, Callable[[], list[np.ndarray]]]] = [
    ("basic", (("slice", 1, None, None), ("int", 0)), lambda: []),
    ("step-none-ellipsis", (("none",), ("ellipsis",), ("slice", None, None, 2)), lambda: []),
    ("neg-int", (("int", -1),), lambda: []),
    ("int-tensor-dup", (("tensor", 0),), lambda: [np.array([2, 0, 2, -1])]),
    ("two-tensors", (("tensor", 0), ("tensor", 1)), lambda: [np.array([0, 2]), np.array([1, 3])]),
    ("mask", (("tensor", 0),), lambda: [np.array([True, False, True])]),
    ("slice-tensor", (_SL, ("tensor", 0)), lambda: [np.array([[3, 0], [1, 2]])]),
]


def _np_index(spec: tuple, tensors: Sequence[np.ndarray]) -> tuple:
    conv = {"int": lambda e: e[1], "slice": lambda e: slice(*e[1:]), "none": lambda e: None,
            "ellipsis": lambda e: Ellipsis, "tensor": lambda e: tensors[e[1]]}
    return tuple(conv[e[0]](e) for e in spec)


def _index_samples(g: Gen) -> list[Sample]:
    return [Sample(label, (g.arr((3, 4)),) + tuple(mk()), {"spec": spec}, g.grad_of(0))
            for label, spec, mk in _INDEX_SPECS] + [
        Sample("noncontig", (g.arr((3, 4), noncontig=True),), {"spec": _INDEX_SPECS[0][1]}, g.grad_of(0))]


case("index", _index_samples, lambda x, *ts, spec: x[_np_index(spec, ts)], ALL)


def _index_put_samples(g: Gen) -> list[Sample]:
    out = []
    for label, spec, mk in _INDEX_SPECS:
        x, ts = g.arr((3, 4)), mk()
        shape = np.empty((3, 4))[_np_index(spec, ts)].shape
        unique = "dup" not in label
        for acc in (False, True):
            if unique or acc:
                out.append(Sample(f"{label}-acc{int(acc)}", (x, g.arr(shape)) + tuple(ts),
                                  {"spec": spec, "accumulate": acc}, g.grad_of(0, 1)))
    out.append(Sample("broadcast-value", (g.arr((3, 4)), g.arr(())), {"spec": _INDEX_SPECS[0][1]},
                      g.grad_of(0, 1)))
    return out


def _index_put_ref(x: np.ndarray, v: np.ndarray, *ts: np.ndarray, spec: tuple,
                   accumulate: bool = False) -> np.ndarray:
    out = x.copy()
    idx = _np_index(spec, ts)
    if accumulate:
        np.add.at(out, idx, v.astype(out.dtype))
    else:
        out[idx] = v
    return out


case("index_put", _index_put_samples, _index_put_ref, ALL)


# ---- factories -----------------------------------------------------------------------
def _factory(rows: Callable[[Gen], list[tuple[str, tuple, dict]]]) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        dt = {"dtype": D.BY_NAME[g.dtype], "device": "cpu"}
        return [Sample(label, inputs, dict(attrs, **dt)) for label, inputs, attrs in rows(g)]
    return make


def _no_dev(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a, dtype=None, device="cpu", **k: fn(*a, **k).astype(np_dtype(dtype.name))


case("full", _factory(lambda g: [("2d", ([2, 3], g.scalar()), {}), ("0d", ([], g.scalar()), {}),
                                 ("empty", ([0, 2], g.scalar()), {})]),
     _no_dev(lambda size, v: np.full(size, v)), ALL, grad=False)
case("arange", _factory(lambda g: [("basic", (0.0, 5.0, 1.0), {}), ("step", (1.0, 8.0, 3.0), {}),
                                   ("neg-step", (5.0, 0.0, -2.0), {}), ("empty", (2.0, 2.0, 1.0), {}),
                                   ("ints", (0, 7, 2), {}), ("float-step", (0, 1, 0.25), {})]),
     _no_dev(lambda start, end, step: start + step * np.arange(math.ceil((end - start) / step))),
     REAL[:4] + ("int32", "int64"), grad=False)
case("linspace", _factory(lambda g: [("basic", (), {"start": 0.0, "end": 1.0, "steps": 5}),
                                     ("one", (), {"start": 2.0, "end": 3.0, "steps": 1}),
                                     ("zero", (), {"start": 0.0, "end": 1.0, "steps": 0})]),
     _no_dev(lambda start, end, steps: np.linspace(start, end, steps)), FLOATS, grad=False)
case("eye", _factory(lambda g: [("square", (), {"n": 3, "m": 3}), ("wide", (), {"n": 2, "m": 4}),
                                ("empty", (), {"n": 0, "m": 2})]),
     _no_dev(lambda n, m: np.eye(n, m)), ALL, grad=False)


def _random_check(lo: float, hi: float) -> CheckFn:
    def check(s: Sample, got: Any) -> None:
        assert got.shape == tuple(s.inputs[0]), (got.shape, s.inputs[0])
        vals = got.astype(np.float64)
        assert vals.size == 0 or (vals.min() >= lo and vals.max() < hi), (vals.min(), vals.max())
        if vals.size >= 100 and got.dtype.kind == "f":
            assert len(np.unique(vals)) > vals.size // 2, "draws repeat"
    return check


_RAND_ROWS = lambda g: [("2d", ([4, 50],), {}), ("0d", ([],), {}), ("empty", ([0, 3],), {})]  # noqa: E731
case("rand", _factory(_RAND_ROWS), None, FLOATS, grad=False, check=_random_check(0, 1))
case("randn", _factory(_RAND_ROWS), None, FLOATS, grad=False, check=_random_check(-10, 10))
case("randint", _factory(lambda g: [(r[0], r[1], {"low": -3 if g.dtype != "uint8" else 0, "high": 5})
                                    for r in _RAND_ROWS(g)]),
     None, INTS, grad=False, check=lambda s, got: _random_check(s.attrs["low"], s.attrs["high"])(s, got))


# ---- integer size arithmetic (scalars in, scalar out) ---------------------------------
def _int_samples(unary_op: bool) -> SampleFn:
    pairs = [(7, 2), (-7, 2), (0, 3), (6, -4)]
    return lambda g: [Sample(f"{a},{b}", (a,) if unary_op else (a, b)) for a, b in pairs]


for _n, _f in (("int_add", lambda a, b: a + b), ("int_sub", lambda a, b: a - b),
               ("int_mul", lambda a, b: a * b), ("int_floordiv", lambda a, b: a // b),
               ("int_mod", lambda a, b: a % b)):
    case(_n, _int_samples(False), _f, ("int64",), grad=False)
case("int_neg", _int_samples(True), lambda a: -a, ("int64",), grad=False)
for _n, _f in (("int_min", min), ("int_max", max), ("int_eq", lambda a, b: a == b),
               ("int_ne", lambda a, b: a != b), ("int_lt", lambda a, b: a < b),
               ("int_le", lambda a, b: a <= b), ("int_gt", lambda a, b: a > b),
               ("int_ge", lambda a, b: a >= b)):
    case(_n, _int_samples(False), _f, ("int64",), grad=False)
# guard: passes its true condition through (a false one raises TraceGuardError, tested with
# the tracer in tests/scriptmod/jit/test_symbolic_shapes.py)
case("guard", lambda g: [Sample("true", (True,), {"what": "x.shape[0] > 2", "where": "m.py:3"})],
     lambda cond, what, where: cond, ("int64",), grad=False)



# ---- Python values (scripted code; ir.ops.script): Python itself is the reference ----------
# Edge cases beyond these rows (division by zero, NaN, errors, tensors in lists, types) are in
# tests/ir/test_script_ops.py and tests/runtime/test_script_kernels.py.
def _rows(*rows: tuple[Any, ...]) -> SampleFn:
    """Fresh copies per call: the list and dict ops change their inputs in place."""
    return lambda g: [Sample(",".join(map(repr, r)), copy.deepcopy(r)) for r in rows]


def _array_rows(*shapes: tuple[int, ...]) -> SampleFn:
    return lambda g: [Sample(f"shape{s}", (g.arr(s, -3, 3),)) for s in shapes]


def _item(x: Any) -> Any:
    return x.item() if isinstance(x, np.ndarray) else x


_PY_NUMBERS = ((7, 2), (-7, 2), (7, -2), (-7.5, 2), (7, 0.5), (True, True), (True, 2.5), (2, 3.0))
_PY_PAIRS = ((1, 1.0), (1, 2), (2.5, -1), (True, 1), (float("nan"), 1.0), ("a", "b"), ("b", "a"))
for _n, _f in (("py_add", operator.add), ("py_sub", operator.sub), ("py_mul", operator.mul),
               ("py_truediv", operator.truediv), ("py_floordiv", operator.floordiv),
               ("py_mod", operator.mod)):
    _extra = {"py_add": (("ab", "cd"),), "py_mul": (("ab", 3), (2, "xy"))}.get(_n, ())
    case(_n, _rows(*_PY_NUMBERS, *_extra), _f, ("int64",), grad=False)
case("py_pow", _rows((2, 10), (2, -2), (-2.0, 3), (2.5, 0.5), (True, 3), (-8, 1.0)), operator.pow,
     ("int64",), grad=False)
case("py_min", _rows((1, 2.5), (True, 0), ("a", "b"), (-1.5, -1.5), (3, 2)), min, ("int64",),
     grad=False)
case("py_max", _rows((1, 2.5), (True, 0), ("a", "b"), (-1.5, -1.5), (3, 2)), max, ("int64",),
     grad=False)
for _n, _f in (("py_eq", operator.eq), ("py_ne", operator.ne), ("py_lt", operator.lt),
               ("py_le", operator.le), ("py_gt", operator.gt), ("py_ge", operator.ge)):
    _extra = ((None, None), (None, 0), ("a", 1), ((1, "a"), (1, "a"))) if _n in ("py_eq", "py_ne") else ()
    case(_n, _rows(*_PY_PAIRS, *_extra), _f, ("int64",), grad=False)
for _n, _f in (("py_and", operator.and_), ("py_or", operator.or_), ("py_xor", operator.xor)):
    case(_n, _rows((True, False), (True, True), (False, False), (6, 3), (-5, 12), (True, 2)),
         _f, ("int64",), grad=False)
case("py_neg", _rows((-3,), (2.5,), (True,), (0,)), operator.neg, ("int64",), grad=False)
case("py_abs", _rows((-3,), (-2.5,), (True,), (3 - 4j,)), abs, ("int64",), grad=False)


def _with_arrays(rows: SampleFn, shapes: tuple[tuple[int, ...], ...]) -> SampleFn:
    return lambda g: rows(g) + _array_rows(*shapes)(g)


_TRUTHS = _rows((0,), (2.5,), ("",), ("x",), (None,), (float("nan"),))
case("py_not", _with_arrays(_TRUTHS, ((), (1,))), lambda x: not _item(x), ("int64",), grad=False)
case("py_bool", _with_arrays(_TRUTHS, ((), (1, 1))), lambda x: bool(_item(x)), ("int64",),
     grad=False)
_CONVERTIBLE = _rows((2.7,), (-2.7,), ("12",), (True,), (-5,))
case("py_int", _with_arrays(_CONVERTIBLE, ((), (1,))), lambda x: int(_item(x)), ("int64",),
     grad=False)
case("py_float", _with_arrays(_CONVERTIBLE, ((), (1, 1))), lambda x: float(_item(x)), ("int64",),
     grad=False)
case("py_str", _rows((1.5,), (None,), ([1, "a"],), (True,), ("s",), (1e20,)), str, ("int64",),
     grad=False)
case("py_format", _rows(("{} {}", 1, "a"), ("{:.2f}|{!r}", 3.14159, "x"), ("{0}{0}", 7),
                        ("none",)),
     lambda fmt, *args: fmt.format(*args), ("int64",), grad=False)
case("py_is_none", _rows((None,), (0,), ("",)), lambda x: x is None, ("int64",), grad=False)
case("dim", _array_rows((3, 4), (), (0, 3)), np.ndim, ("int64",), grad=False)
case("numel", _array_rows((3, 4), (), (0, 3)), np.size, ("int64",), grad=False)
case("shape", _array_rows((3, 4), (), (0, 3)), lambda x: list(x.shape), ("int64",), grad=False)
case("item", _array_rows((), (1,), (1, 1)), lambda x: x.item(), ("int64", "float32", "bool"),
     grad=False)


def _dtype_check(s: Sample, got: Any) -> None:
    from scriptmod.ir.dtypes import BY_NAME
    want = BY_NAME[np.asarray(s.inputs[0]).dtype.name]
    assert got is want, f"tensor_dtype: {got!r}, expected {want!r}"


def _device_check(s: Sample, got: Any) -> None:
    assert got == "cpu", f"tensor_device: {got!r}, expected 'cpu'"


case("tensor_dtype", _array_rows((2,), ()), None, ("int64", "float32", "float16", "bool"),
     grad=False, check=_dtype_check)
case("tensor_device", _array_rows((2,), ()), None, ("float32",), grad=False, check=_device_check)
case("str_len", _rows(("abc",), ("",), ("héllo",)), len, ("int64",), grad=False)


def _set(lst: list, i: int, v: Any) -> list:
    out = list(lst)            # the reference runs first: it must not change the sample
    out[i] = v
    return out


case("list_len", _rows(([1, 2, 3],), ([],)), len, ("int64",), grad=False)
case("list_get", _rows(([1, 2, 3], -1), ([1, 2, 3], 0), (["a", "b"], 1)),
     lambda lst, i: lst[i], ("int64",), grad=False)
case("list_set", _rows(([1, 2, 3], -1, 9), ([1, 2, 3], 0, 5)), _set, ("int64",), grad=False)
case("list_append", _rows(([1, 2], 3), ([], 1.5)), lambda lst, v: lst + [v], ("int64",),
     grad=False)
case("list_slice", _rows(([1, 2, 3, 4, 5], 1, None, 2), ([1, 2, 3], None, None, -1),
                         ([1, 2, 3], -2, 10, None), ([1, 2, 3], 2, 1, None)),
     lambda lst, a, b, c: lst[a:b:c], ("int64",), grad=False)
case("list_concat", _rows(([1], [2, 3]), ([], [1.5])), operator.add, ("int64",), grad=False)
case("list_contains", _rows(([1, 2], 2), ([1, 2], 3), (["a"], "a"), ([1, 2], 1.0)),
     lambda lst, v: v in lst, ("int64",), grad=False)
case("list_eq", _rows(([1, 2], [1, 2]), ([1, 2], [1, 2, 3]), ([], []), ([1.0], [1]),
                     (["a"], ["b"])), operator.eq, ("int64",), grad=False)
case("list_min", _rows(([3, 1, 2],), ([2.5, -1.0],), (["b", "a"],)), min, ("int64",), grad=False)
case("list_max", _rows(([3, 1, 2],), ([2.5, -1.0],), (["b", "a"],)), max, ("int64",), grad=False)
def _py_call_samples(g: Gen) -> list[Sample]:
    """A row of each kind of ``ir.ops.pyfuncs`` (math, builtin, str, list, dict)."""
    rows = [((16,), "math.sqrt"), ((2.5,), "math.floor"), ((float("nan"),), "math.isnan"),
            ((2.675, 2), "round"), (([1.5, 2.0],), "sum"),
            (("a,b", ","), "str.split"), (("-", ["x", "y"]), "str.join"),
            (([3, 1, 2],), "sorted"), (([1, 2, 3], 0), "list.pop"),
            (({"a": 1}, "b", 7), "dict.get")]
    return [Sample(f"{fn}{args!r}", copy.deepcopy(args), {"fn": fn}) for args, fn in rows]


def _py_call_ref(*args: Any, fn: str) -> Any:
    import builtins, math  # noqa: E401
    args = copy.deepcopy(args)       # the reference runs first: it must not change the sample
    if fn.startswith("math."):
        return getattr(math, fn[5:])(*args)
    if "." in fn:
        kind, name = fn.split(".")
        return getattr({"str": str, "list": list, "dict": dict}[kind], name)(*args)
    return getattr(builtins, fn)(*args)


case("py_call", _py_call_samples, _py_call_ref, ("int64",), grad=False)
case("dict_construct", _rows(("a", 1, "b", 2), (1, "x", 2, "y"), ("a", 1, "a", 2)),
     lambda *kv: dict(zip(kv[0::2], kv[1::2])), ("int64",), grad=False)
_D = {"a": 1, "b": 2}
case("dict_get", _rows((_D, "a"), ({1: "x"}, 1)), lambda d, k: d[k], ("int64",), grad=False)
case("dict_set", _rows((_D, "c", 3), (_D, "a", 0)), lambda d, k, v: {**d, k: v}, ("int64",),
     grad=False)
case("dict_contains", _rows((_D, "a"), (_D, "z")), lambda d, k: k in d, ("int64",), grad=False)
for _n, _f in (("dict_len", len), ("dict_keys", lambda d: list(d.keys())),
               ("dict_values", lambda d: list(d.values())),
               ("dict_items", lambda d: list(d.items()))):
    case(_n, _rows((_D,), ({3: 1.5},)), _f, ("int64",), grad=False)

# ---- linear algebra and nn -----------------------------------------------------------
def _matmul_samples(g: Gen) -> list[Sample]:
    shapes = [("mm", (2, 3), (3, 4)), ("vec-mat", (3,), (3, 2)), ("mat-vec", (2, 3), (3,)),
              ("dot", (3,), (3,)), ("batch", (2, 2, 3), (3, 4)), ("batch-bcast", (2, 1, 2, 3), (3, 3, 2)),
              ("empty-k", (2, 0), (0, 3))]
    out = [Sample(label, (g.arr(a), g.arr(b)), {}, g.grad_of(0, 1) if "empty" not in label else ())
           for label, a, b in shapes]
    return out + [Sample("noncontig", (g.arr((2, 3), noncontig=True), g.arr((3, 2), noncontig=True)),
                         {}, g.grad_of(0, 1))]


case("matmul", _matmul_samples, np.matmul, FLOATS + ("int32", "int64") + COMPLEX)


def _attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                   scale: float = 1.0) -> np.ndarray:
    s = q @ np.swapaxes(k, -1, -2) * scale + (0 if mask is None else mask)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        return p / p.sum(-1, keepdims=True) @ v


def _attention_samples(g: Gen) -> list[Sample]:
    masked = g.arr((3, 5), -1.0, 1.0)
    if g.floating:
        masked[1, 1:3] = -np.inf
    return [Sample("heads", (g.arr((2, 2, 3, 4)), g.arr((2, 2, 5, 4)), g.arr((2, 2, 5, 3)), None),
                   {"scale": 0.5}, g.grad_of(0, 1, 2)),
            Sample("matrices", (g.arr((3, 4)), g.arr((5, 4)), g.arr((5, 2)), None), {},
                   g.grad_of(0, 1, 2)),
            Sample("mask", (g.arr((2, 3, 4)), g.arr((2, 5, 4)), g.arr((2, 5, 2)), masked),
                   {"scale": 0.25}, g.grad_of(0, 1, 2)),
            Sample("noncontig", (g.arr((3, 4), noncontig=True), g.arr((5, 4), noncontig=True),
                                 g.arr((5, 3)), g.arr((1, 5))), {"scale": 2.0},
                   g.grad_of(0, 1, 2, 3))]


case("attention", _attention_samples, _attention_ref, ("float32", "float64"))


def _pool_size(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil else span // s) + 1
    return out - 1 if ceil and (out - 1) * s >= n + p else out


def _pool_windows(x: np.ndarray, k: Sequence[int], s: Sequence[int], p: Sequence[int],
                  d: Sequence[int], ceil: bool) -> Any:
    """(i, j, window-slices-in-unpadded-coordinates, padded-extent ends) per output pixel."""
    h, w = x.shape[-2:]
    oh, ow = (_pool_size(n, k[a], s[a], p[a], d[a], ceil) for a, n in enumerate((h, w)))
    for i in range(oh):
        for j in range(ow):
            yield i, j, (i * s[0] - p[0], j * s[1] - p[1]), (oh, ow)


def _max_pool_ref(x: np.ndarray, kernel_size: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int] = (0, 0), dilation: Sequence[int] = (1, 1),
                  ceil_mode: bool = False) -> np.ndarray:
    h, w = x.shape[-2:]
    out = None
    for i, j, (hs, ws), shape in _pool_windows(x, kernel_size, stride, padding, dilation, ceil_mode):
        out = np.full(x.shape[:-2] + shape, -np.inf) if out is None else out
        rows = [r for r in range(hs, hs + dilation[0] * (kernel_size[0] - 1) + 1, dilation[0]) if 0 <= r < h]
        cols = [c for c in range(ws, ws + dilation[1] * (kernel_size[1] - 1) + 1, dilation[1]) if 0 <= c < w]
        out[..., i, j] = x[..., rows, :][..., cols].max(axis=(-2, -1))
    return out


def _avg_pool_ref(x: np.ndarray, kernel_size: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int] = (0, 0), ceil_mode: bool = False,
                  count_include_pad: bool = True) -> np.ndarray:
    h, w = x.shape[-2:]
    (kh, kw), (ph, pw) = kernel_size, padding
    out = None
    for i, j, (hs, ws), shape in _pool_windows(x, kernel_size, stride, padding, (1, 1), ceil_mode):
        out = np.zeros(x.shape[:-2] + shape) if out is None else out
        he, we = min(hs + kh, h + ph), min(ws + kw, w + pw)
        div = (he - hs) * (we - ws)
        hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
        div = div if count_include_pad else (he - hs) * (we - ws)
        out[..., i, j] = x[..., hs:he, ws:we].sum(axis=(-2, -1)) / div
    return out


def _pool_samples(dilation: bool) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        gr = g.grad_of(0)
        base = {"kernel_size": [2, 2], "stride": [2, 2]}
        out = [Sample("basic", (g.arr((1, 2, 4, 4)),), base, gr),
               Sample("3d-pad", (g.arr((2, 5, 5)),), {"kernel_size": [3, 2], "stride": [2, 1],
                                                      "padding": [1, 1]}, gr),
               Sample("ceil", (g.arr((1, 1, 5, 5)),), dict(base, ceil_mode=True), gr),
               Sample("ceil-pad", (g.arr((1, 1, 6, 5)),), {"kernel_size": [3, 3], "stride": [2, 2],
                                                           "padding": [1, 1], "ceil_mode": True}, gr),
               Sample("noncontig", (g.arr((1, 1, 4, 4), noncontig=True),), base, gr)]
        if dilation:
            out.append(Sample("dilation", (g.arr((1, 1, 6, 6)),), dict(base, dilation=[2, 1]), gr))
        else:
            out.append(Sample("exclude-pad", out[3].inputs, dict(out[3].attrs, count_include_pad=False), gr))
        return out
    return make


case("max_pool2d", _pool_samples(True), _max_pool_ref, FLOATS)
case("avg_pool2d", _pool_samples(False), _avg_pool_ref, FLOATS)


# ---- the first-order backward kernels: references are vector-Jacobian products of the
# forward references above, built column by column (the forwards are linear in the input,
# max pooling piecewise so with well-separated random values)
def _vjp(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, gy: np.ndarray,
         h: float = 1e-3) -> np.ndarray:
    base, out = f(x), np.zeros(x.shape)
    for i in np.ndindex(x.shape):
        moved = x.copy()
        moved[i] += h
        out[i] = np.sum((f(moved) - base) / h * gy)
    return out


def _pool_grad_samples(dilation: bool) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        out = []
        ref = _max_pool_ref if dilation else _avg_pool_ref
        for s in _pool_samples(dilation)(Gen("float64", 9)):
            x = s.inputs[0]
            attrs = {"padding": [0, 0], "ceil_mode": False, **s.attrs}
            if dilation:
                attrs.setdefault("dilation", [1, 1])
            else:
                attrs.setdefault("count_include_pad", True)
            gy = g.arr(ref(x, **attrs).shape)
            if dilation:
                out.append(Sample(s.label, (gy, x.astype(gy.dtype)), attrs))
            else:
                out.append(Sample(s.label, (gy, list(x.shape)), attrs))
        return out
    return make


def _max_pool_grad_ref(gy: np.ndarray, x: np.ndarray, **attrs: Any) -> np.ndarray:
    return _vjp(lambda v: _max_pool_ref(v, **attrs), x, gy)


def _avg_pool_grad_ref(gy: np.ndarray, input_size: Sequence[int], **attrs: Any) -> np.ndarray:
    return _vjp(lambda v: _avg_pool_ref(v, **attrs), np.zeros(input_size), gy)


case("max_pool2d_grad", _pool_grad_samples(True), _max_pool_grad_ref, ("float32", "float64"),
     grad=False)
case("avg_pool2d_grad", _pool_grad_samples(False), _avg_pool_grad_ref, ("float32", "float64"),
     grad=False)


def _embedding_samples(g: Gen) -> list[Sample]:
    w = g.arr((5, 3))
    return [Sample("1d", (w, np.array([0, 4, 2, 2])), {}, g.grad_of(0)),
            Sample("2d", (w, np.array([[1, 0], [3, 1]])), {}, g.grad_of(0)),
            Sample("padding", (w, np.array([1, 2, 1])), {"padding_idx": 1}),   # grad: test_autograd
            Sample("int32-idx", (w, np.array([4, 0], dtype=np.int32)), {}, g.grad_of(0))]


case("embedding", _embedding_samples, lambda w, idx, padding_idx=None: w[idx], FLOATS)


def _dropout_samples(g: Gen) -> list[Sample]:
    x = g.arr((4, 50), 0.5, 2)
    return [Sample("eval", (g.arr((2, 3)), False), {"p": 0.5}, g.grad_of(0)),
            Sample("p0", (g.arr((2, 3)), True), {"p": 0.0}, g.grad_of(0)),
            Sample("p1", (g.arr((2, 3)), True), {"p": 1.0}, g.grad_of(0)),
            Sample("train", (x, True), {"p": 0.5}),
            Sample("train-small", (g.arr((2, 3), 0.5, 2), True), {"p": 0.3}, g.grad_of(0))]


def _dropout_check(s: Sample, got: Any) -> None:
    x, train = s.inputs
    p = s.attrs["p"]
    x64, got64 = x.astype(np.float64), got.astype(np.float64)
    if not train or p == 0.0:
        np.testing.assert_allclose(got64, x64, rtol=1e-2)
        return
    kept = got64 != 0
    np.testing.assert_allclose(got64[kept], x64[kept] / (1 - p), rtol=1e-2)
    if x.size >= 100:
        assert 0.3 < kept.mean() < 0.7, f"kept fraction {kept.mean()} for p={p}"


case("dropout", _dropout_samples, None, FLOATS, check=_dropout_check)


def _mse_samples(g: Gen) -> list[Sample]:
    return [Sample(f"{r}", (g.arr((3, 4)), g.arr((3, 4))), {"reduction": r}, g.grad_of(0, 1))
            for r in ("mean", "sum", "none")] + [
        Sample("bcast-target", (g.arr((2, 3, 4)), g.arr((4,))), {"reduction": "mean"},
               g.grad_of(0, 1)),
        Sample("default", (g.arr((5,)), g.arr((5,))), {}, g.grad_of(0))]


def _mse_ref(x: Any, t: Any, reduction: str = "mean") -> Any:
    d = (x - t) ** 2
    return d if reduction == "none" else (d.mean() if reduction == "mean" else d.sum())


case("mse_loss", _mse_samples, _mse_ref, FLOATS)


def _dropout_mask_check(s: Sample, got: Any) -> None:
    x, train = s.inputs
    p = s.attrs["p"]
    got64 = got.astype(np.float64)
    assert got.shape == x.shape and got.dtype == x.dtype
    if not train or p == 0.0:
        np.testing.assert_array_equal(got64, 1.0)
        return
    if p == 1.0:
        np.testing.assert_array_equal(got64, 0.0)
        return
    kept = got64 != 0
    np.testing.assert_allclose(got64[kept], 1 / (1 - p), rtol=1e-2)
    if x.size >= 100:
        assert 0.3 < kept.mean() < 0.7, f"kept fraction {kept.mean()} for p={p}"


case("dropout_mask", _dropout_samples, None, FLOATS, check=_dropout_mask_check, grad=False)


def _bn_samples(g: Gen) -> list[Sample]:
    c = Gen("float32", 5)
    stats = lambda: (c.arr((3,), -1, 1).astype(g.arr(()).dtype), c.arr((3,), 0.5, 2).astype(g.arr(()).dtype))  # noqa: E731
    gr = g.grad_of(0, 3, 4)
    count = lambda: np.zeros((), np.int64)  # noqa: E731
    return [Sample("train", (g.arr((4, 3)),) + stats() + (g.arr((3,)), g.arr((3,)), True, count()),
                   {}, gr),
            Sample("eval", (g.arr((2, 3, 2, 2)),) + stats() + (g.arr((3,)), g.arr((3,)), False, None),
                   {"eps": 1e-3}, gr),
            Sample("no-affine", (g.arr((2, 3, 3)), None, None, None, None, True, None), {},
                   g.grad_of(0)),
            Sample("noncontig", (g.arr((4, 3), noncontig=True),) + stats() + (None, None, True, None),
                   {}, g.grad_of(0)),
            Sample("cumulative", (g.arr((4, 3)),) + stats() + (None, None, True, count()),
                   {"momentum": None}, g.grad_of(0))]


def _bn_ref(x: np.ndarray, rm: Any, rv: Any, w: Any, b: Any, training: bool, nbt: Any = None,
            momentum: float | None = 0.1, eps: float = 1e-5) -> np.ndarray:
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training or rm is None:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, var = rm, rv
    out = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    out = out if w is None else out * w.reshape(shape)
    return out if b is None else out + b.reshape(shape)


case("batch_norm", _bn_samples, _bn_ref, FLOATS)


# ---- checking a sample against the reference ------------------------------------------
def _dtype_name(a: Any) -> str:
    return "bfloat16" if a.dtype == np_dtype("bfloat16") else a.dtype.name


def _operand(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return (D.BY_NAME[_dtype_name(x)], tuple(x.shape))
    return type(x) if type(x) in (bool, int, float, complex) else None


def expected_dtypes(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> tuple:
    """Result dtype(s) the op's schema type rule promises (None for non-tensor results)."""
    schema = REGISTRY[op]
    dt = schema.dtype_rule([_operand(x) for x in inputs], schema.bind_attrs(attrs))
    return dt if isinstance(dt, tuple) else (dt,)


def upcast(x: Any) -> Any:
    """The reference's view of an input: floats in float64, complex in complex128; ints and
    bools keep their dtype (their arithmetic wraps as it does on the tensor side)."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "c":
            return x.astype(np.complex128)
        if x.dtype.kind == "f" or x.dtype == np_dtype("bfloat16"):
            return x.astype(np.float64)
        return x.copy()
    return x


def reference(c: OpCase, s: Sample) -> tuple:
    import warnings
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = c.ref(*[upcast(x) for x in s.inputs], **s.attrs)
    return out if isinstance(out, tuple) else (out,)


def assert_close(got: Any, want: Any, dtype: D.DType | None, where: str) -> None:
    if dtype is None:
        assert got == want, f"{where}: got {got!r}, expected {want!r}"
        return
    got = np.asarray(got)
    assert got.dtype == np_dtype(dtype.name), f"{where}: dtype {got.dtype}, schema says {dtype.name}"
    want = np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, expected {want.shape}"
    if dtype.category <= D.INT:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=where)
        return
    rtol, atol = TOLERANCE[dtype.name]
    wide = np.complex128 if dtype.category == D.COMPLEX else np.float64
    np.testing.assert_allclose(got.astype(wide), want.astype(wide), rtol=rtol, atol=atol,
                               equal_nan=True, err_msg=where)


Execute = Callable[[str, Sequence[Any], dict[str, Any]], Any]


def check_sample(c: OpCase, s: Sample, dtype: str, execute: Execute) -> None:
    """Run one sample through ``execute`` and compare with the reference (or ``c.check``)."""
    where = f"{c.op}[{dtype}:{s.label}]"
    want = None if c.check is not None else reference(c, s)
    got = execute(c.op, s.inputs, dict(s.attrs))
    gots = got if isinstance(got, tuple) else (got,)
    if c.check is not None:
        c.check(s, gots[0])
        return
    dts = expected_dtypes(c.op, s.inputs, s.attrs)
    assert len(gots) == len(want), f"{where}: {len(gots)} outputs, expected {len(want)}"
    for k, (g, w, d) in enumerate(zip(gots, want, dts)):
        assert_close(g, w, d, f"{where} output {k}")


def run_case(c: OpCase, dtype: str, execute: Execute) -> None:
    for s in c.samples(Gen(dtype)):
        check_sample(c, s, dtype, execute)


def grad_samples(c: OpCase) -> list[Sample]:
    """float64 samples with inputs to differentiate (for gradcheck)."""
    if not c.grad or "float64" not in c.dtypes:
        return []
    return [s for s in c.samples(Gen("float64")) if s.grad]


def params() -> list[tuple[str, str]]:
    """(op, dtype) pairs: what a table-driven test parametrizes over."""
    return [(op, dt) for op, c in sorted(CASES.items()) for dt in c.dtypes]


# The families' rows, each in its own module (they import ``case`` and the builders from here).
import op_cases_conv, op_cases_layers, op_cases_loss, op_cases_norm  # noqa: E402,F401
import op_cases_pooling, op_cases_vision  # noqa: E402,F401
import op_cases_fft, op_cases_indexing, op_cases_linalg, op_cases_math  # noqa: E402,F401
import op_cases_products, op_cases_rnn, op_cases_scans, op_cases_special  # noqa: E402,F401
import op_cases_views  # noqa: E402,F401
