"""Functions and Tensor methods of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique: each published once with ``@public``."""
from __future__ import annotations

from scriptmod._public import public  # noqa: F401
