"""``MultiheadAttention``: a float64 NumPy reference of the packed-projection case, masks,
shapes and errors; against PyTorch (same weights -> same outputs, weights and gradients,
identical state-dict keys) when it is installed."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import special

import scriptmod as sm
from scriptmod import nn
from nn_testutil import arr, copy_state_to_torch, leaf, param_grads

RNG = np.random.default_rng(3)
E, H, L, S, N = 8, 2, 3, 4, 2


def _np_mha(m: nn.MultiheadAttention, q: np.ndarray, k: np.ndarray, v: np.ndarray,
            mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(L, N, E) inputs, packed in-projection, boolean attn_mask (True = masked)."""
    sd = {n: arr(t) for n, t in m.state_dict().items()}
    wq, wk, wv = np.split(sd["in_proj_weight"], 3)
    bq, bk, bv = np.split(sd["in_proj_bias"], 3)
    heads = lambda x: x.reshape(x.shape[0], N, H, E // H).transpose(1, 2, 0, 3)  # noqa: E731
    qh, kh, vh = heads(q @ wq.T + bq), heads(k @ wk.T + bk), heads(v @ wv.T + bv)
    scores = qh @ kh.swapaxes(-1, -2) / np.sqrt(E // H)
    if mask is not None:
        scores = scores + np.where(mask, -np.inf, 0.0)
    w = special.softmax(scores, axis=-1)                       # (N, H, L, S)
    out = (w @ vh).transpose(2, 0, 1, 3).reshape(L, N, E)
    return out @ sd["out_proj.weight"].T + sd["out_proj.bias"], w.mean(axis=1)


def test_matches_numpy_reference_with_a_mask() -> None:
    sm.manual_seed(0)
    m = nn.MultiheadAttention(E, H).double()
    with sm.no_grad():
        m.in_proj_bias.copy_(sm.tensor(RNG.standard_normal(3 * E)))
        m.out_proj.bias.copy_(sm.tensor(RNG.standard_normal(E)))
    q, k, v = RNG.standard_normal((L, N, E)), RNG.standard_normal((S, N, E)), RNG.standard_normal((S, N, E))
    mask = np.zeros((L, S), dtype=bool)
    mask[0, 2:] = True
    out, w = m(leaf(q), leaf(k), leaf(v), attn_mask=sm.tensor(mask))
    ref_out, ref_w = _np_mha(m, q, k, v, mask)
    np.testing.assert_allclose(arr(out), ref_out, atol=1e-12)
    np.testing.assert_allclose(arr(w), ref_w, atol=1e-12)
    assert np.all(arr(w)[:, 0, 2:] == 0)


def test_batch_first_unbatched_and_need_weights() -> None:
    m = nn.MultiheadAttention(E, H, batch_first=True).double()
    x = RNG.standard_normal((N, L, E))
    out, w = m(leaf(x), leaf(x), leaf(x), average_attn_weights=False)
    assert tuple(out.shape) == (N, L, E) and tuple(w.shape) == (N, H, L, L)
    out2, none = m(sm.tensor(x[0]), sm.tensor(x[0]), sm.tensor(x[0]), need_weights=False)
    assert none is None and tuple(out2.shape) == (L, E)
    np.testing.assert_allclose(arr(out2), arr(out)[0], atol=1e-12)


def test_state_dict_keys_and_options() -> None:
    assert list(nn.MultiheadAttention(E, H).state_dict()) == [
        "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    sep = nn.MultiheadAttention(E, H, kdim=3, vdim=5, add_bias_kv=True, bias=False)
    assert list(sep.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight",
                                      "bias_k", "bias_v", "out_proj.weight"]
    out, w = sep(sm.randn(L, N, E), sm.randn(S, N, 3), sm.randn(S, N, 5))
    assert tuple(out.shape) == (L, N, E) and tuple(w.shape) == (N, L, S + 1)
    zero = nn.MultiheadAttention(E, H, add_zero_attn=True)
    assert tuple(zero(*(sm.randn(L, N, E),) * 3)[1].shape) == (N, L, L + 1)


def test_key_padding_mask_and_dropout_follow_the_mode() -> None:
    m = nn.MultiheadAttention(E, H, dropout=0.5)
    x = sm.randn(L, N, E)
    pad = sm.tensor([[False, False, True], [False, True, True]])
    m.eval()
    _, w = m(x, x, x, key_padding_mask=pad)
    assert np.all(arr(w)[0, :, 2] == 0) and np.all(arr(w)[1, :, 1:] == 0)
    np.testing.assert_allclose(arr(w).sum(-1), 1.0, rtol=1e-6)
    m.train()
    _, w_train = m(x, x, x)
    assert not np.allclose(arr(w_train).sum(-1), 1.0)     # dropped and rescaled weights


def test_errors_name_the_layer() -> None:
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        nn.MultiheadAttention(10, 3)
    m = nn.MultiheadAttention(E, H)
    with pytest.raises(ValueError, match=r"MultiheadAttention: expected query with last dimension 8"):
        m(sm.randn(L, N, 4), sm.randn(L, N, E), sm.randn(L, N, E))
    with pytest.raises(ValueError, match=r"attn_mask should have shape \(3, 3\)"):
        m(*(sm.randn(L, N, E),) * 3, attn_mask=sm.zeros(2, 2))
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(*(sm.randn(L, N, E),) * 3, is_causal=True)


# ---- the PyTorch oracle -------------------------------------------------------------------
CONFIGS = [
    dict(kwargs={}, call={}),
    dict(kwargs=dict(batch_first=True), call=dict(average_attn_weights=False)),
    dict(kwargs=dict(kdim=3, vdim=5), call={}),
    dict(kwargs=dict(add_bias_kv=True, add_zero_attn=True), call=dict(key_padding_mask="kpm")),
    dict(kwargs=dict(bias=False), call=dict(attn_mask="float", need_weights=False)),
    dict(kwargs={}, call=dict(attn_mask="causal", is_causal=True, key_padding_mask="kpm")),
]


def _call_args(call: dict, lib: Any, n_keys: int) -> dict:
    out = dict(call)
    if call.get("key_padding_mask") == "kpm":
        out["key_padding_mask"] = lib.tensor(np.array([[False] * (n_keys - 1) + [True]] * N))
    if call.get("attn_mask") == "float":
        out["attn_mask"] = lib.tensor(np.linspace(-1, 1, L * n_keys).reshape(L, n_keys))
    if call.get("attn_mask") == "causal":
        out["attn_mask"] = lib.tensor(np.triu(np.ones((L, n_keys), dtype=bool), 1))
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_against_torch(cfg: dict) -> None:
    torch = pytest.importorskip("torch")
    ours = nn.MultiheadAttention(E, H, **cfg["kwargs"]).double()
    theirs = torch.nn.MultiheadAttention(E, H, **cfg["kwargs"]).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    copy_state_to_torch(ours, theirs)
    kd, vd = cfg["kwargs"].get("kdim", E), cfg["kwargs"].get("vdim", E)
    n_keys = L if cfg["call"].get("attn_mask") == "causal" else S
    shapes = [(L, N, E), (n_keys, N, kd), (n_keys, N, vd)]
    if cfg["kwargs"].get("batch_first"):
        shapes = [(s[1], s[0], s[2]) for s in shapes]
    arrays = [RNG.standard_normal(s) for s in shapes]
    out, w = ours(*(leaf(a) for a in arrays), **_call_args(cfg["call"], sm, n_keys))
    tin = [torch.tensor(a, requires_grad=True) for a in arrays]
    tout, tw = theirs(*tin, **_call_args(cfg["call"], torch, n_keys))
    np.testing.assert_allclose(arr(out), tout.detach().numpy(), atol=1e-10)
    assert (w is None) == (tw is None)
    if w is not None:
        np.testing.assert_allclose(arr(w), tw.detach().numpy(), atol=1e-10)
    g = RNG.standard_normal(tuple(tout.shape))
    out.backward(sm.tensor(g))
    tout.backward(torch.tensor(g))
    tgrads = {n: p.grad.numpy() for n, p in theirs.named_parameters() if p.grad is not None}
    for n, gr in param_grads(ours).items():
        np.testing.assert_allclose(gr, tgrads[n], atol=1e-9, err_msg=n)
