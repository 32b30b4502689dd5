"""Derivatives of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
