"""Reference kernels of tensor products: einsum, tensordot, the add*mm family, kron, cdist, cross."""
from __future__ import annotations
