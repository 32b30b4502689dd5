"""Top-level functions and Tensor methods of torch.linalg's decompositions and solvers (LAPACK through NumPy/SciPy, batched) (``scriptmod.cholesky``, ``Tensor.svd``...; ``scriptmod.linalg`` holds the namespace)."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401
