"""``scriptmod.device``: where a tensor lives ('cpu', 'cuda', 'cuda:1').

    >>> device("cuda:1")
    device(type='cuda', index=1)
    >>> device("cpu") == "cpu"
    True
"""
from __future__ import annotations

from typing import Any

from scriptmod.ir.errors import DeviceError

_TYPES = ("cpu", "cuda")
_UNSUPPORTED = ("xpu", "ipu", "mps", "xla", "hip", "meta", "vulkan", "mkldnn", "opengl",
                "opencl", "ideep", "ve", "fpga", "ort", "lazy", "hpu", "mtia", "privateuseone")


class device:
    """A device: ``type`` ('cpu' or 'cuda') and optional ``index``."""

    __slots__ = ("type", "index", "_str")

    def __init__(self, type: Any, index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        elif not isinstance(type, str):
            raise TypeError(f"device(): expected a string like 'cpu' or 'cuda:0', got "
                            f"{type.__class__.__name__}")
        elif ":" in type:
            head, _, tail = type.partition(":")
            if index is not None or not tail.isdigit():
                raise DeviceError(f"device(): invalid device string {type!r}; expected 'cpu', "
                                 f"'cuda' or 'cuda:N'")
            type, index = head, int(tail)
        if type in _UNSUPPORTED:
            raise RuntimeError(f"device type {type!r} is not supported by scriptmod; "
                               f"supported: 'cpu', 'cuda'")
        if type not in _TYPES:
            raise DeviceError(f"device(): expected one of 'cpu', 'cuda' device types, got {type!r}")
        if index is not None and (not isinstance(index, int) or index < 0):
            raise DeviceError(f"device(): index must be a non-negative int, got {index!r}")
        self.type, self.index = type, index
        self._str = type if index is None else f"{type}:{index}"

    def __str__(self) -> str:
        return self._str

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except (ValueError, RuntimeError):
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self) -> tuple:
        return (device, (self.type, self.index))


CPU = device("cpu")


def canonical(d: Any) -> str:
    """'cpu' or 'cuda:N' for anything a user may pass as a device."""
    if d is None:
        return "cpu"
    dev = d if isinstance(d, device) else device(d)
    if dev.type == "cuda":
        return f"cuda:{dev.index or 0}"
    return "cpu"


_CACHE: dict[str, device] = {}


def from_str(s: str) -> device:
    d = _CACHE.get(s)
    if d is None:
        d = _CACHE[s] = device(s)
    return d
