"""Row groups end to end: traced norms, softmaxes and reductions run as row kernels inside
the native program and equal eager, at the traced batch and at others."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn as nn
import scriptmod.nn.functional as F
from scriptmod.ir.graph import Prim


class Heads(nn.Module):
    """Pre-norm, masked softmax, log_softmax, logsumexp, var and an RMS norm."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)

    def forward(self, x: sm.Tensor, mask: sm.Tensor) -> tuple:
        h = self.ln(x)
        s = self.fc(h) * 0.5
        p = F.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        lp = F.log_softmax(s, dim=-1)
        lse = sm.logsumexp(s, dim=-1, keepdim=True)
        v = s.var(-1, keepdim=True)
        rms = s * (s.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt()
        return p + h, lp, lse, v, rms


def _row_groups(traced, *args) -> list:
    g = traced.graph_for(*args)
    return [n for n in g.nodes if n.kind == Prim.FUSION_GROUP
            and any(m.is_op and m.op_name in ("softmax", "mean", "var", "log_softmax",
                                              "logsumexp") for m in n.attrs["subgraph"].nodes)]


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64])
def test_row_groups_equal_eager_at_several_batches(dtype) -> None:
    sm.manual_seed(0)
    model = Heads(48).to(dtype).eval()
    x = sm.randn(2, 7, 48, dtype=dtype)
    mask = sm.tensor(np.random.default_rng(0).random((7, 48)) < 0.3)
    mask[3] = True                                        # one all-masked row: NaN, as torch
    with sm.no_grad():
        traced = sm.jit.trace(model, (x, mask))
        norm, heads = _row_groups(traced, x, mask)      # every row op over s: one kernel
        ops = {n.op_name for n in heads.attrs["subgraph"].nodes if n.is_op}
        assert {"softmax", "log_softmax", "logsumexp", "var", "mean", "rsqrt"} <= ops
        for batch in (2, 5, 1):
            xb = sm.randn(batch, 7, 48, dtype=dtype)
            got, want = traced(xb, mask), model(xb, mask)
            tol = 2e-5 if dtype is sm.float32 else 1e-12
            for g, w in zip(got, want):
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=tol, atol=tol,
                                           equal_nan=True)
            assert np.isnan(got[0].numpy()[:, 3]).all()


def test_layer_norm_and_softmax_run_inside_the_native_program(monkeypatch) -> None:
    """No row op splits the program: the block is one native segment."""
    from scriptmod.ir import log as irlog
    lines: list[str] = []
    monkeypatch.setattr(irlog, "enabled", lambda topic: topic == "codegen")
    monkeypatch.setattr(irlog, "log", lambda topic, msg: lines.append(msg))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(32)
            self.fc = nn.Linear(32, 32)

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return F.softmax(self.fc(self.ln(x)), dim=-1) + x

    x = sm.randn(4, 32)
    model = Block().eval()
    with sm.no_grad():
        traced = sm.jit.trace(model, x)
        y = traced(x)
        want = model(x)
    assert not [m for m in lines if "no native lowering" in m], lines
    assert any("native in 1 segment(s), 0 in Python" in m for m in lines), lines
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=2e-5, atol=1e-6)


def test_fuser_off_runs_row_ops_unfused() -> None:
    x = sm.randn(3, 16)
    traced = sm.jit.trace(lambda t: F.softmax(t * 2, dim=-1), x)
    with sm.jit.fuser(False):
        g = traced.graph_for(x)
        ref = traced(x)
    assert not any(n.kind == Prim.FUSION_GROUP for n in g.nodes)
    np.testing.assert_allclose(traced(x).numpy(), ref.numpy(), rtol=1e-6)


class Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q: sm.Tensor, k: sm.Tensor, v: sm.Tensor, mask: sm.Tensor) -> sm.Tensor:
        if self.causal:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("T", [128, 33])
def test_fused_attention_equals_the_unfused_path(causal: bool, T: int, monkeypatch) -> None:
    """QKᵀ (one batched GEMM), the scale and the mask in the softmax's row kernel, AV: equal
    to the same graph run unfused, float32, rtol 1e-5. This is the path of a chain that
    ``fuse_attention`` leaves alone (weights used elsewhere, a training call that saves
    them); here the pass is switched off so that SDPA's own chain takes it."""
    fa = importlib.import_module("scriptmod.ir.passes.fuse_attention")
    monkeypatch.setattr(fa, "_match", lambda out: None)
    sm.manual_seed(1)
    q, k, v = (sm.randn(8, 4, T, 64) for _ in range(3))
    mask = sm.tensor(np.random.default_rng(1).random((8, 1, 1, T)) < 0.8)   # True: attend
    model = Attention(causal).eval()
    with sm.no_grad():
        traced = sm.jit.trace(model, (q, k, v, mask))
        fused = traced(q, k, v, mask)
        groups = _row_groups(traced, q, k, v, mask)
        with sm.jit.fuser(False):
            unfused = traced(q, k, v, mask)
    ops = [n.op_name for n in groups[0].attrs["subgraph"].nodes if n.is_op]
    assert len(groups) == 1 and ops[-1] == "softmax" and "mul" in ops and "add" in ops
    np.testing.assert_allclose(fused.numpy(), unfused.numpy(), rtol=1e-5, atol=1e-6)
    ref = torch_sdpa(q, k, v, None if causal else mask, causal)
    if ref is not None:
        np.testing.assert_allclose(fused.numpy(), ref, rtol=1e-4, atol=1e-5)


def torch_sdpa(q, k, v, mask, causal):
    try:
        import torch
    except ImportError:
        return None
    t = [torch.from_numpy(a.numpy()) for a in (q, k, v)]
    m = None if mask is None else torch.from_numpy(mask.numpy())
    return torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=m,
                                                            is_causal=causal).numpy()


def test_special_values_through_traced_row_groups_equal_eager() -> None:
    """NaN, ±inf and all-masked rows through a traced LayerNorm, softmax, log_softmax,
    logsumexp, amax and var give eager's numbers (NaN where eager has NaN)."""
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(6)

        def forward(self, x: sm.Tensor) -> tuple:
            return (self.ln(x), F.softmax(x, -1), F.log_softmax(x * 2, -1),
                    sm.logsumexp(x, -1), x.amax(-1), x.var(-1, keepdim=True))

    inf, nan = float("inf"), float("nan")
    rows = [[nan, 0, 1, 2, 3, 4], [inf, 0, 1, 2, 3, 4], [-inf] * 6, [inf, -inf, 0, 1, 2, 3],
            [1e30, 2e30, 3, 4, 5, 6], [0.5] * 6, [-0.0, 0.0, 1, -1, 2, -2]]
    x = sm.tensor(np.array(rows, np.float32))
    model = M().eval()
    with sm.no_grad():
        traced = sm.jit.trace(model, sm.randn(7, 6))
        got, want = traced(x), model(x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
