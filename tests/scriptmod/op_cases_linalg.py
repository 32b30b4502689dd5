"""``op_cases`` rows of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy, batched) (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders)."""
from __future__ import annotations

from op_cases import case  # noqa: F401
