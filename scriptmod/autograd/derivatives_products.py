"""Derivatives of tensor products: einsum, tensordot, the add*mm family, kron, cdist, cross (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
