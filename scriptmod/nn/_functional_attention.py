"""Attention: ``scaled_dot_product_attention`` and the multi-head attention forward
(PyTorch's signatures and semantics), re-exported by ``scriptmod.nn.functional``."""
from __future__ import annotations

import math
from typing import Any


from scriptmod.ir import dtypes as D
from scriptmod._creation import arange, full
from scriptmod._dispatch import dispatch
from scriptmod._tensor_ops import where
from scriptmod.ir.errors import ArgumentValueError, DTypeError, ShapeError
from scriptmod.tensor import Tensor
from scriptmod.nn._functional_layers import dropout, linear, pad

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]


# ---- attention ------------------------------------------------------------------------------
def _mask_as_bias(mask: Tensor, like: Tensor) -> Tensor:
    """A boolean 'may attend' mask becomes 0 / -inf; a float mask is already additive."""
    if mask.dtype is D.bool_:
        return where(mask, 0.0, float("-inf")).to(like.dtype)
    return mask.to(like.dtype)


def _causal_mask(L: int, S: int, device: Any) -> Tensor:
    rows = arange(L, device=device).unsqueeze(1)
    return arange(S, device=device).unsqueeze(0) <= rows


def _repeat_heads(t: Tensor, rep: int) -> Tensor:
    """(..., Hkv, S, E) -> (..., Hkv * rep, S, E), each head repeated ``rep`` times in a row."""
    lead, (h, s, e) = list(t.shape[:-3]), t.shape[-3:]
    return t.unsqueeze(-3).expand(*lead, h, rep, s, e).reshape(*lead, h * rep, s, e)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(Q K^T * scale + mask) V over the last two dims (PyTorch's math definition)."""
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or is_causal, "
                         "not both")
    _check_sdpa_dtypes(query, key, value, attn_mask)
    if not 0.0 <= dropout_p <= 1.0:   # torch's sdpa: a RuntimeError, unlike F.dropout's
        raise ArgumentValueError(f"scaled_dot_product_attention: dropout probability has to be "
                                 f"between 0 and 1, but got {dropout_p}")
    if enable_gqa and query.dim() >= 3 and key.shape[-3] != query.shape[-3]:
        key, value = (_repeat_heads(t, query.shape[-3] // t.shape[-3]) for t in (key, value))
    s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query.matmul(key.transpose(-2, -1)) * s
    if is_causal:
        attn_mask = _causal_mask(query.shape[-2], key.shape[-2], query.device)
    if attn_mask is not None:
        scores = scores + _mask_as_bias(attn_mask, scores)
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True)
    return weights.matmul(value)


def _check_sdpa_dtypes(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
    """PyTorch's rule: q, k, v of one dtype; a mask is bool, float32 or the query's dtype."""
    if not query.dtype is key.dtype is value.dtype:
        raise DTypeError(f"Expected query, key, and value to have the same dtype, but got "
                         f"query.dtype: {query.dtype.name} key.dtype: {key.dtype.name} and "
                         f"value.dtype: {value.dtype.name} instead.")
    if mask is not None and mask.dtype.name not in ("bool", "float32", query.dtype.name):
        raise DTypeError(f"Expected attn_mask dtype to be bool or float or to match query "
                         f"dtype, but got attn_mask.dtype: {mask.dtype.name} and query.dtype: "
                         f"{query.dtype.name} instead.")


def _mha_masks(attn_mask: Tensor | None, key_padding_mask: Tensor | None, q: Tensor,
               shape: tuple[int, int, int, int]) -> Tensor | None:
    """One additive mask broadcasting over (N, H, L, S) scores; boolean masks mean
    True = may NOT attend."""
    bsz, heads, L, S = shape
    mask = None
    if attn_mask is not None:
        want = [(L, S)] if attn_mask.dim() == 2 else [(bsz * heads, L, S)]
        if tuple(attn_mask.shape) not in want:
            raise ShapeError(f"MultiheadAttention: attn_mask should have shape {want[0]}, got "
                             f"{tuple(attn_mask.shape)}")
        mask = _additive(attn_mask, q)
        mask = mask if mask.dim() == 2 else mask.reshape(bsz, heads, L, S)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, S):
            raise ShapeError(f"MultiheadAttention: key_padding_mask should have shape "
                             f"{(bsz, S)}, got {tuple(key_padding_mask.shape)}")
        kpm = _additive(key_padding_mask, q).reshape(bsz, 1, 1, S)
        mask = kpm if mask is None else mask + kpm
    return mask


def _additive(mask: Tensor, like: Tensor) -> Tensor:
    if mask.dtype is D.bool_:
        return where(mask, float("-inf"), 0.0).to(like.dtype)
    return mask.to(like.dtype)


def _in_projection(query: Tensor, key: Tensor, value: Tensor, in_proj_weight: Tensor | None,
                   in_proj_bias: Tensor | None, separate: tuple | None) -> tuple:
    ws = separate if separate is not None else in_proj_weight.chunk(3)
    bs = in_proj_bias.chunk(3) if in_proj_bias is not None else (None, None, None)
    return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), ws, bs))


def _append_kv(k: Tensor, v: Tensor, extra_k: Tensor, extra_v: Tensor, dim: int,
               masks: list[Tensor | None]) -> tuple[Tensor, Tensor, list[Tensor | None]]:
    """Add one key/value position (bias_kv or zero attention); masks grow by one column."""
    k = dispatch("cat", (k, extra_k), {"dim": dim})
    v = dispatch("cat", (v, extra_v), {"dim": dim})
    return k, v, [None if m is None else pad(m, (0, 1)) for m in masks]


def _heads(x: Tensor, n: int, bsz: int, heads: int) -> Tensor:
    """(n, bsz, E) -> (bsz, heads, n, head_dim): a view (only the last dim is split), so no
    copy is made whatever the layout of ``x``; BLAS reads each head's matrix in place."""
    return x.reshape(n, bsz, heads, -1).permute(1, 2, 0, 3)


def _static_heads(t: Tensor, bsz: int, heads: int, name: str) -> Tensor:
    """A (bsz * heads, S, head_dim) ``static_k``/``static_v`` as (bsz, heads, S, head_dim)."""
    if t.dim() != 3 or t.shape[0] != bsz * heads:
        raise ShapeError(f"MultiheadAttention: expected {name} of shape "
                         f"({bsz * heads}, S, head_dim), got {tuple(t.shape)}")
    return t.reshape(bsz, heads, t.shape[1], t.shape[2])


def _attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
            training: bool) -> tuple:
    """softmax(q k^T + mask) v on (N, H, L, hd) heads; ``q`` comes already scaled. A dropout
    with p > 0 stays in the graph with the training flag as its input (train/eval after
    tracing is honoured); p == 0 emits nothing."""
    scores = q.matmul(k.transpose(-2, -1))
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training)
    return weights.matmul(v), weights


def _kv_extras(k: Tensor, v: Tensor, bias_k: Tensor | None, bias_v: Tensor | None,
               masks: list[Tensor | None], bsz: int) -> tuple:
    if bias_k is not None and bias_v is not None:
        e = k.shape[-1]
        k, v, masks = _append_kv(k, v, bias_k.reshape(1, 1, e).expand(1, bsz, e),
                                 bias_v.reshape(1, 1, e).expand(1, bsz, e), 0, masks)
    elif bias_k is not None or bias_v is not None:
        raise ValueError("MultiheadAttention: bias_k and bias_v must both be given or both None")
    return k, v, masks


def _batch_major(x: Tensor) -> bool:
    """A 3-D (L, N, E) tensor laid out (N, L, E) in memory (a ``batch_first`` input)."""
    st = x._data.strides if x.dim() == 3 else None
    return st is not None and x.shape[0] > 1 and x.shape[1] > 1 and st[1] > st[0]


def _merge_heads(out: Tensor, weight: Tensor, bias: Tensor | None, batch_major: bool) -> Tensor:
    """(N, H, L, hd) heads -> out_proj -> (L, N, E). Computed in the caller's memory order:
    for a batch-major input the result is an (L, N, E) view of an (N, L, E) array."""
    bsz, heads, L, hd = out.shape
    if batch_major:
        flat = out.permute(0, 2, 1, 3).reshape(bsz * L, heads * hd)
        return linear(flat, weight, bias).reshape(bsz, L, heads * hd).transpose(0, 1)
    flat = out.permute(2, 0, 1, 3).reshape(L * bsz, heads * hd)
    return linear(flat, weight, bias).reshape(L, bsz, heads * hd)


def multi_head_attention_forward(
        query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int, num_heads: int,
        in_proj_weight: Tensor | None, in_proj_bias: Tensor | None, bias_k: Tensor | None,
        bias_v: Tensor | None, add_zero_attn: bool, dropout_p: float, out_proj_weight: Tensor,
        out_proj_bias: Tensor | None, training: bool = True,
        key_padding_mask: Tensor | None = None, need_weights: bool = True,
        attn_mask: Tensor | None = None, use_separate_proj_weight: bool = False,
        q_proj_weight: Tensor | None = None, k_proj_weight: Tensor | None = None,
        v_proj_weight: Tensor | None = None, static_k: Tensor | None = None,
        static_v: Tensor | None = None, average_attn_weights: bool = True,
        is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    """PyTorch's MultiheadAttention forward on (L, N, E) / unbatched (L, E) inputs."""
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint.")
    batched = query.dim() == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
    L, bsz, E = query.shape
    if E != embed_dim_to_check or E % num_heads:
        raise ShapeError(f"MultiheadAttention: expected query with embed_dim "
                         f"{embed_dim_to_check} divisible by num_heads={num_heads}, got "
                         f"shape {tuple(query.shape)}")
    sep = (q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight else None
    q, k, v = _in_projection(query, key, value, in_proj_weight, in_proj_bias, sep)
    masks: list[Tensor | None] = [attn_mask, key_padding_mask]
    k, v, masks = _kv_extras(k, v, bias_k, bias_v, masks, bsz)
    # the scale joins q's bias add (one fused pass) instead of a pass over the heads
    q = _heads(q * (1.0 / math.sqrt(E // num_heads)), L, bsz, num_heads)
    k = _heads(k, k.shape[0], bsz, num_heads) if static_k is None else \
        _static_heads(static_k, bsz, num_heads, "static_k")
    v = _heads(v, v.shape[0], bsz, num_heads) if static_v is None else \
        _static_heads(static_v, bsz, num_heads, "static_v")
    if add_zero_attn:
        z = full([bsz, num_heads, 1, k.shape[3]], 0.0, dtype=k.dtype, device=k.device)
        k, v, masks = _append_kv(k, v, z, z, 2, masks)
    mask = _mha_masks(masks[0], masks[1], q, (bsz, num_heads, L, k.shape[2]))
    out, weights = _attend(q, k, v, mask, dropout_p, training)
    out = _merge_heads(out, out_proj_weight, out_proj_bias, _batch_major(query))
    out = out if batched else out.reshape(L, E)
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = weights.mean(dim=1)
    return out, (weights if batched else weights.squeeze(0))
