"""``InstanceNorm1d``/``2d``/``3d`` (each channel of each sample normalized over its spatial
positions; optional affine and running stats; unbatched input) and their Lazy variants.

    >>> nn.InstanceNorm2d(3)
    InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, bias=False, track_running_stats=False)
"""
from __future__ import annotations

import warnings
from typing import Any

from scriptmod.nn import functional as F
from scriptmod.nn.modules.normalization import _BatchNorm, _LazyNorm
from scriptmod.tensor import Tensor

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d",
           "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


class _InstanceNorm(_BatchNorm):
    """PyTorch's ``_InstanceNorm``: ``_no_batch_dim`` is the rank of an unbatched input."""

    _no_batch_dim = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() not in (self._no_batch_dim, self._no_batch_dim + 1):
            raise ValueError(f"expected {self._no_batch_dim}D or {self._no_batch_dim + 1}D "
                             f"input (got {input.dim()}D input)")

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        """A pre-0.4 checkpoint (no version) may hold running stats this module does not
        track: report and drop them, as PyTorch does."""
        if local_metadata.get("version", None) is None and not self.track_running_stats:
            keys = [prefix + n for n in ("running_mean", "running_var") if prefix + n in state_dict]
            if keys:
                names = " and ".join(f'"{k}"' for k in keys)
                error_msgs.append(f"Unexpected running stats buffer(s) {names} for "
                                  f"{type(self).__name__} with track_running_stats=False. "
                                  f"Please remove these keys from state_dict, or set "
                                  f"track_running_stats=True.")
                for key in keys:
                    state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        feature_dim = input.dim() - self._no_batch_dim
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. "
                          "You can silence this warning by not passing in num_features, "
                          "which is not used because affine=False", stacklevel=2)
        if input.dim() == self._no_batch_dim:
            return self._instance_norm(input.unsqueeze(0)).squeeze(0)
        return self._instance_norm(input)

    def _instance_norm(self, input: Tensor) -> Tensor:
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Instance norm over (N, C, L) or unbatched (C, L) input."""

    _no_batch_dim = 2


class InstanceNorm2d(_InstanceNorm):
    """Instance norm over (N, C, H, W) or unbatched (C, H, W) input."""

    _no_batch_dim = 3


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over (N, C, D, H, W) or unbatched (C, D, H, W) input."""

    _no_batch_dim = 4


class LazyInstanceNorm1d(_LazyNorm, InstanceNorm1d):
    """``InstanceNorm1d`` with ``num_features`` taken from the first input's dim 1."""

    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyNorm, InstanceNorm2d):
    """``InstanceNorm2d`` with ``num_features`` taken from the first input's dim 1."""

    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNorm, InstanceNorm3d):
    """``InstanceNorm3d`` with ``num_features`` taken from the first input's dim 1."""

    cls_to_become = InstanceNorm3d
