"""ONNX emitters of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy, batched)."""
from __future__ import annotations

from ._table import emits  # noqa: F401
