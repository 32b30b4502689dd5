"""Schemas of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy, batched)."""
from __future__ import annotations
