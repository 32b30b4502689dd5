"""One flat vector from parameters, and back (``torch.nn.utils.convert_parameters``).

    >>> import scriptmod as sm
    >>> lin = sm.nn.Linear(2, 1)
    >>> vec = sm.nn.utils.parameters_to_vector(lin.parameters())
    >>> vec.shape
    scriptmod.Size([3])
    >>> sm.nn.utils.vector_to_parameters(sm.tensor([1.0, 2.0, 3.0]), lin.parameters())
    >>> lin.weight, lin.bias
    (Parameter containing:
    tensor([[1., 2.]], requires_grad=True), Parameter containing:
    tensor([3.], requires_grad=True))
"""
from __future__ import annotations

from typing import Iterable

from scriptmod._shape_ops import cat
from scriptmod.ir.errors import DeviceError
from scriptmod.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _same_device(param: Tensor, device: object) -> object:
    if device is not None and param.device != device:
        raise DeviceError(f"Found two parameters on different devices, this is currently not "
                          f"supported: {device} and {param.device}")
    return param.device


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated into one 1-d tensor (a copy; differentiable)."""
    device, flat = None, []
    for p in parameters:
        device = _same_device(p, device)
        flat.append(p.reshape(-1))
    return cat(flat)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Point each parameter's ``.data`` at its slice of ``vec``, in order (torch's rule: the
    parameters then share ``vec``'s storage)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected scriptmod.Tensor, but got: {type(vec).__name__}")
    device, start = None, 0
    for p in parameters:
        device = _same_device(p, device)
        n = p.numel()
        p.data = vec[start:start + n].view_as(p).data
        start += n
