"""Derivatives of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
