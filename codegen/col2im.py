"""Native sliding-window copies for the convolution backward (``runtime.conv_backward``):
``im2col`` writes the patch rows a GEMM multiplies, ``col2im`` adds patch rows back onto an
input gradient. float32, every spatial rank as 3-D (a 1-D or 2-D convolution has size-1
leading dims, kernel 1, stride 1, no padding).

A *patch row* is one tap ``(c, kd, kh, kw)`` of one channel over a range of output rows
``[R0, R1)`` (a row: the ``OW`` positions of one ``(od, oh)``), so a block of patch rows is
the ``(C*KD*KH*KW, (R1-R0)*OW)`` matrix of the NCHW im2col, each row a run of shifted (at
stride 1, contiguous) copies of the input. Both functions have the signature::

    void f(i64 lo, i64 hi, float* noalias src, float* noalias dst, i64* params)

``im2col``: rows ``[lo, hi)`` of the patch matrix, from the input channels at ``src`` (taps
outside the input are 0), into ``dst``'s rows from 0. ``col2im``: channels ``[lo, hi)`` of
``dst`` += their patch rows, read from ``src``'s rows from 0; a caller owns those channels
(no two threads add to one). ``params`` holds
``PARAMS`` in order; ``LD`` is the patch matrix's row stride in floats (at least a row's
``(R1-R0)*OW``: the patches of several images side by side in one matrix, each image's
call pointed at its first column); only in-range input elements are read or written.

    >>> "define void @\\"conv_im2col_f32\\"" in render_im2col()
    True
"""
from __future__ import annotations

from typing import Any, Callable

from llvmlite import ir

from .llvm_emit import I64, PTR, for_range
from .microkernel import F32, ZERO, at, c64, imin

PARAMS = ("D", "H", "W", "OD", "OH", "OW", "KD", "KH", "KW", "SD", "SH", "SW",
          "PD", "PH", "PW", "DD", "DH", "DW", "R0", "R1", "LD")
IM2COL, COL2IM = "conv_im2col_f32", "conv_col2im_f32"
_ONE = c64(1)
# A row is short (OW: 7 to 112 positions). At LLVM's own choice (16 lanes, 4 vectors per
# iteration) a row of 28 ran wholly in the scalar remainder: one 8-lane vector per
# iteration leaves at most 7 scalar steps.
ROW_WIDTH = 8


def render_im2col() -> str:
    """LLVM IR text of ``conv_im2col_f32`` (module docstring)."""
    return _render(IM2COL, lambda w: w.im2col())


def render_col2im() -> str:
    """LLVM IR text of ``conv_col2im_f32`` (module docstring)."""
    return _render(COL2IM, lambda w: w.col2im())


def _render(fname: str, build: Callable[["_Window"], None]) -> str:
    module = ir.Module(name=fname)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR, PTR]),
                     name=fname)
    fn.attributes.add("nounwind")
    for arg in fn.args[2:4]:
        arg.add_attribute("noalias")
    w = _Window(fn)
    build(w)
    w.b.ret_void()
    return str(module)


def row_loop(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, name: str) -> Any:
    """``for i in range(start, stop)`` vectorized ``ROW_WIDTH`` lanes wide, one vector per
    iteration (``llvm_emit.for_range`` with an interleave of 1: at LLVM's own choice, 16
    lanes x 4, a 28-position row ran wholly in the scalar remainder)."""
    return for_range(b, start, stop, name, interleave=1, width=ROW_WIDTH)


def _max(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y)


class _Window:
    """The builder and the loaded ``PARAMS`` of one function, and the index arithmetic
    both directions share."""

    def __init__(self, fn: ir.Function) -> None:
        self.fn = fn
        self.b = b = ir.IRBuilder(fn.append_basic_block("entry"))
        params = fn.args[4]
        self.P = {p: b.load(b.gep(params, [c64(i)], source_etype=I64), typ=I64)
                  for i, p in enumerate(PARAMS)}
        P = self.P
        self.kk = b.mul(b.mul(P["KD"], P["KH"]), P["KW"])
        self.plane = b.mul(b.mul(P["D"], P["H"]), P["W"])

    def tap(self, t: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """Patch row ``t`` as (channel, kd, kh, kw)."""
        b, P = self.b, self.P
        c, rem = b.sdiv(t, self.kk), b.srem(t, self.kk)
        khw = b.mul(P["KH"], P["KW"])
        kd, r2 = b.sdiv(rem, khw), b.srem(rem, khw)
        return c, kd, b.sdiv(r2, P["KW"]), b.srem(r2, P["KW"])

    def span(self, off: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The positions ``[lo, hi)`` of a row whose input column ``ow*SW + off`` lies in
        ``[0, W)`` (``lo <= hi <= OW``)."""
        b, P = self.b, self.P
        s, n = P["SW"], P["OW"]
        neg = b.icmp_signed("<", off, ZERO)
        lo = b.select(neg, b.sdiv(b.add(b.sub(ZERO, off), b.sub(s, _ONE)), s), ZERO)
        top = b.sub(b.sub(P["W"], _ONE), off)
        hi = b.select(b.icmp_signed("<", top, ZERO), ZERO, b.add(b.sdiv(top, s), _ONE))
        lo = imin(b, lo, n)
        return lo, _max(b, lo, imin(b, hi, n))

    def rows(self, kd: ir.Value, kh: ir.Value,
             body: Callable[[ir.Value, ir.Value, ir.Value], None]) -> None:
        """``body(r, input row offset, valid)`` for each output row ``r`` in ``[R0, R1)``:
        the input row ``(id, ih)`` the tap reads there (its offset in a channel, in floats)
        and whether it lies in the input."""
        b, P = self.b, self.P
        with for_range(b, P["R0"], P["R1"], name="r", vectorize=False) as r:
            od, oh = b.sdiv(r, P["OH"]), b.srem(r, P["OH"])
            i_d = b.add(b.sub(b.mul(od, P["SD"]), P["PD"]), b.mul(kd, P["DD"]))
            i_h = b.add(b.sub(b.mul(oh, P["SH"]), P["PH"]), b.mul(kh, P["DH"]))
            valid = b.and_(self._inside(i_d, P["D"]), self._inside(i_h, P["H"]))
            body(r, b.mul(b.add(b.mul(i_d, P["H"]), i_h), P["W"]), valid)

    def _inside(self, i: ir.Value, n: ir.Value) -> ir.Value:
        b = self.b
        return b.and_(b.icmp_signed(">=", i, ZERO), b.icmp_signed("<", i, n))

    def strided(self, body: Callable[[ir.Value, ir.Value], None], lo: ir.Value,
                hi: ir.Value) -> None:
        """``body(ow, ow*SW)`` over ``ow`` in ``[lo, hi)``, as three loops: SW == 1
        (contiguous) and SW == 2 (constant stride: interleaved vector accesses) vectorize;
        a third takes the other strides."""
        b, P = self.b, self.P
        with b.if_else(b.icmp_signed("==", P["SW"], _ONE)) as (unit, other):
            with unit:
                with row_loop(b, lo, hi, "ow1") as ow:
                    body(ow, ow)
            with other:
                with b.if_else(b.icmp_signed("==", P["SW"], c64(2))) as (two, rest):
                    with two:
                        with row_loop(b, lo, hi, "ow2") as ow:
                            body(ow, b.shl(ow, _ONE))
                    with rest:
                        with row_loop(b, lo, hi, "ows") as ow:
                            body(ow, b.mul(ow, P["SW"]))

    def im2col(self) -> None:
        b, P = self.b, self.P
        lo, hi, src, dst, _ = self.fn.args
        zero = ir.Constant(F32, 0.0)
        with for_range(b, lo, hi, name="t", vectorize=False) as t:
            c, kd, kh, kw = self.tap(t)
            off = b.sub(b.mul(kw, P["DW"]), P["PW"])
            wlo, whi = self.span(off)
            chan = at(b, src, b.mul(c, self.plane))

            def row(r: ir.Value, base: ir.Value, valid: ir.Value) -> None:
                out = at(b, dst, b.add(b.mul(b.sub(t, lo), P["LD"]),
                                       b.mul(b.sub(r, P["R0"]), P["OW"])))
                a = b.select(valid, wlo, P["OW"])
                z = b.select(valid, whi, P["OW"])
                with row_loop(b, ZERO, a, "zl") as ow:
                    b.store(zero, at(b, out, ow))
                inp = at(b, chan, b.add(base, off))
                self.strided(lambda ow, i: b.store(b.load(at(b, inp, i), typ=F32),
                                                   at(b, out, ow)), a, z)
                with row_loop(b, z, P["OW"], "zh") as ow:
                    b.store(zero, at(b, out, ow))
            self.rows(kd, kh, row)

    def col2im(self) -> None:
        b, P = self.b, self.P
        lo, hi, src, dst, _ = self.fn.args
        first = b.mul(lo, self.kk)
        with for_range(b, first, b.mul(hi, self.kk), name="t", vectorize=False) as t:
            c, kd, kh, kw = self.tap(t)
            off = b.sub(b.mul(kw, P["DW"]), P["PW"])
            wlo, whi = self.span(off)
            chan = at(b, dst, b.mul(c, self.plane))

            def row(r: ir.Value, base: ir.Value, valid: ir.Value) -> None:
                cols = at(b, src, b.add(b.mul(b.sub(t, first), P["LD"]),
                                        b.mul(b.sub(r, P["R0"]), P["OW"])))
                outp = at(b, chan, b.add(base, off))
                with b.if_then(valid):
                    def add(ow: ir.Value, i: ir.Value) -> None:
                        p = at(b, outp, i)
                        b.store(b.fadd(b.load(p, typ=F32), b.load(at(b, cols, ow), typ=F32)), p)
                    self.strided(add, wlo, whi)
            self.rows(kd, kh, row)
