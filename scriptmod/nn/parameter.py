"""``nn.Parameter``: a tensor that a Module registers as a learnable parameter.

    >>> p = Parameter(scriptmod.zeros(3))
    >>> p.requires_grad
    True
"""
from __future__ import annotations

from typing import Any

from scriptmod._creation import empty
from scriptmod.tensor import Tensor


class Parameter(Tensor):
    """Shares storage with the tensor it wraps; ``requires_grad`` defaults to True."""

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: expected a Tensor, got {type(data).__name__}")
        Tensor._init(self, data._data)
        self._vc = data._vc
        self.requires_grad = requires_grad and data.dtype.category >= 2

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce__(self) -> Any:
        raise TypeError("scriptmod parameters are not pickled; use state_dict() and scriptmod.save")

    def __deepcopy__(self, memo: dict) -> "Parameter":
        out = Parameter(self.detach().clone(), self.requires_grad)
        memo[id(self)] = out
        return out


class UninitializedParameter(Parameter):
    """A parameter whose shape is not known yet (lazy layers); materialized on first call."""

    def __init__(self, requires_grad: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__(empty(0, device=device, dtype=dtype), requires_grad)

    def materialize(self, shape: tuple, device: Any = None, dtype: Any = None) -> None:
        """Allocate ``shape`` on the placeholder's device and dtype unless given (a
        ``Module.to`` before the first call changes those, as in PyTorch)."""
        t = empty(*shape, device=device or self.device, dtype=dtype or self.dtype)
        self._data = t._data
        self.__class__ = Parameter

    def __repr__(self) -> str:
        return "<UninitializedParameter>"


class UninitializedBuffer(Tensor):
    """A buffer whose shape is not known yet (lazy layers); materialized on first call."""

    def __init__(self, requires_grad: bool = False, device: Any = None, dtype: Any = None) -> None:
        Tensor._init(self, empty(0)._data)
        self.requires_grad_(requires_grad)
        self._lazy_device, self._lazy_dtype = device, dtype

    def materialize(self, shape: tuple, device: Any = None, dtype: Any = None) -> None:
        t = empty(*shape, device=device or self._lazy_device, dtype=dtype or self._lazy_dtype)
        self._data = t._data
        self.__class__ = Tensor

    def __repr__(self) -> str:
        return "<UninitializedBuffer>"


def is_lazy(t: Any) -> bool:
    """True for a parameter or buffer whose shape is not known yet."""
    return isinstance(t, (UninitializedParameter, UninitializedBuffer))


class _BufferMeta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        if cls is Buffer:
            return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)
        return super().__instancecheck__(instance)


class Buffer(Tensor, metaclass=_BufferMeta):
    """Marks a tensor as a buffer when assigned to a Module attribute (``torch.nn.Buffer``):
    ``self.steps = Buffer(scriptmod.zeros(()), persistent=False)``."""

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True) -> Any:  # type: ignore[misc]
        if data is None:
            data = empty(0)
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t
