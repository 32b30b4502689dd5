"""A float32 register-tile GEMM microkernel (FMA on AVX2 or AVX-512 registers) as LLVM IR,
for native loop nests that multiply small matrices they own (``codegen.attention``: QKᵀ and
PV per block of query rows, where calling BLAS per block from each pool thread would fight
BLAS's own threads).

The register shape is an ``Isa``: ``lanes`` floats per vector register, tiles of up to
``mr`` rows by ``nr`` columns. ``AVX2`` (8 lanes, 6 x 16: 12 of the 16 ymm registers hold
sums) and ``AVX512`` (16 lanes, 8 x 32: 16 of the 32 zmm registers; at 12 x 32 LLVM's
scheduler hoists the unrolled steps' broadcasts and spills them, 112 against 198 GFLOP/s
on one Zen 5 core); ``host_isa`` picks from LLVM's host features. The IR is plain LLVM vectors either way, so either shape runs
correctly on any host (LLVM splits a ``<16 x float>`` into two ymm on AVX2); it is only
fast on its own.

One tile computes an ``mr x nr`` block of C (``mr`` in 1..isa.mr) from ``mr`` rows of A,
read in place (unit column stride, any row stride ``lda``), and a *packed* panel of B:
``kc`` rows of ``nr`` consecutive floats (``B[k * nr + j]``), zero-padded past the last
column. The ``mr * nr / lanes`` sums stay in registers over the whole k loop (unrolled by
``UNROLL``); the tile then stores them, or adds them to C (``first`` false). A last,
partial panel (``nvalid < nr`` columns of C) goes through a full tile on the stack, so the
vector code is the same for every panel.

    void NAME.tile{mr}(float* A, i64 lda, float* B, i64 kc, float* C, i64 ldc,
                       i64 nvalid, i1 first)

``tiles(module, prefix, isa)`` adds the ``isa.mr`` functions to a module; ``dispatch``
calls the one for a run-time row count. ``VectorEmitter`` runs ``vmath``'s branch-free
formulas on whole ``<lanes x float>`` registers (the attention kernel's exp).

The AVX2 tile is the one measured on the ``wip/gemm-microkernel`` branch (issue 14): 72-81
GFLOP/s per core in cache on an AVX2 guest, 5-10% behind OpenBLAS's kernel, which is why
whole GEMMs go to BLAS on such hosts; the AVX-512 tile runs whole GEMMs (``codegen.gemm``)
where OpenBLAS has no AVX-512 kernel for the host.

    >>> m = ir.Module("t")
    >>> sorted(tiles(m, "k", AVX2))
    [1, 2, 3, 4, 5, 6]
    >>> "llvm.fma.v8f32" in str(m)
    True
    >>> host_isa("+avx2,+avx512f,+fma").name, host_isa("+avx2,-avx512f,+fma").name
    ('avx512', 'avx2')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from llvmlite import ir

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType
from .emitter import V
from .llvm_emit import I1, I32, I64, PTR, _INTRINSIC, LLVMEmitter, _mangle, for_range, ll_type

UNROLL = 4                        # k steps per iteration of a tile's main loop

F32 = ir.FloatType()
ZERO = ir.Constant(I64, 0)


@dataclass(frozen=True)
class Isa:
    """A register shape: ``lanes`` floats per vector, tiles of up to ``mr x nr``."""
    name: str
    lanes: int
    mr: int
    nr: int

    @property
    def vec(self) -> ir.VectorType:
        return ir.VectorType(F32, self.lanes)

    @property
    def suffix(self) -> str:
        """LLVM's name for the float vector type, as intrinsics spell it (``v8f32``)."""
        return f"v{self.lanes}f32"


AVX2 = Isa("avx2", lanes=8, mr=6, nr=16)
AVX512 = Isa("avx512", lanes=16, mr=8, nr=32)
# one vector of columns: a product with few columns (a recurrent step's 16 sequences) fills
# its tiles, where AVX512's 32-column panels would be half padding (W_hh @ hᵀ at 2048 x 512
# x 16, one thread: 0.34 ms against 0.57 ms, OpenBLAS 0.46 ms)
AVX512_NARROW = Isa("avx512n16", lanes=16, mr=8, nr=16)
ISAS = {isa.name: isa for isa in (AVX2, AVX512)}     # the hosts' shapes (a choice by name)


def host_isa(features: str) -> Isa:
    """The shape for LLVM's host feature string (``+avx512f,...``): AVX512 where the host
    has 512-bit registers, else AVX2."""
    return AVX512 if "+avx512f" in features.split(",") else AVX2


def c64(n: int) -> ir.Constant:
    return ir.Constant(I64, n)


def intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ret, [a.type for a in args]), name=name)
    return b.call(fn, list(args))


def splat(b: ir.IRBuilder, x: ir.Value, vtype: ir.VectorType) -> ir.Value:
    """``x`` in every lane of a ``vtype`` register."""
    one = b.insert_element(ir.Constant(vtype, ir.Undefined), x, ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(vtype, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, vtype.count), [0] * vtype.count))


def at(b: ir.IRBuilder, ptr: ir.Value, offset: ir.Value | int) -> ir.Value:
    """``ptr + offset`` floats."""
    return b.gep(ptr, [c64(offset) if isinstance(offset, int) else offset], source_etype=F32)


def imin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def carried_loop(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: int,
                 init: list[ir.Value],
                 body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
                 name: str) -> tuple[ir.Value, list[ir.Value]]:
    """``for k in range(start, stop, step)`` (while ``k < stop``) carrying ``init`` through
    ``body(k, values) -> values`` as phis (registers, not memory); returns the final ``k``
    and values."""
    pre = b.block
    header = b.append_basic_block(f"{name}.header")
    loop = b.append_basic_block(f"{name}.body")
    end = b.append_basic_block(f"{name}.end")
    b.branch(header)
    b.position_at_end(header)
    k = b.phi(I64, name=f"{name}.k")
    k.add_incoming(start, pre)
    phis = []
    for v in init:
        phi = b.phi(v.type)
        phi.add_incoming(v, pre)
        phis.append(phi)
    b.cbranch(b.icmp_signed("<", k, stop), loop, end)
    b.position_at_end(loop)
    out = body(k, list(phis))
    k.add_incoming(b.add(k, c64(step), flags=["nsw"]), b.block)
    for phi, v in zip(phis, out):
        phi.add_incoming(v, b.block)
    b.branch(header)
    b.position_at_end(end)
    return k, list(phis)


class _TileBuilder:
    """``NAME.tile{mr}``: see the module docstring."""

    def __init__(self, module: ir.Module, prefix: str, isa: Isa, mr: int) -> None:
        self.isa, self.mr, self.nv = isa, mr, isa.nr // isa.lanes
        ftype = ir.FunctionType(ir.VoidType(), [PTR, I64, PTR, I64, PTR, I64, I64, I1])
        self.fn = ir.Function(module, ftype, name=f"{prefix}.tile{mr}")
        self.fn.linkage = "internal"
        for attr in ("nounwind", "noinline"):
            self.fn.attributes.add(attr)
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))

    def build(self) -> ir.Function:
        b = self.b
        a, lda, bp, kc, c, ldc, nvalid, first = self.fn.args
        rows = [at(b, a, b.mul(lda, c64(r))) for r in range(self.mr)]
        isa, vec = self.isa, self.isa.vec
        self.stack = b.alloca(F32, size=c64(isa.mr * isa.nr), name="tile")
        accs = [ir.Constant(vec, [0.0] * isa.lanes)] * (self.mr * self.nv)
        main = b.and_(kc, c64(-UNROLL))

        def unrolled(k: ir.Value, vals: list[ir.Value]) -> list[ir.Value]:
            for u in range(UNROLL):
                vals = self._step(rows, bp, b.add(k, c64(u)), vals)
            return vals
        k, accs = carried_loop(b, ZERO, main, UNROLL, accs, unrolled, "k4")
        _, accs = carried_loop(b, k, kc, 1, accs,
                               lambda k1, vals: self._step(rows, bp, k1, vals), "k1")
        partial = b.icmp_signed("<", nvalid, c64(isa.nr))
        with b.if_then(partial, likely=False):
            self._copy(c, ldc, self.stack, c64(isa.nr), nvalid)
        full = b.not_(partial)
        dst = b.select(full, c, self.stack)
        ld = b.select(full, ldc, c64(isa.nr))
        for r in range(self.mr):
            row = at(b, dst, b.mul(ld, c64(r)))
            for j in range(self.nv):
                ptr = at(b, row, isa.lanes * j)
                v = accs[r * self.nv + j]
                v = b.select(first, v, b.fadd(v, b.load(ptr, typ=vec, align=4)))
                b.store(v, ptr, align=4)
        with b.if_then(partial, likely=False):
            self._copy(self.stack, c64(isa.nr), c, ldc, nvalid)
        b.ret_void()
        return self.fn

    def _step(self, rows: list[ir.Value], bp: ir.Value, k: ir.Value,
              accs: list[ir.Value]) -> list[ir.Value]:
        """One k: nr/lanes loads of the panel, one broadcast of A per row, an FMA per
        register."""
        b, isa = self.b, self.isa
        row_b = b.mul(k, c64(isa.nr))
        bv = [b.load(at(b, bp, b.add(row_b, c64(isa.lanes * j))), typ=isa.vec, align=4)
              for j in range(self.nv)]
        out = []
        for r, row in enumerate(rows):
            av = splat(b, b.load(at(b, row, k), typ=F32, align=4), isa.vec)
            out += [intrinsic(b, f"llvm.fma.{isa.suffix}", isa.vec,
                              [av, bv[j], accs[r * self.nv + j]]) for j in range(self.nv)]
        return out

    def _copy(self, src: ir.Value, lds: ir.Value, dst: ir.Value, ldd: ir.Value,
              cols: ir.Value) -> None:
        """The tile's ``mr x cols`` elements from ``src`` to ``dst`` (row strides ``ld*``)."""
        b = self.b
        for r in range(self.mr):
            rs = at(b, src, b.mul(lds, c64(r)))
            rd = at(b, dst, b.mul(ldd, c64(r)))
            with for_range(b, ZERO, cols, name=f"copy{r}", vectorize=False) as j:
                b.store(b.load(at(b, rs, j), typ=F32, align=4), at(b, rd, j), align=4)


def tiles(module: ir.Module, prefix: str, isa: Isa) -> dict[int, ir.Function]:
    """The tile functions for 1..isa.mr rows, added to ``module`` (internal, named by
    ``prefix``)."""
    return {mr: _TileBuilder(module, prefix, isa, mr).build() for mr in range(1, isa.mr + 1)}


def render_tiled(fname: str, isa: Isa, args: Sequence[ir.Type],
                 build: Callable[[ir.Function, dict[int, ir.Function]], None]) -> str:
    """LLVM IR text of a module exporting ``void fname(args...)`` whose body
    ``build(fn, table)`` writes, ``table`` the module's tiles for ``isa``."""
    module = ir.Module(name=fname)
    table = tiles(module, fname, isa)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), list(args)), name=fname)
    fn.attributes.add("nounwind")
    build(fn, table)
    return str(module)


def dispatch(b: ir.IRBuilder, mr: ir.Value, table: dict[int, ir.Function],
             args: list[ir.Value]) -> None:
    """``table[mr](*args)``: the full tile by default, a switch for the last rows."""
    top = max(table)
    done = b.append_basic_block("tile.done")
    full = b.append_basic_block("tile.full")
    switch = b.switch(mr, full)
    for rows, fn in table.items():
        if rows == top:
            continue
        block = b.append_basic_block(f"tile.{rows}")
        switch.add_case(ir.Constant(I64, rows), block)
        b.position_at_end(block)
        b.call(fn, args)
        b.branch(done)
    b.position_at_end(full)
    b.call(table[top], args)
    b.branch(done)
    b.position_at_end(done)


class VectorEmitter(LLVMEmitter):
    """``LLVMEmitter`` on ``<lanes x T>`` values: ``vmath``'s branch-free formulas, written
    for scalars, emitted lane-wise on whole registers (constants are splats, intrinsics
    take their vector forms; float/int conversions and bit casts only, as vmath's float32
    exp uses)."""

    def __init__(self, builder: ir.IRBuilder, lanes: int) -> None:
        super().__init__(builder)
        self.lanes = lanes

    def vector_type(self, dt: DType) -> ir.VectorType:
        return ir.VectorType(ll_type(dt), self.lanes)

    def const(self, value: bool | int | float, dt: DType) -> V:
        return ir.Constant(self.vector_type(dt), [super().const(value, dt)] * self.lanes)

    def call(self, fn: str, args: Sequence[V], dt: DType) -> V:
        t = self.vector_type(dt)
        return self._intrinsic(_INTRINSIC[fn], [t], t, list(args))

    def _intrinsic(self, base: str, types: Sequence[ir.Type], ret: ir.Type,
                   args: Sequence[ir.Value]) -> ir.Value:
        name = f"llvm.{base}." + ".".join(
            f"v{t.count}{_mangle(t.element)}" if isinstance(t, ir.VectorType) else _mangle(t)
            for t in types)
        return intrinsic(self.b, name, ret, args)

    def bitcast(self, a: V, src: DType, dst: DType) -> V:
        return self.b.bitcast(a, self.vector_type(dst))

    def convert(self, a: V, src: DType, dst: DType, exact: bool = False) -> V:
        if src.is_floating_point and dst in (D.int32, D.int64) and exact:
            return self.b.fptosi(a, self.vector_type(dst))
        if dst.is_floating_point and src in (D.int32, D.int64):
            return self.b.sitofp(a, self.vector_type(dst))
        raise NotImplementedError(f"VectorEmitter: convert {src.name} -> {dst.name}")

    def ldexp(self, a: V, k: V, dt: DType) -> V | None:
        return None                         # vmath's two exact power-of-two multiplies

    def lrint(self, a: V, dt: DType) -> V | None:
        return None
