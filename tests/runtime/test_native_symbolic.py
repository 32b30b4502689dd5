"""Native segments of symbolic specializations (issue 37): sizes read per call.

A traced model's second batch size gets the symbolic specialization (``Float(B, 16, 64)``);
its native segments compile once and read ``B`` from the call, the arena is placed per
size. Checked: what becomes native (about what the concrete specialization has), outputs
against eager at many sizes and both float dtypes, no compile per size, the arena plan per
size, threads at different sizes at once, and the pieces (``codegen.sizes``, the arena).
"""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.bench.workloads import MLP, TransformerBlock
from scriptmod.codegen.sizes import Poly, SizeDependent, dim, lift
from scriptmod.ir import parse
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.runtime.executable import Executable
from scriptmod.runtime.llvm_jit import CACHE
from scriptmod.runtime.memory_plan import check_plan

SIZES = (2, 3, 5, 7, 13, 17)          # 2, primes, and larger than traced (4)


def small_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))


MODELS = {
    "mlp": (small_mlp, (64,)),
    "w3": (lambda: MLP(32, 128), (32,)),
    "w5": (lambda: TransformerBlock(64, 4, 256), (16, 64)),
}


def traced(name: str, dtype: sm.dtype) -> tuple[nn.Module, object, tuple]:
    """The model in eval mode and its trace, called at batch 4 (concrete) and 6 (the
    symbolic specialization)."""
    make, inner = MODELS[name]
    sm.manual_seed(0)
    model = make().eval().to(dtype)
    with sm.no_grad():
        tr = sm.jit.trace(model, sm.randn(4, *inner, dtype=dtype))
        tr(sm.randn(4, *inner, dtype=dtype))
        tr(sm.randn(6, *inner, dtype=dtype))
    return model, tr, inner


def native_count(text: str) -> tuple[int, int]:
    """``(native nodes, segments)`` of an ``explain`` text's plan line."""
    found = re.search(r"(\d+) native in (\d+) segment", text)
    assert found, text
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbolic_specialization_is_as_native_as_the_concrete_one(name: str) -> None:
    model, tr, inner = traced(name, sm.float32)
    with sm.no_grad():
        symbolic = sm.jit.explain(tr, sm.randn(6, *inner))
        concrete = sm.jit.explain(tr, sm.randn(4, *inner))
    assert "(symbolic" in symbolic.splitlines()[0], symbolic.splitlines()[0]
    n_sym, _ = native_count(symbolic)
    n_con, _ = native_count(concrete)
    assert n_sym >= n_con - 1 and n_sym > 0, (n_sym, n_con, symbolic)


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbolic_native_matches_eager_at_every_size(name: str, dtype: sm.dtype) -> None:
    model, tr, inner = traced(name, dtype)
    tol = 1e-4 if dtype is sm.float32 else 1e-10
    with sm.no_grad():
        for b in SIZES:
            x = sm.randn(b, *inner, dtype=dtype)
            got, want = tr(x).numpy(), model(x).numpy()
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"batch {b}")


def test_new_sizes_compile_nothing() -> None:
    model, tr, inner = traced("w5", sm.float32)
    before = CACHE.stats()
    with sm.no_grad():
        for b in (3, 5, 7, 9, 10, 11, 12, 13, 19, 23):
            tr(sm.randn(b, *inner))
    after = CACHE.stats()
    assert after["compiles"] == before["compiles"], (before, after)
    assert after["misses"] == before["misses"], (before, after)


def symbolic_executable() -> Executable:
    """``relu(x @ w) * 2 @ w2`` over ``x: Float(B, 4)``: two GEMMs and a kernel between."""
    return Executable(fuse_elementwise(parse('''\
graph(%x : Float(B, 4), %w : Float(4, 8), %w2 : Float(8, 3)):
  %m : Float(B, 8) = sm::matmul(%x, %w)
  %c : Float() = prim::Constant[value=2.0]()
  %r : Float(B, 8) = sm::relu(%m)
  %y : Float(B, 8) = sm::mul(%r, %c)
  %z : Float(B, 3) = sm::matmul(%y, %w2)
  return (%z)
''')))


def test_symbolic_plan_runs_at_every_size_and_places_the_arena_per_size() -> None:
    ex = symbolic_executable()
    plan = ex.plan
    assert plan is not None and plan.arena is not None and plan.binds == ((0, 0, 1),)
    prog = ex.segments[0].program
    assert prog.symbols == ("B",) and "m=B" in prog.text()
    rng = np.random.default_rng(0)
    w, w2 = rng.random((4, 8), np.float32), rng.random((8, 3), np.float32)
    for b in (2, 3, 4, 5, 6, 50, 3):
        x = rng.random((b, 4), np.float32) - 0.5
        np.testing.assert_allclose(ex.run(x, w, w2), (np.maximum(x @ w, 0) * 2) @ w2,
                                   rtol=1e-5, atol=1e-5)
        check_plan(plan.arena.buffers_at((b,)))
    sizes, nbytes, _ = plan.arena.at((5,))
    assert list(sizes[:1]) == [5] and nbytes >= 5 * 8 * 4


def test_frame_arena_grows_and_is_kept() -> None:
    ex = symbolic_executable()
    frame = ex.frames()[0]
    w, w2 = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)
    ex.run(np.ones((40, 4), np.float32), w, w2)
    big = frame.arena
    ex.run(np.ones((3, 4), np.float32), w, w2)          # smaller: the same arena
    assert frame.arena is big and frame.env == (3,)
    ex.run(np.ones((400, 4), np.float32), w, w2)        # larger: grown
    assert frame.arena.nbytes >= 400 * 8 * 4 and frame.env == (400,)


def test_threads_at_different_sizes_at_once() -> None:
    model, tr, inner = traced("w5", sm.float32)
    errors: list[str] = []

    def work(b: int) -> None:
        with sm.no_grad():
            for _ in range(5):
                x = sm.randn(b, *inner)
                got, want = tr(x).numpy(), model(x).numpy()
                if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                    errors.append(f"batch {b}")
    threads = [threading.Thread(target=work, args=(b,)) for b in (2, 3, 5, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ---- the pieces ------------------------------------------------------------------------------

def test_dims_read_as_polynomials() -> None:
    b, t = dim("B"), dim("T")
    assert dim("16*B") == 16 * b and dim("B*T") == b * t and dim("T - 1") == t - 1
    assert dim(7) == 7 and (b - b) == 0 and isinstance(b * 2 - b, Poly)
    assert (16 * b).evaluate({"B": 3}) == 48 and str(dim("B*T - 1")) == "B*T - 1"
    with pytest.raises(ValueError):
        dim("max(T,8)")


def test_comparisons_hold_for_every_size_or_raise() -> None:
    b = dim("B")
    assert b > 1 and b >= 2 and not b < 2 and 3 * b > b and bool(b - 1)
    with pytest.raises(SizeDependent):
        _ = b > 64
    with pytest.raises(SizeDependent):
        bool(b - 2)


def test_lift_fits_concrete_helpers() -> None:
    b, t = dim("B"), dim("T")
    assert lift(lambda s: (s[0] * s[1] * s[1], s[1] - 1), (b, t)) == (b * t * t, t - 1)
    with pytest.raises(SizeDependent):            # a structure that changes with the size
        lift(lambda n: "small" if n < 10 else "large", b)
    with pytest.raises(SizeDependent):            # not a polynomial
        lift(lambda n: n // 3, b)


def test_profiled_symbolic_segments_run_step_by_step() -> None:
    ex = symbolic_executable()
    w, w2 = np.ones((4, 8), np.float32), np.ones((8, 3), np.float32)
    x = np.ones((5, 4), np.float32)
    want = ex.run(x, w, w2)
    np.testing.assert_allclose(ex.profiled_program().run([x, w, w2], ())[0], want)
    assert all(s.step_fns is not None for s in ex.segments)


def test_two_symbols_and_a_square_of_one() -> None:
    """``x: (B, T, 8)``: ``relu(x @ w)`` and its ``(B, T, T)`` Gram matrix plus ``y``: sizes
    ``B*T``, ``T*T`` and batch strides ``4*T`` computed per call."""
    ex = Executable(fuse_elementwise(parse('''\
graph(%x : Float(B, T, 8), %w : Float(8, 4), %y : Float(B, T, T)):
  %m : Float(B, T, 4) = sm::matmul(%x, %w)
  %r : Float(B, T, 4) = sm::relu(%m)
  %t : Float(B, 4, T) = sm::transpose[dim0=1, dim1=2](%r)
  %s : Float(B, T, T) = sm::matmul(%r, %t)
  %z : Float(B, T, T) = sm::add(%s, %y)
  return (%z)
''')))
    text = ex.segments[0].program.text()
    assert ex.segments[0].program.symbols == ("B", "T") and "m=B*T" in text and "T*T" in text
    rng = np.random.default_rng(1)
    w = rng.random((8, 4), np.float32)
    for b, t in ((2, 3), (5, 7), (3, 11), (2, 2)):
        x, y = rng.random((b, t, 8), np.float32), rng.random((b, t, t), np.float32)
        r = np.maximum(x @ w, 0)
        np.testing.assert_allclose(ex.run(x, w, y), r @ r.transpose(0, 2, 1) + y, rtol=1e-5)
        check_plan(ex.plan.arena.buffers_at((b, t)))


def test_a_row_group_over_symbolic_rows_is_one_native_kernel() -> None:
    from scriptmod.ir.passes import fuse_rows
    ex = Executable(fuse_rows(parse('''\
graph(%x : Float(B, 8)):
  %c : Float() = prim::Constant[value=2.0]()
  %m : Float(B, 8) = sm::mul(%x, %c)
  %s : Float(B, 8) = sm::softmax[dim=-1](%m)
  return (%s)
''')))
    assert "rows kernel (B rows)" in ex.explain()
    for b in (2, 3, 17):
        x = np.random.default_rng(b).random((b, 8), np.float32)
        e = np.exp(2 * x - (2 * x).max(-1, keepdims=True))
        np.testing.assert_allclose(ex.run(x), e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_profiled_symbolic_model_exports_a_trace(tmp_path) -> None:
    import json

    from scriptmod.profiler import profile
    model, tr, inner = traced("mlp", sm.float32)
    x = sm.randn(5, *inner)
    with sm.no_grad():
        with profile() as prof:
            got = tr(x)
        np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    args = [e.get("args", {}) for e in json.loads(path.read_text())["traceEvents"]]
    assert any(a.get("m") == "B" for a in args), args


def test_batch_and_length_symbolic_transformer_block_matches_eager() -> None:
    """``x: (B, T, 64)`` (``dynamic_dims``): the projections, LayerNorms, MLP and the
    attention's GEMMs over ``B*T`` rows native, outputs equal eager at lengths 2 to 33."""
    sm.manual_seed(0)
    model = TransformerBlock(64, 4, 256).eval()
    with sm.no_grad():
        tr = sm.jit.trace(model, sm.randn(2, 16, 64), dynamic_dims={"x": {0: "B", 1: "T"}})
        text = sm.jit.explain(tr, sm.randn(3, 20, 64))
        assert "(B, T, 64)" in text and native_count(text)[0] >= 10, text
        before = CACHE.stats()
        for b, t in ((3, 20), (5, 7), (2, 33), (4, 16), (7, 3), (2, 2)):
            x = sm.randn(b, t, 64)
            np.testing.assert_allclose(tr(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4,
                                       err_msg=f"batch {b}, length {t}")
        assert CACHE.stats()["compiles"] == before["compiles"]


def test_a_step_whose_size_may_be_zero_runs_at_every_length() -> None:
    """``x[:, 2:] - x[:, :-2]`` over a symbolic length ``n`` has ``3 * (n - 2)`` elements:
    zero at n = 2 and unknown at planning time, so the step is kept (its loop runs zero times
    there) instead of the planner asking whether the count is 0."""
    def diff2(x: sm.Tensor) -> sm.Tensor:
        n = x.size(1)
        return x.narrow(1, 2, n - 2) - x.narrow(1, 0, n - 2)
    tr = sm.jit.trace(diff2, sm.randn(3, 7))
    for n in (9, 7, 12, 2, 3):
        x = sm.randn(3, n)
        np.testing.assert_array_equal(tr(x).numpy(), diff2(x).numpy(), err_msg=f"length {n}")
