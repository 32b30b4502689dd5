"""Derivatives of image resampling (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations
