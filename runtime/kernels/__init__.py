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

import ir.ops  # noqa: F401  (fills the schema registry)
from ir import dtypes as D
from ir.ops.rules import real_of
from ir.schema import ELEMENTWISE, FACTORY, REDUCTION, REGISTRY, OpSchema
from runtime import backend
from runtime.backend import NP_DTYPE, from_np_dtype

Kernel = Callable[..., Any]
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

    __slots__ = ("schema", "fn", "ew", "upcast", "n_out", "real_of")

    def __init__(self, schema: OpSchema, fn: Kernel) -> None:
        self.schema, self.fn = schema, fn
        self.ew = ELEMENTWISE in schema.flags
        self.upcast = self.ew or REDUCTION in schema.flags or schema.name in _UPCAST_OPS
        self.n_out = schema.n_outputs
        self.real_of = schema.dtype_rule is real_of   # abs(complex) computes in complex


_UPCAST_OPS = {"softmax", "log_softmax", "cumsum", "matmul", "conv2d", "avg_pool2d",
               "logsumexp"}
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


def run_kernel(name: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """Run op ``name`` on arrays/scalars ``inputs`` with bound ``attrs``.

    Returns one array, or a tuple for multi-output ops, with the dtype(s) the schema says.
    """
    p = _plan(name)
    out_dt = p.schema.dtype_rule([operand(x) for x in inputs], attrs)
    if p.schema.has(FACTORY):
        xp = backend.module_for_device(attrs.get("device") or "cpu")
    else:
        xp = backend.array_module(*inputs)
    if p.ew:
        inputs = _elementwise_inputs(p, inputs, out_dt)
    elif p.upcast:
        inputs = [_cast(x, _F32) if getattr(x, "dtype", None) in _HALF_NP else x for x in inputs]
    out = p.fn(xp, *inputs, **attrs)
    if p.n_out == 1:
        return _finish(xp, out, out_dt)
    return tuple(_finish(xp, o, d) for o, d in zip(out, out_dt))


_HALF_NP = {NP_DTYPE[D.float16], NP_DTYPE[D.bfloat16]}


def _elementwise_inputs(p: _Plan, inputs: Sequence[Any], out_dt: D.DType) -> list[Any]:
    """Cast array inputs to the dtype the op computes in (half types compute in float32)."""
    if out_dt is D.bool_ or p.schema.name == "cast" or p.real_of:
        if p.schema.name in ("where", "cast", "logical_not", "isnan", "isinf",
                             "logical_and", "logical_or", "logical_xor"):
            return list(inputs)
        from ir.ops.rules import promote
        out_dt = promote([operand(x) for x in inputs], {})
    compute = _F32 if out_dt in _HALF else NP_DTYPE[out_dt]
    if p.schema.name == "where":
        return [inputs[0]] + [_cast(x, compute) for x in inputs[1:]]
    return [_cast(x, compute) for x in inputs]


def _finish(xp: Any, out: Any, dt: D.DType | None) -> Any:
    if dt is None:
        return out
    want = NP_DTYPE[dt]
    if type(out) is not np.ndarray and not backend.is_cupy(out):   # NumPy returns scalars for 0-d
        return xp.asarray(out, dtype=want)
    if out.dtype != want:
        return out.astype(want)
    return out


from runtime.kernels import elementwise, nn, reduction, scalar, shape  # noqa: E402,F401

__all__ = ["KERNELS", "kernel", "run_kernel", "operand"]
