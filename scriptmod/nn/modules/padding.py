"""Padding layers: zero, constant, reflection, replication and circular, 1-D to 3-D."""
from __future__ import annotations

__all__: list[str] = []
