"""``Transformer``, its encoder and decoder stacks and their layers: PyTorch's constructors,
submodule names (``self_attn``, ``multihead_attn``, ``linear1``, ``norm1``... ``layers``,
``norm``, ``encoder``, ``decoder``) and numbers, so that a torch state dict loads with
``strict=True`` and the outputs agree with torch's.

    >>> layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32,
    ...                                    batch_first=True)
    >>> encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    >>> encoder(scriptmod.randn(2, 5, 16)).shape
    scriptmod.Size([2, 5, 16])

PyTorch has two ways through these layers: its "fast path" (fused kernels and nested tensors,
taken in eval mode without gradients) and the plain composition of attention, feed-forward and
layer norms. Both compute the same numbers; scriptmod always takes the plain one, so eager,
traced and scripted runs, train and eval, share one definition. ``enable_nested_tensor`` is
accepted and recorded as torch records it, with torch's warning when it cannot apply.

The ``is_causal`` hints only say that the mask given *is* the causal mask (torch's contract);
scriptmod then applies that mask, which gives what torch's causal kernels give. A hint without
a mask raises, as in torch.
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Union

from scriptmod._creation import full, zeros_like
from scriptmod._shape_ops import triu
from scriptmod.ir import dtypes as D
from scriptmod.nn import functional as F
from scriptmod.nn import init
from scriptmod.nn.containers import ModuleList
from scriptmod.nn.module import Module
from scriptmod.nn.modules.activation import GELU, ReLU
from scriptmod.nn.modules.attention import MultiheadAttention
from scriptmod.nn.modules.dropout import Dropout
from scriptmod.nn.modules.linear import Linear
from scriptmod.nn.modules.normalization import LayerNorm
from scriptmod.tensor import Tensor

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder",
           "TransformerEncoderLayer", "TransformerDecoderLayer"]

Activation = Union[str, Callable[[Tensor], Tensor]]


# ---- helpers (torch.nn.modules.transformer's private functions) -----------------------------
def _generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
    """(sz, sz) float mask: 0 on and below the diagonal, -inf above (no look-ahead)."""
    return triu(full((sz, sz), float("-inf"), dtype=dtype, device=device), diagonal=1)


def _get_activation_fn(activation: str) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _relu_or_gelu(activation: Callable[[Tensor], Tensor]) -> int:
    """torch's ``activation_relu_or_gelu`` flag: 1 for ReLU, 2 for GELU, 0 for anything else."""
    if activation is F.relu or isinstance(activation, ReLU):
        return 1
    if activation is F.gelu or isinstance(activation, GELU):
        return 2
    return 0


def _get_clones(module: Module, n: int) -> ModuleList:
    """``n`` independent deep copies (the same initial weights, as torch's stacks have)."""
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def _canonical_mask(mask: Tensor | None, mask_name: str, other: Tensor | None,
                    other_name: str, dtype: D.DType) -> Tensor | None:
    """A bool mask (True = may not attend) becomes the additive float mask of ``dtype``; a
    float mask is kept. Masks of other dtypes raise and masks of different kinds warn, as
    torch's ``F._canonical_mask`` does."""
    if mask is None:
        return None
    if mask.dtype is not D.bool_ and not mask.dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {mask_name} are supported")
    if other is not None and other.dtype is not mask.dtype:
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. "
                      f"Use same type for both instead.", stacklevel=3)
    if mask.dtype is D.bool_:
        return zeros_like(mask, dtype=dtype).masked_fill(mask, float("-inf"))
    return mask


def _nested_tensor_refusal(layer: Module) -> str:
    """Why torch's encoder would not use nested tensors with ``layer`` ('' if it would)."""
    name = "encoder_layer"
    if not isinstance(layer, TransformerEncoderLayer):
        return f"{name} was not TransformerEncoderLayer"
    attn = layer.self_attn
    for failed, reason in (
            (layer.norm_first, f"{name}.norm_first was True"),
            (not attn.batch_first, f"{name}.self_attn.batch_first was not True(use batch_first "
                                   f"for better inference performance)"),
            (not attn._qkv_same_embed_dim, f"{name}.self_attn._qkv_same_embed_dim was not True"),
            (attn.in_proj_bias is None, f"{name}.self_attn was passed bias=False"),
            (not layer.activation_relu_or_gelu, f"{name}.activation_relu_or_gelu was not True"),
            (layer.norm1.eps != layer.norm2.eps,
             f"{name}.norm1.eps was not equal to {name}.norm2.eps"),
            (attn.num_heads % 2 == 1, f"{name}.self_attn.num_heads is odd")):
        if failed:
            return reason
    return ""


# ---- layers ---------------------------------------------------------------------------------
_NAMED_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class _FeedForwardLayer(Module):
    """What both layers share: the feed-forward block and its activation."""

    @property
    def activation(self) -> Callable[[Tensor], Tensor]:
        """The feed-forward activation, as given. ``F.relu`` and ``F.gelu`` are kept by name
        (a plain value), so that a scripted layer saves to an archive; a module is a
        submodule, as in torch."""
        d = self.__dict__
        if d["_modules"].get("activation") is not None:
            return d["_modules"]["activation"]
        name = d.get("_activation_name")
        return _NAMED_ACTIVATIONS[name] if name is not None else d["_activation_fn"]

    @activation.setter
    def activation(self, fn: Callable[[Tensor], Tensor]) -> None:
        name = next((k for k, f in _NAMED_ACTIVATIONS.items() if f is fn), None)
        self.__dict__["_activation_name"] = name
        self.__dict__["_activation_fn"] = None if name is not None else fn

    def _init_feedforward(self, d_model: int, dim_feedforward: int, dropout: float,
                          activation: Activation, bias: bool, kw: dict[str, Any]) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)

    def _set_activation(self, activation: Activation) -> None:
        self.activation = (_get_activation_fn(activation) if isinstance(activation, str)
                           else activation)

    def _ff_core(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _attend(self, attn: MultiheadAttention, x: Tensor, mem: Tensor,
                attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                is_causal: bool) -> Tensor:
        return attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                    need_weights=False, is_causal=is_causal)[0]


class TransformerEncoderLayer(_FeedForwardLayer):
    """Self-attention then a feed-forward network, each with a residual connection and a
    LayerNorm (after each block, or before with ``norm_first``). Inputs (S, N, E), or
    (N, S, E) with ``batch_first``, or unbatched (S, E)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Activation = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self._init_feedforward(d_model, dim_feedforward, dropout, activation, bias, kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        if isinstance(activation, str):
            activation = _get_activation_fn(activation)
        self.activation_relu_or_gelu = _relu_or_gelu(activation)
        self.activation = activation

    def forward(self, src: Tensor, src_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        src_key_padding_mask = _canonical_mask(src_key_padding_mask, "src_key_padding_mask",
                                               src_mask, "src_mask", src.dtype)
        src_mask = _canonical_mask(src_mask, "src_mask", None, "", src.dtype)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool = False) -> Tensor:
        return self.dropout1(self._attend(self.self_attn, x, x, attn_mask, key_padding_mask,
                                          is_causal))

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self._ff_core(x))


class TransformerDecoderLayer(_FeedForwardLayer):
    """Self-attention over the target, attention over the encoder's ``memory``, then a
    feed-forward network; residuals and LayerNorms as in ``TransformerEncoderLayer``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Activation = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias, **kw)
        self._init_feedforward(d_model, dim_feedforward, dropout, activation, bias, kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self._set_activation(activation)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                                    memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                           memory_is_causal))
        return self.norm3(x + self._ff_block(x))

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool = False) -> Tensor:
        return self.dropout1(self._attend(self.self_attn, x, x, attn_mask, key_padding_mask,
                                          is_causal))

    def _mha_block(self, x: Tensor, mem: Tensor, attn_mask: Tensor | None,
                   key_padding_mask: Tensor | None, is_causal: bool = False) -> Tensor:
        return self.dropout2(self._attend(self.multihead_attn, x, mem, attn_mask,
                                          key_padding_mask, is_causal))

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self._ff_core(x))


# ---- stacks ---------------------------------------------------------------------------------
class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` in turn, then ``norm`` if given. The copies
    start with equal weights (torch's warning: re-initialise them if that matters)."""

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        refusal = _nested_tensor_refusal(encoder_layer)
        if enable_nested_tensor and refusal:
            warnings.warn(f"enable_nested_tensor is True, but self.use_nested_tensor is False "
                          f"because {refusal}", stacklevel=3)   # past Module's __init__ wrapper
            self.use_nested_tensor = False

    def forward(self, src: Tensor, mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        src_key_padding_mask = _canonical_mask(src_key_padding_mask, "src_key_padding_mask",
                                               mask, "mask", src.dtype)
        mask = _canonical_mask(mask, "mask", None, "", src.dtype)
        output = src
        for mod in self.layers:
            output = mod(output, src_mask=mask, is_causal=bool(is_causal),
                         src_key_padding_mask=src_key_padding_mask)
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` in turn over (target, memory), then ``norm``
    if given."""

    def __init__(self, decoder_layer: Module, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        output = tgt
        for mod in self.layers:
            output = mod(output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                         tgt_key_padding_mask=tgt_key_padding_mask,
                         memory_key_padding_mask=memory_key_padding_mask,
                         tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return output if self.norm is None else self.norm(output)


class Transformer(Module):
    """The encoder-decoder of "Attention Is All You Need": ``encoder`` (a TransformerEncoder
    with a final LayerNorm, or ``custom_encoder``) over ``src``, ``decoder`` over ``tgt`` and
    the encoder's output.

        >>> model = nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1,
        ...                        num_decoder_layers=1, dim_feedforward=32)
        >>> src, tgt = scriptmod.randn(7, 2, 16), scriptmod.randn(5, 2, 16)
        >>> mask = nn.Transformer.generate_square_subsequent_mask(5)
        >>> model(src, tgt, tgt_mask=mask).shape
        scriptmod.Size([5, 2, 16])
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: Activation = F.relu,
                 custom_encoder: Any | None = None, custom_decoder: Any | None = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **kw), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **kw), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch_dim = 0 if self.batch_first else 1
        if src.dim() == 3 and src.size(batch_dim) != tgt.size(batch_dim):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None,
                                        dtype: Any = None) -> Tensor:
        """A causal mask for a sequence of ``sz``: -inf above the diagonal, 0 elsewhere."""
        return _generate_square_subsequent_mask(sz, device=device, dtype=dtype)

    def _reset_parameters(self) -> None:
        """Xavier-uniform every matrix (torch's init; vectors keep their layers' init)."""
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
