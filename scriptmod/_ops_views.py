"""Functions and Tensor methods of views, copies and layout: diag/diagonal, flips and rolls, stacks and splits, broadcast_*, *_copy, *_scatter, meshgrid, complex views: each published once with ``@public``."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401
