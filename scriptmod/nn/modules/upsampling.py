"""Upsample, UpsamplingNearest2d, UpsamplingBilinear2d."""
from __future__ import annotations

__all__: list[str] = []
