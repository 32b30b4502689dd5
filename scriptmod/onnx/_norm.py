"""Normalization as ONNX nodes."""
from __future__ import annotations
