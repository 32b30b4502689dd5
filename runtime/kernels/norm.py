"""Reference kernels of normalization (group, instance, local response, RMS norm)."""
from __future__ import annotations
