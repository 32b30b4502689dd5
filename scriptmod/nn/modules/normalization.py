"""``BatchNorm1d``/``2d``/``3d`` (running stats, momentum, num_batches_tracked) and their Lazy
variants, ``LayerNorm``, ``GroupNorm``, ``RMSNorm`` and ``LocalResponseNorm``, with PyTorch's
state-dict keys. ``_BatchNorm`` is PyTorch's ``_NormBase`` (InstanceNorm builds on it too).

    >>> nn.BatchNorm2d(16)
    BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
"""
from __future__ import annotations

from typing import Any, Sequence

from scriptmod.ir import dtypes as D
from scriptmod._creation import empty, tensor
from scriptmod.nn import functional as F
from scriptmod.nn import init
from scriptmod.ir.errors import ShapeError
from scriptmod.nn.module import Module
from scriptmod.nn.parameter import (Parameter, UninitializedBuffer, UninitializedParameter,
                                    is_lazy)
from scriptmod.tensor import Tensor

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d",
           "LazyBatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "LocalResponseNorm"]


def _affine_parameters(m: Module, shape: Sequence[int], weight: bool, bias: bool,
                       kw: dict[str, Any]) -> None:
    """Register ``weight`` and ``bias`` of ``shape``, or None in their place (PyTorch's keys)."""
    for name, wanted in (("weight", weight), ("bias", bias)):
        m.register_parameter(name, Parameter(empty(*shape, **kw)) if wanted else None)


class _BatchNorm(Module):
    _version = 2        # version 2 added num_batches_tracked (PyTorch's numbering)
    _ranks: tuple[int, ...] = ()
    _layout = ""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = {"device": device, "dtype": dtype}
        _affine_parameters(self, (num_features,), affine, affine and bias, kw)
        if track_running_stats:
            self.register_buffer("running_mean", empty(num_features, **kw))
            self.register_buffer("running_var", empty(num_features, **kw))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=D.int64, device=device))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        """A checkpoint older than version 2 (or without metadata) has no
        ``num_batches_tracked``: keep the current count, as PyTorch does."""
        version = local_metadata.get("version", None)
        key = prefix + "num_batches_tracked"
        if (version is None or version < 2) and self.track_running_stats \
                and key not in state_dict:
            nbt = self.num_batches_tracked
            state_dict[key] = (nbt if nbt is not None and not is_lazy(nbt)
                               else tensor(0, dtype=D.int64))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def _check_input_dim(self, input: Tensor) -> None:
        per_channel = self.weight is not None or self.running_mean is not None
        if input.dim() not in self._ranks or per_channel and input.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}: expected {self._layout} input with "
                             f"C={self.num_features}, got shape {tuple(input.shape)}")

    def forward(self, input: Tensor) -> Tensor:
        """The ``batch_norm`` op updates the running stats and ``num_batches_tracked`` itself
        when its training flag is set, so a traced BatchNorm follows train/eval."""
        self._check_input_dim(input)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        use_stats = not self.training or self.track_running_stats
        nbt = self.num_batches_tracked if use_stats else None
        if self.training and nbt is not None:
            nbt._vc[0] += 1     # PyTorch's num_batches_tracked.add_(1) bumps _version
        return F.batch_norm(input, self.running_mean if use_stats else None,
                            self.running_var if use_stats else None, self.weight, self.bias,
                            bn_training, self.momentum, self.eps, num_batches_tracked=nbt)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) input."""

    _ranks, _layout = (2, 3), "2-D or 3-D (N, C) / (N, C, L)"


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) input."""

    _ranks, _layout = (4,), "4-D (N, C, H, W)"


class BatchNorm3d(_BatchNorm):
    """Batch norm over (N, C, D, H, W) input."""

    _ranks, _layout = (5,), "5-D (N, C, D, H, W)"


class _LazyNorm(_BatchNorm):
    """The Lazy variant of a ``_BatchNorm`` subclass: ``num_features`` is the first input's
    dim 1, and the module then becomes ``cls_to_become`` (PyTorch's ``_LazyNormBase``)."""

    cls_to_become: type

    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        _BatchNorm.__init__(self, 0, eps, momentum, False, False, device, dtype, bias=False)
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = {"device": device, "dtype": dtype}
        if affine:
            self.register_parameter("weight", UninitializedParameter(**kw))
            if bias:
                self.register_parameter("bias", UninitializedParameter(**kw))
        if track_running_stats:
            self.register_buffer("running_mean", UninitializedBuffer(**kw))
            self.register_buffer("running_var", UninitializedBuffer(**kw))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=D.int64, device=device))

    def _lazy_members(self) -> list[Tensor]:
        return [t for t in (self.weight, self.bias, self.running_mean, self.running_var)
                if t is not None]

    def has_uninitialized_params(self) -> bool:
        return any(is_lazy(t) for t in self._lazy_members())

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            _BatchNorm.reset_parameters(self)

    def _build(self, *inputs: Any, **kwargs: Any) -> bool | None:
        """Materialize every lazy member with the first input's dim 1 and become
        ``cls_to_become`` (the Module lazy-build hook); False when there is no input yet."""
        if not self.has_uninitialized_params():
            members = self._lazy_members()
            if members or inputs:   # given by a checkpoint, or nothing to build (no affine,
                if members:         # no running stats): PyTorch keeps num_features 0 then
                    self.num_features = int(members[0].shape[0])
                self.__class__ = self.cls_to_become
            return None
        if not inputs or not isinstance(inputs[0], Tensor):
            return False
        if inputs[0].dim() < 2:
            raise ShapeError(f"{type(self).__name__}: expected an input with a channel dim 1, "
                             f"got shape {tuple(inputs[0].shape)}")
        self.num_features = int(inputs[0].shape[1])
        for t in self._lazy_members():
            t.materialize((self.num_features,))
        self.reset_parameters()
        self.__class__ = self.cls_to_become
        return None

    initialize_parameters = _build

    def forward(self, input: Tensor) -> Tensor:
        plain = self.cls_to_become
        self._build(input)
        return plain.forward(self, input)


class LazyBatchNorm1d(_LazyNorm, BatchNorm1d):
    """``BatchNorm1d`` with ``num_features`` taken from the first input."""

    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNorm, BatchNorm2d):
    """``BatchNorm2d`` with ``num_features`` taken from the first input."""

    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNorm, BatchNorm3d):
    """``BatchNorm3d`` with ``num_features`` taken from the first input."""

    cls_to_become = BatchNorm3d


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims, then scale and shift."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        kw = {"device": device, "dtype": dtype}
        _affine_parameters(self, self.normalized_shape, elementwise_affine,
                           elementwise_affine and bias, kw)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if input.dim() < n or tuple(input.shape[input.dim() - n:]) != self.normalized_shape:
            raise ShapeError(f"LayerNorm: expected input with shape [*, "
                             f"{', '.join(map(str, self.normalized_shape))}] "
                             f"(normalized_shape), got shape {tuple(input.shape)}")
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalize each group of ``num_channels // num_groups`` channels of each sample, then
    scale and shift per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = \
            num_groups, num_channels, eps, affine
        kw = {"device": device, "dtype": dtype}
        _affine_parameters(self, (num_channels,), affine, affine and bias, kw)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) over the trailing ``normalized_shape`` dims, times a learned
    ``weight``; ``eps=None`` is the machine epsilon of the input's precision."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.register_parameter("weight", Parameter(empty(*self.normalized_shape, device=device,
                                                          dtype=dtype))
                                if elementwise_affine else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input: Tensor) -> Tensor:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class LocalResponseNorm(Module):
    """x / (k + alpha * mean of x^2 over ``size`` neighbouring channels)^beta."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Tensor) -> Tensor:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
