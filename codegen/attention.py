"""Fused float32 attention, ``softmax(Q Kᵀ · scale + mask) V``, as one LLVM function
(FMA on the registers of a ``microkernel.Isa``: AVX2 or AVX-512) that a pool thread calls on
a range of work units.

A unit is one block of ``RB`` query rows of one (batch, head) pair. For its pair a thread
first packs K (transposed) and V into the microkernel's panel layout (``codegen.microkernel``;
once per pair, not per block), then, per block:

1. ``S = Q_blk Kᵀ`` into a ``RB x S_pad`` scratch (``RB * S_pad`` floats: in L2), by
   ``mr x nr`` register tiles, Q's rows read in place;
2. each row: ``x = S · scale + mask`` (lanes past the last key are ``-inf``; only the
   vectors reaching past it pay for that select), its max, then ``e = exp(x - max)`` in
   place (``vmath.exp_softmax``: x <= 0 needs no upper clamp) and ``1 / sum(e)``;
3. ``O_blk = E V`` by tiles straight into the output rows (K blocked by ``KC``), then each
   output row times its ``1 / sum`` (``Ev`` multiplies a row instead of ``S``).

So the ``L x S`` score matrix of a head is never written to memory, and no BLAS call is
made from the pool threads (BLAS's own threads would fight them). Rows whose scores are
all ``-inf`` (fully masked) or hold a NaN come out NaN, as the unfused
``softmax(...) @ v`` gives.

The exported function (``runtime.attention.ATTENTION_TYPE``), named ``name(isa)``::

    void attention_f32_{isa}(i64 lo, i64 hi, i64* p, float* q, float* k, float* v, float* mask,
              float* o, float* ws, float scale)

runs units ``[lo, hi)``; ``p`` holds the sizes and element strides (``PARAMS`` names them),
``mask`` may be NULL, ``ws`` is the calling thread's workspace of ``workspace_floats(...)``
floats, and Q's and O's last dims have unit stride.

    >>> text = render_attention(AVX512)
    >>> "llvm.fma.v16f32" in text and f'@"{name(AVX512)}"(' in text
    True
"""
from __future__ import annotations

from functools import partial

from llvmlite import ir

from scriptmod.ir import dtypes as D
from . import vmath
from .emitter import Num
from .llvm_emit import I32, I64, PTR, for_range
from .microkernel import (AVX512, F32, ZERO, Isa, VectorEmitter, at, c64, carried_loop,
                          dispatch, imin, intrinsic, render_tiled, splat)

KC = 256               # keys per K block of E V: a KC x nr panel of V (16/32 KiB) stays in L1
PARAMS = ("H", "L", "S", "E", "Ev", "NB", "RB",
          "qsb", "qsh", "qsl", "ksb", "ksh", "kss", "kse", "vsb", "vsh", "vss", "vse",
          "msb", "msh", "msl", "mss", "osb", "osh", "osl")
_P = {name: i for i, name in enumerate(PARAMS)}
_NEG_INF = float("-inf")


def name(isa: Isa) -> str:
    """The exported function's name for ``isa``."""
    return f"attention_f32_{isa.name}"


def workspace_floats(S: int, E: int, Ev: int, RB: int, isa: Isa) -> int:
    """Floats of one thread's workspace: packed K, packed V, the score block, the 1/sums."""
    nr = isa.nr
    return -(-S // nr) * nr * (E + RB) + -(-Ev // nr) * nr * S + RB


def render_attention(isa: Isa) -> str:
    """LLVM IR text of the attention module for ``isa`` (see the module docstring)."""
    return render_tiled(name(isa), isa, [I64, I64, PTR, PTR, PTR, PTR, PTR, PTR, PTR, F32],
                        lambda fn, table: _Body(fn, table, isa).build())


class _Body:
    def __init__(self, fn: ir.Function, table: dict[int, ir.Function], isa: Isa) -> None:
        self.fn, self.table, self.isa = fn, table, isa
        self.nr, self.lanes, self.vec = isa.nr, isa.lanes, isa.vec
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def p(self, name: str) -> ir.Value:
        b = self.b
        return b.load(b.gep(self.params, [c64(_P[name])], source_etype=I64), typ=I64)

    def build(self) -> None:
        b = self.b
        lo, hi, self.params, q, k, v, mask, o, ws, scale = self.fn.args
        P = {p: self.p(p) for p in PARAMS}
        self.P, self.scale, NR = P, scale, self.nr
        ps = b.sdiv(b.add(P["S"], c64(NR - 1)), c64(NR))
        pv = b.sdiv(b.add(P["Ev"], c64(NR - 1)), c64(NR))
        self.spad = b.mul(ps, c64(NR))
        kp = ws
        vp = at(b, kp, b.mul(b.mul(ps, P["E"]), c64(NR)))
        sb = at(b, vp, b.mul(b.mul(pv, P["S"]), c64(NR)))
        inv = at(b, sb, b.mul(P["RB"], self.spad))
        last = b.alloca(I64, name="packed_bh")
        b.store(c64(-1), last)
        with for_range(b, lo, hi, name="u", vectorize=False) as u:
            bh = b.sdiv(u, P["NB"])
            i0 = b.mul(b.srem(u, P["NB"]), P["RB"])
            rb = imin(b, P["RB"], b.sub(P["L"], i0))
            bi, hi_ = b.sdiv(bh, P["H"]), b.srem(bh, P["H"])

            def base(ptr: ir.Value, sb_: str, sh: str) -> ir.Value:
                return at(b, ptr, b.add(b.mul(bi, P[sb_]), b.mul(hi_, P[sh])))
            kb, vb = base(k, "ksb", "ksh"), base(v, "vsb", "vsh")
            with b.if_then(b.icmp_signed("!=", b.load(last, typ=I64), bh)):
                self._pack_k(kb, kp, ps)
                self._pack_v(vb, vp, pv)
                b.store(bh, last)
            qrow = at(b, base(q, "qsb", "qsh"), b.mul(i0, P["qsl"]))
            orow = at(b, base(o, "osb", "osh"), b.mul(i0, P["osl"]))
            self._scores(qrow, kp, sb, ps, rb)
            has_mask = b.icmp_unsigned("!=", b.ptrtoint(mask, I64), ZERO)
            mrow = at(b, base(mask, "msb", "msh"), b.mul(i0, P["msl"]))
            with b.if_else(has_mask) as (masked, plain):
                with masked:
                    self._softmax_rows(sb, inv, rb, mrow)
                with plain:
                    self._softmax_rows(sb, inv, rb, None)
            self._values(sb, vp, orow, pv, rb)
            self._normalize(orow, inv, rb)
        b.ret_void()

    # ---- packing: once per (batch, head) -----------------------------------------------
    def _pack_k(self, kb: ir.Value, kp: ir.Value, ps: ir.Value) -> None:
        """``kp[(n // NR) * E + e][n % NR] = k[n, e]`` (0 past the last key): key ``n``'s row
        is read once, along ``e``, and scattered at stride NR."""
        b, P, NR = self.b, self.P, self.nr
        with for_range(b, ZERO, b.mul(ps, c64(NR)), name="pk.n", vectorize=False) as n:
            dst = at(b, kp, b.add(b.mul(b.mul(b.udiv(n, c64(NR)), P["E"]), c64(NR)),
                                  b.urem(n, c64(NR))))
            with b.if_else(b.icmp_signed("<", n, P["S"])) as (key, pad):
                with key:
                    src = at(b, kb, b.mul(n, P["kss"]))
                    with for_range(b, ZERO, P["E"], name="pk.e", vectorize=False) as e:
                        x = b.load(at(b, src, b.mul(e, P["kse"])), typ=F32)
                        b.store(x, at(b, dst, b.mul(e, c64(NR))))
                with pad:
                    with for_range(b, ZERO, P["E"], name="pk.z", vectorize=False) as e:
                        b.store(ir.Constant(F32, 0.0), at(b, dst, b.mul(e, c64(NR))))

    def _pack_v(self, vb: ir.Value, vp: ir.Value, pv: ir.Value) -> None:
        """``vp[(c // NR) * S + s][c % NR] = v[s, c]`` (0 past the last column): whole
        panels as vector copies when v's rows are unit-stride, the rest element-wise."""
        b, P, NR, LANES = self.b, self.P, self.nr, self.lanes
        unit = b.icmp_signed("==", P["vse"], c64(1))
        full = b.select(unit, b.sdiv(P["Ev"], c64(NR)), ZERO)
        with for_range(b, ZERO, P["S"], name="pv.s", vectorize=False) as s:
            src = at(b, vb, b.mul(s, P["vss"]))
            with for_range(b, ZERO, full, name="pv.f", vectorize=False) as p:
                dst = at(b, vp, b.mul(b.add(b.mul(p, P["S"]), s), c64(NR)))
                for h in range(NR // LANES):
                    x = b.load(at(b, src, b.add(b.mul(p, c64(NR)), c64(LANES * h))),
                               typ=self.vec, align=4)
                    b.store(x, at(b, dst, LANES * h), align=4)
            with for_range(b, b.mul(full, c64(NR)), b.mul(pv, c64(NR)), name="pv.c",
                           vectorize=False) as c:
                panel = b.mul(b.add(b.mul(b.udiv(c, c64(NR)), P["S"]), s), c64(NR))
                ptr = at(b, vp, b.add(panel, b.urem(c, c64(NR))))
                with b.if_else(b.icmp_signed("<", c, P["Ev"])) as (col, pad):
                    with col:
                        b.store(b.load(at(b, src, b.mul(c, P["vse"])), typ=F32), ptr)
                    with pad:
                        b.store(ir.Constant(F32, 0.0), ptr)

    # ---- the three stages of a block ----------------------------------------------------
    def _slabs(self, rb: ir.Value, name: str):
        b, MR = self.b, self.isa.mr
        return for_range(b, ZERO, b.sdiv(b.add(rb, c64(MR - 1)), c64(MR)), name=name,
                         vectorize=False)

    def _scores(self, qrow: ir.Value, kp: ir.Value, sb: ir.Value, ps: ir.Value,
                rb: ir.Value) -> None:
        """``sb[r, :] = q[r, :] @ Kᵀ`` (all NR columns of every panel: the scratch is padded)."""
        b, P, MR, NR = self.b, self.P, self.isa.mr, self.nr
        with for_range(b, ZERO, ps, name="qk.p", vectorize=False) as p:
            panel = at(b, kp, b.mul(b.mul(p, P["E"]), c64(NR)))
            with self._slabs(rb, "qk.s") as s:
                r = b.mul(s, c64(MR))
                dispatch(b, imin(b, b.sub(rb, r), c64(MR)), self.table, [
                    at(b, qrow, b.mul(r, P["qsl"])), P["qsl"], panel, P["E"],
                    at(b, sb, b.add(b.mul(r, self.spad), b.mul(p, c64(NR)))), self.spad,
                    c64(NR), ir.Constant(ir.IntType(1), 1)])

    def _softmax_rows(self, sb: ir.Value, inv: ir.Value, rb: ir.Value,
                      mrow: ir.Value | None) -> None:
        """Each row of the block: scale, mask, max; exp in place; ``inv[r] = 1 / sum``."""
        b, P, LANES, VEC = self.b, self.P, self.lanes, self.vec
        vi64 = ir.VectorType(I64, LANES)
        m = Num(VectorEmitter(b, LANES), D.float32)
        neg_inf = ir.Constant(VEC, [_NEG_INF] * LANES)
        iota = ir.Constant(vi64, list(range(LANES)))
        vscale = splat(b, self.scale, VEC)
        vectors = b.sdiv(self.spad, c64(LANES))
        whole = b.sdiv(P["S"], c64(LANES))          # vectors of keys only
        with for_range(b, ZERO, rb, name="sm.r", vectorize=False) as r:
            row = at(b, sb, b.mul(r, self.spad))
            mr_ = None if mrow is None else at(b, mrow, b.mul(r, P["msl"]))

            def first(edge: bool, t: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                n = b.mul(t, c64(LANES))
                ptr = at(b, row, n)
                x = b.fmul(b.load(ptr, typ=VEC, align=4), vscale)
                if mr_ is not None:
                    x = b.fadd(x, self._mask_vector(mr_, n))
                if edge:        # a vector reaching past the last key: -inf there
                    cols = b.add(splat(b, n, vi64), iota)
                    x = b.select(b.icmp_signed("<", cols, splat(b, P["S"], vi64)), x, neg_inf)
                b.store(x, ptr, align=4)
                return [b.select(b.fcmp_ordered(">", x, vals[0]), x, vals[0])]
            t, acc = carried_loop(b, ZERO, whole, 1, [neg_inf], partial(first, False), "sm.max")
            _, (vmax,) = carried_loop(b, t, vectors, 1, acc, partial(first, True), "sm.edge")
            mx = splat(b, intrinsic(b, f"llvm.vector.reduce.fmax.{self.isa.suffix}", F32,
                                    [vmax]), VEC)

            def second(t: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
                ptr = at(b, row, b.mul(t, c64(LANES)))
                e = vmath.exp_softmax(m, b.fsub(b.load(ptr, typ=VEC, align=4), mx))
                b.store(e, ptr, align=4)
                return [b.fadd(vals[0], e)]
            zero = ir.Constant(VEC, [0.0] * LANES)
            _, (vsum,) = carried_loop(b, ZERO, vectors, 1, [zero], second, "sm.sum")
            total = intrinsic(b, f"llvm.vector.reduce.fadd.{self.isa.suffix}", F32,
                              [ir.Constant(F32, 0.0), vsum])
            b.store(b.fdiv(ir.Constant(F32, 1.0), total), at(b, inv, r))

    def _mask_vector(self, mrow: ir.Value, n: ir.Value) -> ir.Value:
        """The mask's values at columns ``n..n+lanes-1`` (any column stride; columns past
        the last key read the last one, and the caller discards them)."""
        b, P = self.b, self.P
        last = b.sub(P["S"], c64(1))
        vec = ir.Constant(self.vec, ir.Undefined)
        for j in range(self.lanes):
            col = imin(b, b.add(n, c64(j)), last)
            x = b.load(at(b, mrow, b.mul(col, P["mss"])), typ=F32)
            vec = b.insert_element(vec, x, ir.Constant(I32, j))
        return vec

    def _values(self, sb: ir.Value, vp: ir.Value, orow: ir.Value, pv: ir.Value,
                rb: ir.Value) -> None:
        """``o[r, :] = e[r, :S] @ V`` (K blocked by KC: the first block stores, later add)."""
        b, P, MR, NR = self.b, self.P, self.isa.mr, self.nr
        kblocks = b.sdiv(b.add(P["S"], c64(KC - 1)), c64(KC))
        with for_range(b, ZERO, pv, name="pv.p", vectorize=False) as p:
            nvalid = imin(b, c64(NR), b.sub(P["Ev"], b.mul(p, c64(NR))))
            with for_range(b, ZERO, kblocks, name="pv.k", vectorize=False) as kb:
                k0 = b.mul(kb, c64(KC))
                kc = imin(b, c64(KC), b.sub(P["S"], k0))
                panel = at(b, vp, b.mul(b.add(b.mul(p, P["S"]), k0), c64(NR)))
                first = b.icmp_signed("==", kb, ZERO)
                with self._slabs(rb, "pv.s") as s:
                    r = b.mul(s, c64(MR))
                    dispatch(b, imin(b, b.sub(rb, r), c64(MR)), self.table, [
                        at(b, sb, b.add(b.mul(r, self.spad), k0)), self.spad, panel, kc,
                        at(b, orow, b.add(b.mul(r, P["osl"]), b.mul(p, c64(NR)))), P["osl"],
                        nvalid, first])

    def _normalize(self, orow: ir.Value, inv: ir.Value, rb: ir.Value) -> None:
        b, P = self.b, self.P
        with for_range(b, ZERO, rb, name="nm.r", vectorize=False) as r:
            s = b.load(at(b, inv, r), typ=F32)
            row = at(b, orow, b.mul(r, P["osl"]))
            with for_range(b, ZERO, P["Ev"], name="nm.c") as c:
                ptr = at(b, row, c)
                b.store(b.fmul(b.load(ptr, typ=F32), s), ptr)

