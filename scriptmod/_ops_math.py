"""Functions and Tensor methods of elementwise math beyond the core: trigonometric/hyperbolic, log10, frac, copysign, fmod, hypot, lerp, addcmul/addcdiv, xlogy, nan_to_num, isfinite, complex helpers: each published once with ``@public``."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401
