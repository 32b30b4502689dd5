"""The exceptions a user meets when an op is given shapes or dtypes that do not fit.

PyTorch raises ``RuntimeError`` for both, and every PyTorch user's ``except RuntimeError``
expects that; code written against our earlier releases caught ``ValueError``/``TypeError``.
Each class is both, so either ``except`` works.

    >>> from scriptmod.ir.errors import ShapeError
    >>> issubclass(ShapeError, RuntimeError) and issubclass(ShapeError, ValueError)
    True
"""
from __future__ import annotations


class ShapeError(RuntimeError, ValueError):
    """Shapes that do not fit an op (broadcast, matmul, reshape, an index out of range)."""


class DTypeError(RuntimeError, TypeError):
    """Dtypes that do not fit an op (``Linear`` weights of bfloat16 fed float32)."""
