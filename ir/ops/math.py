"""Schemas of elementwise math beyond the core: trigonometric/hyperbolic, log10, frac, copysign, fmod, hypot, lerp, addcmul/addcdiv, xlogy, nan_to_num, isfinite, complex helpers."""
from __future__ import annotations
