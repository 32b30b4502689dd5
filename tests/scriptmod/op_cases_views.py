"""``op_cases`` rows of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from op_cases import case  # noqa: F401
