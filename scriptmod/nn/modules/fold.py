"""Fold and Unfold (sliding local blocks)."""
from __future__ import annotations

__all__: list[str] = []
