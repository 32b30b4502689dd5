"""Schemas of embedding bags, padding modes, distances and other layer primitives."""
from __future__ import annotations
