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


class KernelDTypeError(DTypeError, NotImplementedError):
    """An op with no kernel for the input's dtype: PyTorch's ``NotImplementedError``
    (``"gelu" not implemented for 'Long'``), still a ``DTypeError``."""


class ArgumentError(RuntimeError, TypeError):
    """Arguments that do not fit a compiled signature (missing, extra, of the wrong kind):
    a ``RuntimeError`` as in PyTorch's ``forward() is missing value for argument 'y'``, and
    a ``TypeError`` as for a Python function called so."""


class DeviceError(RuntimeError, ValueError):
    """A device an op cannot use: an unknown device string, inputs on different devices."""


class ArgumentValueError(RuntimeError, ValueError):
    """An argument value an op cannot take (a zero step, ``clamp`` with neither bound), which
    PyTorch reports as ``RuntimeError``; still a ``ValueError`` for code that caught that."""


class IndexRangeError(IndexError, RuntimeError):
    """An index outside its dim: PyTorch raises ``IndexError`` for some ops and shapes
    (``index out of range in self``) and ``RuntimeError`` for others; this is both."""


class TraceGuardError(RuntimeError):
    """A call would take a path the trace did not record: Python code branched on (or baked
    in) a size at trace time, and this input changes that decision."""


def guard_failure(what: str, where: str) -> TraceGuardError:
    """The error a failing ``sm::guard`` raises: the condition and the user's line."""
    at = f" at {where}" if where else ""
    return TraceGuardError(
        f"guard failed: this call takes a path the trace did not record. The model was traced "
        f"with `{what}` true{at}, and it is false for this input (Python control flow on a size is "
        f"frozen at trace time). Retrace with an input of this shape, or keep sizes out of "
        f"Python conditions.")
