"""runtime.fusion / runtime.targets.llvm / codegen.lower: fusion groups lowered to KernelSpecs
and run natively,
against the reference interpreter and the float64 op table (``op_cases``): every fusible op
and dtype, broadcast / 0-d / empty / non-contiguous / negative-stride / zero-stride inputs,
odd sizes and thread-split boundaries, special values, random graphs (hypothesis), guards,
output-buffer reuse, and the kernel cache across processes."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import defaultdict
from typing import Any, Sequence

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import op_cases as OC
from scriptmod.codegen.formulas import FORMULAS
from scriptmod.ir import dtypes as D
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.ir.types import TensorType
from scriptmod.runtime import threads
from op_graphs import compiled, fused_kernel
from scriptmod.codegen.lower import plan_layout
from scriptmod.runtime.fusion import DTYPES, FusedKernel
from scriptmod.runtime.targets.llvm import LLVMTarget

supported = LLVMTarget.can_lower      # what the fusion passes ask for CPU nodes
from scriptmod.runtime.interpreter import Interpreter

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
F32 = D.float32



@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))


@pytest.fixture
def two_threads() -> Any:
    before = threads.get_num_threads()
    threads.set_num_threads(2)
    yield
    threads.set_num_threads(before)


def _dtype_of(a: np.ndarray) -> D.DType:
    return D.bfloat16 if a.dtype == ml_dtypes.bfloat16 else D.BY_NAME[a.dtype.name]


def _ttype(a: np.ndarray) -> TensorType:
    return TensorType(_dtype_of(a), tuple(a.shape))


def group_graph(items: Sequence[tuple[str, Sequence[Any], dict]]) -> tuple[Graph, list]:
    """One graph holding ONE FusionGroup that computes every ``(op, inputs, attrs)`` item
    (arrays become group inputs, Python numbers constants); returns (graph, arrays)."""
    arrays = [x for _, ins, _ in items for x in ins if isinstance(x, np.ndarray)]
    sub = Graph()
    sb = Builder(sub)
    vals = iter([sb.input(_ttype(a), f"in{i}") for i, a in enumerate(arrays)])
    for op, ins, attrs in items:
        args = [next(vals) if isinstance(x, np.ndarray) else x for x in ins]
        sb.ret(sb.op(op, *args, **attrs))
    g = Graph()
    b = Builder(g)
    outer = [b.input(_ttype(a), f"x{i}") for i, a in enumerate(arrays)]
    for v in b.fusion_group(sub, outer):
        g.register_output(v)
    return g, arrays


def run_both(g: Graph, arrays: Sequence[np.ndarray]) -> tuple[list, list]:
    """(fused outputs, reference-interpreter outputs) as lists."""
    fused = compiled(g).run(*arrays)
    ref = Interpreter(g).run(*arrays)
    as_list = lambda r: list(r) if isinstance(r, tuple) else [r]   # noqa: E731
    return as_list(fused), as_list(ref)


# ---- the op table: every fusible op, every dtype it has -----------------------------------------

FUSIBLE = sorted(op for op in OC.CASES if op in FORMULAS)
TABLE_DTYPES = sorted({d for op in FUSIBLE for d in OC.CASES[op].dtypes
                       if D.BY_NAME[d] in DTYPES})


def _table_items(dtype: str, all_samples: bool) -> dict[tuple, list]:
    """Op-table samples of ``dtype`` grouped by output shape (one kernel per group)."""
    groups: dict[tuple, list] = defaultdict(list)
    for op in FUSIBLE:
        case = OC.CASES[op]
        if dtype not in case.dtypes:
            continue
        samples = case.samples(OC.Gen(dtype))
        for s in samples if all_samples else samples[:1]:
            shape = np.broadcast_shapes(*[np.shape(x) for x in s.inputs])
            if any(isinstance(x, np.ndarray) for x in s.inputs) and 0 not in shape:
                groups[shape].append((case, s))
    return groups


@pytest.mark.parametrize("dtype", TABLE_DTYPES)
def test_op_table_fused_matches_reference_and_interpreter(dtype: str) -> None:
    """float32/float64: every sample layout of every op; other dtypes: the first sample."""
    full = dtype in ("float32", "float64")
    for shape, cases in _table_items(dtype, full).items():
        g, arrays = group_graph([(c.op, s.inputs, dict(s.attrs)) for c, s in cases])
        fused, ref = run_both(g, arrays)
        fk = fused_kernel(g.nodes[0])
        assert fk is not None and fk.kernels, "the group did not run natively"
        for (c, s), got, want_interp in zip(cases, fused, ref):
            where = f"{c.op}[{dtype}:{s.label}]"
            (dt,) = OC.expected_dtypes(c.op, s.inputs, s.attrs)
            OC.assert_close(got, OC.reference(c, s)[0], dt, where + " vs float64")
            OC.assert_close(got, want_interp.astype(np.float64) if dt.category == D.FLOAT
                            else want_interp, dt, where + " vs interpreter")


def test_every_fusible_op_is_fused_by_the_pass() -> None:
    """The real pass with the backend's veto fuses each op (float32, first sample)."""
    for op in FUSIBLE:
        case = OC.CASES[op]
        s = case.samples(OC.Gen("float32" if "float32" in case.dtypes else case.dtypes[0]))[0]
        g = Graph()
        b = Builder(g)
        ins = [b.input(_ttype(x), f"x{i}") if isinstance(x, np.ndarray) else x
               for i, x in enumerate(s.inputs)]
        b.ret(b.op(op, *ins, **s.attrs))
        fuse_elementwise(g, supported=supported)
        assert [n.kind for n in g.nodes] == [Prim.FUSION_GROUP], f"{op} was not fused:\n{g}"


# ---- layouts ------------------------------------------------------------------------------------

def _w1_like() -> Graph:
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(F32, ("N", "M")), "x")
    a = b.input(TensorType(F32, ("M",)), "a")
    c = b.input(TensorType(F32, ("N", "M")), "c")
    z = b.op("add", b.op("mul", x, a), 0.5)
    y = b.op("div", z, b.op("add", b.op("exp", b.op("clamp", b.op("mul", z, -1.6), max=80.0)), 1.0))
    b.ret(b.op("add", b.op("where", b.op("gt", c, 0.0), y, c), x))
    fuse_elementwise(g, supported=supported)
    assert [n.kind for n in g.nodes] == [Prim.FUSION_GROUP]
    return g


def _ref(g: Graph, *arrays: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return Interpreter(g).run(*[np.ascontiguousarray(a) for a in arrays])


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 7), (7, 1), (3, 1023), (1, 4097), (5, 4097),
                                       (2, threads.MIN_SPLIT // 2), (1, threads.MIN_SPLIT + 1),
                                       (3, threads.MIN_SPLIT // 3 + 5)])
def test_odd_sizes_and_thread_split(rows: int, cols: int, two_threads: Any) -> None:
    g = _w1_like()
    rng = np.random.default_rng(rows * cols)
    x, c = (rng.standard_normal((rows, cols), np.float32) for _ in range(2))
    a = rng.standard_normal(cols, np.float32)
    got = compiled(g).run(x, a, c)
    np.testing.assert_allclose(got, _ref(g, x, a, c), rtol=2e-6, atol=1e-6)
    threads.set_num_threads(1)
    np.testing.assert_array_equal(compiled(g).run(x, a, c), got)


def test_non_contiguous_negative_and_zero_strides() -> None:
    g = _w1_like()
    rng = np.random.default_rng(1)
    big = rng.standard_normal((64, 130), np.float32)
    a = rng.standard_normal(260, np.float32)
    tall = rng.standard_normal((65, 64), np.float32)
    views = {
        "step": (big[:, ::2], a[::4], big[:, 1::2]),
        "transpose": (tall.T, a[:65], big[:64, :65]),
        "negative": (big[::-1, ::-2], a[::-4], big[:, ::2]),
        "zero-stride": (np.broadcast_to(a[:65], (64, 65)), a[:65], big[:, :65]),
        "row-broadcast": (big[:, :65], a[:65], np.broadcast_to(big[3, :65], (64, 65))),
    }
    fk = fused_kernel(g.nodes[0])
    for name, (x, av, c) in views.items():
        got = compiled(g).run(x, av, c)
        np.testing.assert_allclose(got, _ref(g, x, av, c), rtol=2e-6, atol=1e-6, err_msg=name)
    assert len(fk.kernels) >= 2                  # more than one layout kind was compiled


def test_layout_classification_and_coalescing() -> None:
    g = _w1_like()
    lowered = fused_kernel(g.nodes[0]).lowered
    assert {s.kind for s in lowered.inputs} == {"unknown"} and not lowered.laid_out
    spec, meta = plan_layout(lowered, [(8, 16), (16,), (8, 16)], [[16, 1], [1], [16, 1]],
                             (8, 16))
    assert [(s.kind, s.inner) for s in spec.inputs] == [("contiguous", None), ("strided", 1),
                                                        ("contiguous", None)]
    assert spec.rank == 2 and meta == (8, 16, 0, 1)               # shape, then a's strides
    spec, meta = plan_layout(lowered, [(4, 8, 16), (1,), (4, 8, 16)],
                             [[128, 16, 1], [1], [256, 32, 2]], (4, 8, 16))
    assert [s.kind for s in spec.inputs] == ["contiguous", "scalar", "strided"]
    assert spec.rank == 1 and meta == (512, 2)                    # all dims coalesced
    assert spec.in_names == lowered.in_names and spec.ops == lowered.ops
    spec, meta = plan_layout(lowered, [(8, 16)] * 3, [[16, 1]] * 3, (8, 16))
    assert spec.rank == 1 and meta == ()                          # contiguous: no meta


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "int32", "int64", "uint8"])
def test_dtypes_through_a_chain(dtype: str) -> None:
    g = Graph()
    b = Builder(g)
    dt = D.BY_NAME[dtype]
    x = b.input(TensorType(dt, (5, 33)), "x")
    y = b.input(TensorType(dt, (33,)), "y")
    z = b.op("maximum", b.op("sub", b.op("mul", x, y), 3), b.op("add", x, y))
    b.ret(b.op("mul", z, 2), b.op("lt", z, x))
    fuse_elementwise(g, supported=supported)
    assert sum(n.kind == Prim.FUSION_GROUP for n in g.nodes) == 1
    gen = OC.Gen(dtype)
    xs, ys = gen.arr((5, 33), 0, 9), gen.arr((33,), 0, 9)
    fused, ref = compiled(g).run(xs, ys), Interpreter(g).run(xs, ys)
    for f, r in zip(fused, ref):
        assert f.dtype == r.dtype
        np.testing.assert_allclose(f.astype(np.float64), r.astype(np.float64),
                                   rtol={"float16": 2e-3, "bfloat16": 1.6e-2}.get(dtype, 1e-6))


def test_special_values() -> None:
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38,
                         88.7, -88.7, 1.0, -1.0], np.float32)
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(F32, (13,)), "x")
    outs = [b.op("relu", x), b.op("exp", x), b.op("tanh", x), b.op("sigmoid", x),
            b.op("maximum", x, b.op("neg", x)), b.op("div", x, b.op("mul", x, 2.0)),
            b.op("mul", x, -1.0), b.op("where", b.op("isnan", x), 0.0, x)]
    b.ret(*outs)
    fuse_elementwise(g, supported=supported)
    with np.errstate(all="ignore"):
        fused, ref = run_both(g, [specials])
    for k, (f, r) in enumerate(zip(fused, ref)):
        np.testing.assert_array_equal(np.isnan(f), np.isnan(r), err_msg=f"output {k}")
        np.testing.assert_allclose(f, r, rtol=4e-6, equal_nan=True, err_msg=f"output {k}")
        if k != 0:      # relu(-0.0): codegen gives -0.0, the reference +0.0 (reported)
            np.testing.assert_array_equal(np.signbit(f[r == 0]), np.signbit(r[r == 0]),
                                          err_msg=f"output {k}: sign of zero")


# ---- random elementwise graphs -----------------------------------------------------------------

UNARY = ["neg", "abs", "relu", "exp", "tanh", "sigmoid", "sqrt", "log1p", "erf", "sin"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]


@st.composite
def random_graph(draw: Any) -> tuple[Graph, list[np.ndarray]]:
    cols = draw(st.sampled_from([1, 3, 8, 17]))
    shapes = [(4, cols), (cols,), (4, 1), ()]
    n_in = draw(st.integers(1, 3))
    in_shapes = [(4, cols)] + [draw(st.sampled_from(shapes)) for _ in range(n_in - 1)]
    g = Graph()
    b = Builder(g)
    vals = [b.input(TensorType(F32, s), f"x{i}") for i, s in enumerate(in_shapes)]
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            op = draw(st.sampled_from(UNARY))
            arg = draw(st.sampled_from(vals))
            arg = b.op("abs", arg) if op in ("sqrt", "log1p") else arg
            vals.append(b.op(op, arg))
        else:
            lhs = draw(st.sampled_from(vals))
            rhs = draw(st.sampled_from(vals + [0.5, -2.0]))
            op = draw(st.sampled_from(BINARY))
            if op == "div" and not isinstance(rhs, float):
                # a denominator near 0 magnifies one ulp of exp's result into a sin argument
                # error of 1e-4 (sin((exp(x) + x) / x) at x = -1e-3): not a fusion bug
                rhs = b.op("add", b.op("abs", rhs), 0.5)
            vals.append(b.op(op, lhs, rhs))
    b.ret(vals[-1], vals[len(in_shapes) - 1 + (len(vals) - len(in_shapes)) // 2])
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    return g, [rng.standard_normal(s).astype(np.float32) for s in in_shapes]


@settings(max_examples=12, deadline=None)
@given(random_graph())
def test_random_graphs_fused_match_interpreter(case: tuple[Graph, list[np.ndarray]]) -> None:
    g, arrays = case
    ref = [np.asarray(r) for r in Interpreter(g).run(*arrays)]
    fuse_elementwise(g, supported=supported)
    fused = compiled(g).run(*arrays)
    for f, r in zip(fused, ref):
        np.testing.assert_allclose(f, r, rtol=5e-5, atol=1e-5, equal_nan=True)


# ---- guards ----------------------------------------------------------------------------------

def _small_kernel() -> FusedKernel:
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(F32, ("B", 8)), "x")
    bias = b.input(TensorType(F32, (8,)), "bias")
    b.ret(b.op("relu", b.op("add", x, bias)))
    return FusedKernel(g, name="G")


def test_guards_name_the_argument() -> None:
    fk = _small_kernel()
    x, bias = np.ones((2, 8), np.float32), np.ones(8, np.float32)
    with pytest.raises(TypeError, match=r"argument 'x' \(input 0\).*float32.*got float64"):
        fk([x.astype(np.float64), bias])
    with pytest.raises(ValueError, match=r"argument 'bias' \(input 1\).*shape"):
        fk([x, np.ones(9, np.float32)])
    with pytest.raises(ValueError, match=r"argument 'x' \(input 0\).*shape"):
        fk([np.ones(8, np.float32), bias])
    with pytest.raises(TypeError, match=r"argument 'bias'.*NumPy array on cpu.*list"):
        fk([x, [1.0] * 8])
    with pytest.raises(TypeError, match="expected 2 input"):
        fk([x])
    # a mismatch after a successful call is still caught (the fast path checks the layout key)
    fk([x, bias])
    with pytest.raises(TypeError, match="got float64"):
        fk([x.astype(np.float64), bias])


def test_python_scalars_are_refused_before_native_code() -> None:
    """The launcher trusts its arrays; the guards keep anything else from reaching it."""
    g = Graph()
    b = Builder(g)
    b.ret(b.op("neg", b.input(TensorType(F32, ()), "s")))
    fk = FusedKernel(g, name="G")
    with pytest.raises(TypeError, match=r"argument 's'.*NumPy array on cpu.*builtins.float"):
        fk([1.0])
    assert fk([np.float32(2.0)])[0] == -2.0                   # a NumPy scalar: a 0-d array


def test_new_layouts_get_new_launches_not_wrong_answers() -> None:
    fk = _small_kernel()
    rng = np.random.default_rng(0)
    bias = rng.standard_normal(8).astype(np.float32)
    for x in (rng.standard_normal((3, 8), np.float32), rng.standard_normal((5, 8), np.float32),
              rng.standard_normal((5, 16), np.float32)[:, ::2],
              np.asfortranarray(rng.standard_normal((6, 8), np.float32)),
              np.float32(2.0) * np.ones((1, 8), np.float32)):
        np.testing.assert_allclose(fk([x, bias])[0], np.maximum(x + bias, 0), rtol=1e-6)
    assert len(fk._launches) == 5 and 1 <= len(fk.kernels) <= 3


def test_big_endian_input_is_rejected_even_after_a_hit() -> None:
    fk = _small_kernel()
    x, bias = np.ones((2, 8), np.float32), np.ones(8, np.float32)
    fk([x, bias])
    with pytest.raises(TypeError, match="float32"):
        fk([x.astype(">f4"), bias])


# ---- output buffers -----------------------------------------------------------------------------

def test_output_buffer_reused_only_when_unreferenced() -> None:
    fk = _small_kernel()
    x, bias = np.ones((4, 8), np.float32), np.zeros(8, np.float32)
    out = fk([x, bias])[0]
    addr = out.ctypes.data
    del out
    again = fk([x, bias])[0]
    assert again.ctypes.data == addr                        # nobody held it: reused
    held = again
    view = again[1:]                                        # a view keeps its base alive
    del again
    newer = fk([2 * x, bias])[0]
    assert newer.ctypes.data != addr
    np.testing.assert_array_equal(held, x)                  # the held result is untouched
    del held
    third = fk([3 * x, bias])[0]
    assert third.ctypes.data not in (addr, newer.ctypes.data)
    np.testing.assert_array_equal(view, x[1:])


def test_group_outputs_returned_to_user_stay_valid() -> None:
    g = _w1_like()
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((4, 9), np.float32), rng.standard_normal(9, np.float32),
            rng.standard_normal((4, 9), np.float32)]
    results = [compiled(g).run(*[a * k for a in args]) for k in (1.0, 2.0, 3.0)]
    for k, r in zip((1.0, 2.0, 3.0), results):
        np.testing.assert_allclose(r, _ref(g, *[a * k for a in args]), rtol=2e-6, atol=1e-6)


# ---- inspection ---------------------------------------------------------------------------------

def test_llvm_ir_and_asm_of_each_group() -> None:
    g = _w1_like()
    (fk,) = compiled(g).kernels()
    assert "define void" in fk.llvm_ir and fk.kernel.name in fk.llvm_ir
    assert fk.kernel.name in fk.asm
    assert fk.spec.rank >= 1


# ---- the disk cache across processes ---------------------------------------------------------

_CHILD = textwrap.dedent("""
    import sys, json
    sys.path.insert(0, {root!r})
    import numpy as np
    import scriptmod as sm, scriptmod.jit
    from scriptmod import nn
    from scriptmod.runtime import llvm_jit
    sm.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(approximate="tanh"), nn.Linear(32, 16))
    x = sm.randn(4, 16)
    t = sm.jit.trace(m, x)
    with sm.no_grad():
        ys = [t(x).numpy().copy() for _ in range(2)]
        e = m(x).numpy()
    assert np.allclose(ys[0], e, rtol=1e-5, atol=1e-6) and np.array_equal(ys[0], ys[1])
    print(json.dumps(llvm_jit.CACHE.stats()))
""")


def _child(cache: str) -> dict:
    env = dict(os.environ, SCRIPTMOD_CACHE_DIR=cache)
    env.pop("SCRIPTMOD_DISABLE_FUSION", None)
    r = subprocess.run([sys.executable, "-c", _CHILD.format(root=ROOT)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing_and_corrupt_entries_are_rebuilt(tmp_path: Any) -> None:
    cache = str(tmp_path / "cache")
    first = _child(cache)
    assert first["compiles"] >= 1          # fusion kernels, or one whole-graph native program
    second = _child(cache)
    assert second["compiles"] == 0 and second["disk_hits"] == first["compiles"]
    files = list((tmp_path / "cache" / "kernels").glob("*.smko"))
    assert len(files) == first["compiles"]
    data = bytearray(files[0].read_bytes())
    data[-10] ^= 0xFF
    files[0].write_bytes(bytes(data))
    third = _child(cache)
    assert third["corrupt"] == 1 and third["compiles"] == 1
    assert _child(cache)["compiles"] == 0


# ---- edges: empty tensors, loops, threads, pool cap, error mapping ---------------------------

def test_empty_tensors_allocate_without_a_launch() -> None:
    fk = _small_kernel()
    out = fk([np.ones((0, 8), np.float32), np.ones(8, np.float32)])[0]
    assert out.shape == (0, 8) and out.dtype == np.float32 and not fk.kernels


def test_group_inside_a_loop_runs_natively_and_keeps_carried_values() -> None:
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(F32, (4, 8)), "x")
    (y,) = b.loop(3, [x], lambda i, acc: [b.op("add", b.op("mul", acc, 2.0), x)])
    b.ret(y)
    fuse_elementwise(g, supported=supported)
    assert sum(n.kind == Prim.FUSION_GROUP for n in g.walk()) == 1
    xs = np.arange(32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_array_equal(compiled(g).run(xs), 15 * xs)
    assert compiled(g).kernels()[0].kernels


def test_concurrent_callers_of_one_group() -> None:
    from concurrent.futures import ThreadPoolExecutor
    fk = _small_kernel()
    bias = np.zeros(8, np.float32)
    xs = [np.full((64, 8), float(k), np.float32) for k in range(64)]

    def call(x: np.ndarray) -> bool:
        return all(np.array_equal(fk([x, bias])[0], x) for _ in range(20))
    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(call, xs))


def test_pool_cap_disables_pooling(monkeypatch: pytest.MonkeyPatch) -> None:
    import scriptmod.runtime.fusion as F
    monkeypatch.setattr(F, "POOL_BYTES", 0)
    fk = _small_kernel()
    x, bias = np.ones((4, 8), np.float32), np.zeros(8, np.float32)
    before = F.pooled_bytes()
    assert np.array_equal(fk([x, bias])[0], x) and F.pooled_bytes() == before


def test_failing_node_is_named_in_the_error() -> None:
    from scriptmod.runtime.interpreter import InterpreterError
    g = Graph()
    b = Builder(g, source="model.py:12")
    x = b.input(TensorType(F32, ("N", "K")), "x")
    w = b.input(TensorType(F32, ("K", "M")), "w")
    b.ret(b.op("relu", b.op("matmul", x, w)))
    fuse_elementwise(g, supported=supported)
    with pytest.raises(InterpreterError, match=r"^matmul at model.py:12: shapes \(2, 3\)"):
        compiled(g).run(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
