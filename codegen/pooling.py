"""Native pooling kernels in LLVM IR. Windowed max and average pools are
``codegen.conv_direct``'s stencil (``Stencil("max" | "avg", ...)``: the same padded,
phase-split scratch and register tiles, a max or a sum in place of the FMA); this module
adds the one pool that is no stencil worth the name, the global one (an adaptive pool to
one output per plane, as a classifier head ends): each plane's elements are contiguous,
so it is one vector reduction per plane.

    void plane_{mode}_{dtype}_x{lanes}(i64 lo, i64 hi, i64 n, T* x, T* out)

reduces planes ``[lo, hi)`` of ``n`` elements each into ``out[plane]``: their mean
(``mode == "mean"``) or their maximum (``"max"``, NaN if any is NaN, as torch's).

The backward of every pool that returns indices is a scatter-add per plane:

    void scatter_add_{dtype}(i64 lo, i64 hi, i64 per, i64 numel, T* g, i64* index,
                             T* out)

zeroes planes ``[lo, hi)`` of ``numel`` elements of ``out`` and adds each of the plane's
``per`` gradients ``g`` at its ``index`` (overlapping windows add up); an index outside
``[0, numel)`` is skipped, as torch's backward does (a window with no tap inside the
input, padding beyond a dilated kernel's first tap, keeps an index past its plane).

An adaptive max pool's windows have no common stride, so it is a scalar loop per window:

    void adaptive_max_{dtype}(i64 lo, i64 hi, i64* p, T* x, T* out, i64* index)

pools planes ``[lo, hi)``; ``p`` holds ``H, W, OH, OW``, then the windows' row starts and
ends (``OH`` each), then their column starts and ends (``OW`` each). The max and its flat
index follow torch's CPU rule (a value replaces the max if greater or NaN, in row-major
order; a window of -inf keeps its first element).

    >>> text = render_plane(Stencil("mean", "f32", 16))
    >>> "llvm.masked.load.v16f32" in text and "@\\"plane_mean_f32_x16\\"(" in text
    True
    >>> "@\\"scatter_add_f64\\"(" in render_scatter("f64")
    True
    >>> "fcmp uno double" in render_adaptive_max("f64")
    True
"""
from __future__ import annotations

from llvmlite import ir

from .conv_direct import ELEMENT_TYPES, Stencil
from .llvm_emit import I32, I64, PTR, for_range
from .microkernel import ZERO, c64, carried_loop, intrinsic, splat

ACCUMULATORS = 4          # independent vector sums: an add's latency hidden 4 times over
PLANE_MODES = ("mean", "max")


def plane_name(spec: Stencil) -> str:
    """The exported function's name for ``spec``."""
    return f"plane_{spec.mode}_{spec.dtype}_x{spec.lanes}"


def render_plane(spec: Stencil) -> str:
    """LLVM IR text of the plane reduction for ``spec`` (see the module docstring)."""
    if spec.mode not in PLANE_MODES:
        raise ValueError(f"pooling.render_plane: unknown mode {spec.mode!r}")
    module = ir.Module(name=plane_name(spec))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, I64, PTR, PTR]),
                     name=plane_name(spec))
    fn.attributes.add("nounwind")
    _PlaneBody(fn, spec).build()
    return str(module)


class _PlaneBody:
    def __init__(self, fn: ir.Function, spec: Stencil) -> None:
        self.fn, self.spec = fn, spec
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.start = float("-inf") if spec.mode == "max" else 0.0

    def at(self, ptr: ir.Value, offset: ir.Value) -> ir.Value:
        return self.b.gep(ptr, [offset], source_etype=self.spec.elem)

    def combine(self, acc: ir.Value, x: ir.Value) -> ir.Value:
        if self.spec.mode == "max":
            return intrinsic(self.b, f"llvm.maximum.{self.spec.suffix}", self.spec.vec,
                             [acc, x])
        return self.b.fadd(acc, x)

    def build(self) -> None:
        b, spec, L = self.b, self.spec, self.spec.lanes
        lo, hi, n, x, out = self.fn.args
        init = ir.Constant(spec.vec, [self.start] * L)
        with for_range(b, lo, hi, name="plane", vectorize=False) as plane:
            src = self.at(x, b.mul(plane, n))

            def block(j: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
                return [self.combine(acc, b.load(self.at(src, b.add(j, c64(k * L))),
                                                 typ=spec.vec, align=1))
                        for k, acc in enumerate(accs)]
            whole = b.sub(n, c64(ACCUMULATORS * L - 1))
            j, accs = carried_loop(b, ZERO, whole, ACCUMULATORS * L, [init] * ACCUMULATORS,
                                   block, "blk")
            one = b.sub(n, c64(L - 1))
            j, (acc,) = carried_loop(b, j, one, L, [self._tree(accs)],
                                     lambda k, a: block(k, a[:1]), "vec")
            acc = self.combine(acc, self._tail(self.at(src, j), b.sub(n, j)))
            value = self._lanes(acc)
            if spec.mode == "mean":
                value = b.fdiv(value, b.sitofp(n, spec.elem))
            b.store(value, self.at(out, plane))
        b.ret_void()

    def _tree(self, vals: list[ir.Value]) -> ir.Value:
        while len(vals) > 1:
            vals = [self.combine(vals[i], vals[i + 1]) for i in range(0, len(vals), 2)]
        return vals[0]

    def _tail(self, ptr: ir.Value, count: ir.Value) -> ir.Value:
        """The last ``count < lanes`` elements as a vector, the reduction's identity after."""
        b, spec, L = self.b, self.spec, self.spec.lanes
        ivec = ir.VectorType(I64, L)
        mask = b.icmp_signed("<", ir.Constant(ivec, list(range(L))), splat(b, count, ivec))
        return intrinsic(b, f"llvm.masked.load.{spec.suffix}.p0", spec.vec,
                         [ptr, ir.Constant(I32, 1), mask,
                          ir.Constant(spec.vec, [self.start] * L)])

    def _lanes(self, v: ir.Value) -> ir.Value:
        """The lanes of ``v`` combined: halves folded onto each other."""
        b, n = self.b, self.spec.lanes
        while n > 1:
            n //= 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, n), list(range(n))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, n),
                                                    list(range(n, 2 * n))))
            if self.spec.mode == "max":
                v = intrinsic(b, f"llvm.maximum.v{n}{self.spec.dtype}",
                              ir.VectorType(self.spec.elem, n), [lo, hi])
            else:
                v = b.fadd(lo, hi)
        return b.extract_element(v, ir.Constant(I32, 0))



def scatter_name(dtype: str) -> str:
    """The exported scatter-add's name for ``dtype`` (``f32`` or ``f64``)."""
    return f"scatter_add_{dtype}"


def render_scatter(dtype: str) -> str:
    """LLVM IR text of the per-plane scatter-add (see the module docstring)."""
    elem = ELEMENT_TYPES[dtype]
    module = ir.Module(name=scatter_name(dtype))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64] * 4 + [PTR] * 3),
                     name=scatter_name(dtype))
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lo, hi, per, numel, g, index, out = fn.args
    with for_range(b, lo, hi, name="plane", vectorize=False) as plane:
        dst = b.gep(out, [b.mul(plane, numel)], source_etype=elem)
        with for_range(b, ZERO, numel, name="zero") as j:      # a memset, in cache after
            b.store(ir.Constant(elem, 0.0), b.gep(dst, [j], source_etype=elem))
        first = b.mul(plane, per)
        with for_range(b, ZERO, per, name="k", vectorize=False) as k:
            i = b.load(b.gep(index, [b.add(first, k)], source_etype=I64), typ=I64)
            with b.if_then(b.icmp_unsigned("<", i, numel)):
                where = b.gep(dst, [i], source_etype=elem)
                grad = b.load(b.gep(g, [b.add(first, k)], source_etype=elem), typ=elem)
                b.store(b.fadd(b.load(where, typ=elem), grad), where)
    b.ret_void()
    return str(module)


def adaptive_max_name(dtype: str) -> str:
    """The exported adaptive max pool's name for ``dtype`` (``f32`` or ``f64``)."""
    return f"adaptive_max_{dtype}"


def render_adaptive_max(dtype: str) -> str:
    """LLVM IR text of the adaptive max pool (see the module docstring)."""
    elem = ELEMENT_TYPES[dtype]
    module = ir.Module(name=adaptive_max_name(dtype))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] + [PTR] * 4),
                     name=adaptive_max_name(dtype))
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lo, hi, params, x, out, index = fn.args

    def param(i: ir.Value | int) -> ir.Value:
        return b.load(b.gep(params, [c64(i) if isinstance(i, int) else i], source_etype=I64),
                      typ=I64)
    h, w, oh, ow = (param(i) for i in range(4))
    plane_out = b.mul(oh, ow)
    with for_range(b, lo, hi, name="plane", vectorize=False) as plane:
        src = b.gep(x, [b.mul(plane, b.mul(h, w))], source_etype=elem)
        first = b.mul(plane, plane_out)
        with for_range(b, ZERO, oh, name="oh", vectorize=False) as i:
            rows = param(b.add(c64(4), i)), param(b.add(b.add(c64(4), oh), i))
            with for_range(b, ZERO, ow, name="ow", vectorize=False) as j:
                cols_at = b.add(c64(4), b.mul(oh, c64(2)))
                cols = param(b.add(cols_at, j)), param(b.add(b.add(cols_at, ow), j))
                best, at = _window_max(b, elem, src, w, rows, cols)
                k = b.add(first, b.add(b.mul(i, ow), j))
                b.store(best, b.gep(out, [k], source_etype=elem))
                b.store(at, b.gep(index, [k], source_etype=I64))
    b.ret_void()
    return str(module)


def _window_max(b: ir.IRBuilder, elem: ir.Type, src: ir.Value, w: ir.Value,
                rows: tuple[ir.Value, ir.Value],
                cols: tuple[ir.Value, ir.Value]) -> tuple[ir.Value, ir.Value]:
    """The max of ``src[rows, cols]`` (a row-major plane of width ``w``) and its flat index."""
    init = [ir.Constant(elem, float("-inf")), b.add(b.mul(rows[0], w), cols[0])]

    def row(r: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        line = b.mul(r, w)

        def col(c: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            at = b.add(line, c)
            v = b.load(b.gep(src, [at], source_etype=elem), typ=elem)
            wins = b.or_(b.fcmp_ordered(">", v, acc[0]), b.fcmp_unordered("uno", v, v))
            return [b.select(wins, v, acc[0]), b.select(wins, at, acc[1])]
        return carried_loop(b, cols[0], cols[1], 1, acc, col, "col")[1]
    return tuple(carried_loop(b, rows[0], rows[1], 1, init, row, "row")[1])  # type: ignore
