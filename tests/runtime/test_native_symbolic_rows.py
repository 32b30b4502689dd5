"""Row kernels over a symbolic row length (issue 37): softmax over a sequence length ``T``.

A symbolic specialization (``Float(1, 4, s0, s0)``) groups its softmax and log_softmax with
their prologue (``ir.passes.fuse_rows``: a symbolic reduced dim is accepted for the row ops
whose formula does not hold the row length) and runs them as one native row kernel that
reads its row length per call. A mean or variance over a symbolic dim (a layer norm over
``T``) stays outside row groups and keeps eager's numbers. Checked against eager at many
lengths, float32 and float64, masked rows (fully masked ones give NaN, as eager), and
nothing compiled per length.
"""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from scriptmod.bench.dynamic import DYNAMIC, generate
from scriptmod.ir import parse
from scriptmod.ir.passes import fuse_rows
from scriptmod.ir.passes.fuse_rows import row_geometry
from scriptmod.runtime.executable import Executable
from scriptmod.runtime.llvm_jit import CACHE

LENGTHS = (2, 3, 9, 17, 33, 64)
DTYPES = pytest.mark.parametrize("dtype", [sm.float32, sm.float64], ids=["float32", "float64"])


def tolerance(dtype: sm.dtype) -> dict:
    return {"rtol": 1e-5, "atol": 1e-6} if dtype is sm.float32 else {"rtol": 1e-12, "atol": 1e-13}


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_a_row_op_over_a_symbolic_length_is_one_kernel(op: str) -> None:
    ex = Executable(fuse_rows(parse(f'''\
graph(%x : Float(B, T)):
  %c : Float() = prim::Constant[value=2.0]()
  %m : Float(B, T) = sm::mul(%x, %c)
  %s : Float(B, T) = sm::{op}[dim=-1](%m)
  return (%s)
''')))
    assert "rows kernel (B rows)" in ex.explain(), ex.explain()
    for b, t in ((2, 2), (3, 17), (5, 64), (2, 1000)):
        x = np.random.default_rng(t).standard_normal((b, t)).astype(np.float32)
        a = 2 * x - (2 * x).max(-1, keepdims=True)
        want = a - np.log(np.exp(a).sum(-1, keepdims=True)) if op == "log_softmax" \
            else np.exp(a) / np.exp(a).sum(-1, keepdims=True)
        np.testing.assert_allclose(ex.run(x), want, rtol=1e-5, atol=1e-6, err_msg=f"{b}x{t}")


def test_a_mean_over_a_symbolic_length_is_no_row_op() -> None:
    """A mean divides by the row length, which a row kernel builds in: over ``T`` it stays
    out of row groups (``COUNTED``); over a concrete dim it is one."""
    g = parse('''\
graph(%x : Float(B, T), %y : Float(T, 8)):
  %m : Float(B, 1) = sm::mean[dim=[-1], keepdim=1](%x)
  %s : Float(T, 8) = sm::softmax[dim=-1](%y)
  %n : Float(T, 1) = sm::mean[dim=[-1], keepdim=1](%y)
  return (%m, %s, %n)
''')
    mean_t, softmax_8, mean_8 = g.nodes
    assert row_geometry(mean_t) is None
    assert row_geometry(softmax_8) == (("T", 8), 1)
    assert row_geometry(mean_8) == (("T", 8), 1)


class Rows(nn.Module):
    """softmax, log_softmax and a layer norm over the last dim, which is the symbolic one."""

    def forward(self, x: sm.Tensor) -> tuple[sm.Tensor, sm.Tensor, sm.Tensor]:
        return ((x * 0.5).softmax(-1), (x + 1.0).log_softmax(-1),
                F.layer_norm(x, (x.size(-1),)))


class MaskedSoftmax(nn.Module):
    """``where(mask, scores, -inf).softmax(-1)`` with a causal mask from ``arange``, shifted
    so that the first row is masked entirely (eager: NaN there)."""

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        t = x.size(-1)
        i = sm.arange(0, t)
        mask = i.unsqueeze(1) > i.unsqueeze(0)
        return sm.where(mask, x * 0.25, float("-inf")).softmax(-1)


def symbolic_trace(model: nn.Module, shape: tuple, dtype: sm.dtype):
    """The trace at length 8, then called at 10 and 12 (its symbolic specialization)."""
    with sm.no_grad():
        tr = sm.jit.trace(model, sm.randn(*shape(8), dtype=dtype))
        for t in (10, 12):
            tr(sm.randn(*shape(t), dtype=dtype))
    return tr


@DTYPES
def test_rows_over_a_symbolic_last_dim_match_eager(dtype: sm.dtype) -> None:
    model = Rows().eval()
    tr = symbolic_trace(model, lambda t: (3, t), dtype)
    with sm.no_grad():
        text = sm.jit.explain(tr, sm.randn(3, 20, dtype=dtype)).split("---- program")[0]
        assert "(symbolic" in text.splitlines()[0], text
        assert "softmax" not in "".join(l for l in text.splitlines() if "NumPy" in l), text
        before = CACHE.stats()["compiles"]
        for t in LENGTHS:
            x = sm.randn(3, t, dtype=dtype)
            for got, want in zip(tr(x), model(x)):
                np.testing.assert_allclose(got.numpy(), want.numpy(), **tolerance(dtype),
                                           err_msg=f"length {t}")
        assert CACHE.stats()["compiles"] == before


@DTYPES
def test_masked_softmax_over_a_symbolic_length_matches_eager(dtype: sm.dtype) -> None:
    model = MaskedSoftmax().eval()
    tr = symbolic_trace(model, lambda t: (1, 4, t, t), dtype)
    with sm.no_grad():
        text = sm.jit.explain(tr, sm.randn(1, 4, 20, 20, dtype=dtype)).split("---- program")[0]
        assert "rows kernel (4*s0 rows)" in text, text
        for t in LENGTHS:
            x = sm.randn(1, 4, t, t, dtype=dtype)
            got, want = tr(x).numpy(), model(x).numpy()
            assert np.isnan(want[:, :, 0]).all()         # the fully masked row
            np.testing.assert_allclose(got, want, **tolerance(dtype), equal_nan=True,
                                       err_msg=f"length {t}")


@DTYPES
def test_g1_generates_at_every_length_as_eager_without_compiling(dtype: sm.dtype) -> None:
    """G1 (nanoGPT-shaped, explicit causal attention): one symbolic specialization serves
    every length, its softmax never a reference kernel, outputs equal eager."""
    model, prompt = DYNAMIC["G1"].build(quick=True)
    model = model.eval().to(dtype)
    with sm.no_grad():
        tr = sm.jit.trace(model, prompt)
        generate(tr, prompt, 3)                       # lengths 8 (concrete), 9, 10
        x = sm.cat([prompt] * 4, 1)
        text = sm.jit.explain(tr, x).split("---- program")[0]
        assert "(symbolic" in text.splitlines()[0], text
        assert not [l for l in text.splitlines() if "softmax" in l and "NumPy" in l], text
        before = CACHE.stats()["compiles"]
        for t in LENGTHS:
            idx = sm.cat([prompt] * 8, 1)[:, :t]
            np.testing.assert_allclose(tr(idx).numpy(), model(idx).numpy(),
                                       rtol=1e-4 if dtype is sm.float32 else 1e-10,
                                       atol=1e-5 if dtype is sm.float32 else 1e-11,
                                       err_msg=f"length {t}")
        assert CACHE.stats()["compiles"] == before


def test_a_masked_row_max_stays_vectorized() -> None:
    """``max(acc, where(mask, a, -inf))`` with ``-inf`` a constant folds to a conditional
    reduction LLVM leaves scalar; the row kernel reads its infinities opaquely instead."""
    import re

    from scriptmod.codegen.llvm_ir import render_llvm
    from scriptmod.codegen.rows import lower_row_group, plan_row_layout
    from scriptmod.runtime.llvm_jit import _optimized
    sub = parse('''graph(%x : Float(4, 64, 64), %m : Bool(64, 64)):
  %ninf : Float() = prim::Constant[value=-inf]()
  %w : Float(4, 64, 64) = sm::where(%m, %x, %ninf)
  %y : Float(4, 64, 1) = sm::amax[dim=[-1], keepdim=1](%w)
  return (%y)
''')
    spec, _ = plan_row_layout(lower_row_group(sub), [(4, 64, 64), (64, 64)],
                              [(4096, 64, 1), (64, 1)], (4, 64, 64))
    text = render_llvm(spec).text
    assert "load volatile" in text
    optimized = str(_optimized(text)[0])
    assert re.search(r"@llvm\.maximum\.v\d+f32", optimized), optimized
