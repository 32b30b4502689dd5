"""InstanceNorm1d/2d/3d and their Lazy variants."""
from __future__ import annotations

__all__: list[str] = []
