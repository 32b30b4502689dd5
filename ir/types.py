"""Types of IR values: tensors (dtype, shape with symbolic dims, device, requires_grad) and
the small set of non-tensor types a traced or scripted program manipulates.

    >>> from scriptmod.ir.dtypes import float32
    >>> TensorType(float32, ("B", 4096))
    Float(B, 4096)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from .dtypes import DType
from .symdims import dim_factors, symbols  # noqa: F401  (re-exported: callers outside ir/)

Dim = Union[int, str, None]   # a size, a symbolic size (canonical text of ``ir.symdims``:
Shape = tuple[Dim, ...]       # "B", "16*B", "B*T", "T-1", "max(T,8)"), or unknown


class Type:
    """Base of all IR types. Types are immutable values compared structurally."""

    def __str__(self) -> str:
        return repr(self)


@dataclass(frozen=True)
class TensorType(Type):
    dtype: DType | None = None          # None: not known yet
    shape: Shape | None = None          # None: rank unknown
    device: str = "cpu"
    requires_grad: bool = False

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_concrete(self) -> bool:
        return self.dtype is not None and self.shape is not None and all(
            isinstance(d, int) for d in self.shape)

    def with_(self, **changes) -> "TensorType":
        from dataclasses import replace
        return replace(self, **changes)

    def __repr__(self) -> str:
        head = self.dtype.short if self.dtype is not None else "Tensor"
        if self.shape is None and self.device == "cpu" and not self.requires_grad:
            return head
        parts = [] if self.shape is None else ["*" if d is None else str(d) for d in self.shape]
        if self.shape is None:
            parts.append("*")
        if self.device != "cpu":
            parts.append(f"device={self.device}")
        if self.requires_grad:
            parts.append("requires_grad=1")
        return f"{head}({', '.join(parts)})"


@dataclass(frozen=True)
class _Named(Type):
    name: str

    def __repr__(self) -> str:
        return self.name


IntType = _Named("int")
FloatType = _Named("float")
BoolType = _Named("bool")
ComplexType = _Named("complex")
StrType = _Named("str")
NoneType = _Named("NoneType")
DeviceType = _Named("Device")
DTypeType = _Named("ScalarType")
NumberType = _Named("Scalar")      # int, float, bool or complex, decided at run time
AnyType = _Named("Any")
DICT_KEY_TYPES = (StrType, IntType)


@dataclass(frozen=True)
class TupleType(Type):
    elements: tuple[Type, ...]

    def __repr__(self) -> str:
        return f"({', '.join(map(repr, self.elements))})"


@dataclass(frozen=True, repr=False)
class NamedTupleType(TupleType):
    """The values of a ``NamedTuple`` class (TorchScript's NamedTuple): a tuple whose items
    also have names. It prints, and so is saved, as the tuple it is; the names serve the
    script frontend (``out.boxes``, ``Out(boxes=b)``) and ``cls`` (the Python class, not
    compared) rebuilds instances at a compiled method's boundary.

        >>> NamedTupleType((IntType, FloatType), "Pair", ("n", "x"))
        (int, float)
    """

    name: str = ""
    fields: tuple[str, ...] = ()
    cls: object = field(default=None, compare=False, hash=False)

    def plain(self, elements: tuple[Type, ...]) -> "NamedTupleType":
        """The same named tuple with other element types (joined, refined)."""
        return NamedTupleType(elements, self.name, self.fields, self.cls)


@dataclass(frozen=True)
class ListType(Type):
    element: Type

    def __repr__(self) -> str:
        return f"{self.element!r}[]"


@dataclass(frozen=True)
class DictType(Type):
    """``Dict(str, Tensor)``: a Python dict at run time, keyed by str or int (as TorchScript's
    ``Dict[str, T]`` / ``Dict[int, T]``).

        >>> DictType(StrType, ListType(IntType))
        Dict(str, int[])
    """

    key: Type
    value: Type

    def __post_init__(self) -> None:
        if self.key not in DICT_KEY_TYPES:
            raise ValueError(f"DictType: key type must be str or int, got {self.key!r}")

    def __repr__(self) -> str:
        return f"Dict({self.key!r}, {self.value!r})"


@dataclass(frozen=True)
class OptionalType(Type):
    element: Type

    def __repr__(self) -> str:
        return f"{self.element!r}?"


@dataclass(frozen=True)
class ModuleType(Type):
    """The type of a module value (``self`` and submodules) in a method graph."""

    class_name: str                          # qualified, e.g. "__main__.Block"
    attributes: tuple[tuple[str, Type], ...] = field(default=())

    def __repr__(self) -> str:
        return f"__module__.{self.class_name}"


SCALAR_TYPES: dict[type, Type] = {int: IntType, float: FloatType, bool: BoolType,
                                  complex: ComplexType, str: StrType, type(None): NoneType}
