"""Derivatives of special functions (torch.special and the top-level gamma/erfinv/Bessel family), on SciPy's special (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
