"""``Dropout``, channel-wise ``Dropout1d``/``2d``/``3d``, ``AlphaDropout`` and
``FeatureAlphaDropout``: the training flag reaches the op as a value, so train/eval is
honoured after tracing too (the alpha variants keep the mode they were traced in).

    >>> nn.Dropout(0.1)
    Dropout(p=0.1, inplace=False)
"""
from __future__ import annotations

from typing import Any

from scriptmod.nn import functional as F
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
           "FeatureAlphaDropout"]


class Dropout(Module):
    """Zero elements with probability ``p`` in training, scaling the rest by 1/(1-p)."""

    _function: Any = F.dropout

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._function(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zero whole channels of (N, C, L) or (C, L) input."""

    _function = F.dropout1d


class Dropout2d(Dropout):
    """Zero whole channels of (N, C, H, W) input."""

    _function = F.dropout2d


class Dropout3d(Dropout):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) input."""

    _function = F.dropout3d


class AlphaDropout(Dropout):
    """Dropout that keeps a SELU network's mean and variance."""

    _function = F.alpha_dropout


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels."""

    _function = F.feature_alpha_dropout
