"""Derivatives of embedding bags, padding, distances and other layers (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations
