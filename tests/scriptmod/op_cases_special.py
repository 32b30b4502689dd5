"""``op_cases`` rows of special functions (torch.special and the top-level gamma/erfinv/Bessel family), on SciPy's special (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from op_cases import case  # noqa: F401
