"""Programs whose branches index dims only some input ranks have (torchvision's
``get_dimensions``: ``1 if img.ndim == 2 else img.shape[-3]``). Kept out of the test module
so that they have plain source."""
from __future__ import annotations

from typing import List, Optional

from scriptmod import Tensor


def channels_by_rank(img: Tensor) -> List[int]:
    channels = 1 if img.ndim == 2 else img.shape[-3]
    height, width = img.shape[-2:]
    return [channels, height, width]


def returns_by_rank(img: Tensor) -> int:
    if img.ndim == 2:
        return 1
    elif img.ndim == 3:
        return img.shape[-3]
    return img.size(-3) * img.size(-4)


def grayscale_by_rank(img: Tensor) -> Tensor:
    if img.dim() < 3:
        return img * 2
    r, g, b = img.unbind(dim=-3)
    return (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(dim=-3)


def checked_channels(img: Tensor) -> int:
    if img.ndim < 3:
        raise TypeError(f"Input image tensor should have at least 3 dimensions, but found "
                        f"{img.ndim}")
    return img.shape[-3]


def size_at_a_runtime_axis(img: Tensor, k: int, axis: int) -> int:
    return min(k, img.size(axis))


def normalized_by_mask(x: Tensor, mask: Optional[Tensor] = None, normalize: bool = True) -> Tensor:
    if mask is not None:
        if mask.shape[:-1] != x.shape[:-1] or mask.shape[-1] != x.shape[-1]:
            raise ValueError("mask and x differ in shape")
        if normalize:
            mask = mask / (mask.sum(dim=-1, keepdim=True) + 1e-15)
        x = x * mask
    return x


def checked_lengths(w: Tensor, lengths: Optional[Tensor] = None) -> Tensor:
    if not (w.ndim == 2 and (lengths is None or lengths.ndim == 1)):
        raise ValueError("expected a 2-D input and 1-D lengths")
    return w * 2
