"""Transformer layers and stacks: numbers against a NumPy float64 reference and against torch
(same weights through ``load_state_dict(strict=True)``), gradients, masks, tracing over batch
sizes and sequence lengths, train/eval, and torch's errors and warnings."""
import copy
import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

D, H, FF = 8, 2, 16


def _np(t):
    return t.detach().numpy()


# ---- NumPy reference: a post-norm encoder layer, written out --------------------------------
def _layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _attention(x, p, mask):
    """Self-attention on (S, N, E) with ``mask`` additive (S, S)."""
    S, N, E = x.shape
    q, k, v = np.split(x @ p["self_attn.in_proj_weight"].T + p["self_attn.in_proj_bias"], 3, -1)
    heads = [t.reshape(S, N, H, E // H).transpose(1, 2, 0, 3) for t in (q, k, v)]
    scores = heads[0] @ heads[1].transpose(0, 1, 3, 2) / np.sqrt(E // H) + mask
    w = np.exp(scores - scores.max(-1, keepdims=True))
    out = (w / w.sum(-1, keepdims=True)) @ heads[2]
    out = out.transpose(2, 0, 1, 3).reshape(S, N, E)
    return out @ p["self_attn.out_proj.weight"].T + p["self_attn.out_proj.bias"]


def _encoder_layer_reference(x, p, mask):
    x = _layer_norm(x + _attention(x, p, mask), p["norm1.weight"], p["norm1.bias"])
    ff = np.maximum(x @ p["linear1.weight"].T + p["linear1.bias"], 0)
    return _layer_norm(x + ff @ p["linear2.weight"].T + p["linear2.bias"],
                       p["norm2.weight"], p["norm2.bias"])


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64])
def test_encoder_layer_matches_numpy_reference(dtype):
    sm.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, dtype=dtype)
    x = sm.randn(5, 3, D, dtype=dtype)
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=dtype)
    params = {k: _np(v).astype(np.float64) for k, v in layer.state_dict().items()}
    want = _encoder_layer_reference(_np(x).astype(np.float64), params, _np(mask))
    tol = 1e-5 if dtype is sm.float32 else 1e-12
    np.testing.assert_allclose(_np(layer(x, src_mask=mask)), want, rtol=tol, atol=tol)
    bool_mask = sm.tensor(np.triu(np.ones((5, 5), bool), 1))   # True = may not attend
    np.testing.assert_allclose(_np(layer(x, src_mask=bool_mask)), want, rtol=tol, atol=tol)


def test_square_subsequent_mask():
    m = nn.Transformer.generate_square_subsequent_mask(3, dtype=sm.float64)
    assert m.dtype is sm.float64
    np.testing.assert_array_equal(_np(m), np.triu(np.full((3, 3), -np.inf), 1))


# ---- against torch --------------------------------------------------------------------------
def _pair(torch, name, *args, **kwargs):
    """The torch module and ours with the same weights (float64)."""
    t = getattr(torch.nn, name)(*args, **kwargs).double()
    s = getattr(nn, name)(*args, **kwargs).to(sm.float64)
    s.load_state_dict({k: sm.tensor(v.detach().numpy()) for k, v in t.state_dict().items()},
                      strict=True)
    return t, s


def _inputs(torch, shapes, batch_first):
    ts = [torch.randn(*shape, dtype=torch.float64, requires_grad=True) for shape in shapes]
    if batch_first:
        ts = [t.detach().transpose(0, 1).requires_grad_(True) if t.dim() == 3 else t for t in ts]
    return ts, [sm.tensor(t.detach().numpy(), requires_grad=True) for t in ts]


def _check_forward_backward(t_mod, s_mod, t_in, s_in, t_kw, s_kw):
    out_t, out_s = t_mod(*t_in, **t_kw), s_mod(*s_in, **s_kw)
    np.testing.assert_allclose(_np(out_s), out_t.detach().numpy(), rtol=1e-9, atol=1e-10)
    out_t.sin().sum().backward()
    out_s.sin().sum().backward()
    for a, b in zip(t_in, s_in):
        np.testing.assert_allclose(_np(b.grad), a.grad.numpy(), rtol=1e-8, atol=1e-10)
    t_params, s_params = dict(t_mod.named_parameters()), dict(s_mod.named_parameters())
    assert t_params.keys() == s_params.keys()
    for k in t_params:
        np.testing.assert_allclose(_np(s_params[k].grad), t_params[k].grad.numpy(),
                                   rtol=1e-8, atol=1e-10, err_msg=k)


def _masks(torch, S, N, kind):
    """(attn mask, key padding mask) in torch and scriptmod forms: bool or float."""
    causal = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
    pad = torch.zeros(N, S, dtype=torch.bool)
    pad[-1, -2:] = True
    if kind == "float":
        causal, pad = (torch.zeros(m.shape, dtype=torch.float64).masked_fill(m, float("-inf"))
                       for m in (causal, pad))
    return (causal, pad), tuple(sm.tensor(m.numpy()) for m in (causal, pad))


OPTIONS = [dict(), dict(batch_first=True, norm_first=True), dict(bias=False, activation="gelu"),
           dict(layer_norm_eps=1e-3, batch_first=True)]


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_encoder_layer_like_torch(opts, mask_kind):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    t_mod, s_mod = _pair(torch, "TransformerEncoderLayer", D, H, FF, dropout=0.0, **opts)
    t_in, s_in = _inputs(torch, [(5, 3, D)], opts.get("batch_first", False))
    (tm, tp), (sm_, sp) = _masks(torch, 5, 3, mask_kind)
    _check_forward_backward(t_mod, s_mod, t_in, s_in, dict(src_mask=tm, src_key_padding_mask=tp),
                            dict(src_mask=sm_, src_key_padding_mask=sp))


@pytest.mark.parametrize("opts", OPTIONS)
def test_decoder_layer_like_torch(opts):
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    t_mod, s_mod = _pair(torch, "TransformerDecoderLayer", D, H, FF, dropout=0.0, **opts)
    t_in, s_in = _inputs(torch, [(4, 3, D), (6, 3, D)], opts.get("batch_first", False))
    (tm, tp), (sm_, sp) = _masks(torch, 4, 3, "bool")
    (_, mp), (_, smp) = _masks(torch, 6, 3, "bool")
    _check_forward_backward(
        t_mod, s_mod, t_in, s_in,
        dict(tgt_mask=tm, tgt_key_padding_mask=tp, memory_key_padding_mask=mp, tgt_is_causal=True),
        dict(tgt_mask=sm_, tgt_key_padding_mask=sp, memory_key_padding_mask=smp,
             tgt_is_causal=True))


@pytest.mark.parametrize("opts", [dict(), dict(batch_first=True, norm_first=True, bias=False)])
def test_transformer_like_torch(opts):
    torch = pytest.importorskip("torch")
    torch.manual_seed(2)
    t_mod, s_mod = _pair(torch, "Transformer", D, H, 2, 1, FF, dropout=0.0, **opts)
    t_in, s_in = _inputs(torch, [(6, 2, D), (4, 2, D)], opts.get("batch_first", False))
    (tm, _), (sm_, _) = _masks(torch, 4, 2, "float")
    (_, sp_t), (_, sp_s) = _masks(torch, 6, 2, "bool")
    _check_forward_backward(t_mod, s_mod, t_in, s_in,
                            dict(tgt_mask=tm, src_key_padding_mask=sp_t,
                                 memory_key_padding_mask=sp_t),
                            dict(tgt_mask=sm_, src_key_padding_mask=sp_s,
                                 memory_key_padding_mask=sp_s))


@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched_inputs_like_torch(batch_first):
    torch = pytest.importorskip("torch")
    t_mod, s_mod = _pair(torch, "Transformer", D, H, 1, 1, FF, dropout=0.0,
                         batch_first=batch_first)
    t_in, s_in = _inputs(torch, [(5, D), (3, D)], False)
    pad_t = torch.tensor([False, False, False, True, True])
    _check_forward_backward(t_mod, s_mod, t_in, s_in, dict(src_key_padding_mask=pad_t),
                            dict(src_key_padding_mask=sm.tensor(pad_t.numpy())))


def test_encoder_stack_with_callable_activation_and_norm_like_torch():
    torch = pytest.importorskip("torch")
    t_layer = torch.nn.TransformerEncoderLayer(D, H, FF, 0.0, torch.nn.functional.gelu).double()
    s_layer = nn.TransformerEncoderLayer(D, H, FF, 0.0, nn.functional.gelu, dtype=sm.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_mod = torch.nn.TransformerEncoder(t_layer, 3, torch.nn.LayerNorm(D).double())
        s_mod = nn.TransformerEncoder(s_layer, 3, nn.LayerNorm(D, dtype=sm.float64))
    s_mod.load_state_dict({k: sm.tensor(v.detach().numpy())
                           for k, v in t_mod.state_dict().items()}, strict=True)
    t_in, s_in = _inputs(torch, [(5, 2, D)], False)
    mask_t = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    _check_forward_backward(t_mod, s_mod, t_in, s_in, dict(mask=mask_t),
                            dict(mask=sm.tensor(mask_t.numpy())))


def test_state_dict_keys_and_repr_like_torch():
    torch = pytest.importorskip("torch")
    kw = dict(num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=FF)
    t_mod, s_mod = torch.nn.Transformer(D, H, **kw), nn.Transformer(D, H, **kw)
    assert list(t_mod.state_dict()) == list(s_mod.state_dict())
    assert repr(s_mod) == repr(t_mod)
    for name in ("d_model", "nhead", "batch_first"):
        assert getattr(s_mod, name) == getattr(t_mod, name)
    assert s_mod.encoder.layers[0].activation_relu_or_gelu == 1
    assert (s_mod.encoder.use_nested_tensor, s_mod.encoder.mask_check) == \
        (t_mod.encoder.use_nested_tensor, t_mod.encoder.mask_check)


# ---- structure, tracing, modes, errors ------------------------------------------------------
def test_stack_layers_are_independent_copies():
    layer = nn.TransformerEncoderLayer(D, H, FF)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    a, b = enc.layers
    assert a is not layer and a.linear1.weight is not b.linear1.weight
    np.testing.assert_array_equal(_np(a.linear1.weight), _np(b.linear1.weight))
    with sm.no_grad():
        a.linear1.weight.zero_()
    assert np.abs(_np(b.linear1.weight)).sum() > 0


def test_custom_encoder_and_decoder():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF), 1,
                                enable_nested_tensor=False)
    model = nn.Transformer(D, H, custom_encoder=enc, custom_decoder=nn.TransformerDecoder(
        nn.TransformerDecoderLayer(D, H, FF), 1))
    assert model.encoder is enc and model.decoder.norm is None
    assert model(sm.randn(5, 2, D), sm.randn(3, 2, D)).shape == (3, 2, D)


@pytest.mark.parametrize("batch_first", [False, True])
def test_trace_over_batch_sizes_and_lengths(batch_first):
    """One trace serves other batch sizes and sequence lengths (checked without gradients
    and fusion: each new size compiles, and that is not what this test is about)."""
    sm.manual_seed(0)
    model = nn.Transformer(D, H, 1, 1, FF, dropout=0.0, batch_first=batch_first).eval()

    class Causal(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, src, tgt, mask):
            return self.model(src, tgt, tgt_mask=mask)

    def inputs(n, s, t):
        shape = (lambda L: (n, L, D)) if batch_first else (lambda L: (L, n, D))
        return (sm.randn(*shape(s)), sm.randn(*shape(t)),
                nn.Transformer.generate_square_subsequent_mask(t))

    wrapped = Causal()
    traced = sm.jit.trace(wrapped, inputs(2, 5, 4))
    with sm.no_grad(), sm.jit.fuser(False):
        for n, s, t in ((3, 5, 4), (2, 7, 6)):
            args = inputs(n, s, t)
            np.testing.assert_allclose(_np(traced(*args)), _np(wrapped(*args)),
                                       rtol=1e-5, atol=1e-5)


def test_trace_honours_train_and_eval():
    sm.manual_seed(0)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.5)
    x = sm.randn(5, 2, D)
    traced = sm.jit.trace(layer.eval(), x)
    with sm.no_grad(), sm.jit.fuser(False):
        np.testing.assert_allclose(_np(traced(x)), _np(layer(x)), rtol=1e-5, atol=1e-5)
        traced.train()
        assert not np.allclose(_np(traced(x)), _np(layer(x)), atol=1e-3)   # dropout is on


def test_errors_and_warnings_like_torch():
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(D, H, activation="tanh")
    layer = nn.TransformerEncoderLayer(D, H, FF)
    x = sm.randn(5, 2, D)
    with pytest.raises(AssertionError, match="only bool and floating types of src_mask"):
        layer(x, src_mask=sm.zeros(5, 5, dtype=sm.int64))
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        layer(x, is_causal=True)
    with pytest.warns(UserWarning, match="mismatched src_key_padding_mask and src_mask"):
        layer(x, src_mask=nn.Transformer.generate_square_subsequent_mask(5),
              src_key_padding_mask=sm.zeros(2, 5, dtype=sm.bool))
    with pytest.warns(UserWarning, match="batch_first was not True"):
        nn.TransformerEncoder(layer, 1)
    model = nn.Transformer(D, H, 1, 1, FF)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        model(sm.randn(5, 2, D), sm.randn(4, 3, D))
    with pytest.raises(RuntimeError, match="feature number of src and tgt must be equal"):
        model(sm.randn(5, 2, D), sm.randn(4, 2, D + 2))


def test_deepcopy_keeps_function_activation():
    layer = nn.TransformerDecoderLayer(D, H, FF, activation="gelu")
    assert copy.deepcopy(layer).activation is nn.functional.gelu
