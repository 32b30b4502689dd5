"""``Embedding`` (a lookup table of ``num_embeddings`` rows) and ``EmbeddingBag`` (sums,
means or maxima of bags of its rows).

    >>> nn.Embedding(10, 3, padding_idx=0)
    Embedding(10, 3, padding_idx=0)
    >>> nn.EmbeddingBag(10, 3, mode="sum")
    EmbeddingBag(10, 3, mode='sum')
"""
from __future__ import annotations

from typing import Any

from scriptmod.ir import dtypes as D
from scriptmod._creation import empty
from scriptmod.autograd.grad_mode import no_grad
from scriptmod.nn import functional as F
from scriptmod.nn import init
from scriptmod.nn._functional_layers import _padding_index
from scriptmod.ir.errors import DTypeError, ShapeError
from scriptmod.nn.module import Module
from scriptmod.nn.parameter import Parameter
from scriptmod.tensor import Tensor

__all__ = ["Embedding", "EmbeddingBag"]


def _table(module: Module, num_embeddings: int, embedding_dim: int, weight: Tensor | None,
           freeze: bool, device: Any, dtype: Any) -> None:
    """``module.weight``: the given (num_embeddings, embedding_dim) table, or a new one
    initialized by ``reset_parameters`` (N(0, 1), the padding row zeroed)."""
    if weight is None:
        module.weight = Parameter(empty(num_embeddings, embedding_dim, device=device,
                                        dtype=dtype), requires_grad=not freeze)
        module.reset_parameters()
        return
    if tuple(weight.shape) != (num_embeddings, embedding_dim):
        raise ShapeError(f"{type(module).__name__}: shape of weight {tuple(weight.shape)} does "
                         f"not match num_embeddings and embedding_dim ({num_embeddings}, "
                         f"{embedding_dim})")
    module.weight = Parameter(weight, requires_grad=not freeze)


class _Table(Module):
    """What ``Embedding`` and ``EmbeddingBag`` share: the weight's init and the padding row."""

    padding_idx: int | None

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0


class Embedding(_Table):
    """Rows of a (num_embeddings, embedding_dim) table picked by integer indices
    (``F.embedding``; every option as torch, ``sparse=True`` with a dense gradient)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight: Tensor | None = None, _freeze: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = _padding_index(padding_idx, num_embeddings, "Embedding")
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        _table(self, num_embeddings, embedding_dim, _weight, _freeze, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        if input.dtype.category != D.INT:
            raise DTypeError(f"Embedding: expected indices of an integer dtype (Long or Int), "
                             f"got {input.dtype.name}")
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        if self.sparse is not False:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True,
                        padding_idx: int | None = None, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> "Embedding":
        if embeddings.dim() != 2:
            raise ShapeError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)


class EmbeddingBag(_Table):
    """Sums, means (the default) or maxima of bags of rows of a (num_embeddings,
    embedding_dim) table, without the picked rows in between (``F.embedding_bag``).

        >>> bag = nn.EmbeddingBag(10, 3, mode="sum")
        >>> bag(scriptmod.tensor([1, 2, 4, 5, 4]), scriptmod.tensor([0, 2])).shape
        scriptmod.Size([2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: Tensor | None = None,
                 include_last_offset: bool = False, padding_idx: int | None = None,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.padding_idx = _padding_index(padding_idx, num_embeddings, "EmbeddingBag")
        _table(self, num_embeddings, embedding_dim, _weight, False, device, dtype)
        self.mode, self.sparse = mode, sparse
        self.include_last_offset = include_last_offset

    def forward(self, input: Tensor, offsets: Tensor | None = None,
                per_sample_weights: Tensor | None = None) -> Tensor:
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse,
                               per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        s += f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True,
                        max_norm: float | None = None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, mode: str = "mean",
                        sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: int | None = None) -> "EmbeddingBag":
        """A bag over the given 2-D table (its weight frozen unless ``freeze=False``)."""
        if embeddings.dim() != 2:
            raise ShapeError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                  _weight=embeddings, include_last_offset=include_last_offset,
                  padding_idx=padding_idx)
        bag.weight.requires_grad = not freeze
        return bag
