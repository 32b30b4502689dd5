"""Reference kernels of scatter/index_* writes, take, nonzero, masked_select, searchsorted, bincount, histc, unique."""
from __future__ import annotations
