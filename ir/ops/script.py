"""Ops on Python values, for scripted programs (``jit.script``): arithmetic, comparisons and
conversions with Python's own semantics on int/float/bool/str/None (a bool counts as an int
in arithmetic), ``str.format``, tensor queries, and lists and dicts (a Python list or dict at
run time; ``Dict(str, T)`` / ``Dict(int, T)`` in the IR).

Every op has a ``type_rule``: its result type by Python's rules from the input types, so that
``propagate_shapes`` keeps precise types through scripted code.

    >>> from scriptmod.ir.schema import get
    >>> from scriptmod.ir.types import FloatType, IntType, ListType, StrType, TensorType
    >>> get("py_add").infer([IntType, FloatType], {})
    [float]
    >>> get("py_add").infer([StrType, StrType], {})
    [str]
    >>> get("list_get").infer([ListType(TensorType()), IntType], {})
    [Tensor]

Lists and dicts are mutable and shared, so every op that reads or writes one is ``IMPURE``:
DCE, CSE, folding and fusion never drop, merge or reorder it. The pure ops (arithmetic,
comparisons, conversions other than ``py_str``) refuse list and dict operands, whose value
depends on when they are read: a list's truth is ``list_len(l) != 0``. Ops that mutate a
container (``list_set``, ``list_append``, ``dict_set``) return it.

Where Python decides a result's type from a value (``2 ** n`` is an int for ``n >= 0``, a
float below), the rule uses the exponent when it is a known constant and says ``Scalar``
otherwise. ``py_min``/``py_max`` of mixed types give their operands' common type (``min(1,
2.5)`` is ``1.0``), as TorchScript does, so that the type is static. An ``Optional`` operand
types as its element: the None case fails when it runs, as it does in Python.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

from . import rules as R
from .. import symdims as SD
from ..graph import LIST_VALUE_RULES, PLAIN_VALUE_RULES, SYMBOLIC_VALUE_RULES
from .scalar import SYMBOLIC_ARITH, SYMBOLIC_COMPARE
from ..schema import IMPURE, NONDIFF, TypeRule, op
from ..types import (DICT_KEY_TYPES, AnyType, BoolType, ComplexType, DeviceType, DictType,
                     DTypeType, FloatType,
                     IntType, ListType, NumberType, OptionalType, StrType, TensorType,
                     TupleType, Type)

# what the binary ops compute: the reference kernels and ``known_value`` share these
PY_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "py_add": operator.add, "py_sub": operator.sub, "py_mul": operator.mul,
    "py_truediv": operator.truediv, "py_floordiv": operator.floordiv, "py_mod": operator.mod,
    "py_pow": operator.pow, "py_and": operator.and_, "py_or": operator.or_,
    "py_xor": operator.xor}
PY_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "py_eq": operator.eq, "py_ne": operator.ne, "py_lt": operator.lt, "py_le": operator.le,
    "py_gt": operator.gt, "py_ge": operator.ge}
_SYMBOLS = {"py_add": "+", "py_sub": "-", "py_mul": "*", "py_truediv": "/", "py_floordiv": "//",
            "py_mod": "%", "py_pow": "**", "py_and": "&", "py_or": "|", "py_xor": "^",
            "py_eq": "==", "py_ne": "!=", "py_lt": "<", "py_le": "<=", "py_gt": ">", "py_ge": ">="}

# values computed with these ops from known ones (sizes, constants) are known before
# folding, as with the ``int_*`` ops
PLAIN_VALUE_RULES.update({f"sm::{n}": (lambda attrs, a, b, fn=fn: fn(a, b))
                          for n, fn in {**PY_ARITH, **PY_COMPARE}.items()})
PLAIN_VALUE_RULES.update({
    "sm::py_neg": lambda attrs, a: -a, "sm::py_abs": lambda attrs, a: abs(a),
    "sm::py_not": lambda attrs, a: not a, "sm::py_bool": lambda attrs, a: bool(a),
    "sm::py_int": lambda attrs, a: int(a), "sm::py_float": lambda attrs, a: float(a),
    "sm::py_str": lambda attrs, a: str(a),
    "sm::py_min": lambda attrs, a, b: min(a, b) if type(a) is type(b) else None,
    "sm::py_max": lambda attrs, a, b: max(a, b) if type(a) is type(b) else None,
})


LIST_VALUE_RULES.update({
    "sm::list_len": len, "sm::list_get": lambda lst, i: lst[i],
    "sm::list_slice": lambda lst, a, b, c: lst[a:b:c], "sm::list_concat": lambda a, b: a + b,
    "sm::list_eq": lambda a, b: a == b, "sm::list_contains": lambda lst, x: x in lst,
})


def _symbolic_call(attrs: dict, *args: Any) -> Any:
    """A ``py_call`` that is the identity on an int size (``math.floor(T)``, ``round(T)``)."""
    if attrs.get("fn") in ("math.floor", "math.ceil", "math.trunc", "round") and len(args) == 1:
        return args[0]
    return None


# on symbolic sizes (``ir.symdims``): Python's int arithmetic, ``min``/``max``, ``int()``
SYMBOLIC_VALUE_RULES.update({f"sm::py_{name}": (lambda attrs, *a, fn=fn: fn(*a))
                             for name, fn in SYMBOLIC_ARITH.items()})
SYMBOLIC_VALUE_RULES.update({f"sm::py_{name}": (lambda attrs, a, b, o=o: SD.compare(o, a, b))
                             for name, o in SYMBOLIC_COMPARE.items()})
SYMBOLIC_VALUE_RULES.update({"sm::py_neg": lambda attrs, a: SD.neg(a),
                             "sm::py_int": lambda attrs, a: a, "sm::py_call": _symbolic_call})


def _plain_call(attrs: dict, *args: Any) -> Any:
    """A known ``py_call`` of numbers and strs (``math.sqrt(4)``); the ones that change a
    list or dict never have all-scalar arguments."""
    from .pyfuncs import EFFECTS, call
    if attrs.get("fn") in EFFECTS:              # ``warnings.warn``: only when it runs
        return None
    return call(attrs.get("fn", ""), args)


PLAIN_VALUE_RULES["sm::py_call"] = _plain_call

_TOWER = (BoolType, IntType, FloatType, ComplexType)      # Python's numbers, narrowest first


# ---- type helpers ------------------------------------------------------------------------

def _strip(t: Type) -> Type:
    return t.element if isinstance(t, OptionalType) else t


def _is_number(t: Type) -> bool:
    return t in _TOWER or t == NumberType


def _mutable(t: Type) -> bool:
    """A list or dict, or something holding one: its value depends on when it is read."""
    t = _strip(t)
    if isinstance(t, TupleType):
        return any(_mutable(e) for e in t.elements)
    return isinstance(t, (ListType, DictType))


def _arith(a: Type, b: Type, floor: Type = IntType, complex_ok: bool = True) -> Type | None:
    """Python's result type of arithmetic on numbers ``a`` and ``b`` (at least ``floor``), or
    None when they are not both numbers."""
    if not (_is_number(a) and _is_number(b)) or (not complex_ok and ComplexType in (a, b)):
        return None
    if NumberType in (a, b):
        return NumberType
    return _TOWER[max(_TOWER.index(a), _TOWER.index(b), _TOWER.index(floor))]


def _int_like(t: Type) -> bool:
    return t in (IntType, BoolType)


def _binary(name: str, result: Callable[[Type, Type, Any], Type | None]) -> TypeRule:
    """A binary op's rule: ``result(a, b, b's known value)``, None meaning Python's TypeError."""
    symbol = _SYMBOLS.get(name, name)

    def rule(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
        a, b = _strip(types[0]), _strip(types[1])
        if AnyType in (a, b):
            return [BoolType if name in PY_COMPARE else AnyType]
        out = result(a, b, values)
        if out is None:
            if name in PY_COMPARE:
                raise TypeError(f"'{symbol}' not supported between instances of '{a!r}' and "
                                f"'{b!r}'")
            raise TypeError(f"unsupported operand type(s) for {symbol}: '{a!r}' and '{b!r}'")
        return [out]
    return rule


def _pow(a: Type, b: Type, values: Any) -> Type | None:
    exponent: Any = values[1] if values else None
    t = _arith(a, b)
    if t != IntType:
        return t
    if type(exponent) in (int, bool):          # 2 ** 3 is an int, 2 ** -1 a float
        return IntType if exponent >= 0 else FloatType
    return IntType if b == BoolType else NumberType


def _add(a: Type, b: Type, _: Any) -> Type | None:
    return _arith(a, b) or (StrType if a == b == StrType else None)


def _mul(a: Type, b: Type, _: Any) -> Type | None:
    """Numbers, or a str repeated an int number of times (``"ab" * 3``, ``3 * "ab"``)."""
    repeat = (a == StrType and _int_like(b)) or (b == StrType and _int_like(a))
    return _arith(a, b) or (StrType if repeat else None)


_SAMPLES: dict[Type, object] = {IntType: 1, FloatType: 1.0, BoolType: True, StrType: "s"}


def _mod(a: Type, b: Type, values: Any) -> Type | None:
    """Numbers, or printf-style formatting of a str by a number, a str or a tuple of them
    (``"%d items" % n``, ``"%s-%s" % (a, b)``): checked by formatting the constant str with
    the argument (or a sample of its type) where the str is known, as Python would."""
    if a != StrType:
        return _arith(a, b, complex_ok=False)
    elements = b.elements if isinstance(b, TupleType) else (b,)
    if not all(e in _SAMPLES for e in elements):
        return None
    fmt = values[0] if values else None
    if isinstance(fmt, str):
        arg = values[1] if values[1] is not None else (
            tuple(_SAMPLES[e] for e in elements) if isinstance(b, TupleType) else _SAMPLES[b])
        try:
            fmt % arg
        except (TypeError, ValueError):
            return None
    return StrType


def _bitwise(a: Type, b: Type, _: Any) -> Type | None:
    """``&``, ``|``, ``^`` of bools (a bool) or ints (an int)."""
    if not all(t in (BoolType, IntType, NumberType) for t in (a, b)):
        return None
    if NumberType in (a, b):
        return NumberType
    return BoolType if a == b == BoolType else IntType


def _min(a: Type, b: Type, _: Any) -> Type | None:
    """Ordered numbers in their common type (no complex), or two strs."""
    return _arith(a, b, BoolType, complex_ok=False) or (StrType if a == b == StrType else None)


def _ordered(a: Type, b: Type) -> bool:
    return _arith(a, b, complex_ok=False) is not None or a == b == StrType


def _equatable(a: Type, b: Type) -> bool:
    return not (isinstance(a, TensorType) or isinstance(b, TensorType) or _mutable(a)
                or _mutable(b))


_RESULTS: dict[str, Callable[[Type, Type, Any], Type | None]] = {
    "py_add": _add,
    "py_sub": lambda a, b, _: _arith(a, b),
    "py_mul": _mul,
    "py_truediv": lambda a, b, _: _arith(a, b, floor=FloatType),
    "py_floordiv": lambda a, b, _: _arith(a, b, complex_ok=False),
    "py_mod": _mod,
    "py_pow": _pow,
    "py_min": _min,
    "py_and": _bitwise, "py_or": _bitwise, "py_xor": _bitwise,
    "py_eq": lambda a, b, _: BoolType if _equatable(a, b) else None,
    "py_lt": lambda a, b, _: BoolType if _ordered(a, b) else None,
}
for _alias, _of in (("py_max", "py_min"), ("py_ne", "py_eq"), ("py_le", "py_lt"),
                    ("py_gt", "py_lt"), ("py_ge", "py_lt")):
    _RESULTS[_alias] = _RESULTS[_of]


def _unary(name: str, result: Callable[[Type], Type | None], unknown: Type) -> TypeRule:
    """A one-input op's rule; ``unknown``: its result type for an ``Any`` operand."""
    def rule(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
        t = _strip(types[0])
        out = unknown if t == AnyType else result(t)
        if out is None:
            raise TypeError(f"{name}(): cannot take a {t!r}")
        return [out]
    return rule


def _convertible(t: Type) -> bool:
    """What ``int()``/``float()`` take: a real number, a str, a one-element tensor."""
    return (_is_number(t) and t != ComplexType) or t == StrType or isinstance(t, TensorType)


_UNARY: dict[str, Callable[[Type], Type | None]] = {
    "py_neg": lambda t: _arith(t, t),
    "py_abs": lambda t: FloatType if t == ComplexType else _arith(t, t),
    "py_not": lambda t: None if _mutable(t) else BoolType,
    "py_bool": lambda t: None if _mutable(t) else BoolType,
    "py_int": lambda t: IntType if _convertible(t) else None,
    "py_float": lambda t: FloatType if _convertible(t) else None,
    "py_str": lambda t: StrType,
    "py_is_none": lambda t: BoolType,
}


def _fixed(*outputs: Type) -> TypeRule:
    return lambda types, attrs, values: list(outputs)


def _tensor_query(result: Type) -> TypeRule:
    def rule(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
        t = _strip(types[0])               # an Optional: its None case fails when it runs
        if not isinstance(t, TensorType) and t != AnyType:
            raise TypeError(f"expected a Tensor, got {types[0]!r}")
        return [result]
    return rule


# ---- lists ---------------------------------------------------------------------------------

def _fits(value: Type, declared: Type) -> bool:
    """Whether a value of type ``value`` may be stored where ``declared`` is expected (any
    tensor where a tensor is: a list of tensors holds tensors of many shapes)."""
    from ..verify import is_subtype  # verify imports the registry: import when a rule runs
    if isinstance(value, TensorType) and isinstance(declared, TensorType):
        return True
    return is_subtype(value, declared) or (declared == FloatType and _int_like(value))


def _element(t: Type, what: str) -> Type:
    t = _strip(t)
    if t == AnyType:
        return AnyType
    if not isinstance(t, ListType):
        raise TypeError(f"{what}: expected a list, got {t!r}")
    return t.element


def _list_rule(name: str) -> TypeRule:
    def rule(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
        elem = _element(types[0], name)
        lst = ListType(elem)
        if name in ("list_set", "list_append"):
            v = types[-1]
            if not _fits(v, elem):
                raise TypeError(f"{name}: cannot store a {v!r} in a {lst!r}")
        if name == "list_concat":
            from ..builder import join_types  # builder imports the registry
            return [ListType(join_types(elem, _element(types[1], name)))]
        if name in ("list_min", "list_max"):
            if not (_is_number(elem) or elem == StrType):
                raise TypeError(f"{name[5:]}() of a {lst!r}: the items must be numbers or strs")
            return [elem]
        if name == "list_eq":
            other = _element(types[1], name)
            if TensorType in (type(elem), type(other)):
                raise TypeError("list_eq: lists of tensors have no == (compare the tensors)")
        return [{"list_len": IntType, "list_get": elem, "list_contains": BoolType,
                 "list_eq": BoolType}.get(name, lst)]
    return rule


# ---- dicts ---------------------------------------------------------------------------------

def dict_type_of(text: str) -> DictType:
    """The ``Dict(...)`` type that ``dict_construct``'s ``type`` attribute spells.

        >>> dict_type_of("Dict(str, Tensor)")
        Dict(str, Tensor)
    """
    from ..parser import Line, parse_type   # the parser imports the registry
    line = Line(text, 1)
    t = parse_type(line)
    line.expect_end()
    if not isinstance(t, DictType):
        raise TypeError(f"dict_construct: type={text!r} is not a Dict(...) type")
    return t


def _key_fits(k: Type, key: Type) -> bool:
    k = _strip(k)
    return k == AnyType or k == key or (key == IntType and k == BoolType)


def _dict_construct(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
    if len(types) % 2:
        raise TypeError(f"dict_construct: keys and values alternate, got {len(types)} inputs")
    keys, vals = list(types[0::2]), list(types[1::2])
    if attrs.get("type") is not None:
        t = dict_type_of(attrs["type"])
    elif not types:
        raise TypeError('dict_construct: an empty dict needs its type, e.g. '
                        'type="Dict(str, Tensor)"')
    else:
        from ..builder import join_types  # builder imports the registry
        value = vals[0]
        for v in vals[1:]:
            value = join_types(value, v)
        key = keys[0] if all(k == keys[0] for k in keys) else AnyType
        if key not in DICT_KEY_TYPES:
            raise TypeError(f"dict_construct: keys must be all str or all int, got "
                            f"{', '.join(map(repr, keys))}")
        t = DictType(key, value)
    for k, v in zip(keys, vals):
        if not (_key_fits(k, t.key) and _fits(v, t.value)):
            raise TypeError(f"dict_construct: a {k!r}: {v!r} item does not fit {t!r}")
    return [t]


def _dict_rule(name: str) -> TypeRule:
    def rule(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
        d = _strip(types[0])
        key: Type
        value: Type
        if d == AnyType:
            key, value = AnyType, AnyType
        elif isinstance(d, DictType):
            key, value = d.key, d.value
        else:
            raise TypeError(f"{name}: expected a Dict, got {d!r}")
        if len(types) > 1 and key != AnyType and not _key_fits(types[1], key):
            raise TypeError(f"{name}: a {types[1]!r} key does not fit {d!r}")
        if name == "dict_set" and not _fits(types[2], value):
            raise TypeError(f"dict_set: cannot store a {types[2]!r} in a {d!r}")
        return [{"dict_get": value, "dict_set": d, "dict_contains": BoolType,
                 "dict_len": IntType, "dict_keys": ListType(key), "dict_values": ListType(value),
                 "dict_items": ListType(TupleType((key, value)))}[name]]
    return rule


# ---- declarations --------------------------------------------------------------------------

def _declare(schema: str, rule: TypeRule, *flags: str, doc: str = "") -> None:
    op(schema, R.no_dtype, R.scalar_shape, NONDIFF, *flags, type_rule=rule, doc=doc)


for _name in (*PY_ARITH, "py_min", "py_max"):
    _declare(f"{_name}(Any a, Any b) -> Any", _binary(_name, _RESULTS[_name]))
for _name in PY_COMPARE:
    _declare(f"{_name}(Any a, Any b) -> bool", _binary(_name, _RESULTS[_name]))
for _name, _out in (("py_neg", AnyType), ("py_abs", AnyType), ("py_not", BoolType),
                    ("py_int", IntType), ("py_float", FloatType), ("py_bool", BoolType),
                    ("py_is_none", BoolType)):
    _declare(f"{_name}(Any x) -> {_out!r}", _unary(_name, _UNARY[_name], _out))
# they print lists and dicts, so they read them: IMPURE keeps them in order
_declare("py_str(Any x) -> str", _unary("py_str", _UNARY["py_str"], StrType), IMPURE)
_declare("py_format(str fmt, Any... args) -> str", _fixed(StrType), IMPURE,
         doc="``fmt.format(*args)``; f-strings compile to it.")

def _item(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
    """``Tensor.item()``: a bool, int, float or complex by the tensor's dtype (``Scalar``
    while the dtype is not known)."""
    t = _strip(types[0])
    if not isinstance(t, TensorType) and t != AnyType:
        raise TypeError(f"item(): expected a Tensor, got {t!r}")
    dt = getattr(t, "dtype", None)
    if dt is None:
        return [NumberType]
    return [(BoolType, IntType, FloatType, ComplexType)[dt.category]]


_declare("item(Tensor self) -> Scalar", _item,
         doc="``Tensor.item()``: the one element as a Python number.")
_declare("tensor_dtype(Tensor self) -> ScalarType", _tensor_query(DTypeType),
         doc="``Tensor.dtype`` (known when the specialization is built: see ``known_value``).")
_declare("tensor_device(Tensor self) -> Device", _tensor_query(DeviceType),
         doc="``Tensor.device``, as its string (``\"cpu\"``, ``\"cuda:0\"``).")
def _py_call(types: Sequence[Type], attrs: dict, values: Sequence[Any]) -> list[Type]:
    from .pyfuncs import result_type
    return [result_type(attrs.get("fn", ""), list(types))]


# reads and may change lists and dicts: IMPURE keeps it in order
_declare("py_call(Any... args, *, str fn) -> Any", _py_call, IMPURE,
         doc="A builtin, ``math`` function or str/list/dict method by name (``fn=\"math.sqrt\"``"
             "); the names and their result types are the table ``ir.ops.pyfuncs``.")
_declare("str_len(str s) -> int", _unary("str_len", lambda t: IntType if t == StrType else None,
                                         IntType), doc="``len(s)`` of a str.")
_declare("dim(Tensor self) -> int", _tensor_query(IntType))
_declare("numel(Tensor self) -> int", _tensor_query(IntType))
_declare("shape(Tensor self) -> int[]", _tensor_query(ListType(IntType)))

for _schema in ("list_len(Any[] l) -> int", "list_get(Any[] l, int i) -> Any",
                "list_set(Any[] l, int i, Any v) -> Any[]", "list_append(Any[] l, Any v) -> Any[]",
                "list_slice(Any[] l, int? start, int? end, int? step) -> Any[]",
                "list_concat(Any[] a, Any[] b) -> Any[]", "list_contains(Any[] l, Any v) -> bool",
                "list_eq(Any[] a, Any[] b) -> bool", "list_min(Any[] l) -> Any",
                "list_max(Any[] l) -> Any"):
    _declare(_schema, _list_rule(_schema.split("(")[0]), IMPURE)

# a fresh dict per run: IMPURE, so CSE never makes two literals one shared dict
_declare("dict_construct(Any... keys_and_values, *, str? type=None) -> Any", _dict_construct,
         IMPURE, doc="Keys and values alternate; ``type`` (``\"Dict(str, Tensor)\"``) types an "
                     "empty dict or widens the value type.")
for _schema in ("dict_get(Any d, Any k) -> Any", "dict_set(Any d, Any k, Any v) -> Any",
                "dict_contains(Any d, Any k) -> bool", "dict_len(Any d) -> int",
                "dict_keys(Any d) -> Any[]", "dict_values(Any d) -> Any[]",
                "dict_items(Any d) -> Any[]"):
    _declare(_schema, _dict_rule(_schema.split("(")[0]), IMPURE)

__all__ = ["PY_ARITH", "PY_COMPARE", "dict_type_of"]
