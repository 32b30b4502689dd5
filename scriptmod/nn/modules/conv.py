"""Convolution layers with PyTorch's arguments, padding modes, parameter layout and reprs:
``Conv1d``/``2d``/``3d``, ``ConvTranspose1d``/``2d``/``3d`` and their ``Lazy`` forms (which
take ``in_channels`` from the first input and then become the plain class, as PyTorch's do).

    >>> nn.Conv2d(3, 8, 3, padding=1)
    Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))
    >>> nn.ConvTranspose1d(4, 2, 3, stride=2, output_padding=1)
    ConvTranspose1d(4, 2, kernel_size=(3,), stride=(2,), output_padding=(1,))
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from scriptmod._creation import empty
from scriptmod.ir.errors import ShapeError
from scriptmod.nn import functional as F
from scriptmod.nn._functional_conv import _ntuple
from scriptmod.nn.module import Module
from scriptmod.nn.modules.linear import reset_fan_in_uniform
from scriptmod.nn.parameter import Parameter, UninitializedParameter
from scriptmod.tensor import Tensor

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
           "ConvTranspose3d", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
           "LazyConvTranspose2d", "LazyConvTranspose3d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_CONV: dict[int, Callable[..., Tensor]] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T: dict[int, Callable[..., Tensor]] = {1: F.conv_transpose1d, 2: F.conv_transpose2d,
                                             3: F.conv_transpose3d}


def _check_conv_args(in_channels: int, out_channels: int, groups: int, padding: Any,
                     stride: tuple[int, ...], padding_mode: str) -> None:
    """PyTorch's constructor checks, in its order and words."""
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups:
        raise ValueError("out_channels must be divisible by groups")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             "{'valid', 'same'}")
        if padding == "same" and any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
    if padding_mode not in _PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                         f"padding_mode='{padding_mode}'")


def _reversed_padding(padding: Any, kernel_size: tuple[int, ...],
                      dilation: tuple[int, ...]) -> Any:
    """F.pad's (last-dim left, right, ..., first-dim left, right) for the explicit padding
    modes: a list for the string paddings, a tuple otherwise (PyTorch's types)."""
    if not isinstance(padding, str):
        return tuple(p for p in reversed(padding) for _ in range(2))
    out: list[int] = []
    for d, k in zip(reversed(dilation), reversed(kernel_size)):
        total = d * (k - 1) if padding == "same" else 0
        out += [total // 2, total - total // 2]
    return out


class _ConvNd(Module):
    """What every convolution layer shares: PyTorch's ``_ConvNd`` attributes, parameters
    (``weight`` (out, in/groups, *k), or (in, out/groups, *k) when ``transposed``, and
    ``bias``), their init and the repr. ``_rank`` is the number of spatial dims."""

    _rank = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any,
                 padding: Any, dilation: Any, transposed: bool, output_padding: Any,
                 groups: int, bias: bool, padding_mode: str, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        n, name = self._rank, type(self).__name__
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size", name)
        self.stride = _ntuple(stride, n, "stride", name)
        self.padding = padding if isinstance(padding, str) else \
            _ntuple(padding, n, "padding", name)
        self.dilation = _ntuple(dilation, n, "dilation", name)
        self.output_padding = _ntuple(output_padding, n, "output_padding", name)
        _check_conv_args(in_channels, out_channels, groups, padding, self.stride, padding_mode)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.transposed, self.padding_mode = transposed, padding_mode
        self._reversed_padding_repeated_twice = _reversed_padding(self.padding,
                                                                  self.kernel_size,
                                                                  self.dilation)
        self.weight = Parameter(empty(*self._weight_shape(), device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _weight_shape(self) -> tuple[int, ...]:
        i, o, g = self.in_channels, self.out_channels, self.groups
        return (i, o // g, *self.kernel_size) if self.transposed else \
            (o, i // g, *self.kernel_size)

    def reset_parameters(self) -> None:
        reset_fan_in_uniform(self.weight, self.bias)

    def _check_input(self, input: Tensor) -> None:
        n, c = self._rank, self.in_channels
        if input.dim() not in (n + 1, n + 2) or input.shape[-n - 1] != c:
            sp = ("L", "H, W", "D, H, W")[n - 1]
            raise ShapeError(f"{type(self).__name__}: expected {n + 1}-D or {n + 2}-D input "
                             f"(C, {sp}) / (N, C, {sp}) with C={c}, got shape "
                             f"{tuple(input.shape)}")

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    """A convolution over ``_rank`` spatial dims (PyTorch's ``ConvNd.__init__`` arguments)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         False, 0, groups, bias, padding_mode, device, dtype)

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        conv = _CONV[self._rank]
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_Conv):
    """1-D convolution over (N, C, L) or (C, L) input."""

    _rank = 1


class Conv2d(_Conv):
    """2-D convolution over (N, C, H, W) or (C, H, W) input."""

    _rank = 2


class Conv3d(_Conv):
    """3-D convolution over (N, C, D, H, W) or (C, D, H, W) input."""

    _rank = 3


class _ConvTransposeNd(_ConvNd):
    """A transposed convolution (the input gradient of a convolution); ``forward`` takes
    PyTorch's optional ``output_size`` (which picks ``output_padding``)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None) -> None:
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         True, output_padding, groups, bias, padding_mode, device, dtype)

    def _output_padding(self, input: Tensor, output_size: Sequence[int] | None, stride: Any,
                        padding: Any, kernel_size: Any, num_spatial_dims: int,
                        dilation: Any = None) -> list[int]:
        """``output_padding``, or the one that gives ``output_size`` (PyTorch's checks)."""
        if output_size is None:
            return list(self.output_padding)
        n = num_spatial_dims
        lead = 2 if input.dim() == n + 2 else 1
        size = list(output_size)
        if len(size) == lead + n:
            size = size[lead:]
        if len(size) != n:
            raise ValueError(f"ConvTranspose{n}D: for {input.dim()}D input, output_size must "
                             f"have {n} or {lead + n} elements (got {len(size)})")
        dil = dilation if dilation is not None else (1,) * n
        low = [(input.shape[lead + d] - 1) * stride[d] - 2 * padding[d]
               + dil[d] * (kernel_size[d] - 1) + 1 for d in range(n)]
        high = [low[d] + stride[d] - 1 for d in range(n)]
        if any(s < lo or s > hi for s, lo, hi in zip(size, low, high)):
            raise ValueError(f"requested an output size of {size}, but valid sizes range from "
                             f"{low} to {high} (for an input of {tuple(input.shape[lead:])})")
        return [s - lo for s, lo in zip(size, low)]

    def forward(self, input: Tensor, output_size: list[int] | None = None) -> Tensor:
        self._check_input(input)
        n = self._rank
        output_padding = self._output_padding(input, output_size, self.stride, self.padding,
                                              self.kernel_size, n, self.dilation)
        return _CONV_T[n](input, self.weight, self.bias, self.stride, self.padding,
                          output_padding, self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution over (N, C, L) or (C, L) input."""

    _rank = 1


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution over (N, C, H, W) or (C, H, W) input."""

    _rank = 2


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution over (N, C, D, H, W) or (C, D, H, W) input."""

    _rank = 3


class _LazyConvMixin:
    """``in_channels`` taken from the first input (its dim 1, or dim 0 unbatched); the
    layer then becomes ``cls_to_become``, as PyTorch's lazy convolutions do."""

    cls_to_become: type
    _rank: int
    in_channels: int
    out_channels: int
    groups: int
    transposed: bool
    weight: Any
    bias: Any

    def _lazy_init(self, out_channels: int, bias: bool, device: Any, dtype: Any) -> None:
        """Replace the (0, 0, *k) parameters the plain constructor made by lazy ones."""
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = out_channels
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def has_uninitialized_params(self) -> bool:
        return isinstance(self.weight, UninitializedParameter)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()   # type: ignore[misc]

    def _get_in_channels(self, input: Tensor) -> int:
        n = self._rank
        if input.dim() not in (n + 1, n + 2):
            raise RuntimeError(f"Expected {n + 1}D (unbatched) or {n + 2}D (batched) input to "
                               f"{type(self).__name__}, but got input of size: "
                               f"{tuple(input.shape)}")
        return int(input.shape[1] if input.dim() == n + 2 else input.shape[0])

    def _build(self, *inputs: Any, **kwargs: Any) -> bool | None:
        """Materialize the parameters from the first input and become the plain layer (the
        Module lazy-build hook); False when there is no input yet."""
        if not self.has_uninitialized_params():
            if self.in_channels == 0 and self.weight is not None:   # given by v= or a checkpoint
                w = self.weight.shape
                self.in_channels = int(w[0] if self.transposed else w[1] * self.groups)
                self.__class__ = self.cls_to_become
            return None
        if not inputs or not isinstance(inputs[0], Tensor):
            return False
        self.in_channels = self._get_in_channels(inputs[0])
        if self.in_channels % self.groups:
            raise ValueError("in_channels must be divisible by groups")
        self.weight.materialize(self._weight_shape())    # type: ignore[attr-defined]
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))
        self.reset_parameters()
        self.__class__ = self.cls_to_become
        return None

    initialize_parameters = _build


class _LazyConv(_LazyConvMixin, _Conv):
    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        _Conv.__init__(self, 0, 0, kernel_size, stride, padding, dilation, groups, False,
                       padding_mode, device, dtype)
        self._lazy_init(out_channels, bias, device, dtype)

    def forward(self, input: Tensor) -> Tensor:
        self._build(input)
        return self.cls_to_become.forward(self, input)


class _LazyConvTranspose(_LazyConvMixin, _ConvTransposeNd):
    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        _ConvTransposeNd.__init__(self, 0, 0, kernel_size, stride, padding, output_padding,
                                  groups, False, dilation, padding_mode, device, dtype)
        self._lazy_init(out_channels, bias, device, dtype)

    def forward(self, input: Tensor, output_size: list[int] | None = None) -> Tensor:
        self._build(input)
        return self.cls_to_become.forward(self, input, output_size)


class LazyConv1d(_LazyConv):
    """A ``Conv1d`` whose ``in_channels`` is inferred from the first input."""

    cls_to_become, _rank = Conv1d, 1


class LazyConv2d(_LazyConv):
    """A ``Conv2d`` whose ``in_channels`` is inferred from the first input."""

    cls_to_become, _rank = Conv2d, 2


class LazyConv3d(_LazyConv):
    """A ``Conv3d`` whose ``in_channels`` is inferred from the first input."""

    cls_to_become, _rank = Conv3d, 3


class LazyConvTranspose1d(_LazyConvTranspose):
    """A ``ConvTranspose1d`` whose ``in_channels`` is inferred from the first input."""

    cls_to_become, _rank = ConvTranspose1d, 1


class LazyConvTranspose2d(_LazyConvTranspose):
    """A ``ConvTranspose2d`` whose ``in_channels`` is inferred from the first input."""

    cls_to_become, _rank = ConvTranspose2d, 2


class LazyConvTranspose3d(_LazyConvTranspose):
    """A ``ConvTranspose3d`` whose ``in_channels`` is inferred from the first input."""

    cls_to_become, _rank = ConvTranspose3d, 3
