"""Python annotations to IR types: ``Tensor``, ``int``, ``float``, ``bool``, ``str``, ``None``,
``Optional[T]``, ``List[T]``, ``Tuple[...]``, ``Dict[K, V]`` (``typing`` or builtin spellings,
``T | None`` too), ``Union`` of scalars (as ``Any``), ``NamedTuple`` classes, ``device``
and ``dtype`` (TorchScript's ``torch.device`` / ``torch.dtype``), and ``Any`` (a value
passed through, as TorchScript's ``Any``).

    >>> from typing import Optional, List
    >>> to_ir_type(Optional[List[int]])
    int[]?
"""
from __future__ import annotations

import types
import typing
from typing import Any

from scriptmod._device import device
from scriptmod.ir.dtypes import DType
from scriptmod.ir.types import (AnyType, BoolType, DeviceType, DTypeType, FloatType, IntType,
                                ListType, NamedTupleType, NoneType, OptionalType, StrType,
                                TensorType, TupleType, Type)
from scriptmod.tensor import Tensor

_SCALARS: dict[Any, Type] = {int: IntType, float: FloatType, bool: BoolType, str: StrType,
                             type(None): NoneType, None: NoneType, device: DeviceType,
                             DType: DTypeType}


class AnnotationError(TypeError):
    """An annotation the frontend has no IR type for."""


def is_namedtuple_class(obj: Any) -> bool:
    """Whether ``obj`` is a ``typing.NamedTuple`` class (fields with annotations)."""
    return isinstance(obj, type) and issubclass(obj, tuple) and \
        isinstance(getattr(obj, "_fields", None), tuple) and \
        bool(getattr(obj, "__annotations__", None))


def to_ir_type(ann: Any) -> Type:
    """The IR type of a resolved annotation object."""
    if ann is Tensor or (isinstance(ann, type) and issubclass(ann, Tensor)):
        return TensorType()
    if ann in _SCALARS:
        return _SCALARS[ann]
    if ann is Any:
        return AnyType
    if is_namedtuple_class(ann):
        hints = typing.get_type_hints(ann)
        return NamedTupleType(tuple(to_ir_type(hints[f]) for f in ann._fields),
                              ann.__qualname__, tuple(ann._fields), ann)
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (typing.Union, getattr(types, "UnionType", typing.Union)):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return OptionalType(to_ir_type(rest[0]))
        if all(a in _SCALARS for a in args):     # Union[bool, str]: a value of any of them,
            return AnyType                       # told apart by (jit.)isinstance at run time
        raise AnnotationError(f"Union types other than Optional[T] and Unions of int, float, "
                              f"bool, str and None are not supported: {ann!r}")
    if origin in (list, typing.List):
        if len(args) != 1:
            raise AnnotationError(f"List needs one element type, as in List[int]: {ann!r}")
        return ListType(to_ir_type(args[0]))
    if origin in (tuple, typing.Tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            raise AnnotationError(f"variable-length Tuple[T, ...] is not supported; use "
                                  f"List[T]: {ann!r}")
        if args == ((),):
            return TupleType(())
        return TupleType(tuple(to_ir_type(a) for a in args))
    if origin in (dict, typing.Dict):
        from scriptmod.ir.types import DictType   # noqa: PLC0415  (added with the dict ops)
        key, value = (to_ir_type(a) for a in args)
        if key not in (StrType, IntType):
            raise AnnotationError(f"Dict keys must be str or int, got {key!r}")
        return DictType(key, value)
    if ann in (list, tuple, dict):
        raise AnnotationError(f"'{ann.__name__}' needs element types, as in "
                              f"{ann.__name__}[int]")
    raise AnnotationError(f"unknown type annotation {ann!r}")
