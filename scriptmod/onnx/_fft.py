"""ONNX emitters of torch.fft's transform families: none yet.

``fft_c2c``, ``fft_r2c`` and ``fft_c2r`` produce or read complex tensors, which standard ONNX
operators do not take: ONNX's ``DFT`` (opset 17/20) carries a complex signal as a trailing
dimension of size 2 (real, imaginary), so exporting a transform means exporting the complex
values around it in that form too (every consumer of the spectrum: ``abs``, ``mul``, ...),
which this exporter does not do. A model with an FFT therefore fails to export with the
exporter's message naming the op. (The window functions are constants and export as such;
``stft``/``istft`` are decompositions over these ops.)
"""
from __future__ import annotations

from ._table import emits  # noqa: F401
