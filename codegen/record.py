"""``Record``: a frozen value class declared like a dataclass, built without ``exec``.

``dataclasses`` generates each class's ``__init__``, ``__eq__``, ``__repr__`` and frozen
``__setattr__`` as source text and compiles it when the module is imported: ~0.6 ms a class.
The native-program classes are imported on a specialization's first call, where six of them
cost 5 ms of W4's warm start (a new process running a cached model), a third of its budget.
A ``Record`` reads its fields from the class annotations once, in ``__init_subclass__``, and
shares one generic ``__init__``: slower per instance (a few hundred are built per
specialization, microseconds in all), free at import.

    >>> class Point(Record):
    ...     x: int
    ...     y: int = 0
    ...     def __post_init__(self) -> None:
    ...         if self.x < 0:
    ...             raise ValueError(f"Point: x must be >= 0, got {self.x}")
    >>> p = Point(1, y=2); p
    Point(x=1, y=2)
    >>> p == Point(1, 2), hash(p) == hash(Point(1, 2)), Point(3).y
    (True, True, 0)
    >>> p.x = 5
    Traceback (most recent call last):
      ...
    AttributeError: Point is frozen: cannot assign to field 'x'
    >>> Point(-1)
    Traceback (most recent call last):
      ...
    ValueError: Point: x must be >= 0, got -1

Semantics are those of ``@dataclass(frozen=True)``: positional or keyword fields in
declaration order, defaults from the class body, equality and hash over the fields (same
class only), ``__post_init__`` to validate (it may normalize a field with
``object.__setattr__``, as for a frozen dataclass). Annotations starting with ``_`` are not
fields.
"""
from __future__ import annotations

from typing import Any, ClassVar


class Record:
    """Base class of a frozen value record (see the module docstring)."""

    _fields: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = list(cls._fields)
        defaults = dict(cls._defaults)
        for name in cls.__dict__.get("__annotations__", {}):
            if name.startswith("_") or name in fields:
                continue
            fields.append(name)
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
            elif defaults:
                raise TypeError(f"{cls.__name__}: field {name!r} without a default follows "
                                f"one with a default")
        cls._fields, cls._defaults = tuple(fields), defaults

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        if len(args) > len(cls._fields):
            raise TypeError(f"{cls.__name__}() takes {len(cls._fields)} arguments, "
                            f"got {len(args)}")
        values = dict(zip(cls._fields, args))
        for name, value in kwargs.items():
            if name not in cls._fields or name in values:
                why = "unexpected" if name not in cls._fields else "repeated"
                raise TypeError(f"{cls.__name__}(): {why} argument {name!r}")
            values[name] = value
        for name in cls._fields:
            if name not in values:
                if name not in cls._defaults:
                    raise TypeError(f"{cls.__name__}(): missing argument {name!r}")
                values[name] = cls._defaults[name]
        self.__dict__.update(values)
        self.__post_init__()

    def __post_init__(self) -> None:
        """Validate or normalize the fields (subclasses)."""

    def _values(self) -> tuple:
        d = self.__dict__
        return tuple(d[name] for name in self._fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()           # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"
