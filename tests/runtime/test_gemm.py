"""runtime.gemm: our float32 GEMM against a float64 reference at odd sizes (edges of every
block: rows past a tile, columns past a panel, a contraction past a K block), every operand
layout its packing distinguishes, both register shapes, threads; the per-block epilogue
against the separate group; the compiled path (which GEMMs it takes, weights written in
place, other batch sizes) and the clear errors."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.codegen.gemm import KC, MC, NC
from scriptmod.codegen.microkernel import AVX2, AVX512, AVX512_NARROW
from scriptmod.ir import parse
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.runtime import gemm
from scriptmod.runtime.fusion import FusedKernel

SHAPES = [(1, 1, 1), (7, 5, 3), (8, 16, 32), (9, 17, 33), (37, 50, 45),
          (MC + 3, KC + 1, NC + 31), (2 * MC + 1, 2 * KC + 16, 65)]


def _layouts(rng: np.random.Generator, k: int, n: int) -> dict[str, np.ndarray]:
    """B of shape (k, n) in each layout the packing treats differently."""
    wide = rng.standard_normal((2 * k + 1, 3 * n + 2), dtype=np.float32)
    return {"weight_t": rng.standard_normal((n, k), dtype=np.float32).T,   # unit row stride
            "row_major": rng.standard_normal((k, n), dtype=np.float32),    # unit col stride
            "strided": wide[1::2, 2::3][:k, :n]}                          # neither


def _bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float32 accumulation error bound of ``a @ b``: K ulps of ``|a| @ |b|``."""
    return 2.0 * a.shape[1] * 2.0 ** -24 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 1e-30


@pytest.mark.parametrize("isa", [AVX2, AVX512, AVX512_NARROW], ids=lambda i: i.name)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matches_float64_in_every_layout(isa, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    big = rng.standard_normal((m, k + 3), dtype=np.float32)
    for a in (big[:, :k].copy(), big[:, 3:]):                # lda == k and lda > k
        for name, b in _layouts(rng, k, n).items():
            got = gemm.matmul(a, b, shape=isa)
            want = a.astype(np.float64) @ b.astype(np.float64)
            assert got.shape == (m, n) and got.dtype == np.float32 and got.flags.c_contiguous
            assert np.all(np.abs(got - want) <= _bound(a, b)), (name, a.strides)


@pytest.mark.parametrize("isa", [AVX2, AVX512, AVX512_NARROW], ids=lambda i: i.name)
def test_special_values_propagate_as_in_float64(isa):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((19, 40), dtype=np.float32)
    b = rng.standard_normal((40, 70), dtype=np.float32)
    a[3, 7] = np.nan
    a[5, 2] = np.inf
    b[11, 60] = -np.inf
    got = gemm.matmul(a, b, shape=isa)
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    assert np.all(np.abs(got[fin] - want[fin]) <= _bound(np.nan_to_num(a), np.nan_to_num(b))[fin])


def test_threads_give_the_same_bits_and_out_is_written():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((MC * 2 + 5, 300), dtype=np.float32)
    w = rng.standard_normal((NC * 3 + 7, 300), dtype=np.float32)
    one = gemm.matmul(a, w.T, threads=1)
    out = np.full(one.shape, np.nan, np.float32)
    assert gemm.matmul(a, w.T, out=out) is out
    np.testing.assert_array_equal(out, one)


@pytest.mark.parametrize("isa", [AVX2, AVX512, AVX512_NARROW], ids=lambda i: i.name)
@pytest.mark.parametrize("m,k,n", [(9, 17, 33), (MC + 3, KC + 1, NC + 31)])
def test_accumulates_into_a_column_block_of_a_wider_matrix(isa, m, k, n):
    """``out`` a column block of a wider C (its row stride past ``n``), ``accumulate``
    adding to what is there: the columns around the block are untouched."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k), dtype=np.float32).T
    wide = rng.standard_normal((m, n + 9), dtype=np.float32)
    before = wide.copy()
    block = wide[:, 5:5 + n]
    assert gemm.matmul(a, b, out=block, shape=isa, accumulate=True) is block
    want = before[:, 5:5 + n].astype(np.float64) + a.astype(np.float64) @ b
    assert np.all(np.abs(block - want) <= _bound(a, b) + 1e-6 * np.abs(want))
    np.testing.assert_array_equal(wide[:, :5], before[:, :5])
    np.testing.assert_array_equal(wide[:, 5 + n:], before[:, 5 + n:])
    gemm.matmul(a, b, out=block, shape=isa)                      # overwrites
    assert np.all(np.abs(block - a.astype(np.float64) @ b) <= _bound(a, b))


def test_bad_arrays_are_clear_errors():
    a = np.ones((4, 3), np.float32)
    with pytest.raises(ValueError, match=r"gemm.matmul: expected float32 .*got a float64"):
        gemm.matmul(a.astype(np.float64), np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"got a float32 \(4, 3\).*b float32 \(4, 2\)"):
        gemm.matmul(a, np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="unit column"):
        gemm.matmul(np.ones((3, 4), np.float32).T, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"out must be a float32 \(4, 2\) array"):
        gemm.matmul(a, np.ones((3, 2), np.float32), out=np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match="unit column stride"):
        gemm.matmul(a, np.ones((3, 2), np.float32), out=np.empty((2, 4), np.float32).T)
    with pytest.raises(ValueError, match="accumulate needs an out"):
        gemm.matmul(a, np.ones((3, 2), np.float32), accumulate=True)
    assert not gemm.supported(np.ones((0, 3), np.float32), np.ones((3, 2), np.float32))


def test_choice_reads_the_environment(monkeypatch):
    monkeypatch.setenv("SCRIPTMOD_GEMM", "own")
    assert gemm.preferred()
    monkeypatch.setenv("SCRIPTMOD_GEMM", "blas")
    assert not gemm.preferred()
    monkeypatch.setenv("SCRIPTMOD_GEMM", "fast")
    with pytest.raises(ValueError, match=r"SCRIPTMOD_GEMM: expected one of \['auto', 'own', "
                                         r"'blas'\], got 'fast'"):
        gemm.preferred()


# ---- the epilogue ------------------------------------------------------------------------

def _group(m: int, n: int) -> FusedKernel:
    """bias + tanh-GELU-like chain + residual: y = sigmoid(2 (c + bias)) * (c + bias) + r."""
    g = fuse_elementwise(parse(f'''graph(%c : Float({m}, {n}), %b : Float({n}), %r : Float({m}, {n})):
  %two : float = prim::Constant[value=2.0]()
  %h : Float({m}, {n}) = sm::add(%c, %b)
  %s : Float({m}, {n}) = sm::mul(%h, %two)
  %g : Float({m}, {n}) = sm::sigmoid(%s)
  %y : Float({m}, {n}) = sm::mul(%h, %g)
  %o : Float({m}, {n}) = sm::add(%y, %r)
  return (%o)
'''))
    return FusedKernel(g.nodes[0].attrs["subgraph"], name="epilogue")


@pytest.mark.parametrize("m,k,n", [(MC + 3, KC + 1, NC + 31), (1400, 64, 45), (640, 40, 600)])
def test_epilogue_per_block_equals_the_separate_group(m, k, n):
    """Odd sizes: blocks whose rows, columns and contraction all end inside a tile; flat
    starts that are not vector-aligned. Below MIN_FLOPS the step falls back to separate."""
    rng = np.random.default_rng(m + n)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    res = rng.standard_normal((m, n), dtype=np.float32)
    fk = _group(m, n)
    calls = []

    def fallback(ab):
        calls.append(1)
        return gemm.matmul(*ab)
    step = gemm.epilogue_step(0, fk, fk, fallback)
    got = step([x, w.T, None, bias, res])
    want = fk([gemm.matmul(x, w.T), bias, res])[0]
    np.testing.assert_array_equal(got, want)
    assert calls == ([] if 2 * m * n * k >= gemm.MIN_FLOPS else [1])
    again = step([x, w.T, None, bias, res])               # the C buffer is reused
    np.testing.assert_array_equal(again, want)
    assert again is not got or not calls


def test_epilogue_step_falls_back_for_arrays_it_does_not_take():
    m, k, n = 300, 300, 300
    rng = np.random.default_rng(3)
    x = rng.standard_normal((k, m), dtype=np.float32).T          # no unit column stride
    w = rng.standard_normal((n, k), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    res = rng.standard_normal((m, n), dtype=np.float32)
    fk = _group(m, n)
    step = gemm.epilogue_step(0, fk, fk, lambda ab: np.matmul(*ab))
    want = fk([np.matmul(x, w.T), bias, res])[0]
    np.testing.assert_allclose(step([x, w.T, None, bias, res]), want, rtol=1e-5, atol=1e-5)


# ---- the compiled path ---------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(96, 512), nn.GELU(approximate="tanh"), \
            nn.Linear(512, 96)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) + x


def _traced(x):
    sm.manual_seed(0)
    model = MLP().eval()
    with sm.no_grad():
        return model, sm.jit.trace(model, x)


def _close(got, want):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("choice", ["own", "blas"])
def test_compiled_mlp_equals_eager_at_every_batch(monkeypatch, choice):
    monkeypatch.setenv("SCRIPTMOD_GEMM", choice)
    x = sm.randn(200, 96)
    model, traced = _traced(x)
    with sm.no_grad():
        for rows in (200, 1, 3, 513):                       # 1 and 3: below MIN_FLOPS
            xi = sm.randn(rows, 96)
            _close(traced(xi), model(xi))
        xs = sm.randn(4, 70, 96)                             # a stack of rows: one GEMM
        _close(traced(xs), model(xs))
    program = traced.executable_for(x)._program
    assert bool(program.epilogues) == (choice == "own")
    assert ("gemm float32" in "".join(s.program.text() for s in
                                      traced.executable_for(x).segments)) == (choice == "blas")


def test_weights_written_in_place_are_read(monkeypatch):
    """The GEMM packs the weight per call: in-place writes by any route are seen."""
    monkeypatch.setenv("SCRIPTMOD_GEMM", "own")
    x = sm.randn(200, 96)
    model, traced = _traced(x)
    with sm.no_grad():
        traced(x)
        model.fc1.weight.mul_(2.0)                            # a tracked in-place op
        _close(traced(x), model(x))
        model.fc2.weight.data.numpy()[:] = 0.25               # a NumPy view of .data
        _close(traced(x), model(x))
        model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
        _close(traced(x), model(x))
