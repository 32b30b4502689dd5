"""Losses as ONNX nodes.

Every loss but CTC is a decomposition, exported through its primitives' emitters; CTC's
registry ops (``ctc_loss``, ``ctc_loss_grad``) have no standard ONNX node, so none is here.
"""
from __future__ import annotations
