"""A float32 convolution as an implicit GEMM on ``codegen.microkernel``'s register tiles: no
im2col matrix is ever built; each ``KC x nr`` panel of patches is packed straight from the
input into the L1 buffer the tiles read, as a GEMM packs its B.

Every convolution is taken as 3-D (a 1-D or 2-D one has size-1 leading dims) on an NCDHW
input. For one image ``n`` and group ``g`` it is the GEMM ``out[o, p] = sum_k W[o, k] *
patch[k, p]``: rows ``o`` the group's ``O/G`` output channels (A is the weight, read in place,
``lda = K``), columns ``p`` the ``P = OD*OH*OW`` output positions, ``k = c * T + t`` over the
group's channels ``c`` and the ``T`` kernel taps ``t = (kd, kh, kw)``, the weight's own
order. C is then the image's NCDHW output itself (row ``o``, column ``p``): no transposes.

A unit is ``(n, g, row block, column block)``, blocks of ``MC x NC`` as ``codegen.gemm``'s.
A panel holds ``nr`` consecutive output positions (they may span output rows). Per panel the
lanes' window origins ``(id0, ih0, iw0)`` and flat input offsets are computed once; then, tap
by tap (the tap's offsets and padding masks once), each channel of the K block is one masked
load per vector: two contiguous masked loads (a vector meets at most two output rows) where
the W stride is 1 and an output row holds at least a vector (``contig``), a gather elsewhere
(stride, dilation along W, narrow rows). Lanes in the padding or past ``P`` load 0.

After the K blocks the bias is added to the block (when given) and, if ``ep`` is not NULL,
each row of the block goes through ``ep(start, end, ep_args, ep_meta)`` over flat indices of
the whole ``(N, O, *out)`` output, ``start = (n * O + o) * P + j0``: ``codegen.gemm``'s
epilogue ABI.

The exported function (``runtime.conv.CONV_TYPE``), named ``name(isa)``::

    void conv_f32_{isa}(i64 lo, i64 hi, i64* p, i64* taps, float* x, float* w,
                        float* bias, float* out, float* ws,
                        void (*ep)(i64, i64, ptr, ptr), ptr ep_args, ptr ep_meta)

runs units ``[lo, hi)``; ``p`` holds the sizes (``PARAMS``), ``taps`` four ints per tap
(``TAP``: its offsets along D, H, W and its flat input offset); ``bias`` may be NULL; ``ws``
is the calling thread's workspace of ``KC * nr`` floats.

    >>> from .microkernel import AVX512
    >>> text = render_conv(AVX512)
    >>> "llvm.masked.gather.v16f32" in text and f'@"{name(AVX512)}"(' in text
    True
"""
from __future__ import annotations

from llvmlite import ir

from .gemm import EP_TYPE, KC
from .llvm_emit import I1, I32, I64, PTR, for_range
from .microkernel import F32, ZERO, Isa, at, c64, dispatch, imin, intrinsic, render_tiled, splat

PARAMS = ("Cg", "ID", "IH", "IW", "OD", "OH", "OW", "SD", "SH", "SW", "PD", "PH", "PW",
          "O", "Og", "G", "K", "T", "P", "MC", "NC", "MB", "NB", "contig", "ahead")
_P = {name: i for i, name in enumerate(PARAMS)}
TAP = ("dd", "dh", "dw", "off")          # one tap's row of the ``taps`` table
FAR = -(1 << 30)                          # a window origin no tap brings into the input


def name(isa: Isa) -> str:
    """The exported function's name for ``isa``."""
    return f"conv_f32_{isa.name}"


def workspace_floats(isa: Isa) -> int:
    """Floats of one thread's workspace: one packed ``KC x nr`` panel."""
    return KC * isa.nr


def render_conv(isa: Isa) -> str:
    """LLVM IR text of the convolution module for ``isa`` (see the module docstring)."""
    return render_tiled(name(isa), isa,
                        [I64, I64, PTR, PTR, PTR, PTR, PTR, PTR, PTR, EP_TYPE.as_pointer(),
                         PTR, PTR],
                        lambda fn, table: _Body(fn, table, isa).build())


def _ivec(isa: Isa) -> ir.VectorType:
    return ir.VectorType(I32, isa.lanes)


def _isplat(b: ir.IRBuilder, x: ir.Value, isa: Isa) -> ir.Value:
    """An i64 scalar as a ``<lanes x i32>`` splat."""
    return splat(b, b.trunc(x, I32), _ivec(isa))


class _Lanes:
    """One vector of a panel: its lanes' window origins (``id0`` is ``FAR`` past ``P``,
    so every mask drops them), flat input offsets, and for ``contig`` panels the two
    contiguous runs (``start1`` for the lanes of the first output row, ``first``, and
    ``start2`` for the rest)."""

    def __init__(self, id0: ir.Value, ih0: ir.Value, iw0: ir.Value, base: ir.Value,
                 start1: ir.Value, start2: ir.Value, first: ir.Value) -> None:
        self.id0, self.ih0, self.iw0, self.base = id0, ih0, iw0, base
        self.start1, self.start2, self.first = start1, start2, first


class _Body:
    def __init__(self, fn: ir.Function, table: dict[int, ir.Function], isa: Isa) -> None:
        self.fn, self.table, self.isa = fn, table, isa
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def build(self) -> None:
        b = self.b
        lo, hi, params, self.taps, x, w, bias, out, ws, ep, ep_args, ep_meta = self.fn.args
        self.P = P = {p: b.load(b.gep(params, [c64(i)], source_etype=I64), typ=I64)
                      for p, i in _P.items()}
        self.S = b.mul(P["ID"], b.mul(P["IH"], P["IW"]))
        with for_range(b, lo, hi, name="u", vectorize=False) as u:
            nb = b.srem(u, P["NB"])
            mb = b.srem(b.sdiv(u, P["NB"]), P["MB"])
            ng = b.sdiv(u, b.mul(P["NB"], P["MB"]))
            n, g = b.sdiv(ng, P["G"]), b.srem(ng, P["G"])
            o0 = b.mul(g, P["Og"])                                   # the group's first row
            xg = at(b, x, b.mul(b.add(b.mul(n, b.mul(P["G"], P["Cg"])), b.mul(g, P["Cg"])),
                                self.S))
            cg = at(b, out, b.mul(b.add(b.mul(n, P["O"]), o0), P["P"]))
            i0, j0 = b.mul(mb, P["MC"]), b.mul(nb, P["NC"])
            rows = imin(b, P["MC"], b.sub(P["Og"], i0))
            cols = imin(b, P["NC"], b.sub(P["P"], j0))
            self._block(xg, at(b, w, b.mul(o0, P["K"])), cg, ws, i0, j0, rows, cols)
            self._finish(bias, o0, cg, i0, j0, rows, cols, b.mul(n, P["O"]), ep, ep_args,
                         ep_meta)
        b.ret_void()

    def _block(self, xg: ir.Value, wg: ir.Value, cg: ir.Value, ws: ir.Value, i0: ir.Value,
               j0: ir.Value, rows: ir.Value, cols: ir.Value) -> None:
        """The ``rows x cols`` block of C at ``(i0, j0)``: K blocks of panels of tiles."""
        b, P, MR, NR = self.b, self.P, self.isa.mr, self.isa.nr
        panels = b.sdiv(b.add(cols, c64(NR - 1)), c64(NR))
        slabs = b.sdiv(b.add(rows, c64(MR - 1)), c64(MR))
        kblocks = b.sdiv(b.add(P["K"], c64(KC - 1)), c64(KC))
        with for_range(b, ZERO, kblocks, name="kb", vectorize=False) as kb:
            k0 = b.mul(kb, c64(KC))
            kc = imin(b, c64(KC), b.sub(P["K"], k0))
            first = b.icmp_signed("==", kb, ZERO)
            with for_range(b, ZERO, panels, name="p", vectorize=False) as p:
                j = b.add(j0, b.mul(p, c64(NR)))
                nvalid = imin(b, c64(NR), b.sub(P["P"], j))
                self._pack(xg, j, k0, kc, ws)
                with for_range(b, ZERO, slabs, name="s", vectorize=False) as s:
                    r = b.add(i0, b.mul(s, c64(MR)))
                    dispatch(b, imin(b, b.sub(b.add(i0, rows), r), c64(MR)), self.table, [
                        at(b, wg, b.add(b.mul(r, P["K"]), k0)), P["K"], ws, kc,
                        at(b, cg, b.add(b.mul(r, P["P"]), j)), P["P"], nvalid, first])

    def _finish(self, bias: ir.Value, o0: ir.Value, cg: ir.Value, i0: ir.Value, j0: ir.Value,
                rows: ir.Value, cols: ir.Value, nO: ir.Value, ep: ir.Value, ep_args: ir.Value,
                ep_meta: ir.Value) -> None:
        """The bias added to the finished block, then the epilogue per row."""
        b, P = self.b, self.P
        with b.if_then(b.icmp_unsigned("!=", b.ptrtoint(bias, I64), ZERO)):
            with for_range(b, i0, b.add(i0, rows), name="bias.i", vectorize=False) as i:
                value = b.load(at(b, bias, b.add(o0, i)), typ=F32)
                row = at(b, cg, b.add(b.mul(i, P["P"]), j0))
                with for_range(b, ZERO, cols, name="bias.j") as jj:
                    ptr = at(b, row, jj)
                    b.store(b.fadd(b.load(ptr, typ=F32), value), ptr)
        with b.if_then(b.icmp_unsigned("!=", b.ptrtoint(ep, I64), ZERO)):
            with for_range(b, i0, b.add(i0, rows), name="ep", vectorize=False) as i:
                start = b.add(b.mul(b.add(nO, b.add(o0, i)), P["P"]), j0)
                b.call(ep, [start, b.add(start, cols), ep_args, ep_meta])

    # ---- packing: patches[k0 : k0 + kc, j : j + nr] into ws[(k - k0) * nr + jj] ---------
    def _pack(self, xg: ir.Value, j: ir.Value, k0: ir.Value, kc: ir.Value,
              ws: ir.Value) -> None:
        b, P, T = self.b, self.P, self.P["T"]
        lanes = [self._lanes(b.add(j, c64(h * self.isa.lanes)))
                 for h in range(self.isa.nr // self.isa.lanes)]
        contig = b.icmp_signed("!=", P["contig"], ZERO)
        with for_range(b, ZERO, T, name="tap", vectorize=False) as t:
            tap = {f: b.load(b.gep(self.taps, [b.add(b.mul(t, c64(len(TAP))), c64(i))],
                                   source_etype=I64), typ=I64) for i, f in enumerate(TAP)}
            masks = [self._mask(v, tap) for v in lanes]
            # the channels c with k = c * T + t in [k0, k0 + kc)
            c_lo = b.sdiv(b.sub(b.add(k0, T), b.add(t, c64(1))), T)
            c_hi = b.sdiv(b.sub(b.add(b.add(k0, kc), T), b.add(t, c64(1))), T)
            with b.if_else(contig) as (runs, gathers):
                with runs:
                    self._channels(xg, tap, t, c_lo, c_hi, k0, ws,
                                   lambda src, v, m: self._runs(src, v, m), lanes, masks)
                with gathers:
                    self._channels(xg, tap, t, c_lo, c_hi, k0, ws,
                                   lambda src, v, m: self._gather(src, v, m), lanes, masks)

    def _lanes(self, j: ir.Value) -> _Lanes:
        """The window origins and input offsets of output positions ``j .. j + lanes``."""
        b, P, isa = self.b, self.P, self.isa
        iota = ir.Constant(_ivec(isa), list(range(isa.lanes)))
        pos = b.add(_isplat(b, j, isa), iota)
        plane = _isplat(b, b.mul(P["OH"], P["OW"]), isa)
        ow_, oh_ = _isplat(b, P["OW"], isa), None
        od, rem = b.sdiv(pos, plane), b.srem(pos, plane)
        oh_, ow = b.sdiv(rem, ow_), b.srem(rem, ow_)

        def origin(o: ir.Value, s: str, p: str) -> ir.Value:
            return b.sub(b.mul(o, _isplat(b, P[s], isa)), _isplat(b, P[p], isa))
        id0, ih0, iw0 = origin(od, "SD", "PD"), origin(oh_, "SH", "PH"), origin(ow, "SW", "PW")
        base = b.add(b.mul(b.add(b.mul(id0, _isplat(b, P["IH"], isa)), ih0),
                           _isplat(b, P["IW"], isa)), iw0)
        live = b.icmp_signed("<", pos, _isplat(b, P["P"], isa))
        far = ir.Constant(_ivec(isa), [FAR] * isa.lanes)
        start1 = b.extract_element(base, ir.Constant(I32, 0))
        first = b.icmp_signed("==", b.sub(base, splat(b, start1, _ivec(isa))), iota)
        start2 = b.extract_element(b.sub(base, iota), ir.Constant(I32, isa.lanes - 1))
        return _Lanes(b.select(live, id0, far), ih0, iw0, base, start1, start2, first)

    def _mask(self, v: _Lanes, tap: dict[str, ir.Value]) -> ir.Value:
        """The lanes whose input element under ``tap`` is inside the input (not padding)."""
        b, P, isa = self.b, self.P, self.isa
        inside = [b.icmp_unsigned("<", b.add(o, _isplat(b, tap[d], isa)), _isplat(b, P[n], isa))
                  for o, d, n in ((v.id0, "dd", "ID"), (v.ih0, "dh", "IH"), (v.iw0, "dw", "IW"))]
        return b.and_(b.and_(inside[0], inside[1]), inside[2])

    def _channels(self, xg: ir.Value, tap: dict[str, ir.Value], t: ir.Value, c_lo: ir.Value,
                  c_hi: ir.Value, k0: ir.Value, ws: ir.Value, load, lanes: list[_Lanes],
                  masks: list[ir.Value]) -> None:
        """Rows ``c * T + t`` of the panel for channels ``c_lo .. c_hi``: ``load(src, lanes,
        mask)`` per vector, ``src`` the tap's element of channel ``c`` at offset 0."""
        b, P, L, NR = self.b, self.P, self.isa.lanes, self.isa.nr
        with for_range(b, c_lo, c_hi, name="ch", vectorize=False) as c:
            src = at(b, xg, b.add(b.mul(c, self.S), tap["off"]))
            ahead = at(b, src, b.add(b.sext(lanes[0].start1, I64), P["ahead"]))
            intrinsic(b, "llvm.prefetch.p0", ir.VoidType(),
                      [ahead, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])
            row = at(b, ws, b.mul(b.sub(b.add(b.mul(c, P["T"]), t), k0), c64(NR)))
            for h, (v, m) in enumerate(zip(lanes, masks)):
                b.store(load(src, v, m), at(b, row, h * L), align=4)

    def _runs(self, src: ir.Value, v: _Lanes, mask: ir.Value) -> ir.Value:
        """Two masked contiguous loads: the lanes of the first output row, then the rest."""
        b, isa = self.b, self.isa
        name = f"llvm.masked.load.{isa.suffix}.p0"
        zero = ir.Constant(isa.vec, [0.0] * isa.lanes)
        align = ir.Constant(I32, 4)
        one = intrinsic(b, name, isa.vec, [at(b, src, b.sext(v.start1, I64)), align,
                                           b.and_(mask, v.first), zero])
        return intrinsic(b, name, isa.vec, [at(b, src, b.sext(v.start2, I64)), align,
                                             b.and_(mask, b.not_(v.first)), one])

    def _gather(self, src: ir.Value, v: _Lanes, mask: ir.Value) -> ir.Value:
        """One masked gather at the lanes' input offsets."""
        b, isa = self.b, self.isa
        ptrs = b.gep(src, [v.base], source_etype=F32)
        ptrs.type = ir.VectorType(PTR, isa.lanes)    # llvmlite types a vector GEP as a scalar
        return intrinsic(b, f"llvm.masked.gather.{isa.suffix}.v{isa.lanes}p0", isa.vec,
                         [ptrs, ir.Constant(I32, 4), mask,
                          ir.Constant(isa.vec, [0.0] * isa.lanes)])
