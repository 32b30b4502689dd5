"""``op_cases`` rows of tensor products: einsum, tensordot, the add*mm family, kron, cdist, cross (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from op_cases import case  # noqa: F401
