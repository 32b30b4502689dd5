"""einops on scriptmod tensors: ``rearrange``, ``reduce``, ``repeat``, ``pack``/``unpack``
and the layers ``Rearrange``/``Reduce`` (``pip install einops``; written against einops 0.8).

einops chooses a backend by the tensor's type among the backends whose classes exist; this
module defines scriptmod's, so import it once before the first einops call::

    import scriptmod.integrations.einops              # registers the backend
    from einops import rearrange
    from scriptmod.integrations.einops import Rearrange, Reduce

    patches = rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=16, p2=16)
    to_patches = nn.Sequential(Rearrange("b c (h p) (w q) -> b (h w) (p q c)", p=16, q=16),
                               nn.Linear(16 * 16 * 3, dim))

``import scriptmod`` itself never imports einops. Every einops operation becomes reshapes,
permutes, expands and reductions of scriptmod, so it runs eagerly, records gradients and is
traced by ``scriptmod.jit.trace``. ``Rearrange`` and ``Reduce`` are ``scriptmod.nn.Module``s
(einops' own ``einops.layers.torch`` subclass ``torch.nn.Module``): in a model ported from
torch, import them from here instead of from ``einops.layers.torch``. ``einops.einsum`` is
``scriptmod.einsum`` (one batched matmul per contraction, so it traces onto the GEMM path).
"""
from __future__ import annotations

from typing import Any, Sequence

from einops._backends import AbstractBackend
from einops.layers import RearrangeMixin, ReduceMixin

import scriptmod
from scriptmod.jit.frontend import is_tracing
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor

__all__ = ["ScriptmodBackend", "Rearrange", "Reduce"]

_FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


class ScriptmodBackend(AbstractBackend):
    """einops' view of scriptmod: found by ``framework_name`` once ``scriptmod`` is imported
    and this class defined (einops scans ``AbstractBackend``'s subclasses)."""

    framework_name = "scriptmod"

    def is_appropriate_type(self, tensor: Any) -> bool:
        return isinstance(tensor, Tensor)

    def shape(self, x: Tensor) -> Any:
        """Sizes as einops caches recipes by them; while tracing, a list instead: traced sizes
        belong to one trace, and einops does not cache what it cannot hash."""
        return list(x.shape) if is_tracing() else x.shape

    def from_numpy(self, x: Any) -> Tensor:
        t = scriptmod.from_numpy(x)
        return t.requires_grad_(True) if self.is_float_type(t) else t

    def to_numpy(self, x: Tensor) -> Any:
        return x.detach().cpu().numpy()

    def arange(self, start: int, stop: int) -> Tensor:
        return scriptmod.arange(start, stop, dtype=scriptmod.int64)

    def reduce(self, x: Tensor, operation: str, reduced_axes: Sequence[int]) -> Tensor:
        if operation in ("min", "max"):
            return getattr(x, "a" + operation)(dim=tuple(reduced_axes))
        if operation in ("sum", "mean"):
            return getattr(x, operation)(dim=tuple(reduced_axes))
        if operation in ("any", "all", "prod"):   # one axis at a time, last first
            for axis in sorted(reduced_axes, reverse=True):
                x = getattr(x, operation)(dim=axis)
            return x
        raise NotImplementedError(f"Unknown reduction {operation!r}")

    def transpose(self, x: Tensor, axes: Sequence[int]) -> Tensor:
        return x.permute(*axes)

    def stack_on_zeroth_dimension(self, tensors: list[Tensor]) -> Tensor:
        return scriptmod.stack(tensors)

    def add_axes(self, x: Tensor, n_axes: int, pos2len: dict[int, int]) -> Tensor:
        """New axes of the given lengths: an expanded view (no copy), as einops' torch
        backend does."""
        repeats = [-1] * n_axes
        for position, length in pos2len.items():
            x = x.unsqueeze(position)
            repeats[position] = length
        return x.expand(*repeats)

    def tile(self, x: Tensor, repeats: Sequence[int]) -> Tensor:
        return x.repeat(*repeats)

    def concat(self, tensors: list[Tensor], axis: int) -> Tensor:
        return scriptmod.cat(tensors, dim=axis)

    def add_axis(self, x: Tensor, new_position: int) -> Tensor:
        return x.unsqueeze(new_position)

    def is_float_type(self, x: Tensor) -> bool:
        return x.dtype.name in _FLOAT_DTYPES

    def einsum(self, pattern: str, *x: Tensor) -> Tensor:
        from scriptmod._ops_products import einsum
        return einsum(pattern, *x)

    def layers(self) -> Any:
        import sys
        return sys.modules[__name__]


class Rearrange(RearrangeMixin, Module):
    """``einops.rearrange`` as a layer: ``Rearrange("b c h w -> b (c h w)")``."""

    def forward(self, input: Tensor) -> Tensor:
        return self._apply_recipe(input)


class Reduce(ReduceMixin, Module):
    """``einops.reduce`` as a layer: ``Reduce("b c h w -> b c", "mean")``."""

    def forward(self, input: Tensor) -> Tensor:
        return self._apply_recipe(input)
