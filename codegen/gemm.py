"""A float32 GEMM, ``C = A @ B`` then an optional elementwise epilogue on each block of C
while it is in cache, as one LLVM function (the register tiles of ``codegen.microkernel``)
that a pool thread calls on a range of work units.

A unit is a block of C: ``MC`` rows by ``NC`` columns (fewer at the edges). For each block of
``KC`` steps of the contraction, the unit packs each ``KC x nr`` panel of B into the
microkernel's layout (``B[k * nr + j]``, zero-padded past the last column) in an L1 buffer
and runs the register tiles over all the block's rows, A read in place (its ``MC x KC``
block stays in L2 across the panels). The first K block stores into C, later ones add.
Packing is per call, not cached per weight: a weight written in place (``w.data[...] = ``,
``load_state_dict``, an optimizer step, a NumPy view) is always what the GEMM reads. It
costs one read of B per row block, which the GEMM reads anyway:

- B with unit column stride (a row-major ``K x N``) packs as vector row copies;
- B with unit row stride (``Wᵀ`` of a row-major ``N x K`` weight: ``Linear``) packs by
  ``lanes x lanes`` in-register transposes (``transpose``);
- anything else, and the edges, element by element.

Then, if ``ep`` is not NULL, each row of the finished block goes through
``ep(start, end, ep_args, ep_meta)`` with flat indices ``i * N + j`` (C is C-contiguous,
``ldc = N``, where there is an epilogue): a fusion-group kernel (``codegen.llvm_ir``'s ABI) that reads C and writes its
output, bias, activation and residual applied while the ``MC x NC`` block is in L2.

The exported function (``runtime.gemm.GEMM_TYPE``), named ``name(isa)``::

    void gemm_f32_{isa}(i64 lo, i64 hi, i64* p, float* a, float* b, float* c, float* ws,
                        void (*ep)(i64, i64, ptr, ptr), ptr ep_args, ptr ep_meta)

runs units ``[lo, hi)``; ``p`` holds the sizes and element strides (``PARAMS``; ``ACC``
nonzero: ``C += A @ B``, the first K block adds too); ``ws`` is the calling thread's
workspace of ``KC * nr`` floats; A and C have unit column stride.

    >>> from .microkernel import AVX512
    >>> text = render_gemm(AVX512)
    >>> "llvm.fma.v16f32" in text and f'@"{name(AVX512)}"(' in text
    True
"""
from __future__ import annotations

from llvmlite import ir

from .llvm_emit import I64, PTR, for_range
from .microkernel import F32, ZERO, Isa, at, c64, dispatch, imin, render_tiled

KC = 256           # contraction steps per block: a KC x nr panel (32 KiB at nr = 32) in L1
MC = 256           # rows per unit: A's MC x KC block (256 KiB) stays in L2 over the panels
NC = 256           # columns per unit: 8 panels of 32; the MC x NC block of C is in L2 for
                   # the epilogue
PARAMS = ("M", "N", "K", "lda", "bsk", "bsn", "ldc", "NB", "ACC")
_P = {name: i for i, name in enumerate(PARAMS)}
EP_TYPE = ir.FunctionType(ir.VoidType(), [I64, I64, PTR, PTR])


def name(isa: Isa) -> str:
    """The exported function's name for ``isa``."""
    return f"gemm_f32_{isa.name}"


def workspace_floats(isa: Isa) -> int:
    """Floats of one thread's workspace: one packed ``KC x nr`` panel."""
    return KC * isa.nr


def transpose(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The ``n x n`` matrix held as ``n`` vectors of ``n`` lanes, transposed in registers:
    ``log2 n`` rounds, round ``d`` swapping the off-diagonal ``d``-blocks of rows ``i`` and
    ``i + d`` (two shuffles per pair), so each element's row and column index bits swap one
    bit per round."""
    n = len(rows)
    assert n & (n - 1) == 0 and all(r.type.count == n for r in rows)
    d = 1
    while d < n:
        lo = ir.Constant(ir.VectorType(ir.IntType(32), n),
                         [p if p & d == 0 else n + p - d for p in range(n)])
        hi = ir.Constant(ir.VectorType(ir.IntType(32), n),
                         [p + d if p & d == 0 else n + p for p in range(n)])
        out = list(rows)
        for i in range(n):
            if i & d == 0:
                out[i] = b.shuffle_vector(rows[i], rows[i + d], lo)
                out[i + d] = b.shuffle_vector(rows[i], rows[i + d], hi)
        rows, d = out, d * 2
    return rows


def render_gemm(isa: Isa) -> str:
    """LLVM IR text of the GEMM module for ``isa`` (see the module docstring)."""
    return render_tiled(name(isa), isa,
                        [I64, I64, PTR, PTR, PTR, PTR, PTR, EP_TYPE.as_pointer(), PTR, PTR],
                        lambda fn, table: _Body(fn, table, isa).build())


class _Body:
    def __init__(self, fn: ir.Function, table: dict[int, ir.Function], isa: Isa) -> None:
        self.fn, self.table, self.isa = fn, table, isa
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))

    def build(self) -> None:
        b, isa = self.b, self.isa
        lo, hi, params, a, bm, c, ws, ep, ep_args, ep_meta = self.fn.args
        P = self.P = {p: b.load(b.gep(params, [c64(i)], source_etype=I64), typ=I64)
                      for p, i in _P.items()}
        MR, NR = isa.mr, isa.nr
        with for_range(b, lo, hi, name="u", vectorize=False) as u:
            i0 = b.mul(b.sdiv(u, P["NB"]), c64(MC))
            j0 = b.mul(b.srem(u, P["NB"]), c64(NC))
            rows = imin(b, c64(MC), b.sub(P["M"], i0))
            cols = imin(b, c64(NC), b.sub(P["N"], j0))
            panels = b.sdiv(b.add(cols, c64(NR - 1)), c64(NR))
            slabs = b.sdiv(b.add(rows, c64(MR - 1)), c64(MR))
            kblocks = b.sdiv(b.add(P["K"], c64(KC - 1)), c64(KC))
            with for_range(b, ZERO, kblocks, name="kb", vectorize=False) as kb:
                k0 = b.mul(kb, c64(KC))
                kc = imin(b, c64(KC), b.sub(P["K"], k0))
                first = b.and_(b.icmp_signed("==", kb, ZERO),
                               b.icmp_signed("==", P["ACC"], ZERO))
                with for_range(b, ZERO, panels, name="p", vectorize=False) as p:
                    j = b.add(j0, b.mul(p, c64(NR)))
                    nvalid = imin(b, c64(NR), b.sub(P["N"], j))
                    src = at(b, bm, b.add(b.mul(k0, P["bsk"]), b.mul(j, P["bsn"])))
                    self._pack(src, kc, nvalid, ws)
                    with for_range(b, ZERO, slabs, name="s", vectorize=False) as s:
                        r = b.add(i0, b.mul(s, c64(MR)))
                        dispatch(b, imin(b, b.sub(b.add(i0, rows), r), c64(MR)), self.table, [
                            at(b, a, b.add(b.mul(r, P["lda"]), k0)), P["lda"], ws, kc,
                            at(b, c, b.add(b.mul(r, P["ldc"]), j)), P["ldc"], nvalid, first])
            has_ep = b.icmp_unsigned("!=", b.ptrtoint(ep, I64), ZERO)
            with b.if_then(has_ep):
                with for_range(b, i0, b.add(i0, rows), name="ep", vectorize=False) as i:
                    start = b.add(b.mul(i, P["N"]), j0)
                    b.call(ep, [start, b.add(start, cols), ep_args, ep_meta])
        b.ret_void()

    # ---- packing: B[k0 : k0 + kc, j : j + nr] into dst[k * nr + jj] --------------------
    def _pack(self, src: ir.Value, kc: ir.Value, nvalid: ir.Value, dst: ir.Value) -> None:
        b, P, NR, L = self.b, self.P, self.isa.nr, self.isa.lanes
        full = b.icmp_signed("==", nvalid, c64(NR))
        rowwise = b.and_(full, b.icmp_signed("==", P["bsn"], c64(1)))
        colwise = b.and_(full, b.icmp_signed("==", P["bsk"], c64(1)))
        with b.if_else(rowwise) as (rows_, other):
            with rows_:
                with for_range(b, ZERO, kc, name="pk.r", vectorize=False) as k:
                    row = at(b, src, b.mul(k, P["bsk"]))
                    for h in range(NR // L):
                        x = b.load(at(b, row, L * h), typ=self.isa.vec, align=4)
                        b.store(x, at(b, dst, b.add(b.mul(k, c64(NR)), c64(L * h))), align=4)
            with other:
                with b.if_else(colwise) as (cols_, general):
                    with cols_:
                        done = b.mul(b.sdiv(kc, c64(L)), c64(L))
                        self._pack_transposed(src, done, dst)
                        self._pack_elements(src, done, kc, nvalid, dst)
                    with general:
                        self._pack_elements(src, ZERO, kc, nvalid, dst)

    def _pack_transposed(self, src: ir.Value, kend: ir.Value, dst: ir.Value) -> None:
        """Whole ``lanes x lanes`` blocks of a column-contiguous B (``bsk == 1``): ``lanes``
        vector loads along k, one ``transpose``, ``lanes`` vector stores along j."""
        b, P, NR, L, vec = self.b, self.P, self.isa.nr, self.isa.lanes, self.isa.vec
        with for_range(b, ZERO, b.sdiv(kend, c64(L)), name="pk.t", vectorize=False) as kt:
            k = b.mul(kt, c64(L))
            for h in range(NR // L):
                loads = [b.load(at(b, src, b.add(b.mul(c64(h * L + r), P["bsn"]), k)),
                                typ=vec, align=4) for r in range(L)]
                for t, v in enumerate(transpose(b, loads)):
                    b.store(v, at(b, dst, b.add(b.mul(b.add(k, c64(t)), c64(NR)),
                                                c64(h * L))), align=4)

    def _pack_elements(self, src: ir.Value, kstart: ir.Value, kend: ir.Value,
                       nvalid: ir.Value, dst: ir.Value) -> None:
        """Rows ``kstart..kend`` element by element, 0 past column ``nvalid``."""
        b, P, NR = self.b, self.P, self.isa.nr
        with for_range(b, kstart, kend, name="pk.k", vectorize=False) as k:
            with for_range(b, ZERO, c64(NR), name="pk.j", vectorize=False) as jj:
                ptr = at(b, dst, b.add(b.mul(k, c64(NR)), jj))
                with b.if_else(b.icmp_signed("<", jj, nvalid)) as (col, pad):
                    with col:
                        x = b.load(at(b, src, b.add(b.mul(k, P["bsk"]), b.mul(jj, P["bsn"]))),
                                   typ=F32)
                        b.store(x, ptr)
                    with pad:
                        b.store(ir.Constant(F32, 0.0), ptr)
