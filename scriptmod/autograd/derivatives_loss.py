"""Derivatives of losses (rows of ``autograd.derivatives``' table)."""
from __future__ import annotations
