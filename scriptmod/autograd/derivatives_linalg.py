"""Derivatives of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy, batched) (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
