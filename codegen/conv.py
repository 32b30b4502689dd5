"""A float32 convolution as an implicit GEMM on ``codegen.microkernel``'s register tiles: no
im2col matrix is ever built; each ``KC x nr`` panel of patches is packed straight from the
input into the L1 buffer the tiles read, as a GEMM packs its B.

Every convolution is taken as 3-D (a 1-D or 2-D one has size-1 leading dims) on an NCDHW
input. For one image ``n`` and group ``g`` it is the GEMM ``out[o, p] = sum_k W[o, k] *
patch[k, p]``: rows ``o`` the group's ``O/G`` output channels (A is the weight, read in place,
``lda = K``), columns ``p`` the ``P = OD*OH*OW`` output positions, ``k = c * T + t`` over the
group's channels ``c`` and the ``T`` kernel taps ``t = (kd, kh, kw)``, the weight's own
order. C is then the image's NCDHW output itself (row ``o``, column ``p``): no transposes.

The columns of one group's GEMM are the output positions of the whole batch, ``J = N * P``
(image-major), so a small image's last panel goes on into the next image instead of being
mostly empty (14 x 14: 196 = 6 panels of 32 and 4 columns). A unit is ``(g, row block,
column block)``, ``MC x NC`` as the planner chooses (``runtime.conv``); per K block of
``KC`` steps each panel of ``nr`` columns is packed, then the tiles run over the block's
rows. Where ``P`` is a multiple of ``nr`` no panel spans images and C is the output itself
(row stride ``P``); else (``buffered``) C is a block buffer in the workspace (``cbuf``, row
stride ``NC``), copied to the output image by image once the block is done (a copy
measured at ~1% of a block's time, where per-panel copies at each K block cost up to half
of a 7 x 7 layer's).

Per panel the lanes' window origins ``(id0, ih0, iw0)`` and flat input offsets are computed
once, and each vector's lanes split into runs: lanes whose offsets step by the W stride
(``RS``, 1 or 2), i.e. one output row, or several where the rows are contiguous in the input
(same padding: a whole 14 x 14 image is one run). Then, tap by tap (the tap's offsets and
padding masks once), each channel of the K block is one masked load per run and vector (at
stride 2 a twice-as-wide load whose even lanes are kept), where every vector has at most
``MAX_RUNS`` runs; else (a W stride over 2, rows of a few elements) one gather per vector,
which costs several times as much on this host. Lanes in the padding or past ``J`` load
0. The next panel's input is prefetched to L2 meanwhile.

The bias (when given) goes onto each panel after its last K block while it is in L1, or, where
the block is buffered, onto the copy from ``cbuf``; then, if ``ep`` is not NULL,
each row of the block, image by image, goes through ``ep(start, end, ep_args, ep_meta)`` over
flat indices of the whole ``(N, O, *out)`` output, ``start = (n * O + o) * P + p0``:
``codegen.gemm``'s epilogue ABI.

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

from functools import partial
from typing import Callable

from llvmlite import ir

from .gemm import EP_TYPE, KC, MC, NC
from .llvm_emit import I1, I32, I64, PTR, for_range
from .microkernel import (F32, ZERO, Isa, at, c64, dispatch, imin, intrinsic, render_tiled,
                          splat, tiles)

PARAMS = ("Cg", "ID", "IH", "IW", "OH", "OW", "SD", "SH", "SW", "PD", "PH", "PW", "Og", "K",
          "T", "P", "J", "CS", "OP", "MC", "NC", "MB", "NB", "RS", "ahead", "buffered", "KB")
_P = {name: i for i, name in enumerate(PARAMS)}
TAP = ("dd", "dh", "dw", "off")          # one tap's row of the ``taps`` table
FAR = -(1 << 30)                          # a window origin no tap brings into the input
MAX_RUNS = 4                              # masked loads per vector before it gathers instead
RUN_STRIDES = (1, 2)                      # W strides the run loads handle (RS; 0: gathers)
NC_MAX = 2 * NC       # a unit's columns: NC, or all of J up to this (7 x 7 at batch 8: 392),
                      # so a weight block read from L3 serves every panel, none a remainder


def name(isa: Isa) -> str:
    """The exported function's name for ``isa``."""
    return f"conv_f32_{isa.name}"


def workspace_floats(isa: Isa) -> int:
    """Floats of one thread's workspace: one packed ``KC x nr`` panel, then ``cbuf``: one
    block of C (at most ``MC x NC_MAX``)."""
    return KC * isa.nr + MC * NC_MAX


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
    """One vector of a panel: its lanes' window origins (``id0`` is ``FAR`` past ``J``,
    so every mask drops them) and flat input offsets ``base``; and its runs: lanes whose
    input offsets step by the W stride ``RS`` (``base - RS * lane`` equal), each read by
    one masked load at ``start`` (lane ``l`` at ``start + RS * l``). ``runs`` holds up to
    ``MAX_RUNS`` ``(start, lanes)`` pairs, ``count`` how many are used, ``ok`` whether they
    cover every live lane."""

    def __init__(self, id0: ir.Value, ih0: ir.Value, iw0: ir.Value, base: ir.Value,
                 runs: list[tuple[ir.Value, ir.Value]], count: ir.Value, ok: ir.Value) -> None:
        self.id0, self.ih0, self.iw0, self.base = id0, ih0, iw0, base
        self.runs, self.count, self.ok = runs, count, ok


class _Body:
    def __init__(self, fn: ir.Function, table: dict[int, ir.Function], isa: Isa) -> None:
        self.fn, self.table, self.isa = fn, table, isa
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        # one-vector-wide tiles for a last panel of at most ``lanes`` columns (7 x 7 at
        # batch 8: 392 = 12 panels and 8 columns, which a full tile would run as 32)
        self.narrow = None if isa.nr == isa.lanes else tiles(
            fn.module, f"{fn.name}.narrow", Isa(isa.name, isa.lanes, isa.mr, isa.lanes))

    def build(self) -> None:
        b = self.b
        lo, hi, params, self.taps, x, w, bias, out, ws, ep, ep_args, ep_meta = self.fn.args
        self.P = P = {p: b.load(b.gep(params, [c64(i)], source_etype=I64), typ=I64)
                      for p, i in _P.items()}
        self.S = b.mul(P["ID"], b.mul(P["IH"], P["IW"]))
        self.cbuf = at(b, ws, KC * self.isa.nr)
        self.zero = b.alloca(F32, name="zero")   # the bias where there is none: x + -0.0
        b.store(ir.Constant(F32, -0.0), self.zero)       # is x, -0.0 included
        with for_range(b, lo, hi, name="u", vectorize=False) as u:
            nb = b.srem(u, P["NB"])
            mb = b.srem(b.sdiv(u, P["NB"]), P["MB"])
            o0 = b.mul(b.sdiv(u, b.mul(P["NB"], P["MB"])), P["Og"])   # the group's first row
            xg = at(b, x, b.mul(b.mul(b.sdiv(o0, P["Og"]), P["Cg"]), self.S))
            i0, j0 = b.add(o0, b.mul(mb, P["MC"])), b.mul(nb, P["NC"])
            rows = imin(b, P["MC"], b.sub(b.add(o0, P["Og"]), i0))
            cols = imin(b, P["NC"], b.sub(P["J"], j0))
            self._block(xg, at(b, w, b.mul(i0, P["K"])), out, ws, bias, i0, j0, rows, cols)
            self._finish(bias, out, i0, j0, rows, cols, ep, ep_args, ep_meta)
        b.ret_void()

    def _block(self, xg: ir.Value, wb: ir.Value, out: ir.Value, ws: ir.Value, bias: ir.Value,
               i0: ir.Value, j0: ir.Value, rows: ir.Value, cols: ir.Value) -> None:
        """Rows ``i0 .. i0 + rows`` (output channels) by columns ``j0 .. j0 + cols`` (batch
        positions): K blocks of panels of tiles, A the weight rows at ``wb``; C the output
        itself, or ``cbuf`` (row stride ``NC``) where panels may span images."""
        b, P, MR, NR = self.b, self.P, self.isa.mr, self.isa.nr
        panels = b.sdiv(b.add(cols, c64(NR - 1)), c64(NR))
        slabs = b.sdiv(b.add(rows, c64(MR - 1)), c64(MR))
        kblocks = b.sdiv(b.add(P["K"], b.sub(P["KB"], c64(1))), P["KB"])
        buffered = b.icmp_signed("!=", P["buffered"], ZERO)
        ldc = b.select(buffered, P["NC"], P["P"])
        with for_range(b, ZERO, kblocks, name="kb", vectorize=False) as kb:
            k0 = b.mul(kb, P["KB"])
            kc = imin(b, P["KB"], b.sub(P["K"], k0))
            first = b.icmp_signed("==", kb, ZERO)
            with for_range(b, ZERO, panels, name="p", vectorize=False) as p:
                jj = b.mul(p, c64(NR))
                j = b.add(j0, jj)
                # the panel's first row of C: in one image (its row i0), or in cbuf
                c = b.select(buffered, at(b, self.cbuf, jj), at(b, out, b.add(
                    b.mul(b.sdiv(j, P["P"]), P["OP"]),
                    b.add(b.mul(i0, P["P"]), b.srem(j, P["P"])))))
                valid = imin(b, c64(NR), b.sub(cols, jj))

                def panel(width: int, table: dict[int, ir.Function]) -> None:
                    self._pack(xg, j, k0, kc, ws, width)
                    with for_range(b, ZERO, slabs, name="s", vectorize=False) as s:
                        r = b.mul(s, c64(MR))
                        dispatch(b, imin(b, b.sub(rows, r), c64(MR)), table, [
                            at(b, wb, b.add(b.mul(r, P["K"]), k0)), P["K"], ws, kc,
                            at(b, c, b.mul(r, ldc)), ldc, valid, first])
                if self.narrow is None:
                    panel(NR, self.table)
                else:   # a last panel of at most one vector: packed and multiplied as such
                    with b.if_else(b.icmp_signed("<=", valid, c64(self.isa.lanes))) as (
                            narrow, wide):
                        with narrow:
                            panel(self.isa.lanes, self.narrow)
                        with wide:
                            panel(NR, self.table)
                # unbuffered, the bias goes on each panel after its last K block, in L1
                last = b.icmp_signed("==", b.add(kb, c64(1)), kblocks)
                has_bias = b.icmp_unsigned("!=", b.ptrtoint(bias, I64), ZERO)
                with b.if_then(b.and_(b.and_(last, has_bias), b.not_(buffered))):
                    with for_range(b, ZERO, rows, name="bias.i", vectorize=False) as i:
                        row = at(b, c, b.mul(i, ldc))
                        self._add_row(row, row, valid,
                                      b.load(at(b, bias, b.add(i0, i)), typ=F32))

    def _finish(self, bias: ir.Value, out: ir.Value, i0: ir.Value, j0: ir.Value,
                rows: ir.Value, cols: ir.Value, ep: ir.Value, ep_args: ir.Value,
                ep_meta: ir.Value) -> None:
        """Image by image: the block's rows copied from ``cbuf`` (if buffered) with the bias
        added (when given; an unbuffered block has it from ``_block``), then the epilogue
        per row."""
        b, P = self.b, self.P
        last = b.sdiv(b.sub(b.add(j0, cols), c64(1)), P["P"])
        has_bias = b.icmp_unsigned("!=", b.ptrtoint(bias, I64), ZERO)
        buffered = b.icmp_signed("!=", P["buffered"], ZERO)
        with for_range(b, b.sdiv(j0, P["P"]), b.add(last, c64(1)), name="img",
                       vectorize=False) as n:
            lo = b.select(b.icmp_signed(">", j0, b.mul(n, P["P"])), j0, b.mul(n, P["P"]))
            hi = imin(b, b.add(j0, cols), b.mul(b.add(n, c64(1)), P["P"]))
            seg = b.add(b.mul(n, P["OP"]), b.sub(lo, b.mul(n, P["P"])))   # row 0's start
            length = b.sub(hi, lo)
            with b.if_then(buffered):              # (unbuffered, ``_block`` added the bias)
                with for_range(b, ZERO, rows, name="fin.i", vectorize=False) as i:
                    value = b.load(b.select(has_bias, at(b, bias, b.add(i0, i)), self.zero),
                                   typ=F32)
                    dst = at(b, out, b.add(b.mul(b.add(i0, i), P["P"]), seg))
                    src = at(b, self.cbuf, b.add(b.mul(i, P["NC"]), b.sub(lo, j0)))
                    self._add_row(src, dst, length, value)
            with b.if_then(b.icmp_unsigned("!=", b.ptrtoint(ep, I64), ZERO)):
                with for_range(b, i0, b.add(i0, rows), name="ep", vectorize=False) as i:
                    start = b.add(b.mul(i, P["P"]), seg)
                    b.call(ep, [start, b.add(start, length), ep_args, ep_meta])

    def _add_row(self, src: ir.Value, dst: ir.Value, length: ir.Value,
                 value: ir.Value) -> None:
        """``dst[j] = src[j] + value`` for ``j < length`` (``src`` may be ``dst``): whole
        vectors, the last one masked (LLVM left the scalar loop unvectorized)."""
        b, isa, L = self.b, self.isa, self.isa.lanes
        iota = ir.Constant(_ivec(isa), list(range(L)))
        add = splat(b, value, isa.vec)
        with for_range(b, ZERO, b.sdiv(b.add(length, c64(L - 1)), c64(L)), name="fin.v",
                       vectorize=False) as v:
            j = b.mul(v, c64(L))
            live = b.icmp_signed("<", iota, _isplat(b, b.sub(length, j), isa))
            row = intrinsic(b, f"llvm.masked.load.{isa.suffix}.p0", isa.vec,
                            [at(b, src, j), ir.Constant(I32, 4), live,
                             ir.Constant(isa.vec, [0.0] * L)])
            intrinsic(b, f"llvm.masked.store.{isa.suffix}.p0", ir.VoidType(),
                      [b.fadd(row, add), at(b, dst, j), ir.Constant(I32, 4), live])

    # ---- packing: patches[k0 : k0 + kc, j : j + nr] into ws[(k - k0) * nr + jj] ---------
    def _pack(self, xg: ir.Value, j: ir.Value, k0: ir.Value, kc: ir.Value, ws: ir.Value,
              width: int) -> None:
        """Rows ``k0 .. k0 + kc`` of the patches, columns ``j .. j + width``, into ``ws``
        (row stride ``width``)."""
        b, P, T = self.b, self.P, self.P["T"]
        lanes = [self._lanes(b.add(j, c64(h * self.isa.lanes)))
                 for h in range(width // self.isa.lanes)]
        # the run loads where every vector's live lanes are in at most MAX_RUNS runs: the
        # variant for the W stride and the most runs a vector has; else gathers
        ok, count = b.icmp_signed("!=", P["RS"], ZERO), ZERO
        for v in lanes:
            ok = b.and_(ok, v.ok)
            count = b.select(b.icmp_signed(">", v.count, count), v.count, count)
        variant = b.select(ok, b.add(count, b.mul(b.sub(P["RS"], c64(1)), c64(MAX_RUNS))),
                           ZERO)
        with for_range(b, ZERO, T, name="tap", vectorize=False) as t:
            tap = {f: b.load(b.gep(self.taps, [b.add(b.mul(t, c64(len(TAP))), c64(i))],
                                   source_etype=I64), typ=I64) for i, f in enumerate(TAP)}
            masks = [self._mask(v, tap) for v in lanes]
            # the channels c with k = c * T + t in [k0, k0 + kc)
            c_lo = b.sdiv(b.sub(b.add(k0, T), b.add(t, c64(1))), T)
            c_hi = b.sdiv(b.sub(b.add(b.add(k0, kc), T), b.add(t, c64(1))), T)
            channels = partial(self._channels, xg, tap, t, c_lo, c_hi, k0, ws, lanes, masks)
            done = b.append_basic_block("pack.done")
            gathers = b.append_basic_block("pack.gathers")
            switch = b.switch(variant, gathers)
            for stride in RUN_STRIDES:
                for n in range(1, MAX_RUNS + 1):
                    block = b.append_basic_block(f"pack.runs{stride}x{n}")
                    switch.add_case(c64(n + (stride - 1) * MAX_RUNS), block)
                    b.position_at_end(block)
                    channels(partial(self._runs, stride, n))
                    b.branch(done)
            b.position_at_end(gathers)
            channels(self._gather)
            b.branch(done)
            b.position_at_end(done)

    def _lanes(self, j: ir.Value) -> _Lanes:
        """The window origins and input offsets of output positions ``j .. j + lanes``."""
        b, P, isa = self.b, self.P, self.isa
        iota = ir.Constant(_ivec(isa), list(range(isa.lanes)))
        column = b.add(_isplat(b, j, isa), iota)
        image, pos = self._divmod(column, P["P"])
        od, rem = self._divmod(pos, b.mul(P["OH"], P["OW"]))
        oh, ow = self._divmod(rem, P["OW"])

        def origin(o: ir.Value, s: str, p: str) -> ir.Value:
            return b.sub(b.mul(o, _isplat(b, P[s], isa)), _isplat(b, P[p], isa))
        id0, ih0, iw0 = origin(od, "SD", "PD"), origin(oh, "SH", "PH"), origin(ow, "SW", "PW")
        base = b.add(b.mul(b.add(b.mul(id0, _isplat(b, P["IH"], isa)), ih0),
                           _isplat(b, P["IW"], isa)), iw0)
        base = b.add(base, b.mul(image, _isplat(b, P["CS"], isa)))
        live = b.icmp_signed("<", column, _isplat(b, P["J"], isa))
        far = ir.Constant(_ivec(isa), [FAR] * isa.lanes)
        return _Lanes(b.select(live, id0, far), ih0, iw0, base,
                      *self._find_runs(b.sub(base, b.mul(_isplat(b, P["RS"], isa), iota)),
                                       live))

    def _divmod(self, x: ir.Value, d: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``x // d, x % d`` lane-wise for ``0 <= x < 2**31`` and a positive i64 ``d``: a
        float64 multiply by ``1 / d`` (off by at most one) and one correction each way,
        where LLVM turns a vector division into one ``idiv`` per lane."""
        b, isa = self.b, self.isa
        f64 = ir.VectorType(ir.DoubleType(), isa.lanes)
        inverse = b.fdiv(ir.Constant(ir.DoubleType(), 1.0), b.sitofp(d, ir.DoubleType()))
        q = b.fptosi(b.fmul(b.sitofp(x, f64), splat(b, inverse, f64)), _ivec(isa))
        dv, zeros = _isplat(b, d, isa), ir.Constant(_ivec(isa), [0] * isa.lanes)
        r = b.sub(x, b.mul(q, dv))
        low = b.icmp_signed("<", r, zeros)
        q, r = b.sub(q, b.zext(low, _ivec(isa))), b.add(r, b.select(low, dv, zeros))
        high = b.icmp_signed(">=", r, dv)
        return b.add(q, b.zext(high, _ivec(isa))), b.sub(r, b.select(high, dv, zeros))

    def _find_runs(self, key: ir.Value, live: ir.Value) -> tuple[list, ir.Value, ir.Value]:
        """Up to ``MAX_RUNS`` runs of the lanes (``_Lanes``): each the lanes whose ``key``
        (``base - RS * lane``) equals that of the first live lane no run has taken yet."""
        b, isa = self.b, self.isa
        bits = ir.IntType(isa.lanes)
        taken = b.not_(live)
        runs, count = [], ZERO
        for _ in range(MAX_RUNS):
            free = b.not_(b.bitcast(taken, bits))
            left = b.icmp_unsigned("!=", free, ir.Constant(bits, 0))
            lane = intrinsic(b, f"llvm.cttz.i{isa.lanes}", bits, [free, ir.Constant(I1, 0)])
            lane = b.select(left, b.zext(lane, I32), ir.Constant(I32, 0))
            start = b.extract_element(key, lane)
            run = b.and_(b.icmp_signed("==", key, splat(b, start, _ivec(isa))), b.not_(taken))
            runs.append((start, run))
            taken = b.or_(taken, run)
            count = b.add(count, b.zext(left, I64))
        ok = b.icmp_signed("==", b.bitcast(taken, bits), ir.Constant(bits, -1))
        return runs, count, ok

    def _mask(self, v: _Lanes, tap: dict[str, ir.Value]) -> ir.Value:
        """The lanes whose input element under ``tap`` is inside the input (not padding)."""
        b, P, isa = self.b, self.P, self.isa
        inside = [b.icmp_unsigned("<", b.add(o, _isplat(b, tap[d], isa)), _isplat(b, P[n], isa))
                  for o, d, n in ((v.id0, "dd", "ID"), (v.ih0, "dh", "IH"), (v.iw0, "dw", "IW"))]
        return b.and_(b.and_(inside[0], inside[1]), inside[2])

    def _channels(self, xg: ir.Value, tap: dict[str, ir.Value], t: ir.Value, c_lo: ir.Value,
                  c_hi: ir.Value, k0: ir.Value, ws: ir.Value, lanes: list[_Lanes],
                  masks: list[ir.Value],
                  load: Callable[[ir.Value, _Lanes, ir.Value], ir.Value]) -> None:
        """Rows ``c * T + t`` of the panel for channels ``c_lo .. c_hi``: ``load(src, lanes,
        mask)`` per vector, ``src`` the tap's element of channel ``c`` at offset 0."""
        b, P, L = self.b, self.P, self.isa.lanes
        with for_range(b, c_lo, c_hi, name="ch", vectorize=False) as c:
            src = at(b, xg, b.add(b.mul(c, self.S), tap["off"]))
            first = b.extract_element(lanes[0].base, ir.Constant(I32, 0))
            ahead = at(b, src, b.add(b.sext(first, I64), P["ahead"]))
            intrinsic(b, "llvm.prefetch.p0", ir.VoidType(),
                      [ahead, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])
            row = at(b, ws, b.mul(b.sub(b.add(b.mul(c, P["T"]), t), k0), c64(L * len(lanes))))
            for h, (v, m) in enumerate(zip(lanes, masks)):
                b.store(load(src, v, m), at(b, row, h * L), align=4)

    def _runs(self, stride: int, n: int, src: ir.Value, v: _Lanes, mask: ir.Value) -> ir.Value:
        """``n`` masked loads, one per run of ``v`` (W stride ``stride``: a stride-2 run
        loads twice the lanes and keeps the even ones); lanes outside ``mask`` load 0."""
        b, isa, L = self.b, self.isa, self.isa.lanes
        value = ir.Constant(isa.vec, [0.0] * L)
        wide = ir.VectorType(F32, L * stride)
        for start, run in v.runs[:n]:
            lanes = b.and_(run, mask)
            at_start = at(b, src, b.sext(start, I64))
            if stride == 1:
                value = intrinsic(b, f"llvm.masked.load.{isa.suffix}.p0", isa.vec,
                                  [at_start, ir.Constant(I32, 4), lanes, value])
                continue
            spread = b.shuffle_vector(lanes, ir.Constant(lanes.type, [0] * L), ir.Constant(
                ir.VectorType(I32, L * stride),
                [i // stride if i % stride == 0 else L for i in range(L * stride)]))
            loaded = intrinsic(b, f"llvm.masked.load.v{L * stride}f32.p0", wide,
                               [at_start, ir.Constant(I32, 4), spread,
                                ir.Constant(wide, [0.0] * (L * stride))])
            picked = b.shuffle_vector(loaded, ir.Constant(wide, ir.Undefined), ir.Constant(
                ir.VectorType(I32, L), [stride * i for i in range(L)]))
            value = b.select(lanes, picked, value)
        return value

    def _gather(self, src: ir.Value, v: _Lanes, mask: ir.Value) -> ir.Value:
        """One masked gather at the lanes' input offsets."""
        b, isa = self.b, self.isa
        ptrs = b.gep(src, [v.base], source_etype=F32)
        ptrs.type = ir.VectorType(PTR, isa.lanes)    # llvmlite types a vector GEP as a scalar
        return intrinsic(b, f"llvm.masked.gather.{isa.suffix}.v{isa.lanes}p0", isa.vec,
                         [ptrs, ir.Constant(I32, 4), mask,
                          ir.Constant(isa.vec, [0.0] * isa.lanes)])
