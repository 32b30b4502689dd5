"""Derivatives of elementwise math beyond the core: trigonometric/hyperbolic, log10, frac, copysign, fmod, hypot, lerp, addcmul/addcdiv, xlogy, nan_to_num, isfinite, complex helpers (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations

from scriptmod.autograd.derivative_table import _op, derivative  # noqa: F401
