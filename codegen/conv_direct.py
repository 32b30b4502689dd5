"""Direct windowed kernels in LLVM IR: a convolution whose patches are too short for a GEMM
(depthwise, or few input channels: the 1 -> 32 stem), and max and average pooling, as one
loop nest over (N, O, OH, OW) outputs vectorized along OW.

A unit is one (n, group) and a block of ``RB`` output rows. It first copies the rows its
windows read of each of the group's ``Cg`` input planes into a per-thread scratch
(``ws``), padded (0, or -inf for max pooling) and split by stride phase: for row phase
``a < SH`` and column phase ``b < SW`` a sub-plane of ``RB + KHX`` rows (and spare ones,
a vector's worth) by ``PC`` columns,

    ws[((c * SH + a) * SW + b) * SUB + i * PC + j] = xpad[(oh0 + i) * SH + a][j * SW + b]

so that the input of output ``(oh, ow)`` under tap ``(kh, kw)`` is at the flat offset
``(oh - oh0) * PC + ow + taps[t]``, ``taps[t]`` a constant per tap (``runtime`` computes
the table): every tap of every stride and dilation is a contiguous vector load, and no
branch decides about padding in the inner loop. Then, for each output channel of the
group, register tiles of up to ``R`` output rows by one vector of ``lanes`` columns run
the taps (an FMA per row, or a max, or an add). Stores are whole vectors: a row of
``lanes`` or more ends with a vector that overlaps the one before it, a shorter row's
vector spills into the rows after it (stored later), and only a store that would pass the
end of the block's rows is masked (masked stores are slow on Zen). After each output
channel's rows, ``ep(start, end, ep_args, ep_meta)`` (if not NULL)
runs over their flat indices into the ``(N, O, OH, OW)`` output (``codegen.gemm``'s
epilogue ABI).

The exported function, named ``name(spec)``::

    void NAME(i64 lo, i64 hi, i64* p, T* x, T* w, T* aux, T* out, T* ws, i64* taps,
              void (*ep)(i64, i64, ptr, ptr), ptr ep_args, ptr ep_meta)

runs units ``[lo, hi)``; ``p`` holds ``PARAMS``, then ``jlo, jhi`` for each column phase
``b < SW``: the scratch columns ``[jlo, jhi)`` of that phase that lie inside the input.
``aux``: the bias per output channel (``conv``), or the average's divisors (``avg``:
``OH`` row factors, then a column factor for each of ``ceil(OW / lanes) * lanes``
columns; a window's divisor is their product); unused for ``max``. 1-D inputs are 2-D
ones of one row.

``argmax`` is ``max`` that also writes each window's int64 flat index into its input plane
(PyTorch's CPU rule: taps in row-major order, a value replaces the max if it is greater or
NaN, so the first maximum wins and the last NaN; a window of -inf only keeps its first
in-bounds tap). ``w`` is then the ``(N, O, OH, OW)`` int64 index output, the table after
the ``T`` tap offsets holds each tap's offset in the input plane (``i * DH * W + j * DW``),
and ``aux`` is int64: ``(rowbase, rowskip)`` per output row (the window's first row
``oh * SH - PH`` times ``W``; the offset of its first row inside the input, times ``W``),
then ``colbase`` (``ow * SW - PW``) and ``colskip`` for ``ceil(OW / lanes) * lanes``
columns each. A lane tracks its tap's offset relative to the window's corner in int32,
started at ``rowskip + colskip`` (the first in-bounds tap). The fill's column masks are int32
vectors: an input row must be narrower than 2^30 elements (``runtime`` checks).

    >>> from .microkernel import AVX512
    >>> text = render(Stencil("conv", "f32", AVX512.lanes))
    >>> "llvm.fma.v16f32" in text and "llvm.masked.store" in text
    True
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .llvm_emit import I32, I64, PTR, for_range
from .microkernel import ZERO, c64, carried_loop, dispatch, imin, intrinsic, splat

MODES = ("conv", "max", "avg", "argmax")
ROWS = 8                 # output rows per register tile: 8 independent accumulators
PARAMS = ("G", "Cg", "Og", "H", "W", "OH", "OW", "SH", "SW", "PH", "PW", "RB", "NRB",
          "PC", "SUB", "T", "KHX", "WT")
_P = {p: i for i, p in enumerate(PARAMS)}
EP_TYPE = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR])
ELEMENT_TYPES = {"f32": ir.FloatType(), "f64": ir.DoubleType()}


@dataclass(frozen=True)
class Stencil:
    """What one compiled kernel computes: ``mode`` (``MODES``) on ``dtype`` (``f32`` or
    ``f64``) elements, ``lanes`` of them per vector. ``rows``: the row offsets (in scratch
    rows) of the taps that one table entry stands for, a column of the kernel at unit row
    stride (``(0, 1, 2)`` for 3 x 3): the tile then loads each input row of the column once
    for every output row it feeds; ``(0,)``: one tap per entry, any stride."""
    mode: str
    dtype: str
    lanes: int
    rows: tuple[int, ...] = (0,)

    @property
    def elem(self) -> ir.Type:
        return ELEMENT_TYPES[self.dtype]

    @property
    def vec(self) -> ir.VectorType:
        return ir.VectorType(self.elem, self.lanes)

    @property
    def suffix(self) -> str:
        return f"v{self.lanes}{self.dtype}"

    @property
    def fill(self) -> float:
        """The padding value: what a tap outside the input contributes nothing with."""
        return float("-inf") if self.mode in ("max", "argmax") else 0.0


def name(spec: Stencil) -> str:
    """The exported function's name for ``spec``."""
    rows = "_".join(map(str, spec.rows))
    return f"stencil_{spec.mode}_{spec.dtype}_x{spec.lanes}_r{rows}"


def scratch_elements(spec: Stencil, cg: int, sh: int, sw: int, sub: int) -> int:
    """Elements of one thread's scratch: the unit's phase-split planes, plus the slack the
    last vector of a row may read past them (lanes that are never stored)."""
    return cg * sh * sw * sub + 4 * spec.lanes


def render(spec: Stencil) -> str:
    """LLVM IR text of the kernel module for ``spec`` (see the module docstring)."""
    if spec.mode not in MODES or spec.dtype not in ELEMENT_TYPES:
        raise ValueError(f"conv_direct.render: unknown stencil {spec!r}")
    module = ir.Module(name=name(spec))
    tiles = {r: _Tile(module, spec, r).build() for r in range(1, ROWS + 1)}
    args = [I64, I64, PTR, PTR, PTR, PTR, PTR, PTR, PTR, EP_TYPE.as_pointer(), PTR, PTR]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name=name(spec))
    fn.attributes.add("nounwind")
    _Body(fn, spec, tiles).build()
    return str(module)


def _elem_at(b: ir.IRBuilder, spec: Stencil, ptr: ir.Value, offset: ir.Value | int) -> ir.Value:
    return b.gep(ptr, [c64(offset) if isinstance(offset, int) else offset],
                 source_etype=spec.elem)


class _Body:
    """The exported function: units, the scratch fill, and the tiles over each row block."""

    def __init__(self, fn: ir.Function, spec: Stencil, tiles: dict[int, ir.Function]) -> None:
        self.fn, self.spec, self.tiles = fn, spec, tiles
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def at(self, ptr: ir.Value, offset: ir.Value | int) -> ir.Value:
        return _elem_at(self.b, self.spec, ptr, offset)

    def build(self) -> None:
        b = self.b
        lo, hi, params, x, w, aux, out, ws, taps, ep, ep_args, ep_meta = self.fn.args
        P = self.P = {p: b.load(b.gep(params, [c64(i)], source_etype=I64), typ=I64)
                      for p, i in _P.items()}
        with for_range(b, lo, hi, name="u", vectorize=False) as u:
            pg = b.sdiv(u, P["NRB"])                       # n * G + g
            oh0 = b.mul(b.srem(u, P["NRB"]), P["RB"])
            rows = imin(b, P["RB"], b.sub(P["OH"], oh0))
            plane = b.mul(P["H"], P["W"])
            self._fill(self.at(x, b.mul(b.mul(pg, P["Cg"]), plane)), plane, oh0,
                       b.add(rows, P["KHX"]), ws)
            with for_range(b, ZERO, P["Og"], name="o", vectorize=False) as oi:
                o = b.add(b.mul(pg, P["Og"]), oi)          # n * O + g * Og + oi
                first = b.mul(b.add(b.mul(o, P["OH"]), oh0), P["OW"])
                self._rows(w, aux, o, oh0, rows, ws, taps, out, first)
                has_ep = b.icmp_unsigned("!=", b.ptrtoint(ep, I64), ZERO)
                with b.if_then(has_ep):
                    b.call(ep, [first, b.add(first, b.mul(rows, P["OW"])), ep_args, ep_meta])
        b.ret_void()

    # ---- the scratch: padded, phase-split input rows ------------------------------------
    def _fill(self, src: ir.Value, plane: ir.Value, oh0: ir.Value, nrows: ir.Value,
              ws: ir.Value) -> None:
        """The unit's scratch, sub-plane after sub-plane in memory order (a row's last
        vector may store past its end, into what is written next: see ``_fill_row``).
        One loop nest per column stride (1, 2: whole vectors; any other: element-wise),
        chosen once per unit, not per row."""
        b, P = self.b, self.P
        with b.if_else(b.icmp_signed("==", P["SW"], c64(1))) as (one, other):
            with one:
                self._fill_planes(src, plane, oh0, nrows, ws, 1)
            with other:
                with b.if_else(b.icmp_signed("==", P["SW"], c64(2))) as (two, rest):
                    with two:
                        self._fill_pairs(src, plane, oh0, nrows, ws)
                    with rest:
                        self._fill_planes(src, plane, oh0, nrows, ws, None)

    def _fill_planes(self, src: ir.Value, plane: ir.Value, oh0: ir.Value, nrows: ir.Value,
                     ws: ir.Value, stride: int | None) -> None:
        b, P = self.b, self.P
        with for_range(b, ZERO, P["Cg"], name="fc", vectorize=False) as c:
            chan = self.at(src, b.mul(c, plane))
            with for_range(b, ZERO, P["SH"], name="fa", vectorize=False) as a:
                with for_range(b, ZERO, P["SW"], name="fb", vectorize=False) as ph:
                    jlo, jhi = self._columns(ph)
                    base = self.at(chan, b.sub(ph, P["PW"]))
                    sub = b.add(b.mul(b.add(b.mul(c, P["SH"]), a), P["SW"]), ph)
                    first = self.at(ws, b.mul(sub, P["SUB"]))
                    with for_range(b, ZERO, nrows, name="fi", vectorize=False) as i:
                        y = b.sub(b.add(b.mul(b.add(oh0, i), P["SH"]), a), P["PH"])
                        inside = b.and_(b.icmp_signed(">=", y, ZERO),
                                        b.icmp_signed("<", y, P["H"]))
                        dst = self.at(first, b.mul(i, P["PC"]))
                        with b.if_else(inside) as (row, pad):
                            with row:
                                self._fill_row(self.at(base, b.mul(y, P["W"])), jlo, jhi,
                                               dst, stride)
                            with pad:
                                carried_loop(b, ZERO, P["PC"], self.spec.lanes, [],
                                             lambda j, _: self._store_fill(dst, j), "fz")
                    # the row after: a row's last vector reads into it (lanes never stored,
                    # but garbage there, denormals, slowed the FMAs 4x)
                    self._store_fill(first, b.mul(nrows, P["PC"]))

    def _fill_pairs(self, src: ir.Value, plane: ir.Value, oh0: ir.Value, nrows: ir.Value,
                    ws: ir.Value) -> None:
        """``_fill_planes`` at column stride 2: each input row loaded once (two vectors)
        for both column phases, its even elements to phase 0 and odd ones to phase 1. (A
        sub-plane has spare rows for a row's last store, so the order sub-planes are
        written in is free.)"""
        b, P, spec, L = self.b, self.P, self.spec, self.spec.lanes
        ivec = ir.VectorType(I32, L)          # column masks in int32: half the compares
        pick = [ir.Constant(ir.VectorType(I32, L), list(range(ph, 2 * L, 2))) for ph in (0, 1)]
        with for_range(b, ZERO, P["Cg"], name="pc", vectorize=False) as c:
            chan = self.at(src, b.mul(c, plane))
            with for_range(b, ZERO, P["SH"], name="pa", vectorize=False) as a:
                sub = b.mul(b.add(b.mul(c, P["SH"]), a), c64(2))
                firsts = [self.at(ws, b.mul(b.add(sub, c64(ph)), P["SUB"])) for ph in (0, 1)]
                with for_range(b, ZERO, nrows, name="pi", vectorize=False) as i:
                    y = b.sub(b.add(b.mul(b.add(oh0, i), P["SH"]), a), P["PH"])
                    inside = b.and_(b.icmp_signed(">=", y, ZERO), b.icmp_signed("<", y, P["H"]))
                    dsts = [self.at(f, b.mul(i, P["PC"])) for f in firsts]
                    row = self.at(chan, b.sub(b.mul(y, P["W"]), P["PW"]))
                    width = splat(b, b.trunc(b.select(inside, P["W"], ZERO), I32),
                                  ivec)                                  # 0: padding

                    def pair(j: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
                        halves = []
                        for h in (0, L):      # source elements 2j - PW + h + lane
                            first = b.sub(b.add(b.mul(j, c64(2)), c64(h)), P["PW"])
                            e = b.add(splat(b, b.trunc(first, I32), ivec),
                                      ir.Constant(ivec, list(range(L))))
                            mask = b.and_(b.icmp_signed(">=", e, ir.Constant(ivec, [0] * L)),
                                          b.icmp_signed("<", e, width))
                            halves.append(intrinsic(
                                b, f"llvm.masked.load.{spec.suffix}.p0", spec.vec,
                                [self.at(row, b.add(b.mul(j, c64(2)), c64(h))),
                                 ir.Constant(I32, 1), mask, self._fill_vec()]))
                        for dst, order in zip(dsts, pick):
                            b.store(b.shuffle_vector(halves[0], halves[1], order),
                                    self.at(dst, j), align=1)
                        return []
                    carried_loop(b, ZERO, P["PC"], L, [], pair, "pj")
                for f in firsts:
                    self._store_fill(f, b.mul(nrows, P["PC"]))

    def _columns(self, ph: ir.Value) -> tuple[ir.Value, ir.Value]:
        """``[jlo, jhi)``: the columns of phase ``ph`` that lie inside the input row (from
        the table after ``PARAMS``: two divisions per phase and unit cost more than the
        fill of a 7 x 7 plane)."""
        b, params = self.b, self.fn.args[2]
        pair = b.add(c64(len(PARAMS)), b.mul(ph, c64(2)))
        return tuple(b.load(b.gep(params, [b.add(pair, c64(k))], source_etype=I64), typ=I64)
                     for k in range(2))

    def _fill_row(self, base: ir.Value, jlo: ir.Value, jhi: ir.Value, dst: ir.Value,
                  stride: int | None) -> None:
        """``dst[j] = base[j * SW]`` for ``j`` in ``[jlo, jhi)``, the fill elsewhere in
        ``[0, PC)``. Strides 1 and 2 (the common ones): whole vectors, each one masked load
        (or two and a de-interleave) whose masked lanes read the fill; its last store may
        pass ``PC``, into the next row, written after it. Other strides: element-wise."""
        if stride is not None:
            self._vector_row(base, stride, jlo, jhi, dst)
            return
        b, P, fill = self.b, self.P, ir.Constant(self.spec.elem, self.spec.fill)
        self._splat_range(dst, ZERO, jlo, fill, "fl")
        with for_range(b, jlo, jhi, name="fs", vectorize=False) as j:
            v = b.load(self.at(base, b.mul(j, P["SW"])), typ=self.spec.elem)
            b.store(v, self.at(dst, j))
        self._splat_range(dst, jhi, P["PC"], fill, "fr")

    def _vector_row(self, base: ir.Value, stride: int, jlo: ir.Value, jhi: ir.Value,
                    dst: ir.Value) -> None:
        """``_fill_row`` for a constant ``stride`` of 1 or 2."""
        b, spec, L = self.b, self.spec, self.spec.lanes
        ivec = ir.VectorType(I32, L)          # column masks in int32: half the compares
        lo, hi = splat(b, b.trunc(jlo, I32), ivec), splat(b, b.trunc(jhi, I32), ivec)
        evens = ir.Constant(ir.VectorType(I32, L), list(range(0, 2 * L, 2)))

        def load(j: ir.Value, first: int) -> ir.Value:
            """The source elements ``first .. first + L`` past ``j * stride``; lane ``i``
            belongs to column ``j + (first + i) // stride``."""
            steps = ir.Constant(ivec, [(first + i) // stride for i in range(L)])
            cols = b.add(splat(b, b.trunc(j, I32), ivec), steps)
            mask = b.and_(b.icmp_signed(">=", cols, lo), b.icmp_signed("<", cols, hi))
            ptr = self.at(base, b.add(b.mul(j, c64(stride)), c64(first)))
            return intrinsic(b, f"llvm.masked.load.{spec.suffix}.p0", spec.vec,
                             [ptr, ir.Constant(I32, 1), mask, self._fill_vec()])

        def vector(j: ir.Value, _: list[ir.Value]) -> list[ir.Value]:
            v = load(j, 0)
            if stride == 2:
                v = b.shuffle_vector(v, load(j, L), evens)
            b.store(v, self.at(dst, j), align=1)
            return []
        carried_loop(b, ZERO, self.P["PC"], L, [], vector, f"f{stride}")

    def _store_fill(self, dst: ir.Value, j: ir.Value) -> list[ir.Value]:
        self.b.store(self._fill_vec(), self.at(dst, j), align=1)
        return []

    def _fill_vec(self) -> ir.Constant:
        return ir.Constant(self.spec.vec, [self.spec.fill] * self.spec.lanes)

    def _splat_range(self, dst: ir.Value, start: ir.Value, stop: ir.Value, fill: ir.Constant,
                     label: str) -> None:
        with for_range(self.b, start, stop, name=label) as j:
            self.b.store(fill, self.at(dst, j))

    # ---- the output rows of one channel ----------------------------------------------
    def _rows(self, w: ir.Value, aux: ir.Value, o: ir.Value, oh0: ir.Value, rows: ir.Value,
              ws: ir.Value, taps: ir.Value, out: ir.Value, first: ir.Value) -> None:
        b, P, spec = self.b, self.P, self.spec
        och = b.srem(o, b.mul(P["G"], P["Og"]))             # the output channel
        out = self.at(out, first)
        if spec.mode == "conv":
            wrow, bias = self.at(w, b.mul(och, P["WT"])), b.load(self.at(aux, och), typ=spec.elem)
            rowdiv = coldiv = aux
        elif spec.mode == "argmax":       # w: the index output; aux: int64 tables
            wrow, bias = b.gep(w, [first], source_etype=I64), ir.Constant(spec.elem, spec.fill)
            rowdiv = b.gep(aux, [b.mul(oh0, c64(2))], source_etype=I64)
            coldiv = b.gep(aux, [b.mul(P["OH"], c64(2))], source_etype=I64)
        else:
            wrow, bias = w, ir.Constant(spec.elem, spec.fill)
            rowdiv, coldiv = self.at(aux, oh0), self.at(aux, P["OH"])
        step = c64(ROWS)
        nb = b.sdiv(b.add(rows, c64(ROWS - 1)), step)
        with for_range(b, ZERO, nb, name="rt", vectorize=False) as t:
            r = b.mul(t, step)
            if spec.mode == "argmax":
                wrow_r = b.gep(wrow, [b.mul(r, P["OW"])], source_etype=I64)
                rowdiv_r = b.gep(rowdiv, [b.mul(r, c64(2))], source_etype=I64)
            else:
                wrow_r, rowdiv_r = wrow, self.at(rowdiv, r)
            args = [self.at(ws, b.mul(r, P["PC"])), P["PC"], wrow_r, taps, P["T"], bias,
                    self.at(out, b.mul(r, P["OW"])), P["OW"], rowdiv_r, coldiv,
                    b.mul(b.sub(rows, r), P["OW"])]
            dispatch(b, imin(b, step, b.sub(rows, r)), self.tiles, args)


class _Tile:
    """``void tile{R}(T* in, i64 pc, T* w, i64* taps, i64 ntaps, T init, T* out, i64 ow,
    T* rowdiv, T* coldiv, i64 limit)``: ``R`` output rows (input rows ``pc`` apart,
    output rows ``ow`` apart), one vector of columns at a time, all taps each; no store
    passes ``out + limit`` (the end of the block's rows)."""

    def __init__(self, module: ir.Module, spec: Stencil, rows: int) -> None:
        self.spec, self.rows = spec, rows
        ftype = ir.FunctionType(ir.VoidType(), [PTR, I64, PTR, PTR, I64, spec.elem, PTR, I64,
                                                PTR, PTR, I64])
        self.fn = ir.Function(module, ftype, name=f"{name(spec)}.tile{rows}")
        self.fn.linkage = "internal"
        for attr in ("nounwind", "noinline"):
            self.fn.attributes.add(attr)
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))

    def at(self, ptr: ir.Value, offset: ir.Value | int) -> ir.Value:
        return _elem_at(self.b, self.spec, ptr, offset)

    def build(self) -> ir.Function:
        b, spec, L = self.b, self.spec, self.spec.lanes
        src, pc, w, taps, ntaps, init, out, ow, rowdiv, coldiv, limit = self.fn.args
        nvec = b.sdiv(b.add(ow, c64(L - 1)), c64(L))
        with for_range(b, ZERO, nvec, name="v", vectorize=False) as v:
            # a row of L or more: its last vector ends at the row's end, overlapping the one
            # before (a masked store is slow on Zen); a shorter row's vector stores into the
            # next rows, stored later, or masked at the end of the block (``_store``)
            q = b.mul(v, c64(L))
            q = b.select(b.icmp_signed(">=", ow, c64(L)), imin(b, q, b.sub(ow, c64(L))), q)
            start = [splat(b, init, spec.vec)] * self.rows
            if spec.mode == "argmax":
                start += self._first_taps(rowdiv, coldiv, b.mul(nvec, c64(L)), q)

            def tap(t: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                off = b.load(b.gep(taps, [t], source_etype=I64), typ=I64)
                if spec.mode == "argmax":
                    rel = b.load(b.gep(taps, [b.add(t, ntaps)], source_etype=I64), typ=I64)
                    return self._argmax(self.at(src, b.add(off, q)), pc, rel, accs)
                return self._column(self.at(src, b.add(off, q)), pc, w, t, accs)
            _, accs = carried_loop(b, ZERO, ntaps, 1, start, tap, "t")
            if spec.mode == "avg":
                cols = b.load(self.at(coldiv, q), typ=spec.vec, align=4)
                accs = [b.fdiv(acc, b.fmul(splat(b, b.load(self.at(rowdiv, r), typ=spec.elem),
                                                 spec.vec), cols))
                        for r, acc in enumerate(accs)]
            for r in range(self.rows):
                self._store(accs[r], b.add(b.mul(ow, c64(r)), q), b.sub(ow, q), out, limit)
            if spec.mode == "argmax":
                colbase = b.load(b.gep(coldiv, [q], source_etype=I64), typ=self.ivec(64),
                                 align=8)
                for r, rel in enumerate(accs[self.rows:]):
                    rowbase = b.load(b.gep(rowdiv, [c64(2 * r)], source_etype=I64), typ=I64)
                    index = b.add(b.add(b.sext(rel, self.ivec(64)), colbase),
                                  splat(b, rowbase, self.ivec(64)))
                    self._store(index, b.add(b.mul(ow, c64(r)), q), b.sub(ow, q), w, limit)
        b.ret_void()
        return self.fn

    def ivec(self, bits: int) -> ir.VectorType:
        return ir.VectorType(ir.IntType(bits), self.spec.lanes)

    def _first_taps(self, rowdiv: ir.Value, coldiv: ir.Value, ncols: ir.Value,
                    q: ir.Value) -> list[ir.Value]:
        """``argmax``: each row's int32 offsets of the windows' first in-bounds taps
        (``rowskip + colskip``), the index a window of -inf keeps."""
        b = self.b
        cols = b.load(b.gep(coldiv, [b.add(ncols, q)], source_etype=I64), typ=self.ivec(64),
                      align=8)
        cols = b.trunc(cols, self.ivec(32))
        rows = [b.trunc(b.load(b.gep(rowdiv, [c64(2 * r + 1)], source_etype=I64), typ=I64), I32)
                for r in range(self.rows)]
        return [b.add(splat(b, row, self.ivec(32)), cols) for row in rows]

    def _argmax(self, base: ir.Value, pc: ir.Value, rel: ir.Value,
                accs: list[ir.Value]) -> list[ir.Value]:
        """One tap of ``argmax`` on every output row: where the input is greater than the
        row's max or NaN (torch's ``val > maxval || isnan(val)``), it and ``rel`` (the
        tap's offset in the input plane) replace the max and its offset."""
        b, spec, R = self.b, self.spec, self.rows
        offset = splat(b, b.trunc(rel, I32), self.ivec(32))
        values, offsets = list(accs[:R]), list(accs[R:])
        for r in range(R):
            x = b.load(self.at(base, b.mul(pc, c64(r))), typ=spec.vec, align=4)
            wins = b.or_(b.fcmp_ordered(">", x, values[r]), b.fcmp_unordered("uno", x, x))
            values[r] = b.select(wins, x, values[r])
            offsets[r] = b.select(wins, offset, offsets[r])
        return values + offsets

    def _column(self, base: ir.Value, pc: ir.Value, w: ir.Value, t: ir.Value,
                accs: list[ir.Value]) -> list[ir.Value]:
        """Table entry ``t``: its taps (``spec.rows`` apart) on every output row, each input
        row loaded once (row ``i`` feeds output row ``i - offset`` of each tap)."""
        b, spec = self.b, self.spec
        weights: list[ir.Value | None] = [None] * len(spec.rows)
        if spec.mode == "conv":
            first = b.mul(t, c64(len(spec.rows)))
            weights = [splat(b, b.load(self.at(w, b.add(first, c64(k))), typ=spec.elem),
                             spec.vec) for k in range(len(spec.rows))]
        accs = list(accs)
        for i in range(self.rows + max(spec.rows)):
            x = None
            for k, offset in enumerate(spec.rows):
                if 0 <= i - offset < self.rows:
                    if x is None:
                        x = b.load(self.at(base, b.mul(pc, c64(i))), typ=spec.vec, align=4)
                    accs[i - offset] = self._combine(accs[i - offset], x, weights[k])
        return accs

    def _store(self, acc: ir.Value, offset: ir.Value, valid: ir.Value, out: ir.Value,
               limit: ir.Value) -> None:
        """``acc``'s first ``valid`` lanes at ``out + offset``: a whole vector store unless it
        would pass ``limit`` (its lanes past ``valid`` land in later rows, stored later),
        else a masked one."""
        b, L = self.b, self.spec.lanes
        elem = acc.type.element
        ptr = b.gep(out, [offset], source_etype=elem)
        suffix = f"v{L}i64" if isinstance(elem, ir.IntType) else self.spec.suffix
        align = 8 if isinstance(elem, ir.IntType) else 4
        past = b.icmp_signed(">", b.add(offset, c64(L)), limit)
        with b.if_else(past) as (edge, inside):
            with edge:
                lane = ir.Constant(ir.VectorType(I64, L), list(range(L)))
                mask = b.icmp_signed("<", lane, splat(b, valid, ir.VectorType(I64, L)))
                intrinsic(b, f"llvm.masked.store.{suffix}.p0", ir.VoidType(),
                          [acc, ptr, ir.Constant(I32, align), mask])
            with inside:
                b.store(acc, ptr, align=align)

    def _combine(self, acc: ir.Value, x: ir.Value, wt: ir.Value | None) -> ir.Value:
        b, spec = self.b, self.spec
        if spec.mode == "conv":
            return intrinsic(b, f"llvm.fma.{spec.suffix}", spec.vec, [wt, x, acc])
        if spec.mode == "max":         # NaN-propagating, as torch's max pooling
            return intrinsic(b, f"llvm.maximum.{spec.suffix}", spec.vec, [acc, x])
        return b.fadd(acc, x)

