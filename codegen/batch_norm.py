"""Per-channel passes of a float32 batch norm over an ``(N, C, S)`` tensor (``S`` the spatial
size), for ``runtime.batch_norm``: training's statistics and its backward each read the
tensors once for the sums and once for the result, instead of a NumPy pass per reduction.

``bn_sums_f32(i64 lo, i64 hi, float* u, float* v, double* out, i64* params)``: for each
channel ``c`` in ``[lo, hi)``, with ``a = u - K`` (``K`` the channel's first value, ``u[0, c,
0]``), ``out[4c:4c+4] = (Σa, Σa², Σv, Σav)`` over the ``N*S`` values of the channel (float64
sums; with ``v`` NULL only the first two are written). The shift keeps the variance
``Σa²/n - (Σa/n)²`` exact to float64's digits when the mean is large next to the spread.

``bn_affine_f32(i64 lo, i64 hi, float* u, float* v, float* out, i64* params, float* coef)``:
with ``(k1, k2, k3, m) = coef[4c:4c+4]``, ``out = k1*u + k2*(v - m) + k3`` elementwise over
channels ``[lo, hi)``, or with ``v`` NULL ``out = k1*(u - m) + k3``. The forward
normalization is ``(x - mean)*scale + bias``, the input gradient
``g*k1 + (x - mean)*k2 + k3`` (centred first, as the unfused formula rounds: a channel
whose mean is large next to its spread keeps its digits).

``params`` holds ``(N, C, S)``; the tensors are C-contiguous ``(N, C, S)``.

    >>> "bn_sums_f32" in render_sums() and "bn_affine_f32" in render_affine()
    True
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from .llvm_emit import I64, PTR, for_range
from .microkernel import F32, ZERO, at, c64

SUMS, AFFINE = "bn_sums_f32", "bn_affine_f32"
F64 = ir.DoubleType()
_SUM_FLAGS = ("reassoc", "contract")
_INTERLEAVE = 4          # independent vector accumulators per sum (hide the add latency)


def render_sums() -> str:
    """LLVM IR text of ``bn_sums_f32`` (module docstring)."""
    return _render(SUMS, [I64, I64, PTR, PTR, PTR, PTR], _sums)


def render_affine() -> str:
    """LLVM IR text of ``bn_affine_f32`` (module docstring)."""
    return _render(AFFINE, [I64, I64, PTR, PTR, PTR, PTR, PTR], _affine)


def _render(fname: str, args: list[ir.Type],
            build: Callable[[ir.IRBuilder, ir.Function, dict[str, ir.Value]], None]) -> str:
    module = ir.Module(name=fname)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name=fname)
    fn.attributes.add("nounwind")
    for arg in fn.args[2:5]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    params = fn.args[5]
    P = {p: b.load(b.gep(params, [c64(i)], source_etype=I64), typ=I64)
         for i, p in enumerate(("N", "C", "S"))}
    build(b, fn, P)
    b.ret_void()
    return str(module)


def _channels(b: ir.IRBuilder, P: dict[str, ir.Value], lo: ir.Value, hi: ir.Value,
              row: Callable[[ir.Value, ir.Value], None]) -> None:
    """``row(c, offset)`` for each channel ``c`` in ``[lo, hi)`` and each of its ``N`` rows
    (``offset``: the row's first element)."""
    with for_range(b, lo, hi, name="c", vectorize=False) as c:
        with for_range(b, ZERO, P["N"], name="n", vectorize=False) as n:
            row(c, b.mul(b.add(b.mul(n, P["C"]), c), P["S"]))


def _sums(b: ir.IRBuilder, fn: ir.Function, P: dict[str, ir.Value]) -> None:
    lo, hi, u, v, out, _ = fn.args
    has_v = b.icmp_unsigned("!=", b.ptrtoint(v, I64), ZERO)
    with b.if_else(has_v) as (two, one):
        with two:
            _sum_loop(b, P, lo, hi, u, v, out)
        with one:
            _sum_loop(b, P, lo, hi, u, None, out)


def _sum_loop(b: ir.IRBuilder, P: dict[str, ir.Value], lo: ir.Value, hi: ir.Value,
              u: ir.Value, v: ir.Value | None, out: ir.Value) -> None:
    """The sums of each channel, accumulated over its rows in float64 (``reassoc`` adds, so
    the column loop vectorizes at float32's width)."""
    count = 2 if v is None else 4
    accs = [b.alloca(F64, name=f"s{i}") for i in range(count)]
    zero = ir.Constant(F64, 0.0)
    with for_range(b, lo, hi, name="c", vectorize=False) as c:
        for a in accs:
            b.store(zero, a)
        shift = b.fpext(b.load(at(b, u, b.mul(c, P["S"])), typ=F32), F64)
        with for_range(b, ZERO, P["N"], name="n", vectorize=False) as n:
            base = b.mul(b.add(b.mul(n, P["C"]), c), P["S"])
            with for_range(b, ZERO, P["S"], name="i", interleave=_INTERLEAVE, width=16) as i:
                k = b.add(base, i)
                x = b.fsub(b.fpext(b.load(at(b, u, k), typ=F32), F64), shift)
                terms = [x, b.fmul(x, x)]
                if v is not None:
                    y = b.fpext(b.load(at(b, v, k), typ=F32), F64)
                    terms += [y, b.fmul(x, y)]
                for a, t in zip(accs, terms):
                    b.store(b.fadd(b.load(a, typ=F64), t, flags=_SUM_FLAGS), a)
        for j, a in enumerate(accs):
            slot = b.gep(out, [b.add(b.mul(c, c64(4)), c64(j))], source_etype=F64)
            b.store(b.load(a, typ=F64), slot)


def _affine(b: ir.IRBuilder, fn: ir.Function, P: dict[str, ir.Value]) -> None:
    lo, hi, u, v, out, _, coef = fn.args
    has_v = b.icmp_unsigned("!=", b.ptrtoint(v, I64), ZERO)
    with b.if_else(has_v) as (two, one):
        with two:
            _affine_loop(b, P, lo, hi, u, v, out, coef)
        with one:
            _affine_loop(b, P, lo, hi, u, None, out, coef)


def _affine_loop(b: ir.IRBuilder, P: dict[str, ir.Value], lo: ir.Value, hi: ir.Value,
                 u: ir.Value, v: ir.Value | None, out: ir.Value, coef: ir.Value) -> None:
    def row(c: ir.Value, base: ir.Value) -> None:
        k1, k2, k3, m = (b.load(at(b, coef, b.add(b.mul(c, c64(4)), c64(j))), typ=F32)
                         for j in range(4))
        with for_range(b, ZERO, P["S"], name="i", interleave=2) as i:
            k = b.add(base, i)
            x = b.load(at(b, u, k), typ=F32)
            if v is None:
                y = b.fadd(b.fmul(b.fsub(x, m), k1), k3)
            else:
                centred = b.fsub(b.load(at(b, v, k), typ=F32), m)
                y = b.fadd(b.fadd(b.fmul(x, k1), b.fmul(centred, k2)), k3)
            b.store(y, at(b, out, k))
    _channels(b, P, lo, hi, row)
