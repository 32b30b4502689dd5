"""Pooling layers: max, average, LP, adaptive and fractional pools over 1, 2 or 3 dims, and
max unpooling. Arguments are stored as PyTorch stores them, so the reprs are PyTorch's.

    >>> nn.MaxPool2d(2)
    MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)
    >>> nn.AdaptiveAvgPool2d((7, 7))
    AdaptiveAvgPool2d(output_size=(7, 7))
"""
from __future__ import annotations

from typing import Any

from scriptmod.ir.errors import ShapeError
from scriptmod.nn import functional as F
from scriptmod.nn.module import Module
from scriptmod.tensor import Tensor

__all__ = [f"{name}{n}d" for n in (1, 2, 3) for name in (
    "MaxPool", "AvgPool", "LPPool", "AdaptiveAvgPool", "AdaptiveMaxPool", "MaxUnpool")]
__all__ += ["FractionalMaxPool2d", "FractionalMaxPool3d"]


def _check_rank(layer: Module, input: Tensor) -> None:
    """The layer's name in the error, as the old 2-d layers gave it."""
    n = layer._rank
    if input.dim() not in (n + 1, n + 2):
        raise ShapeError(f"{type(layer).__name__}: expected {n + 1}-D or {n + 2}-D input "
                         f"(unbatched or batched), got shape {tuple(input.shape)}")


def _repeat(v: Any, n: int) -> Any:
    """PyTorch's ``_single``/``_pair``/``_triple``: a sequence as a tuple, else n copies."""
    return tuple(v) if isinstance(v, (list, tuple)) else (v,) * n


class _MaxPoolNd(Module):
    _rank = 0

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input: Tensor) -> Any:
        _check_rank(self, input)
        pool = getattr(F, f"max_pool{self._rank}d")
        return pool(input, self.kernel_size, self.stride, self.padding, self.dilation,
                    ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    _rank = 1


class MaxPool2d(_MaxPoolNd):
    _rank = 2


class MaxPool3d(_MaxPoolNd):
    _rank = 3


class _AvgPoolNd(Module):
    _rank = 0

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input: Tensor) -> Tensor:
        _check_rank(self, input)
        return getattr(F, f"avg_pool{self._rank}d")(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """PyTorch's AvgPool1d has no ``divisor_override`` and stores its sizes as 1-tuples."""
    _rank = 1

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 ceil_mode: bool = False, count_include_pad: bool = True) -> None:
        super().__init__(_repeat(kernel_size, 1),
                         _repeat(stride if stride is not None else kernel_size, 1),
                         _repeat(padding, 1), ceil_mode, count_include_pad)
        del self.divisor_override

    def forward(self, input: Tensor) -> Tensor:
        _check_rank(self, input)
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)


class AvgPool2d(_AvgPoolNd):
    _rank = 2


class AvgPool3d(_AvgPoolNd):
    _rank = 3


class _LPPoolNd(Module):
    _rank = 0

    def __init__(self, norm_type: float, kernel_size: Any, stride: Any = None,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, f"lp_pool{self._rank}d")(input, float(self.norm_type), self.kernel_size,
                                                   self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    _rank = 1


class LPPool2d(_LPPoolNd):
    _rank = 2


class LPPool3d(_LPPoolNd):
    _rank = 3


class _AdaptiveAvgPoolNd(Module):
    _rank = 0

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, f"adaptive_avg_pool{self._rank}d")(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    _rank = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    _rank = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    _rank = 3


class _AdaptiveMaxPoolNd(Module):
    _rank = 0

    def __init__(self, output_size: Any, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input: Tensor) -> Any:
        return getattr(F, f"adaptive_max_pool{self._rank}d")(input, self.output_size,
                                                             self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    _rank = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    _rank = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    _rank = 3


class _FractionalMaxPoolNd(Module):
    """``_random_samples`` (a buffer, as in PyTorch) fixes the windows; None draws them anew
    at every call."""
    _rank = 0

    def __init__(self, kernel_size: Any, output_size: Any = None, output_ratio: Any = None,
                 return_indices: bool = False, _random_samples: Tensor | None = None) -> None:
        super().__init__()
        n, name = self._rank, type(self).__name__
        if any(k <= 0 for k in _repeat(kernel_size, n)):
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = _repeat(kernel_size, n)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _repeat(output_size, n) if output_size is not None else None
        self.output_ratio = _repeat(output_ratio, n) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling "
                             f"ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input: Tensor) -> Any:
        return getattr(F, f"fractional_max_pool{self._rank}d")(
            input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
            _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    _rank = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    _rank = 3


class _MaxUnpoolNd(Module):
    _rank = 0

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        n = self._rank
        self.kernel_size = _repeat(kernel_size, n)
        self.stride = _repeat(stride if stride is not None else kernel_size, n)
        self.padding = _repeat(padding, n)

    def forward(self, input: Tensor, indices: Tensor, output_size: Any = None) -> Tensor:
        return getattr(F, f"max_unpool{self._rank}d")(input, indices, self.kernel_size,
                                                      self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    _rank = 1


class MaxUnpool2d(_MaxUnpoolNd):
    _rank = 2


class MaxUnpool3d(_MaxUnpoolNd):
    _rank = 3
