"""Python's builtins, ``math`` functions and the methods of str, list and dict that scripted
code calls: one table, ``PY_FUNCTIONS``, from a dotted name (``"math.sqrt"``, ``"round"``,
``"str.split"``, ``"list.pop"``) to the Python callable and the rule for its result type.
The op ``py_call(args..., fn=name)`` (``ir.ops.script``) runs a row: its type rule is the
row's, its kernel calls the row's callable. Adding a function is one row here.

Only names in this table run: an archive naming anything else is refused by the type rule
and by the kernel, so a loaded graph never calls an arbitrary function.

    >>> from scriptmod.ir.types import FloatType, IntType, ListType, StrType
    >>> result_type("math.sqrt", [IntType])
    float
    >>> result_type("str.split", [StrType, StrType])
    str[]
    >>> PY_FUNCTIONS["round"][0](2.5), PY_FUNCTIONS["list.pop"][0]([1, 2, 3], 0)
    (2, 1)
"""
from __future__ import annotations

import builtins
import math
import warnings
from typing import Any, Callable, Sequence

from ..types import (AnyType, BoolType, DictType, FloatType, IntType, ListType, NoneType,
                     NumberType, OptionalType, StrType, TensorType, TupleType, Type)
from .script import _element as _list_element, _strip

Rule = Callable[[Sequence[Type]], Type]
_REAL = (BoolType, IntType, FloatType)


def _real(types: Sequence[Type], name: str) -> None:
    for t in types:
        if _strip(t) not in _REAL + (NumberType, AnyType):
            raise TypeError(f"{name}(): expected a real number, got {t!r}")


def _fixed(result: Type, check: Callable[[Sequence[Type], str], None] | None = _real,
           arity: tuple[int, ...] = (1,)) -> Callable[[str], Rule]:
    def make(name: str) -> Rule:
        def rule(types: Sequence[Type]) -> Type:
            if len(types) not in arity:
                raise TypeError(f"{name}() takes {' or '.join(map(str, arity))} argument(s), "
                                f"got {len(types)}")
            if check is not None:
                check(types, name)
            return result
        return rule
    return make


def _common(types: Sequence[Type]) -> Type:
    """The wider of real number types (bool counts as int), as Python's arithmetic gives."""
    ts = [_strip(t) for t in types]
    if NumberType in ts or AnyType in ts:
        return NumberType
    return FloatType if FloatType in ts else IntType


def _round(name: str) -> Rule:
    def rule(types: Sequence[Type]) -> Type:
        _real(types, name)
        if len(types) == 1:
            return IntType                     # round(2.5) is the int 2
        if len(types) == 2:
            return _common(types[:1])          # round(2.567, 2) keeps the float
        raise TypeError(f"round() takes 1 or 2 arguments, got {len(types)}")
    return rule


def _divmod(name: str) -> Rule:
    def rule(types: Sequence[Type]) -> Type:
        if len(types) != 2:
            raise TypeError("divmod() takes 2 arguments")
        _real(types, name)
        t = _common(types)
        return TupleType((t, t))
    return rule


def _element(t: Type, name: str) -> Type:
    return _list_element(t, f"{name}()")


def _of_list(result: Callable[[Type, Sequence[Type], str], Type],
             arity: tuple[int, ...]) -> Callable[[str], Rule]:
    """A rule over a list (the first argument): ``result(element, types, name)``."""
    def make(name: str) -> Rule:
        def rule(types: Sequence[Type]) -> Type:
            if len(types) not in arity:
                raise TypeError(f"{name}() takes {' or '.join(str(a - 1) for a in arity)} "
                                f"argument(s), got {len(types) - 1}")
            return result(_element(types[0], name), types, name)
        return rule
    return make


def _sum_rule(elem: Type, types: Sequence[Type], name: str) -> Type:
    if _strip(elem) not in _REAL + (NumberType, AnyType):
        raise TypeError(f"sum() of a {elem!r}[]: the items must be numbers")
    if elem in (BoolType, IntType):
        return IntType                          # sum([True, 2]) and sum([]) are ints
    return FloatType if elem == FloatType else NumberType


def _str(result: Type, arity: tuple[int, ...], args: Type | None = StrType) -> Callable[[str], Rule]:
    """A str method: the receiver and (``args``-typed) arguments."""
    def make(name: str) -> Rule:
        def rule(types: Sequence[Type]) -> Type:
            if len(types) not in arity:
                raise TypeError(f"{name}() takes {' or '.join(str(a - 1) for a in arity)} "
                                f"argument(s), got {len(types) - 1}")
            if _strip(types[0]) not in (StrType, AnyType):
                raise TypeError(f"{name}(): expected a str, got {types[0]!r}")
            if args is not None:
                for t in types[1:]:
                    if _strip(t) not in (args, AnyType, IntType, NoneType):
                        raise TypeError(f"{name}(): unexpected argument of type {t!r}")
            return result
        return rule
    return make


def _join(name: str) -> Rule:
    def rule(types: Sequence[Type]) -> Type:
        if len(types) != 2 or _element(types[1], name) not in (StrType, AnyType):
            raise TypeError("str.join() takes a list of strs")
        return StrType
    return rule


def _dict_value(types: Sequence[Type], name: str) -> tuple[Type, Type]:
    d = _strip(types[0])
    if d == AnyType:
        return AnyType, AnyType
    if not isinstance(d, DictType):
        raise TypeError(f"{name}(): expected a dict, got {d!r}")
    return d.key, d.value


def _dict_get(name: str) -> Rule:
    def rule(types: Sequence[Type]) -> Type:
        if len(types) not in (2, 3):
            raise TypeError(f"{name}() takes 1 or 2 arguments, got {len(types) - 1}")
        _, value = _dict_value(types, name)
        if len(types) == 2:
            return value if name == "dict.pop" else OptionalType(value)
        default = _strip(types[2])
        if default == NoneType:
            return OptionalType(value)
        from ..builder import join_types            # builder imports the registry
        return join_types(value, types[2]) if not isinstance(value, TensorType) else value
    return rule


def _dict_none(name: str) -> Rule:
    def rule(types: Sequence[Type]) -> Type:
        _dict_value(types, name)
        return NoneType
    return rule


def _from_pairs(elem: Type, types: Sequence[Type], name: str) -> Type:
    """``dict(pairs)`` / ``OrderedDict(pairs)`` of a list of (key, value) tuples."""
    if not (isinstance(elem, TupleType) and len(elem.elements) == 2):
        raise TypeError(f"{name}(): expected a list of (key, value) pairs, got a {elem!r}[]")
    return DictType(*elem.elements)


def _list_pop(elem: Type, types: Sequence[Type], name: str) -> Type:
    return elem


def _no_result(elem: Type, types: Sequence[Type], name: str) -> Type:
    return NoneType


def _int_result(elem: Type, types: Sequence[Type], name: str) -> Type:
    return IntType


def _same_list(elem: Type, types: Sequence[Type], name: str) -> Type:
    return ListType(elem)


def _bool_result(elem: Type, types: Sequence[Type], name: str) -> Type:
    return BoolType


def _extend(lst: list, other: list) -> None:
    lst.extend(other)


def _sorted(lst: list, reverse: bool = False) -> list:
    return sorted(lst, reverse=reverse)


def _sort(lst: list, reverse: bool = False) -> None:
    lst.sort(reverse=reverse)


def _repeat(lst: list, n: int) -> list:
    """``lst * n`` (and ``n * lst``): a new list."""
    return lst * n


def _split(s: str, sep: str | None = None, maxsplit: int = -1) -> list:
    return s.split(sep, maxsplit)


_CLASSES = {"int": int, "float": float, "bool": bool, "str": str, "NoneType": type(None)}


def _isinstance(value: Any, names: str) -> bool:
    """``isinstance(value, (int, str))`` of a value typed ``Any`` (a ``Union`` of scalars),
    the classes by name: ``"int,str"``."""
    return isinstance(value, tuple(_CLASSES[n] for n in names.split(",")))


def _isinstance_rule(name: str) -> Rule:
    def rule(types: Sequence[Type]) -> Type:
        if len(types) != 2 or _strip(types[1]) != StrType:
            raise TypeError("isinstance() takes a value and the names of classes")
        return BoolType
    return rule


def _warn(message: str, stacklevel: int = 2, category: str = "UserWarning") -> None:
    """``warnings.warn(message, category, stacklevel)``, run when the program runs; the
    category by name, one of Python's own warning classes."""
    cls = getattr(builtins, category, None)
    if not (isinstance(cls, type) and issubclass(cls, Warning)):
        raise TypeError(f"warnings.warn(): {category!r} is not a Python warning class")
    warnings.warn(message, cls, stacklevel=stacklevel)


def _warn_rule(name: str) -> Rule:
    def rule(types: Sequence[Type]) -> Type:
        if not 1 <= len(types) <= 3:
            raise TypeError(f"{name}() takes a message, a stacklevel and a category")
        for t, want, what in zip(types, (StrType, IntType, StrType),
                                 ("message", "stacklevel", "category")):
            if _strip(t) not in (want, AnyType):
                raise TypeError(f"{name}(): the {what} must be a {want!r}, got {t!r}")
        return NoneType
    return rule


# name -> (callable, rule factory); ``math.*`` entries take their name from the module
_FLOAT_MATH = ("sqrt", "exp", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan", "asin",
               "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "fabs",
               "erf", "erfc", "gamma", "lgamma", "degrees", "radians")
_ROWS: dict[str, tuple[Callable[..., Any], Callable[[str], Rule]]] = {
    **{f"math.{n}": (getattr(math, n), _fixed(FloatType)) for n in _FLOAT_MATH},
    "math.log": (math.log, _fixed(FloatType, arity=(1, 2))),
    **{f"math.{n}": (getattr(math, n), _fixed(FloatType, arity=(2,)))
       for n in ("pow", "atan2", "hypot", "copysign", "fmod")},
    **{f"math.{n}": (getattr(math, n), _fixed(IntType)) for n in ("floor", "ceil", "trunc")},
    "math.gcd": (math.gcd, _fixed(IntType, arity=(2,))),
    "math.factorial": (math.factorial, _fixed(IntType)),
    **{f"math.{n}": (getattr(math, n), _fixed(BoolType)) for n in ("isnan", "isinf",
                                                                   "isfinite")},
    "round": (builtins.round, _round),
    "divmod": (builtins.divmod, _divmod),
    "sum": (builtins.sum, _of_list(_sum_rule, (1,))),
    "any": (builtins.any, _of_list(_bool_result, (1,))),
    "all": (builtins.all, _of_list(_bool_result, (1,))),
    "sorted": (_sorted, _of_list(_same_list, (1, 2))),
    "list.extend": (_extend, _of_list(_no_result, (2,))),
    "list.insert": (list.insert, _of_list(_no_result, (3,))),
    "list.pop": (list.pop, _of_list(_list_pop, (1, 2))),
    "list.remove": (list.remove, _of_list(_no_result, (2,))),
    "list.clear": (list.clear, _of_list(_no_result, (1,))),
    "list.reverse": (list.reverse, _of_list(_no_result, (1,))),
    "list.sort": (_sort, _of_list(_no_result, (1, 2))),
    "list.index": (list.index, _of_list(_int_result, (2,))),
    "list.count": (list.count, _of_list(_int_result, (2,))),
    "list.copy": (list.copy, _of_list(_same_list, (1,))),
    "list.repeat": (_repeat, _of_list(_same_list, (2,))),
    "dict.from_pairs": (dict, _of_list(_from_pairs, (1,))),
    "dict.get": (dict.get, _dict_get),
    "dict.pop": (dict.pop, _dict_get),
    "dict.clear": (dict.clear, _dict_none),
    "dict.update": (dict.update, _dict_none),
    **{f"str.{n}": (getattr(str, n), _str(StrType, (1, 2)))
       for n in ("strip", "lstrip", "rstrip")},
    **{f"str.{n}": (getattr(str, n), _str(StrType, (1,)))
       for n in ("upper", "lower", "capitalize", "title", "swapcase", "casefold")},
    **{f"str.{n}": (getattr(str, n), _str(BoolType, (1,)))
       for n in ("isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower",
                 "isnumeric", "isdecimal", "isidentifier")},
    **{f"str.{n}": (getattr(str, n), _str(BoolType, (2, 3, 4)))
       for n in ("startswith", "endswith")},
    **{f"str.{n}": (getattr(str, n), _str(IntType, (2, 3, 4))) for n in ("find", "rfind",
                                                                         "count", "index")},
    "str.replace": (str.replace, _str(StrType, (3, 4))),
    "str.split": (_split, _str(ListType(StrType), (1, 2, 3))),
    "str.join": (str.join, _join),
    **{f"str.{n}": (getattr(str, n), _str(StrType, (2, 3))) for n in ("center", "ljust",
                                                                      "rjust")},
    "str.zfill": (str.zfill, _str(StrType, (2,))),
    "str.getitem": (str.__getitem__, _str(StrType, (2,))),
    "str.slice": (lambda s, a, b, c: s[a:b:c], _str(StrType, (4,))),
    "warnings.warn": (_warn, _warn_rule),
    "isinstance": (_isinstance, _isinstance_rule),
}
PY_FUNCTIONS: dict[str, tuple[Callable[..., Any], Rule]] = {
    name: (fn, make(name)) for name, (fn, make) in _ROWS.items()}

# the rows that change their first argument (a list or dict) in place
MUTATING = frozenset({"list.extend", "list.insert", "list.pop", "list.remove", "list.clear",
                      "list.reverse", "list.sort", "dict.pop", "dict.clear", "dict.update"})

# the rows that act on the world (never run to learn a known value at compile time)
EFFECTS = frozenset({"warnings.warn"})

# what a callable object stands for, for the frontend: ``math.sqrt`` -> "math.sqrt"
BY_OBJECT: dict[int, str] = {id(getattr(math, n.split(".")[1])): n for n in PY_FUNCTIONS
                             if n.startswith("math.")}
BY_OBJECT.update({id(getattr(builtins, n)): n for n in ("round", "divmod", "sum", "any",
                                                         "all", "sorted")})


def result_type(name: str, types: Sequence[Type]) -> Type:
    row = PY_FUNCTIONS.get(name)
    if row is None:
        raise TypeError(f"py_call: {name!r} is not a function scripted code may call")
    return row[1](types)


def call(name: str, args: Sequence[Any]) -> Any:
    row = PY_FUNCTIONS.get(name)
    if row is None:
        raise TypeError(f"py_call: {name!r} is not a function scripted code may call")
    return row[0](*args)


__all__ = ["PY_FUNCTIONS", "MUTATING", "EFFECTS", "BY_OBJECT", "result_type", "call"]
