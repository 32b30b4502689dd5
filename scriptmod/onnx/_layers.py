"""Embedding bags, padding, distances and other layers as ONNX nodes."""
from __future__ import annotations
