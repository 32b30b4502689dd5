"""``op_cases`` rows of elementwise math beyond the core: trigonometric/hyperbolic, log10, frac, copysign, fmod, hypot, lerp, addcmul/addcdiv, xlogy, nan_to_num, isfinite, complex helpers (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from op_cases import case  # noqa: F401
