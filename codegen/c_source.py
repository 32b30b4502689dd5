"""KernelSpec -> C-like source: CUDA C with a grid-stride loop, or the same kernel for a
CPU shim (a C++ prelude that defines ``blockIdx``/``threadIdx`` and loops over them).

The statement emitter and the kernel text are shared; a ``Dialect`` is the small table of
what differs (qualifiers, bit casts, half conversions, an optional launcher).

    >>> from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
    >>> from scriptmod.ir import dtypes as D
    >>> spec = KernelSpec([InputSpec(D.float32, "contiguous")],
    ...                   [OpStep("exp", (0,), {}, D.float32)], [1], [D.float32], rank=1)
    >>> src = render_c(spec, CUDA)
    >>> src.text.count("__global__")
    1

Kernel parameters: input pointers, output pointers, ``long long n`` (element count) and
one ``long long`` per ``meta`` entry (see ``codegen.kernel``), passed by value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .emitter import Emitter, V, compute_dtype, float_in_int_range
from .formulas import lower_steps, round_bf16
from .kernel import KernelSpec
from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType

_CTYPE = {"bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short",
          "int32": "int", "int64": "long long", "float32": "float", "float64": "double",
          "float16": "unsigned short", "bfloat16": "unsigned short"}
_UTYPE = {"int8": "unsigned char", "int16": "unsigned short", "int32": "unsigned int",
          "int64": "unsigned long long"}
_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "and": "&", "or": "|",
        "xor": "^", "shl": "<<", "lshr": ">>", "ashr": ">>", "eq": "==", "ne": "!=",
        "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_CALLS = {"sqrt": "sqrt", "fabs": "fabs", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
          "rint": "rint", "copysign": "copysign", "minnum": "fmin", "maxnum": "fmax",
          "fma_exact": "fma"}
_BITCAST = {("float32", "int32"): "sm_f2i", ("int32", "float32"): "sm_i2f",
            ("float64", "int64"): "sm_d2l", ("int64", "float64"): "sm_l2d"}


def ctype(dt: DType) -> str:
    """C type of compute values of ``dt``."""
    return _CTYPE[compute_dtype(dt).name]


class CEmitter(Emitter):
    """Scalar ops as C statements ``T tN = expr;`` appended to ``lines``."""

    def __init__(self, indent: str = "    ") -> None:
        self.lines: list[str] = []
        self.indent = indent
        self._n = 0

    def let(self, dt: DType, expr: str) -> str:
        self._n += 1
        name = f"t{self._n}"
        self.lines.append(f"{self.indent}{ctype(dt)} {name} = {expr};")
        return name

    def const(self, value: bool | int | float, dt: DType) -> V:
        dt = compute_dtype(dt)
        if dt is D.bool_:
            return "true" if value else "false"
        if dt.category == D.INT:
            v = int(value)
            if dt is D.int64 and v == -(1 << 63):
                return "(-9223372036854775807LL - 1)"
            return f"(({ctype(dt)}){v}LL)"
        return _float_literal(float(value), dt)

    def arith(self, op: str, a: V, b: V, dt: DType) -> V:
        dt = compute_dtype(dt)
        if op == "rem" and dt.is_floating_point:                 # C's % is for ints only
            return self.let(dt, f"{_fn('fmod', dt)}({a}, {b})")
        if dt.name in _UTYPE and op in ("add", "sub", "mul"):    # wrap, no signed overflow UB
            u = _UTYPE[dt.name]
            return self.let(dt, f"({ctype(dt)})(({u}){a} {_OPS[op]} ({u}){b})")
        return self.let(dt, f"({ctype(dt)})({a} {_OPS[op]} {b})")

    def neg(self, a: V, dt: DType) -> V:
        dt = compute_dtype(dt)
        if dt.name in _UTYPE:
            return self.let(dt, f"({ctype(dt)})(0 - ({_UTYPE[dt.name]}){a})")
        return self.let(dt, f"({ctype(dt)})(-{a})")

    def fma(self, a: V, b: V, c: V, dt: DType) -> V:
        return self.let(dt, f"{_fn('fma', dt)}({a}, {b}, {c})")

    def call(self, fn: str, args: Sequence[V], dt: DType) -> V:
        return self.let(dt, f"{_fn(_CALLS[fn], dt)}({', '.join(args)})")

    def trig(self, fn: str, a: V, dt: DType) -> V:
        """``sin``/``cos`` from the target's math library: CUDA's (without fast math) and
        the C library reduce over the whole float range, unlike ``vmath``'s fallback."""
        return self.let(dt, f"{_fn(fn, dt)}({a})")

    def cmp(self, op: str, a: V, b: V, dt: DType) -> V:
        return self.let(D.bool_, f"({a} {_OPS[op]} {b})")

    def select(self, cond: V, a: V, b: V, dt: DType) -> V:
        return self.let(dt, f"({cond} ? {a} : {b})")

    def bits(self, op: str, a: V, b: V, dt: DType) -> V:
        dt = compute_dtype(dt)
        if op in ("shl", "lshr") and dt.name in _UTYPE:
            u = _UTYPE[dt.name]
            return self.let(dt, f"({ctype(dt)})(({u}){a} {_OPS[op]} {b})")
        return self.let(dt, f"({ctype(dt)})({a} {_OPS[op]} {b})")

    def bitcast(self, a: V, src: DType, dst: DType) -> V:
        return self.let(dst, f"{_BITCAST[compute_dtype(src).name, compute_dtype(dst).name]}({a})")

    def convert(self, a: V, src: DType, dst: DType, exact: bool = False) -> V:
        src, dst = compute_dtype(src), compute_dtype(dst)
        if dst is D.bool_:
            return self.let(dst, f"({a} != 0)")
        if src.is_floating_point and dst.category == D.INT and not exact:
            wide = 64 if dst.bits == 64 else 32
            inside = self.select(float_in_int_range(self, a, src, wide), a,
                                 self.const(-2.0 ** (wide - 1), src), src)
            wide_t = "long long" if wide == 64 else "int"
            return self.let(dst, f"({ctype(dst)})({wide_t}){inside}")
        return self.let(dst, f"({ctype(dst)}){a}")

    def round_half(self, a: V) -> V:
        return self.let(D.float32, f"sm_h2f(sm_f2h({a}))")


def _fn(base: str, dt: DType) -> str:
    return base if compute_dtype(dt) is D.float64 else base + "f"


def _float_literal(v: float, dt: DType) -> str:
    f64 = compute_dtype(dt) is D.float64
    if math.isnan(v):
        return "sm_l2d(0x7ff8000000000000LL)" if f64 else "sm_i2f(0x7fc00000)"
    if math.isinf(v):
        bits = ("0x7ff0000000000000LL" if v > 0 else "(long long)0xfff0000000000000ULL") if f64 \
            else ("0x7f800000" if v > 0 else "(int)0xff800000u")
        return f"sm_l2d({bits})" if f64 else f"sm_i2f({bits})"
    return f"({v.hex()}{'' if f64 else 'f'})"


@dataclass(frozen=True)
class Dialect:
    """What differs between C targets: prelude helpers and an optional launcher."""

    name: str
    prelude: str
    launcher: bool = False


_COMMON = r"""
SM_FN float sm_bf2f(unsigned short h) { return sm_i2f((int)((unsigned int)h << 16)); }
"""

CUDA = Dialect("cuda", r"""#include <cuda_fp16.h>
#define SM_FN __device__ __forceinline__
SM_FN float sm_i2f(int v) { return __int_as_float(v); }
SM_FN int sm_f2i(float v) { return __float_as_int(v); }
SM_FN double sm_l2d(long long v) { return __longlong_as_double(v); }
SM_FN long long sm_d2l(double v) { return __double_as_longlong(v); }
SM_FN float sm_h2f(unsigned short h) { return __half2float(__ushort_as_half(h)); }
SM_FN unsigned short sm_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
""" + _COMMON)

CPU_SHIM = Dialect("cpu_shim", r"""#include <math.h>
#include <string.h>
struct sm_dim3 { unsigned x, y, z; };
static sm_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define SM_FN static inline
SM_FN float sm_i2f(int v) { float f; memcpy(&f, &v, 4); return f; }
SM_FN int sm_f2i(float v) { int i; memcpy(&i, &v, 4); return i; }
SM_FN double sm_l2d(long long v) { double f; memcpy(&f, &v, 8); return f; }
SM_FN long long sm_d2l(double v) { long long i; memcpy(&i, &v, 8); return i; }
SM_FN float sm_h2f(unsigned short h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }
SM_FN unsigned short sm_f2h(float f) {
  _Float16 v = (_Float16)f; unsigned short h; memcpy(&h, &v, 2); return h;
}
""" + _COMMON, launcher=True)


@dataclass(frozen=True)
class CSource:
    """Rendered C source defining kernel ``name`` (and ``sm_launch`` for the CPU shim)."""

    spec: KernelSpec
    name: str
    text: str
    n_meta: int


def render_c(spec: KernelSpec, dialect: Dialect = CUDA, name: str | None = None) -> CSource:
    """Render ``spec`` as C source for ``dialect`` (CUDA by default); ``spec`` must have a
    layout (``KernelSpec.require_layout``)."""
    spec.require_layout()
    name = name or f"sm_ew_{spec.key()[:16]}"
    n_meta = spec.rank * (1 + len(spec.strided)) if spec.strided else 0
    params = _params(spec, n_meta)
    lines = [dialect.prelude,
             f'extern "C" __global__ void {name}({", ".join(params)}) {{',
             "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;"
             " i += (long long)blockDim.x * gridDim.x) {"]
    lines += _loop_body(spec)
    lines += ["  }", "}"]
    if dialect.launcher:
        lines += _launcher(spec, name, n_meta)
    return CSource(spec, name, "\n".join(lines) + "\n", n_meta)


def _params(spec: KernelSpec, n_meta: int) -> list[str]:
    ins = [f"const {_CTYPE[s.dtype.name]}* __restrict__ in{k}" for k, s in enumerate(spec.inputs)]
    outs = [f"{_CTYPE[d.name]}* __restrict__ out{j}" for j, d in enumerate(spec.out_dtypes)]
    return ins + outs + ["long long n"] + [f"long long m{j}" for j in range(n_meta)]


def _index_lines(spec: KernelSpec) -> list[str]:
    """Element offsets of strided inputs from the flat index (div/mod per dimension)."""
    if not spec.strided:
        return []
    out = ["    long long rem = i;"]
    for d in reversed(range(spec.rank)):
        out.append(f"    long long c{d} = rem % m{d}; rem /= m{d};")
    for j, k in enumerate(spec.strided):
        terms = " + ".join(f"c{d} * m{spec.rank * (1 + j) + d}" for d in range(spec.rank))
        out.append(f"    long long off{k} = {terms or '0'};")
    return out


def _load(k: int, dt: DType, kind: str) -> str:
    at = {"contiguous": "i", "strided": f"off{k}", "scalar": "0"}[kind]
    ref = f"in{k}[{at}]"
    return {"bool": f"({ref} != 0)", "float16": f"sm_h2f({ref})",
            "bfloat16": f"sm_bf2f({ref})"}.get(dt.name, ref)


def _store(e: CEmitter, v: V, j: int, dt: DType) -> str:
    if dt is D.float16:
        v = f"sm_f2h({v})"
    elif dt is D.bfloat16:
        bits = e.bitcast(round_bf16(e, v), D.float32, D.int32)
        v = f"(unsigned short)((unsigned int){bits} >> 16)"
    elif dt is D.bool_:
        v = f"(unsigned char){v}"
    return f"    out{j}[i] = {v};"


def _loop_body(spec: KernelSpec) -> list[str]:
    e = CEmitter()
    loads = [e.let(s.dtype, _load(k, s.dtype, s.kind)) for k, s in enumerate(spec.inputs)]
    stores = [_store(e, v, j, d) for j, (v, d) in
              enumerate(zip(lower_steps(e, spec, loads), spec.out_dtypes))]
    return _index_lines(spec) + e.lines + stores


def _launcher(spec: KernelSpec, name: str, n_meta: int) -> list[str]:
    """``sm_launch(ptrs, n, meta, grid, block)``: runs every (block, thread) in turn."""
    args = [f"({'const ' if k < len(spec.inputs) else ''}{_CTYPE[d.name]}*)ptrs[{k}]"
            for k, d in enumerate([s.dtype for s in spec.inputs] + list(spec.out_dtypes))]
    args += ["n"] + [f"meta[{j}]" for j in range(n_meta)]
    return ['extern "C" void sm_launch(void** ptrs, long long n, const long long* meta,'
            " unsigned grid, unsigned block) {",
            "  blockDim.x = block; blockDim.y = blockDim.z = 1;",
            "  gridDim.x = grid; gridDim.y = gridDim.z = 1;",
            "  for (unsigned b = 0; b < grid; ++b)",
            "    for (unsigned t = 0; t < block; ++t) {",
            "      blockIdx.x = b; threadIdx.x = t;",
            f"      {name}({', '.join(args)});",
            "    }", "}"]
