"""``BatchNorm1d``/``BatchNorm2d`` (running stats, momentum, num_batches_tracked) and
``LayerNorm``, with PyTorch's state-dict keys.

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
from scriptmod.nn.parameter import Parameter, is_lazy
from scriptmod.tensor import Tensor

__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm"]


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
        if input.dim() not in self._ranks or input.shape[1] != self.num_features:
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
