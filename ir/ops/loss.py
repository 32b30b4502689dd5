"""Schemas of losses that are not decompositions (CTC, ...)."""
from __future__ import annotations
