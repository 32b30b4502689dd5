"""Row kernels: "reduce along the trailing dims, then an elementwise map that uses the
reduced values", as one ``KernelSpec`` with ``cols > 0`` (see ``codegen.kernel``).

``ROW_OPS`` is the one table: per op, how it expands into three primitive reductions
(``row_sum``, ``row_max``, ``row_min``) and elementwise steps that ``codegen.formulas``
already knows (which trailing dims it reduces is ``ir.passes.fuse_rows.row_geometry``)::

    softmax(a)    m = row_max(a); e = exp(a - m); y = e * (1 / row_sum(e))
    log_softmax   m = row_max(a); y = a - m - log(row_sum(exp(a - m)))
    logsumexp     m = row_max(a), 0 where infinite; y = log(row_sum(exp(a - m))) + m
    sum / mean    row_sum(a) (times 1/n)
    amax / amin   row_max(a) / row_min(a)          (NaN-propagating, as torch)
    var           d = a - mean(a); row_sum(d * d) / max(0, n - correction)
    vector norm   sqrt(row_sum(a * a)); row_sum(|a|); row_max/min(|a|); row_sum(|a| ** p) ** (1/p)

The ``exp`` of ``a - row_max(a)`` is marked ``at_most_zero`` (its operand is <= 0 or NaN):
``codegen.llvm_rows`` computes it with ``vmath.exp_softmax`` in float32, which needs no
upper clamp and never goes through subnormal intermediates (``exp`` of a masked score's
``-inf`` clamps to -104 and scales through subnormals, ~100x slower per element).
Sums accumulate in float64 (also for float32 and half inputs: a row's error is then one
rounding, below the pairwise summation eager uses); maxima and minima are exact. A variance
of the row's own mean (``var``, a traced ``layer_norm``) is then rewritten to take one pass
(``one_pass_moments``: sums shifted by the row's first element, ``row_first``).

``lower_row_group`` lowers a fusion subgraph holding row ops (``ir.passes.fuse_rows`` makes
them) to a layout-free row spec; ``plan_row_layout`` lays it out for concrete shapes and
strides: the reduced dims merge into one (each input must walk them uniformly), the leading
dims coalesce as in ``codegen.lower.plan_layout``. ``codegen.llvm_rows`` renders it.

    >>> from scriptmod.ir import parse
    >>> sub = parse('''graph(%x : Float(4, 8), %b : Float(8)):
    ...   %a : Float(4, 8) = sm::add(%x, %b)
    ...   %y : Float(4, 8) = sm::softmax[dim=-1](%a)
    ...   return (%y)
    ... ''')
    >>> spec = lower_row_group(sub)
    >>> print(spec.text())
    kernel rank=2 cols=1
      %0 = input float32:unknown
      %1 = input float32:unknown
      %2 = float32 add(%0, %1)
      %3 = float32 row_max(%2)
      %4 = float32 sub(%2, %3)
      %5 = float32 exp(%4, at_most_zero=True)
      %6 = float64 row_sum(%5)
      %7 = float32 cast(%6, dtype=float32)
      %8 = float32 reciprocal(%7)
      %9 = float32 mul(%5, %8)
      return %9:float32
    >>> laid, meta = plan_row_layout(spec, [(4, 8), (8,)], [(8, 1), (1,)], (4, 8))
    >>> [s.text() for s in laid.inputs], meta
    (['float32:contiguous', 'float32:strided:1'], (4, 8, 0, 1))
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType
from scriptmod.ir.graph import Graph, Node, Value
from scriptmod.ir.passes.fuse_rows import row_geometry
from .emitter import compute_dtype
from .kernel import UNKNOWN, Imm, InputSpec, KernelSpec, OpStep, broadcast_strides
from .lower import _coalesce, _dt, _numel, _tensor, classify_inputs, lower_nodes

REDUCE_STEPS = ("row_sum", "row_max", "row_min")   # the primitive per-row reductions
HALF = (D.float16, D.bfloat16)


class _Steps:
    """Appends ``OpStep``s to a spec under construction; values are numbered after the
    ``n_inputs`` inputs."""

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs, self.ops = n_inputs, []    # type: int, list[OpStep]

    def __call__(self, op: str, args: Sequence[int | Imm], dt: DType, **attrs: Any) -> int:
        self.ops.append(OpStep(op, tuple(args), attrs, dt))
        return self.n_inputs + len(self.ops) - 1


def _sum(s: _Steps, a: int, dt: DType) -> int:
    """``row_sum(a)`` accumulated in float64, as ``dt``."""
    total = s("row_sum", (a,), D.float64)
    return total if dt is D.float64 else s("cast", (total,), dt, dtype=dt)


def _count(n: int) -> float:
    """The row length ``n`` as a float (0: a symbolic length, which no formula may hold)."""
    if not n:
        raise NotImplementedError("rows: a mean or variance over a symbolic row length")
    return float(n)


def _mean(s: _Steps, a: int, n: int, dt: DType) -> int:
    _count(n)
    total = s("row_sum", (a,), D.float64)
    mean = s("mul", (total, Imm(1.0 / n, D.float64)), D.float64)
    return mean if dt is D.float64 else s("cast", (mean,), dt, dtype=dt)


def _softmax(s: _Steps, a: int, n: int, dt: DType, attrs: dict) -> int:
    m = s("row_max", (a,), dt)
    e = s("exp", (s("sub", (a, m), dt),), dt, at_most_zero=True)
    return s("mul", (e, s("reciprocal", (_sum(s, e, dt),), dt)), dt)


def _log_softmax(s: _Steps, a: int, n: int, dt: DType, attrs: dict) -> int:
    m = s("row_max", (a,), dt)
    shifted = s("sub", (a, m), dt)
    total = _sum(s, s("exp", (shifted,), dt, at_most_zero=True), dt)
    return s("sub", (shifted, s("log", (total,), dt)), dt)


def _logsumexp(s: _Steps, a: int, n: int, dt: DType, attrs: dict) -> int:
    m = s("row_max", (a,), dt)
    finite = s("where", (s("isinf", (m,), D.bool_), Imm(0.0, dt), m), dt)   # torch's guard
    total = _sum(s, s("exp", (s("sub", (a, finite), dt),), dt), dt)
    return s("add", (s("log", (total,), dt), finite), dt)


def _var(s: _Steps, a: int, n: int, dt: DType, attrs: dict) -> int:
    d = s("sub", (a, _mean(s, a, n, dt)), dt)
    total = s("row_sum", (s("mul", (d, d), dt),), D.float64)
    dof = max(0.0, _count(n) - float(attrs.get("correction", 1)))
    var = s("mul", (total, Imm(1.0 / dof if dof else math.inf, D.float64)), D.float64)
    return var if dt is D.float64 else s("cast", (var,), dt, dtype=dt)


def _vector_norm(s: _Steps, a: int, n: int, dt: DType, attrs: dict) -> int:
    p = float(attrs.get("ord", 2.0))
    if p == 2:        # no abs: a * a is |a| ** 2 for the real inputs a row kernel takes
        return s("sqrt", (_sum(s, s("mul", (a, a), dt), dt),), dt)
    mag = s("abs", (a,), dt)
    if math.isinf(p):
        return s("row_max" if p > 0 else "row_min", (mag,), dt)
    if p == 0:
        nonzero = s("ne", (a, Imm(0.0, dt)), D.bool_)
        return _sum(s, s("where", (nonzero, Imm(1.0, dt), Imm(0.0, dt)), dt), dt)
    if p == 1:
        return _sum(s, mag, dt)
    total = _sum(s, s("pow", (mag, Imm(p, dt)), dt), dt)
    return s("pow", (total, Imm(1.0 / p, dt)), dt)


Expand = Callable[[_Steps, int, int, DType, dict], int]
# op -> its expansion ``(steps, operand, n reduced elements, compute dtype, attrs) -> value``:
# one row per ``ROW``-flagged op of the registry (``tests/test_registry.py`` checks both agree;
# which dims an op reduces is ``ir.passes.fuse_rows.row_geometry``).
ROW_OPS: dict[str, Expand] = {
    "sum": lambda s, a, n, dt, at: _sum(s, a, dt),
    "mean": lambda s, a, n, dt, at: _mean(s, a, n, dt),
    "amax": lambda s, a, n, dt, at: s("row_max", (a,), dt),
    "amin": lambda s, a, n, dt, at: s("row_min", (a,), dt),
    "var": _var,
    "logsumexp": _logsumexp,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "linalg_vector_norm": _vector_norm,
}


def one_pass_moments(in_dtypes: Sequence[DType], ops: Sequence[OpStep],
                     outputs: Sequence[int], n: int) -> tuple[list[OpStep], list[int]]:
    """Variance in the mean's pass. A centred sum of squares ``row_sum((a - m) * (a - m))``
    whose ``m`` is ``a``'s own row mean (``layer_norm``, ``var``) needs the mean first: a
    second pass. Shifting by the row's first element ``k`` gives both sums in one pass,

        t1 = sum(a - k),  t2 = sum((a - k)**2)  ->  sum(a) = t1 + n k,
        sum((a - m)**2) = t2 - 2 (m - k) t1 + n (m - k)**2   (exact, for the m in use),

    the shifted two-moment form (Chan, Golub, LeVeque, 1983): ``a - k`` is exact where ``a``
    and ``k`` are within a factor of 2 (the cancellation the naive ``sum(a**2) - n m**2``
    suffers is gone), and the sums and the correction are float64. Welford's update
    needs a division per element and does not vectorize. Other steps are kept."""
    f64, n_inputs = D.float64, len(in_dtypes)
    if not n:                       # a symbolic row length: no mean to rewrite
        return list(ops), list(outputs)

    def dtype_of(v: int) -> DType:
        return ops[v - n_inputs].dtype if v >= n_inputs else in_dtypes[v]

    def step(v: int) -> OpStep | None:
        return ops[v - n_inputs] if v >= n_inputs else None

    def mean_of(mc: int) -> tuple[int, int] | None:
        """``(row_sum, a)`` when ``mc`` is ``[cast](row_sum(a) * 1/n)``."""
        st = step(mc)
        if st is not None and st.op == "cast":
            st = step(st.args[0]) if not isinstance(st.args[0], Imm) else None
        if st is None or st.op != "mul" or not isinstance(st.args[1], Imm) \
                or isinstance(st.args[0], Imm) or st.args[1].value != 1.0 / n:
            return None
        r1 = step(st.args[0])
        return (st.args[0], r1.args[0]) if r1 is not None and r1.op == "row_sum" else None

    found: dict[int, tuple[int, int, int]] = {}           # r2 -> (r1, a, mc)
    for i, st in enumerate(ops):
        q = step(st.args[0]) if st.op == "row_sum" and not isinstance(st.args[0], Imm) else None
        if q is None or q.op != "mul" or q.args[0] != q.args[1] or isinstance(q.args[0], Imm):
            continue
        d = step(q.args[0])
        if d is None or d.op != "sub" or any(isinstance(x, Imm) for x in d.args):
            continue
        m = mean_of(d.args[1])
        if m is not None and m[1] == d.args[0]:
            found[n_inputs + i] = (m[0], m[1], d.args[1])
    if not found:
        return list(ops), list(outputs)
    by_r1 = {r1: (a, r2) for r2, (r1, a, _) in found.items()}
    out = _Steps(n_inputs)
    remap: dict[int, int] = {}
    shift: dict[int, tuple[int, int, int]] = {}            # r1 -> (t1, t2, k as float64)

    def arg(x: int | Imm) -> int | Imm:
        return x if isinstance(x, Imm) else remap.get(x, x)

    def wide(v: int, dt: DType) -> int:
        return v if dt is f64 else out("cast", (v,), f64, dtype=f64)

    for i, st in enumerate(ops):
        v = n_inputs + i
        if v in by_r1:
            a = remap.get(by_r1[v][0], by_r1[v][0])
            dt = compute_dtype(dtype_of(by_r1[v][0]))
            k = out("row_first", (a,), dt)
            dk = wide(out("sub", (a, k), dt), dt)
            t1 = out("row_sum", (dk,), f64)
            t2 = out("row_sum", (out("mul", (dk, dk), f64),), f64)
            kw = wide(k, dt)
            shift[v] = (t1, t2, kw)
            remap[v] = out("add", (t1, out("mul", (kw, Imm(float(n), f64)), f64)), f64)
        elif v in found and found[v][0] in shift:
            t1, t2, kw = shift[found[v][0]]
            mc = remap.get(found[v][2], found[v][2])
            delta = out("sub", (wide(mc, dtype_of(found[v][2])), kw), f64)
            c = out("sub", (t2, out("mul", (out("mul", (delta, t1), f64), Imm(2.0, f64)), f64)),
                    f64)
            total = out("add", (c, out("mul", (out("mul", (delta, delta), f64),
                                               Imm(float(n), f64)), f64)), f64)
            remap[v] = out("maximum", (total, Imm(0.0, f64)), f64)     # never below 0
        else:
            remap[v] = out(st.op, tuple(arg(x) for x in st.args), st.dtype, **st.attrs)
    return out.ops, [remap.get(o, o) for o in outputs]


def has_row_ops(subgraph: Graph) -> bool:
    """Whether a fusion subgraph holds row ops (it lowers with ``lower_row_group``)."""
    return any(n.is_op and n.op_name in ROW_OPS for n in subgraph.nodes)


def geometry(subgraph: Graph) -> tuple[tuple, int]:
    """``(full shape, reduced trailing dims)`` shared by a group's row ops (the full shape
    may have symbolic leading dims); ``NotImplementedError`` when they disagree."""
    geo = {row_geometry(n) for n in subgraph.nodes if n.is_op and n.op_name in ROW_OPS}
    if None in geo or len(geo) != 1:
        raise NotImplementedError(f"rows: the row ops must reduce the same trailing dims of "
                                  f"one shape, got {sorted(map(str, geo))}")
    (full, k), = geo
    return tuple(full), k


def lower_row_group(subgraph: Graph) -> KernelSpec:
    """The layout-free row spec of a fusion subgraph of elementwise and row ops (``rank``:
    the full shape's rank; ``cols``: the reduced trailing dims, which may be symbolic). Raises
    ``NotImplementedError`` naming what a row kernel cannot compute."""
    full, k = geometry(subgraph)
    reduced = full[len(full) - k:]
    # the row length: built in where concrete; ``row_geometry`` keeps the ops that need it
    # (``COUNTED``) off symbolic dims, the others never read it (the kernel's loops read the
    # length from ``meta``)
    n = _numel(reduced) if all(isinstance(d, int) for d in reduced) else 0
    index: dict[Value, int] = {v: i for i, v in enumerate(subgraph.inputs)}
    steps = _Steps(len(subgraph.inputs))

    def expand(node: Node, index: dict, ops: list) -> int | None:
        if node.op_name not in ROW_OPS:
            return None
        dt = _dt(_tensor(node.output))
        cdt = D.float32 if dt in HALF else dt
        return ROW_OPS[node.op_name](steps, index[node.inputs[0]], n, cdt, dict(node.attrs))
    lower_nodes(subgraph, index, steps.ops, expand, who="rows")
    rows = tuple(full[:len(full) - k])
    per_row = []
    for v in subgraph.outputs:
        shape = tuple(_tensor(v).shape or ())
        if shape == full:
            per_row.append(False)
        elif shape in (rows + (1,) * k, rows):
            per_row.append(True)
        else:
            raise NotImplementedError(f"rows: an output of shape {shape} is neither the row "
                                      f"shape {full} nor reduced")
        if v not in index or index[v] < len(subgraph.inputs):
            raise NotImplementedError("rows: a group output must be computed by the group")
    in_types = [_tensor(v) for v in subgraph.inputs]
    out_types = [_tensor(v) for v in subgraph.outputs]
    names = [v.debug_name or f"input {i}" for i, v in enumerate(subgraph.inputs)]
    ops, outs = one_pass_moments([_dt(t) for t in in_types], steps.ops,
                                 [index[v] for v in subgraph.outputs], n)
    return KernelSpec([InputSpec(_dt(t), UNKNOWN) for t in in_types], ops, outs,
                      [_dt(t) for t in out_types],
                      rank=len(full), in_types=in_types, in_names=names,
                      out_types=out_types, cols=k, per_row=per_row)


def output_shapes(spec: KernelSpec, full: Sequence[int]) -> list[tuple[int, ...]]:
    """Each output's shape for a call whose row ops read ``full``: ``full``, or the reduced
    shape with its kept dims (as the output's type has them) or without."""
    full = tuple(full)
    lead = full[:len(full) - spec.cols]
    return [full if not r else lead + (1,) * spec.cols if len(t.shape or ()) == len(full)
            else lead for r, t in zip(spec.per_row, spec.out_types)]


def reduced_stride(red: Sequence[int], strides: Sequence[int]) -> int | None:
    """The one element stride with which an input walks the reduced dims ``red`` (their
    strides ``strides``, 0 where broadcast), or None when they do not merge into one dim
    (a broadcast inside them, a slice with a step)."""
    dims = [(n, s) for n, s in zip(red, strides) if n != 1]
    if any(s0 != s1 * n1 for (_, s0), (n1, s1) in zip(dims, dims[1:])):
        return None
    return dims[-1][1] if dims else 0


def plan_row_layout(spec: KernelSpec, shapes: Sequence[Sequence[int]],
                    elem_strides: Sequence[Sequence[int]],
                    full: Sequence[int]) -> tuple[KernelSpec, tuple[int, ...]]:
    """``(laid-out spec, meta)`` of a row spec for inputs of ``shapes`` and element strides
    broadcast to the ``full`` shape: rank = coalesced leading dims + 1, the last dim the
    merged reduced dims; ``meta`` always holds the shape. ``NotImplementedError`` when an
    input does not walk the reduced dims uniformly; ``ValueError`` when a shape does not
    broadcast."""
    k = spec.cols
    full = [int(d) for d in full]
    lead, red = full[:len(full) - k], full[len(full) - k:]
    bst = [broadcast_strides(sh, st, full) for sh, st in zip(shapes, elem_strides)]
    scalar = [_numel(sh) == 1 for sh in shapes]
    inner = []
    for i, (st, sc) in enumerate(zip(bst, scalar)):
        step = None if sc else reduced_stride(red, st[len(lead):])
        if not sc and step is None:
            raise NotImplementedError(f"rows: input {i} does not walk the reduced dims "
                                      f"uniformly (strides {st[len(lead):]})")
        inner.append(step or 0)
    keep = [d for d, n in enumerate(lead) if n != 1]
    oshape, ost = _coalesce([lead[d] for d in keep], [[st[d] for d in keep] for st in bst],
                            scalar)
    shape = oshape + [_numel(red)]
    strides = [o + [c] for o, c in zip(ost, inner)]
    inputs, kept = classify_inputs(spec, shape, strides, scalar)
    laid = spec.with_layout(inputs, len(shape), cols=1)
    return laid, tuple(laid.meta(shape, kept))
