"""Functions and Tensor methods of tensor products: einsum, tensordot, the add*mm family, kron, cdist, cross: each published once with ``@public``."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401
