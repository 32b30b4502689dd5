"""Fused attention (issue 14): ``fuse_attention`` writes a traced graph's
``softmax(q kᵀ · scale + mask) v`` chain as one ``sm::attention`` op, which runs as one
native kernel per thread on float32 CPU tensors (``runtime.attention``).

The kernel is checked against a float64 reference over the sizes 1, 7, 128 and 1023 in the
key dim, odd head dims, masks of every broadcast shape, strided heads, fully masked and NaN
rows; the pass against eager on ``scaled_dot_product_attention`` and ``MultiheadAttention``,
and for what it must leave alone. Every test runs with both register shapes of the kernel
(AVX2 and AVX-512: either is correct on any host, ``microkernel.Isa``)."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import functional as F
from scriptmod.runtime import attention as A


@pytest.fixture(autouse=True, params=["avx2", "avx512"])
def isa(request, monkeypatch):
    monkeypatch.setenv("SCRIPTMOD_ATTENTION_ISA", request.param)
    assert A.isa().name == request.param
    return request.param


def _ref(q, k, v, mask, scale):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        return p / p.sum(-1, keepdims=True) @ v


def _qkv(rng, lead, L, S, E, Ev):
    return (rng.standard_normal(lead + (L, E), dtype=np.float32),
            rng.standard_normal(lead + (S, E), dtype=np.float32),
            rng.standard_normal(lead + (S, Ev), dtype=np.float32))


@pytest.mark.parametrize("S", [1, 7, 128, 1023])
@pytest.mark.parametrize("L,E,Ev", [(1, 1, 1), (7, 64, 64), (50, 33, 5), (97, 16, 40)])
def test_kernel_equals_the_float64_reference(S, L, E, Ev) -> None:
    rng = np.random.default_rng(S * 1000 + L)
    q, k, v = _qkv(rng, (2, 3), L, S, E, Ev)
    out = A.attention(q, k, v, None, 1 / np.sqrt(E))
    assert out.shape == (2, 3, L, Ev) and out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_allclose(out, _ref(q, k, v, None, 1 / np.sqrt(E)), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("mask_shape", [(9, 130), (1, 130), (2, 1, 1, 130), (2, 3, 9, 130),
                                        (130,), (3, 9, 1)])
def test_masks_of_every_broadcast_shape(mask_shape) -> None:
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, (2, 3), 9, 130, 16, 24)
    mask = rng.standard_normal(mask_shape).astype(np.float32)
    mask[rng.random(mask_shape) < 0.3] = -np.inf
    out = A.attention(q, k, v, mask, 0.3)
    ref = _ref(q, k, v, mask, 0.3)
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=2e-6)


def test_fully_masked_and_nan_rows_are_nan_as_unfused() -> None:
    """A row whose scores are all -inf, or that holds a NaN, is NaN (softmax then matmul
    give that); a +inf score also makes its row NaN (inf - inf), as the unfused path."""
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng, (1, 2), 6, 20, 8, 8)
    mask = np.zeros((6, 20), np.float32)
    mask[1] = -np.inf                     # fully masked
    mask[2, 3] = np.nan
    mask[3, 5] = np.inf
    mask[4, :19] = -np.inf                # one key left: that value row exactly
    out = A.attention(q, k, v, mask, 1.0)
    assert np.isnan(out[:, :, 1:4]).all() and not np.isnan(out[:, :, [0, 4, 5]]).any()
    np.testing.assert_allclose(out[:, :, 4], v[:, :, 19], rtol=1e-6)
    np.testing.assert_allclose(out[:, :, [0, 5]], _ref(q, k, v, mask, 1.0)[:, :, [0, 5]],
                               rtol=1e-5, atol=2e-6)


def test_strided_heads_and_ranks_2_and_3() -> None:
    """MultiheadAttention's heads are a permuted view of the in-projection; matrices and
    3-D stacks take the same kernel."""
    rng = np.random.default_rng(5)
    proj = rng.standard_normal((37, 2, 3 * 4 * 16), dtype=np.float32)     # (L, N, 3 E)
    heads = proj.reshape(37, 2, 3, 4, 16).transpose(2, 1, 3, 0, 4)      # (3, N, H, L, hd)
    q, k, v = heads[0], heads[1], heads[2]
    assert not q.flags.c_contiguous
    np.testing.assert_allclose(A.attention(q, k, v, None, 0.25), _ref(q, k, v, None, 0.25),
                               rtol=1e-5, atol=2e-6)
    for lead in [(), (5,)]:
        q, k, v = _qkv(rng, lead, 11, 13, 8, 3)
        np.testing.assert_allclose(A.attention(q, k, v, None, 0.5), _ref(q, k, v, None, 0.5),
                                   rtol=1e-5, atol=2e-6)
    q, k, v = _qkv(rng, (2,), 11, 13, 8, 3)
    q = np.asfortranarray(q)              # a query whose rows are not unit-stride is copied
    np.testing.assert_allclose(A.attention(q, k, v, None, 0.5), _ref(q, k, v, None, 0.5),
                               rtol=1e-5, atol=2e-6)


def test_threads_give_the_same_bits() -> None:
    """Each unit (a block of query rows of one head) is computed the same whichever thread
    runs it."""
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng, (4, 4), 200, 300, 64, 64)
    assert np.array_equal(A.attention(q, k, v, None, 0.125),
                          A.attention(q, k, v, None, 0.125, threads=1))


def test_what_the_kernel_does_not_take_is_a_clear_error() -> None:
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, (2,), 4, 5, 8, 8)
    cases = [(q.astype(np.float64), k, v, None), (q, k[:1], v, None), (q, k, v[:, :4], None),
             (q, k, v, np.zeros((4, 6), np.float32)), (q[:, :0], k, v, None),
             (q[None, None], k[None, None], v[None, None], None)]
    for args in cases:
        assert not A.supported(*args)
        with pytest.raises(ValueError, match="attention: expected float32 arrays q"):
            A.attention(*args, 1.0)


# ---- the pass, through traced models -----------------------------------------------------
class SDPA(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, q, k, v, mask):
        if self.kind == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if self.kind == "float-mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
        if self.kind == "bool-mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask > 0)
        return F.scaled_dot_product_attention(q, k, v)


def _ops(traced, *args) -> list[str]:
    return [n.op_name for n in traced.graph_for(*args).nodes if n.is_op]


@pytest.mark.parametrize("kind", ["plain", "causal", "float-mask", "bool-mask"])
def test_sdpa_traces_to_one_attention_op_equal_to_eager(kind) -> None:
    sm.manual_seed(0)
    q, k, v = (sm.randn(2, 3, 160, 16) for _ in range(3))
    mask = sm.randn(160, 160)
    model = SDPA(kind)
    with sm.no_grad():
        traced = sm.jit.trace(model, (q, k, v, mask))
        ops = _ops(traced, q, k, v, mask)
        assert "attention" in ops and "softmax" not in ops and "matmul" not in ops
        for batch in (2, 5, 1):          # other batch sizes: eager's answer
            args = [sm.randn(batch, 3, 160, 16) for _ in range(3)] + [mask]
            np.testing.assert_allclose(traced(*args).numpy(), model(*args).numpy(),
                                       rtol=1e-5, atol=2e-6)


def test_multihead_attention_block_fuses_and_equals_eager() -> None:
    sm.manual_seed(1)
    mha = nn.MultiheadAttention(64, 4, batch_first=True).eval()

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = mha

        def forward(self, x):
            return self.mha(x, x, x, need_weights=False)[0]
    model = Block().eval()
    x = sm.randn(3, 140, 64)
    with sm.no_grad():
        traced = sm.jit.trace(model, x)
        assert "attention" in _ops(traced, x) and "softmax" not in _ops(traced, x)
        np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=1e-5, atol=2e-6)


def test_what_the_pass_leaves_alone() -> None:
    """Weights that are returned (need_weights), float64 and the fuser off keep the unfused
    chain."""
    sm.manual_seed(2)
    mha = nn.MultiheadAttention(32, 2, batch_first=True).eval()
    x = sm.randn(2, 130, 32)
    with sm.no_grad():
        traced = sm.jit.trace(lambda t: mha(t, t, t, need_weights=True), x)
        assert "attention" not in _ops(traced, x)
        out, w = traced(x)
        ref, ref_w = mha(x, x, x, need_weights=True)
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=2e-6)
        q64 = [sm.randn(2, 2, 130, 8, dtype=sm.float64) for _ in range(3)]
        traced64 = sm.jit.trace(lambda a, b, c: F.scaled_dot_product_attention(a, b, c),
                                tuple(q64))
        assert "attention" not in _ops(traced64, *q64)
        q32 = [t.float() for t in q64]
        traced32 = sm.jit.trace(lambda a, b, c: F.scaled_dot_product_attention(a, b, c),
                                tuple(q32))
        with sm.jit.fuser(False):
            assert "attention" not in _ops(traced32, *q32)
        assert "attention" in _ops(traced32, *q32)


@pytest.mark.parametrize("shape", [(2, 2, 128, 8), (2, 4, 16, 16), (1, 1, 1, 4), (8, 4, 128, 64)])
def test_heads_of_every_size_fuse_and_equal_eager(shape) -> None:
    """Small heads fuse too (the 128 x 128 rule is gone), and run on the calling thread
    below ``MIN_THREAD_FLOPS`` or ``MIN_THREAD_UNITS`` units per thread."""
    qkv = [sm.randn(*shape) for _ in range(3)]
    with sm.no_grad():
        traced = sm.jit.trace(lambda a, b, c: F.scaled_dot_product_attention(a, b, c),
                              tuple(qkv))
        assert "attention" in _ops(traced, *qkv) and "softmax" not in _ops(traced, *qkv)
        np.testing.assert_allclose(traced(*qkv).numpy(),
                                   F.scaled_dot_product_attention(*qkv).numpy(),
                                   rtol=1e-5, atol=2e-6)


def test_training_keeps_the_weights_for_backward_and_matches_eager() -> None:
    """With grad enabled the softmax is saved for the backward, so the chain stays unfused;
    the gradients are eager's."""
    sm.manual_seed(3)
    mha = nn.MultiheadAttention(32, 4, batch_first=True)

    class Loss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = mha

        def forward(self, t):
            return self.mha(t, t, t, need_weights=False)[0].sum()
    x = sm.randn(2, 130, 32)
    traced = sm.jit.trace(Loss(), x)
    assert "attention" not in [n.op_name for n in traced.training_graph_for(x).nodes
                               if n.is_op]
    assert "attention" not in [n.op_name for n in traced.training_graph_for(x).nodes
                               if n.is_op]
    traced(x).backward()
    got = [p.grad.numpy().copy() for p in mha.parameters()]
    mha.zero_grad()
    mha(x, x, x, need_weights=False)[0].sum().backward()
    for a, p in zip(got, mha.parameters()):
        np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-4, atol=1e-5)



def test_the_register_shape_follows_the_host_or_the_environment(monkeypatch) -> None:
    from scriptmod.codegen.microkernel import host_isa
    from scriptmod.runtime.llvm_jit import host
    monkeypatch.delenv("SCRIPTMOD_ATTENTION_ISA")
    assert A.isa() is host_isa(host()[2])
    monkeypatch.setenv("SCRIPTMOD_ATTENTION_ISA", "sse2")
    with pytest.raises(ValueError, match=r"SCRIPTMOD_ATTENTION_ISA: expected one of "
                                         r"\['avx2', 'avx512'\], got 'sse2'"):
        A.isa()
