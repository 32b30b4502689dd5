"""Schemas of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views."""
from __future__ import annotations
