"""Image resampling as ONNX nodes."""
from __future__ import annotations
