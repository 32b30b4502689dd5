"""Transformer, its encoder and decoder stacks and their layers."""
from __future__ import annotations

__all__: list[str] = []
