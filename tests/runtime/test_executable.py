"""runtime.executable.Executable: the native entry (runtime.native segments) against the
reference interpreter and float64 references, on the op table (views, matmul, elementwise
ops, many samples packed in one program) and on random graphs (``native_graphs``); results
kept by the caller never alias the arena; threads share one Executable; traced models
(W4- and W5-like) through ``scriptmod.jit`` at the traced and another batch, with and
without grad; ``SCRIPTMOD_LOG=codegen`` says which node split a segment and why."""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np
import pytest

import op_cases as OC
import op_cases_views
from native_graphs import compiled, native_node_count, new_inputs, random_graph, SEEDS
from scriptmod.codegen.formulas import FORMULAS
from scriptmod.ir import dtypes as D
from scriptmod.ir import parse
from scriptmod.ir import schema as S
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.ir.types import TensorType
from scriptmod.runtime.arrays import from_np_dtype
from scriptmod.runtime.executable import Executable
from scriptmod.runtime.interpreter import Interpreter

RTOL, ATOL = 2e-4, 2e-5                     # float32 native against a float64 reference


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))


def as_list(r: Any) -> list:
    return list(r) if isinstance(r, (tuple, list)) else [r]


def poison(ex: Executable) -> None:
    """Fill this thread's arena with 0xFF bytes (NaN in every float): a read of an
    intermediate before it is written shows in the results."""
    if ex.plan is not None:
        ex.frame().arena[:] = 0xFF


# ---- the op table, packed: one program per (kind, dtype) ----------------------------------------

VIEWS = sorted(op for op in OC.CASES if S.REGISTRY[op].has(S.VIEW) and op != "copy_"
               and op not in op_cases_views.COMPLEX_VIEWS)
FUSIBLE = sorted(op for op in OC.CASES if op in FORMULAS)


def _ttype(a: np.ndarray) -> TensorType:
    return TensorType(from_np_dtype(a.dtype), tuple(int(d) for d in a.shape))


def packed(samples: Sequence[tuple[OC.OpCase, OC.Sample]], then: str | None
           ) -> tuple[Graph, list[np.ndarray]]:
    """One graph computing every sample (``then``: an elementwise op applied to each result
    with 2, so that a view's result is read by native code); returns (graph, arrays)."""
    g = Graph()
    b = Builder(g)
    arrays: list[np.ndarray] = []
    outs = []
    for c, s in samples:
        args = []
        for x in s.inputs:
            if isinstance(x, np.ndarray):
                args.append(b.input(_ttype(x), f"x{len(arrays)}"))
                arrays.append(x)
            else:
                args.append(x)
        y = b.op(c.op, *args, **s.attrs)
        outs.append(b.op(then, y, 2) if then else y)
    b.ret(*outs)
    return g, arrays


def _check_packed(samples: list, then: str | None, dtype: str) -> Executable:
    g, arrays = packed(samples, then)
    ex = Executable(fuse_elementwise(g))
    poison(ex)
    got = ex(arrays)
    assert len(got) == len(samples)
    for (c, s), out in zip(samples, got):
        want = OC.reference(c, s)[0]
        if then == "mul":
            want = want * 2
        (dt,) = OC.expected_dtypes(c.op, s.inputs, s.attrs)
        OC.assert_close(out, want, dt, f"{c.op}[{dtype}:{s.label}] native")
    return ex


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_op_table_views_read_natively(dtype: str) -> None:
    """Every view sample, its result read by a native kernel (x2): the kernel gets the
    view's offset and strides over the input, with no copy."""
    samples = [(OC.CASES[op], s) for op in VIEWS if dtype in OC.CASES[op].dtypes
               for s in OC.CASES[op].samples(OC.Gen(dtype))]
    ex = _check_packed(samples, "mul", dtype)
    groups = [n for n in ex.graph.nodes if n.kind == Prim.FUSION_GROUP]
    views = [n for n in ex.graph.nodes if n.is_op and n.op_name in VIEWS]
    assert groups and all(n in ex.plan.native_nodes for n in groups + views), \
        [n for n in groups + views if n not in ex.plan.native_nodes]
    assert len(ex.segments) == 1                  # nothing in between needs Python


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_op_table_matmul_natively(dtype: str) -> None:
    case = OC.CASES["matmul"]
    samples = [(case, s) for s in case.samples(OC.Gen(dtype))]
    ex = _check_packed(samples, None, dtype)
    native = {s.label for (c, s), n in zip(samples, [n for n in ex.graph.nodes if n.is_op])
              if n in ex.plan.native_nodes}
    assert {"mm", "vec-mat", "mat-vec", "dot", "batch", "noncontig"} <= native, native


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_op_table_elementwise_in_one_native_program(dtype: str) -> None:
    """Every sample of every fusible op as its own kernel step of ONE native segment."""
    samples = [(OC.CASES[op], s) for op in FUSIBLE if dtype in OC.CASES[op].dtypes
               for s in OC.CASES[op].samples(OC.Gen(dtype))
               if any(isinstance(x, np.ndarray) for x in s.inputs)]
    ex = _check_packed(samples, None, dtype)
    assert len(ex.segments) == 1 and native_node_count(ex) >= len(FUSIBLE) // 2


# ---- a strided left operand of a matmul with a 2D right one -------------------------------------

@pytest.mark.parametrize("shape,perm", [((4, 6, 8), (1, 0, 2)), ((4, 6, 8), (0, 1, 2)),
                                        ((3, 4, 5, 8), (2, 0, 1, 3)), ((3, 4, 5, 8), (1, 2, 0, 3)),
                                        ((3, 4, 5, 8), (1, 0, 2, 3)), ((3, 4, 5, 8), (0, 2, 1, 3)),
                                        ((2, 1, 6, 8), (2, 1, 0, 3)), ((5, 8), (1, 0)),
                                        ((0, 3, 8), (1, 0, 2))])
def test_matmul_of_a_permuted_operand_is_the_fewest_gemms(shape: tuple, perm: tuple) -> None:
    """``x.permute(perm) @ w``: rows of the permuted operand map one to one to rows of the
    result, so the GEMM takes the longest run of rows that share a stride in both, and the
    other dims as its batch (attention's ``(T, B, C)`` projections: B GEMMs of T rows,
    not T GEMMs of B rows); results equal NumPy's. Three runs need two batch strides, which
    a GEMM step does not have: that matmul runs in Python (and is right there too)."""
    out = tuple(shape[p] for p in perm)
    k = out[-1]
    dims = ", ".join(map(str, shape))
    odims = ", ".join(map(str, out))
    ydims = ", ".join(map(str, out[:-1] + (7,)))
    g = parse(f'''graph(%x : Float({dims}), %w : Float({k}, 7)):
      %p : Float({odims}) = sm::permute[dims={list(perm)}](%x)
      %y : Float({ydims}) = sm::matmul(%p, %w)
      %r : Float({ydims}) = sm::relu(%y)
      return (%r)
    ''')
    ex = Executable(fuse_elementwise(g))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((k, 7)).astype(np.float32)
    np.testing.assert_allclose(ex.run(x, w), np.maximum(x.transpose(perm) @ w, 0), 1e-5, 1e-5)
    runs, run = [], 1                    # maximal runs of result dims contiguous in ``x``
    for i, n in enumerate(out[:-1]):
        run *= n
        if not (i + 2 < len(out) and perm[i + 1] == perm[i] + 1):
            runs.append(run)
            run = 1
    runs = [r for r in runs if r != 1]
    matmul = next(n for n in ex.graph.nodes if n.is_op and n.op_name == "matmul")
    assert (matmul in ex.plan.native_nodes) == (len(runs) <= 2 or 0 in out), ex.graph
    if 0 in out or len(runs) > 2:
        return                                # nothing to compute, or Python's matmul
    gemm = next(s for s in ex.segments[0].program.steps if type(s).__name__ == "GemmStep")
    rows = [n for n in out[:-1] if n != 1]
    assert gemm.m == max(runs, default=1), (gemm, runs)
    assert gemm.m * gemm.batch == int(np.prod(rows, dtype=np.int64)), gemm


def test_attention_input_projection_is_batch_gemms_of_the_sequence() -> None:
    """W5's shape: ``x.transpose(0, 1) @ w.t()`` of a (B, T, C) = (8, 128, 256) input is
    8 GEMMs of 128 rows."""
    g = fuse_elementwise(parse('''graph(%x : Float(8, 128, 256), %w : Float(256, 256)):
      %t : Float(128, 8, 256) = sm::transpose[dim0=0, dim1=1](%x)
      %wt : Float(256, 256) = sm::transpose[dim0=0, dim1=1](%w)
      %y : Float(128, 8, 256) = sm::matmul(%t, %wt)
      return (%y)
    '''))
    ex = Executable(g)
    gemm, = [s for s in ex.segments[0].program.steps if type(s).__name__ == "GemmStep"]
    assert (gemm.batch, gemm.m, gemm.ldc, gemm.stride_a, gemm.stride_c) == \
        (8, 128, 2048, 128 * 256, 256), gemm


# ---- random graphs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_random_graph_matches_float64_reference_and_keeps_results(seed: int) -> None:
    """Random matmul/view/elementwise/softmax-sum-mean graphs: float32 native results equal
    the float64 reference interpreter's (arena poisoned first); a second call with other
    inputs is right too and leaves the first call's results unchanged; no result shares
    memory with the arena."""
    ex, arrays, want, g = compiled(seed)
    assert ex.segments, f"nothing ran natively:\n{ex.graph}"
    poison(ex)
    first = ex(arrays)
    kept = [np.array(o, copy=True) for o in first]
    for k, (got, w) in enumerate(zip(first, want)):
        assert got.dtype == np.float32 and got.shape == w.shape, k
        np.testing.assert_allclose(got, w, RTOL, ATOL, err_msg=f"output {k}\n{ex.graph}")
    for k, (got, w) in enumerate(zip(first, as_list(Interpreter(g).run(*arrays)))):
        np.testing.assert_allclose(got, w, RTOL, ATOL, err_msg=f"output {k} vs float32 interp")
    other = new_inputs(arrays, seed)
    second = ex(other)
    want2 = as_list(Interpreter(random_graph(seed, np.float64)[0]).run(
        *[a.astype(np.float64) for a in other]))
    for k, (got, w) in enumerate(zip(second, want2)):
        np.testing.assert_allclose(got, w, RTOL * 10, ATOL * 10, err_msg=f"2nd call output {k}")
    for k, (a, b) in enumerate(zip(first, kept)):
        np.testing.assert_array_equal(a, b, err_msg=f"output {k} of the 1st call changed")
    arena = ex.frame().arena
    for k, o in enumerate(first + second):
        assert not np.shares_memory(o, arena), f"output {k} aliases the arena"


def test_random_graphs_run_natively_in_bulk() -> None:
    """The suite cannot pass vacuously: most random nodes that can be native are."""
    exs = [compiled(s)[0] for s in SEEDS]
    assert all(ex.segments for ex in exs)
    assert sum(native_node_count(ex) for ex in exs) >= 4 * len(exs)
    assert sum(len(ex.segments) > 1 for ex in exs) >= 5          # Python splits segments


def test_native_off_gives_the_same_results() -> None:
    for seed in (0, 2, 4):
        ex, arrays, want, g = compiled(seed)
        plain = Executable(ex.graph, native=False)
        assert plain.plan is None and not plain.segments
        for a, b in zip(plain(arrays), ex(arrays)):
            np.testing.assert_allclose(a, b, 1e-5, 1e-6)


def test_segment_import_outlives_its_last_python_use() -> None:
    """The Python program keeps ``x`` until the segment that imports it (the base of a view
    that runs natively) has run, though its last graph use comes earlier."""
    g = fuse_elementwise(parse('''graph(%x : Float(2, 3)):
      %u : Float(1, 2, 3) = sm::unsqueeze[dim=0](%x)
      %s : Float(1, 2, 3) = sm::softmax[dim=-1](%u)
      %y : Float(1, 2, 3) = sm::mul(%s, %u)
      return (%y)
    '''))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(Executable(g).run(x), (e / e.sum(-1, keepdims=True) * x)[None],
                               1e-6)


# ---- threads ---------------------------------------------------------------------------------------

def test_threads_share_one_executable() -> None:
    """4 threads x 200 calls with their own inputs: every result right; one arena each."""
    seed = next(s for s in (6, 7, 0, 2) if len(compiled(s)[0].segments) >= 1)
    ex, arrays, _, _ = compiled(seed)
    g64 = random_graph(seed, np.float64)[0]
    inputs = [new_inputs(arrays, 100 + t) for t in range(4)]
    wants = [as_list(Interpreter(g64).run(*[a.astype(np.float64) for a in ins]))
             for ins in inputs]
    errors: list[str] = []
    frames: dict[int, object] = {}   # the frames themselves: a finished thread's freed frame
                                     # could hand its id() to a later one
    start = threading.Barrier(4)

    def work(t: int) -> None:
        start.wait()
        frames[t] = ex.frame()
        for i in range(200):
            ins = inputs[(t + i) % 4]
            got = ex(ins)
            for o, w in zip(got, wants[(t + i) % 4]):
                if not np.allclose(o, w, RTOL * 10, ATOL * 10):
                    errors.append(f"thread {t} call {i}: max error {np.abs(o - w).max()}")
                    return
    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]
    assert len({id(f) for f in frames.values()}) == 4    # one arena per thread


# ---- SCRIPTMOD_LOG=codegen ----------------------------------------------------------------------

SPLIT = '''graph(%x : Float(3, 4), %w : Float(4, 5)):
  %h : Float(3, 5) = sm::matmul(%x, %w)
  %r : Float(3, 5) = sm::relu(%h)
  %s : Float(3, 5) = sm::softmax[dim=1](%r)
  %y : Float(3, 5) = sm::mul(%s, %r)
  return (%y)
'''


def test_codegen_log_names_the_splitting_node_and_why(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("SCRIPTMOD_LOG", "codegen")
    ex = Executable(fuse_elementwise(parse(SPLIT)), name="split")
    err = capsys.readouterr().err
    assert len(ex.segments) == 2
    assert "[scriptmod:codegen] split: native segment 0 ends at sm::softmax: " \
           "softmax has no native lowering yet" in err, err
    assert "split: 3 node(s) native in 2 segment(s)" in err, err
    x, w = np.ones((3, 4), np.float32), np.full((4, 5), 0.5, np.float32)
    np.testing.assert_allclose(ex.run(x, w), np.full((3, 5), 0.4, np.float32), 1e-6)


def test_codegen_log_is_quiet_when_off(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("SCRIPTMOD_LOG", raising=False)
    Executable(fuse_elementwise(parse(SPLIT)), name="quiet")
    assert "scriptmod:codegen" not in capsys.readouterr().err


# ---- traced models: the Executable behind scriptmod.jit ---------------------------------------

def _models() -> dict[str, Any]:
    from scriptmod.bench.workloads import TransformerBlock, tiny_latency
    return {"W4": (tiny_latency, (1, 64), 5), "W5": (lambda: TransformerBlock(32, 4, 64),
                                                    (2, 6, 32), 3)}


@pytest.fixture(scope="module")
def traced_models() -> dict[str, Any]:
    import scriptmod as sm
    from scriptmod import jit
    out = {}
    for name, (make, shape, other) in _models().items():
        sm.manual_seed(0)
        model = make().eval()
        x = sm.randn(*shape)
        with sm.no_grad():
            traced = jit.trace(model, x)
        out[name] = (model, traced, shape, other)
    return out


@pytest.mark.parametrize("name", ["W4", "W5"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_traced_model_matches_eager_at_traced_and_new_batch(traced_models: dict, name: str,
                                                            grad: bool) -> None:
    """Eager's outputs through the Executable of each specialization (traced batch, then a
    new batch: its batch class's shared one), under no_grad (native) and with grad enabled (the
    autograd path: parameter gradients equal eager's too)."""
    import contextlib
    import scriptmod as sm
    model, traced, shape, other = traced_models[name]
    for batch in (shape[0], other):
        sm.manual_seed(batch)
        x = sm.randn(batch, *shape[1:])
        with (contextlib.nullcontext() if grad else sm.no_grad()):
            got, want = traced(x), model(x)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), 2e-5, 2e-5)
        ex = traced.executable_for(x)
        assert isinstance(ex, Executable)
        if not grad:
            # the class's first size is one native program; a later size of the class runs
            # the shared symbolic specialization, its fusion groups as native kernels
            native = ex.segments if batch == shape[0] else ex.kernels()
            assert native, f"{name} batch {batch}: nothing native\n{ex.graph}"
            continue
        assert got.requires_grad
        for p in model.parameters():
            p.grad = None
        (want * want).sum().backward()
        eager = [p.grad.numpy().copy() for p in model.parameters()]
        for p in model.parameters():
            p.grad = None
        (got * got).sum().backward()
        for k, (p, e) in enumerate(zip(model.parameters(), eager)):
            np.testing.assert_allclose(p.grad.numpy(), e, 1e-4, 1e-5, err_msg=f"param {k}")


def test_traced_views_and_tuples_are_never_overwritten_by_the_next_call() -> None:
    """Outputs that are intermediates, views of intermediates (transpose, narrow, unsqueeze)
    and tuples of them: results of call 1 are unchanged after call 2, and equal eager's."""
    import scriptmod as sm
    from scriptmod import jit, nn

    class Views(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(8, 12), nn.Linear(12, 6)

        def forward(self, x: sm.Tensor) -> Any:
            h = self.fc1(x).relu()
            y = self.fc2(h)
            return y, h.transpose(0, 1), y.narrow(1, 2, 3), (h * 2).unsqueeze(0), y.tanh()

    sm.manual_seed(0)
    model = Views().eval()
    x1, x2 = sm.randn(5, 8), sm.randn(5, 8)
    with sm.no_grad():
        traced = jit.trace(model, x1)
        first = traced(x1)
        kept = [o.numpy().copy() for o in first]
        second = traced(x2)
        assert traced.executable_for(x1).segments
        for k, (a, b, e1, e2) in enumerate(zip(first, kept, model(x1), second)):
            np.testing.assert_array_equal(a.numpy(), b, err_msg=f"output {k} changed")
            np.testing.assert_allclose(b, e1.numpy(), 2e-5, 2e-6, err_msg=f"output {k}")
            np.testing.assert_allclose(e2.numpy(), model(x2)[k].numpy(), 2e-5, 2e-6)
            assert not np.shares_memory(a.numpy(), traced.executable_for(x1).frame().arena)


# ---- Python steps: basic indexing as one generated expression ------------------------------------

@pytest.mark.parametrize("spec,ops", [
    ((("slice", None, None, None), ("int", ("input", 0))), (3,)),
    ((("int", -1), ("slice", 1, None, None)), ()),
    ((("slice", 1, -1, 2),), ()),
    ((("none",), ("ellipsis",), ("int", 0)), ()),
    ((("slice", ("input", 0), ("input", 1), None), ("int", 2)), (1, 3)),
    ((("int", 0), ("int", 1), ("int", 2)), ()),                       # a 0-d result
])
def test_basic_index_step_equals_the_kernel(spec: tuple, ops: tuple) -> None:
    from scriptmod.runtime.executable import _basic_index
    from scriptmod.runtime.kernels import KERNELS
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    fast = _basic_index(spec)
    assert fast is not None
    got, want = fast(np, x, *ops, spec=spec), KERNELS["index"](np, x, *ops, spec=spec)
    assert type(got) is np.ndarray and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_basic_index_step_keeps_the_kernels_errors_and_refuses_what_it_cannot_do() -> None:
    from scriptmod.runtime.executable import _basic_index
    from scriptmod.runtime.kernels import KERNELS
    spec = (("int", ("input", 0)),)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(IndexError) as fast_error:
        _basic_index(spec)(np, x, 7, spec=spec)                       # type: ignore[misc]
    with pytest.raises(IndexError) as kernel_error:
        KERNELS["index"](np, x, 7, spec=spec)
    assert str(fast_error.value) == str(kernel_error.value)
    assert _basic_index((("tensor", 0),)) is None                      # advanced indexing
    assert _basic_index((("slice", None, None, ("input", 0)),)) is None   # step unknown
    assert _basic_index((("slice", None, None, -1),)) is None           # the kernel refuses


def test_loop_body_reads_a_hoisted_weight_transpose_from_state() -> None:
    """A weight's transpose hoisted out of a loop is laid over the weight itself in the
    body's native segment (not imported and copied every iteration); results match the
    interpreter for 0, 1 and 3 trips. (W6 covers the module-state case.)"""
    g = parse('''graph(%x : Float(4, 8), %w : Float(6, 8), %n : int):
      %wt : Float(8, 6) = sm::transpose[dim0=0, dim1=1](%w)
      %true : bool = prim::Constant[value=1]()
      %y : Float(4, 8) = prim::Loop(%n, %true, %x)
        block0(%i : int, %h : Float(4, 8)):
          %p : Float(4, 6) = sm::matmul(%h, %wt)
          %q : Float(4, 6) = sm::tanh(%p)
          %s : Float(4, 1) = sm::sum[dim=[1], keepdim=1](%q)
          %r : Float(4, 8) = sm::add(%h, %s)
          -> (%true, %r)
      return (%y)
    ''')
    ex = Executable(fuse_elementwise(g))
    body = next(n for n in ex.graph.nodes if n.kind == Prim.LOOP).blocks[0]
    plan = ex.plans[body]
    mm = next(n for n in body.nodes if n.is_op and n.op_name == "matmul")
    assert mm in plan.native_nodes
    seg = next(s for s in plan.segments if mm in s.nodes)
    # %w itself (contiguous, no copy), not its transpose (copied every iteration)
    assert sorted(v.debug_name for v in seg.imports) == ["h", "w"], seg.imports
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    for n in (0, 1, 3):
        want = as_list(Interpreter(g).run(x, w, n))[0]
        np.testing.assert_allclose(ex.run(x, w, n), want, RTOL, ATOL)
