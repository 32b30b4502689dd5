"""ChannelShuffle.

    >>> nn.ChannelShuffle(2)
    ChannelShuffle(groups=2)
"""
from __future__ import annotations

from scriptmod.nn import functional as F
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor

__all__ = ["ChannelShuffle"]


class ChannelShuffle(Module):
    """Interleaves the channels of ``groups`` groups (ShuffleNet's channel shuffle)."""

    __constants__ = ["groups"]

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.groups = groups

    def forward(self, input: Tensor) -> Tensor:
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
