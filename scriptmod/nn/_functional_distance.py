"""Distances and similarities of ``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

from scriptmod.tensor import Tensor

__all__ = ["cosine_similarity"]


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (broadcast first), each
    divided by its norm clamped at ``eps`` as PyTorch does (zeros give 0, not nan).

    >>> F.cosine_similarity(scriptmod.tensor([[1.0, 0.0]]), scriptmod.tensor([[1.0, 1.0]]))
    tensor([0.7071])
    """
    shape = list((x1 + x2).shape)   # the broadcast shape (torch expands both to it)
    a, b = x1.expand(shape), x2.expand(shape)
    na = (a * a).sum(dim=dim, keepdim=True).sqrt().clamp(min=eps)
    nb = (b * b).sum(dim=dim, keepdim=True).sqrt().clamp(min=eps)
    return ((a / na) * (b / nb)).sum(dim=dim)
