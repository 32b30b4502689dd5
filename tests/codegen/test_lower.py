"""codegen.lower: fusion subgraph -> layout-free KernelSpec -> laid-out spec and meta.

The layout checker decodes ``(spec, meta)`` the way the kernels do (flat output index ->
coalesced multi-index -> element offset per input) and compares every element with NumPy's
own broadcasting of real strided views, on random shapes and strides."""
from __future__ import annotations

import numpy as np
import pytest

from scriptmod.codegen.c_source import CUDA, render_c
from scriptmod.codegen.kernel import KINDS, UNKNOWN, InputSpec, KernelSpec, OpStep
from scriptmod.codegen.llvm_ir import render_llvm
from scriptmod.codegen.lower import (DTYPES, lower_group, plan_layout, static_layout,
                                     supported_on)
from scriptmod.ir import dtypes as D
from scriptmod.ir import parse
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph
from scriptmod.ir.types import TensorType

F32 = D.float32
W1 = '''graph(%x : Float(B, 4), %a : Float(4), %c : Float(B, 4)):
  %m : Float(B, 4) = sm::mul(%x, %a)
  %z : Float(B, 4) = sm::add(%m, %c)
  %y : Float(B, 4) = sm::relu(%z)
  %k : Bool(B, 4) = sm::lt(%z, %x)
  return (%y, %k)
'''


def test_lower_group_keeps_ops_types_and_names_without_a_layout() -> None:
    spec = lower_group(parse(W1))
    assert spec.text() == "\n".join([
        "kernel rank=2",
        "  %0 = input float32:unknown",
        "  %1 = input float32:unknown",
        "  %2 = input float32:unknown",
        "  %3 = float32 mul(%0, %1)",
        "  %4 = float32 add(%3, %2)",
        "  %5 = float32 relu(%4)",
        "  %6 = bool lt(%4, %0)",
        "  return %5:float32, %6:bool"]), spec.text()
    assert spec.in_names == ("x", "a", "c") and not spec.laid_out
    assert [t.shape for t in spec.in_types] == [("B", 4), (4,), ("B", 4)]
    assert [t.dtype for t in spec.out_types] == [D.float32, D.bool_]


def test_scalar_constants_become_immediates_of_the_promoted_dtype() -> None:
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(D.float16, (3,)), "x")
    b.ret(b.op("where", b.op("gt", x, 0.5), b.op("mul", x, 2), 1.5))
    (step_gt, up, step_mul, down, step_where) = lower_group(g).ops
    assert step_gt.args[1].dtype is D.float16 and step_where.args[2].dtype is D.float16
    assert step_where.args[2].value == 1.5
    # mul reads a scalar `other` in float32 (SCALAR_OPMATH), as PyTorch's opmath kernel: it
    # computes in float32 between two casts, its immediate float32
    assert (up.op, up.dtype, down.op, down.dtype) == ("cast", F32, "cast", D.float16)
    assert step_mul.dtype is F32 and (step_mul.args[1].value, step_mul.args[1].dtype) == (2, F32)


def test_a_python_int_takes_the_float_dtype_an_int_op_computes_in() -> None:
    """uint8 / -1 computes in float32, so -1 is float32(-1), not uint8(255); the
    comparison and the add stay in uint8 (PyTorch wraps -1 to 255 there)."""
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(D.uint8, (3,)), "x")
    b.ret(b.op("div", x, -1), b.op("atan2", x, 2**40), b.op("eq", x, -1), b.op("add", x, 256))
    div, atan2, eq, add = lower_group(g).ops
    assert (div.args[1].dtype, div.args[1].value, div.dtype) == (F32, -1, F32)
    assert atan2.args[1].dtype is F32
    assert eq.args[1].dtype is D.uint8 and add.args[1].dtype is D.uint8


@pytest.mark.parametrize("text,match", [
    ('''graph(%x : Float(4)):
  return (%x)
''', "computed by the group"),
    ('''graph(%x : Float(4), %y : Float(3)):
  %a : Float(4) = sm::neg(%x)
  %b : Float(3) = sm::neg(%y)
  return (%a, %b)
''', "outputs of different shapes"),
    ('''graph(%x : Tensor):
  %a : Tensor = sm::neg(%x)
  return (%a)
''', "known tensor dtype"),
])
def test_what_cannot_be_lowered_is_named(text: str, match: str) -> None:
    with pytest.raises(NotImplementedError, match=match):
        lower_group(parse(text))


def test_spec_without_layout_is_refused_by_renderers_and_layout_keeps_types() -> None:
    spec = lower_group(parse(W1))
    with pytest.raises(ValueError, match="input 0 has no layout"):
        render_c(spec, CUDA)
    with pytest.raises(ValueError, match="input 0 has no layout"):
        render_llvm(spec)
    laid, _ = static_layout(spec)
    assert laid.laid_out and laid.in_types == spec.in_types and laid.ops == spec.ops
    assert laid.key() == KernelSpec(laid.inputs, laid.ops, laid.outputs, laid.out_dtypes,
                                    laid.rank).key()          # types are not in the key
    with pytest.raises(ValueError, match="dtypes"):
        spec.with_layout([InputSpec(D.float64)] * 3, 1)
    with pytest.raises(ValueError, match="in_names needs 1"):
        KernelSpec([InputSpec(F32)], [OpStep("neg", (0,), {}, F32)], [1], [F32],
                   in_names=("a", "b"))


def test_static_layout_of_symbolic_dims() -> None:
    laid, meta = static_layout(lower_group(parse(W1)))
    assert [s.kind for s in laid.inputs] == ["contiguous", "strided", "contiguous"]
    assert laid.rank == 2 and meta == (2, 4, 0, 1)


def test_plan_layout_refuses_shapes_that_do_not_broadcast() -> None:
    spec = lower_group(parse(W1))
    with pytest.raises(ValueError, match="cannot broadcast"):
        plan_layout(spec, [(2, 4), (3,), (2, 4)], [(4, 1), (1,), (4, 1)], (2, 4))
    with pytest.raises(ValueError, match="expected 3 shapes"):
        plan_layout(spec, [(2, 4)], [(4, 1)], (2, 4))


def test_supported_on_follows_formulas_devices_and_dtypes() -> None:
    g = parse('''graph(%x : Float(4), %i : Int(4)):
  %e : Float(4) = sm::exp(%x)
  %q : Int(4) = sm::floor_divide(%i, %i)
  %m : Float(4) = sm::matmul(%x, %x)
  return (%e, %q, %m)
''')
    exp, div, mm = g.nodes
    cpu = lambda d: d == "cpu"   # noqa: E731
    assert supported_on(exp, cpu) and not supported_on(exp, lambda d: d.startswith("cuda"))
    assert not supported_on(div, cpu)               # integer division could raise
    assert not supported_on(mm, cpu)                # no scalar formula
    assert D.float32 in DTYPES and D.bfloat16 in DTYPES


# ---- the layout checker -------------------------------------------------------------------

def decode(spec: KernelSpec, meta: tuple[int, ...], numel: int) -> list[list[int]]:
    """Per input, the element offset the kernel reads at each flat output index."""
    r = spec.rank
    shape = meta[:r] if spec.strided else None
    strided = {i: meta[r * (1 + k): r * (2 + k)] for k, i in enumerate(spec.strided)}
    out = []
    for i, s in enumerate(spec.inputs):
        assert s.kind in KINDS and s.kind != UNKNOWN
        if s.kind == "scalar":
            out.append([0] * numel)
        elif s.kind == "contiguous":
            out.append(list(range(numel)))
        else:
            assert shape is not None and int(np.prod(shape)) == numel
            st = strided[i]
            assert s.inner is None or s.inner == st[-1]
            out.append([sum(d * t for d, t in zip(np.unravel_index(f, shape), st))
                        for f in range(numel)])
    return out


BASE = np.arange(1 << 14, dtype=np.float32)     # BASE[k] == k: a value is its own offset
MID = 1 << 13


def _random_views(rng: np.random.Generator) -> list[np.ndarray]:
    """1-3 views of BASE around MID: random shapes (broadcastable to one output, some dims 1,
    some missing), random positive/negative/zero element strides, some made contiguous."""
    rank = int(rng.integers(0, 5))
    out_shape = [int(n) for n in rng.integers(1, 5, rank)]
    views = []
    for _ in range(int(rng.integers(1, 4))):
        shape = [1 if rng.random() < 0.3 else n for n in out_shape[int(rng.integers(0, rank + 1)):]]
        steps = [int(rng.choice([-3, -2, -1, 0, 1, 2, 3])) * 7 ** k for k in range(len(shape))]
        view = np.lib.stride_tricks.as_strided(BASE[MID:], shape, [4 * s for s in steps])
        if rng.random() < 0.3:                       # a copy: contiguous, elsewhere in memory
            view = np.ascontiguousarray(view)
            view = np.lib.stride_tricks.as_strided(BASE[MID:], view.shape, view.strides)
        views.append(view)
    return views


@pytest.mark.parametrize("seed", range(60))
def test_layout_checker_on_random_shapes_and_strides(seed: int) -> None:
    """Every element the laid-out kernel would read is the one NumPy broadcasting reads."""
    views = _random_views(np.random.default_rng(seed))
    sub = Graph()
    b = Builder(sub)
    ins = [b.input(TensorType(F32, v.shape), f"in{i}") for i, v in enumerate(views)]
    acc = b.op("neg", ins[0])
    for v in ins[1:]:
        acc = b.op("add", acc, v)
    b.ret(acc)
    out_shape = tuple(np.broadcast_shapes(*[v.shape for v in views]))
    spec, meta = plan_layout(lower_group(sub), [v.shape for v in views],
                             [[s // v.itemsize for s in v.strides] for v in views], out_shape)
    numel = int(np.prod(out_shape))
    assert spec.rank >= 1 and len(meta) == (spec.rank * (1 + len(spec.strided))
                                            if spec.strided else 0)
    for view, offsets, s in zip(views, decode(spec, meta, numel), spec.inputs):
        start = int(view[(0,) * view.ndim])          # the kernel's pointer: element 0
        want = np.broadcast_to(view, out_shape).reshape(-1).astype(np.int64)
        got = np.array([start + o for o in offsets], np.int64)
        np.testing.assert_array_equal(got, want, err_msg=f"{s.text()} meta={meta}")
