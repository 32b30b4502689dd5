"""Resampling and rearranging of images of ``scriptmod.nn.functional`` (interpolate, grid
sampling, pixel and channel shuffles; re-exported by it)."""
from __future__ import annotations

__all__: list[str] = []
