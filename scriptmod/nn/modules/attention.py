"""``MultiheadAttention`` with PyTorch's parameters (``in_proj_weight``, ``in_proj_bias``,
``out_proj``) so that state dicts load across.

    >>> mha = nn.MultiheadAttention(16, 4, batch_first=True)
    >>> x = scriptmod.randn(2, 5, 16)                     # (batch, sequence, embed)
    >>> out, weights = mha(x, x, x)
    >>> out.shape, weights.shape                          # weights averaged over heads
    (scriptmod.Size([2, 5, 16]), scriptmod.Size([2, 5, 5]))
"""
from __future__ import annotations

from typing import Any

from scriptmod._creation import empty
from scriptmod.nn import functional as F
from scriptmod.nn import init
from scriptmod.ir.errors import ShapeError
from scriptmod.nn.module import Module
from scriptmod.nn.modules.linear import NonDynamicallyQuantizableLinear
from scriptmod.nn.parameter import Parameter
from scriptmod.tensor import Tensor

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads; inputs (L, N, E), or (N, L, E) with
    ``batch_first``, or unbatched (L, E)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise ValueError("embed_dim must be divisible by num_heads")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.batch_first, self.head_dim = batch_first, embed_dim // num_heads
        self._make_projections(bias, {"device": device, "dtype": dtype})
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias,
                                                        device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, embed_dim, device=device, dtype=dtype))
            self.bias_v = Parameter(empty(1, 1, embed_dim, device=device, dtype=dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _make_projections(self, bias: bool, kw: dict) -> None:
        E = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * E, E, **kw))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(E, E, **kw))
            self.k_proj_weight = Parameter(empty(E, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(E, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * E, **kw))
        else:
            self.register_parameter("in_proj_bias", None)

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        q_rank = query.dim()
        if q_rank not in (2, 3) or key.dim() != q_rank or value.dim() != q_rank:
            raise ShapeError(f"MultiheadAttention: expected query, key and value all 2-D "
                             f"(unbatched) or all 3-D, got shapes {tuple(query.shape)}, "
                             f"{tuple(key.shape)}, {tuple(value.shape)}")
        for name, t, want in (("query", query, self.embed_dim), ("key", key, self.kdim),
                              ("value", value, self.vdim)):
            if t.shape[-1] != want:
                raise ShapeError(f"MultiheadAttention: expected {name} with last dimension "
                                 f"{want}, got shape {tuple(t.shape)}")

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Tensor | None = None, need_weights: bool = True,
                attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        self._check_inputs(query, key, value)
        flip = self.batch_first and query.dim() == 3
        if flip:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights,
            is_causal=is_causal)
        return (out.transpose(0, 1) if flip else out), weights
