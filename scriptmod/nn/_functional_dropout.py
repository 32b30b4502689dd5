"""Dropout variants (channel-wise, alpha) of ``scriptmod.nn.functional`` (re-exported by it)."""
from __future__ import annotations

__all__: list[str] = []
