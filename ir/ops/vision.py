"""Schemas of image resampling (interpolate, grid_sample, affine_grid, shuffles)."""
from __future__ import annotations
