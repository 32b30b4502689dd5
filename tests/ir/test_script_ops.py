"""The Python-value ops' IR half (``ir.ops.script``): every type rule against the type of
what Python itself computes, the refusals (Python's TypeError wording), list and dict types,
``DictType`` through print/parse (and hostile text), flags (NONDIFF everywhere, IMPURE on
every op that reads or writes a list or dict) and what DCE, CSE and folding do with them."""
from __future__ import annotations

import ast
import itertools
import math
import operator
import re
from typing import Any

import pytest

from scriptmod.ir import parse, verify
from scriptmod.ir.builder import Builder
from scriptmod.ir.dtypes import float32, int64
from scriptmod.ir.graph import Graph, known_value
from scriptmod.ir.ops.script import PY_ARITH, PY_COMPARE, dict_type_of
from scriptmod.ir.parser import IRParseError
from scriptmod.ir.passes import (eliminate_common_subexpressions, eliminate_dead_code,
                                 fold_constants, propagate_shapes)
from scriptmod.ir.schema import IMPURE, NONDIFF, REGISTRY, get
from scriptmod.ir.types import (SCALAR_TYPES, AnyType, BoolType, ComplexType, DictType,
                                FloatType, IntType, ListType, NoneType, NumberType, OptionalType,
                                StrType, TensorType, TupleType, Type)

SCRIPT_OPS = sorted(n for n in REGISTRY if n.startswith(("py_", "list_", "dict_"))) + [
    "dim", "numel", "shape"]
CONTAINER_OPS = sorted(n for n in SCRIPT_OPS if n.startswith(("list_", "dict_")))
# one value of each Python type the ops take, with the awkward ones (0, negative, nan, bool)
VALUES = [True, False, 0, 7, -7, 2, -2, 0.0, 2.5, -7.5, math.nan, math.inf, "ab", "", None, 3 - 4j]
BINARY = {**PY_ARITH, **PY_COMPARE, "py_min": min, "py_max": max}


def typeof(x: Any) -> Type:
    return SCALAR_TYPES[type(x)]


def infer(name: str, *types: Type, values: list | None = None, **attrs: Any) -> list[Type]:
    schema = get(name)
    return schema.infer(list(types), schema.bind_attrs(attrs), values)


# ---- every binary rule against Python ------------------------------------------------------

def _python_type(name: str, a: Any, b: Any) -> Type | None:
    """The type of what Python computes (None: Python raises TypeError); for min/max the
    operands' common type, as the op documents."""
    try:
        out = BINARY[name](a, b)
    except TypeError:
        return None
    except ZeroDivisionError:          # the type, had the zero been a one of its type
        if ComplexType in (typeof(a), typeof(b)):     # inf ** 1j raises this too
            return ComplexType
        out = BINARY[name](type(a)(1) if a == 0 else a, type(b)(1) if b == 0 else b)
    if name in ("py_min", "py_max") and typeof(a) != typeof(b):
        return max(typeof(a), typeof(b), key=[BoolType, IntType, FloatType].index)
    return typeof(out)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_type_rule_is_the_type_python_computes(name: str) -> None:
    checked = 0
    for a, b in itertools.product(VALUES, VALUES):
        want = _python_type(name, a, b)
        if name == "py_pow" and want == ComplexType and ComplexType not in (typeof(a), typeof(b)):
            want = FloatType            # the kernel refuses a complex power of reals
        if want is None:
            with pytest.raises(TypeError):
                infer(name, typeof(a), typeof(b), values=[a, b])
            continue
        assert infer(name, typeof(a), typeof(b), values=[a, b]) == [want], (name, a, b)
        checked += 1
    assert checked > 20


def test_python_type_error_wording() -> None:
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'int' and 'str'"):
        infer("py_add", IntType, StrType)
    with pytest.raises(TypeError, match="'<' not supported between instances of 'str' and 'int'"):
        infer("py_lt", StrType, IntType)
    with pytest.raises(TypeError, match=r"for //: 'complex' and 'int'"):
        infer("py_floordiv", ComplexType, IntType)


def test_pow_of_ints_is_an_int_only_for_a_known_non_negative_exponent() -> None:
    assert infer("py_pow", IntType, IntType, values=[2, 3]) == [IntType]
    assert infer("py_pow", IntType, IntType, values=[2, -1]) == [FloatType]
    assert infer("py_pow", IntType, IntType) == [NumberType]        # decided when it runs
    assert infer("py_pow", IntType, BoolType) == [IntType]          # a bool is never negative
    assert infer("py_pow", FloatType, IntType) == [FloatType]


def test_unknown_optional_and_scalar_operands() -> None:
    assert infer("py_add", AnyType, IntType) == [AnyType]
    assert infer("py_lt", AnyType, StrType) == [BoolType]
    assert infer("py_add", OptionalType(IntType), FloatType) == [FloatType]   # None fails at run
    assert infer("py_mul", NumberType, IntType) == [NumberType]
    assert infer("py_int", AnyType) == [IntType] and infer("py_neg", AnyType) == [AnyType]


@pytest.mark.parametrize("name,fn", [("py_neg", operator.neg), ("py_abs", abs), ("py_int", int),
                                     ("py_float", float), ("py_bool", bool),
                                     ("py_not", operator.not_), ("py_str", str),
                                     ("py_is_none", lambda x: x is None)])
def test_unary_type_rule_is_the_type_python_computes(name: str, fn: Any) -> None:
    for x in VALUES:
        try:
            want: Type | None = typeof(fn(x))
        except TypeError:
            want = None
        except (ValueError, OverflowError):    # int(nan), int("ab"): a value error, typed fine
            want = IntType if name == "py_int" else FloatType
        if want is None:
            with pytest.raises(TypeError):
                infer(name, typeof(x))
        else:
            assert infer(name, typeof(x)) == [want], (name, x)


def test_conversions_and_truth_of_tensors() -> None:
    t = TensorType(float32, (1,))
    assert [infer(n, t)[0] for n in ("py_int", "py_float", "py_bool", "py_not", "py_str")] == [
        IntType, FloatType, BoolType, BoolType, StrType]
    with pytest.raises(TypeError):
        infer("py_neg", t)              # tensor arithmetic is sm::neg
    with pytest.raises(TypeError):
        infer("py_eq", t, IntType)      # and sm::eq


def test_pure_ops_refuse_lists_and_dicts() -> None:
    """A list's value depends on when it is read; the pure ops would be merged or moved."""
    lst, d = ListType(IntType), DictType(StrType, IntType)
    for name, types in [("py_bool", [lst]), ("py_not", [d]), ("py_eq", [lst, lst]),
                        ("py_ne", [TupleType((IntType, lst)), NoneType]), ("py_int", [lst])]:
        with pytest.raises(TypeError):
            infer(name, *types)
    assert infer("py_str", lst) == [StrType]          # py_str is IMPURE: it may read lists
    assert infer("py_format", StrType, lst, d) == [StrType]


def test_tensor_queries() -> None:
    t = TensorType(float32, ("B", 4))
    assert infer("dim", t) == [IntType] and infer("numel", t) == [IntType]
    assert infer("shape", t) == [ListType(IntType)]
    with pytest.raises(TypeError, match="expected a Tensor"):
        infer("dim", IntType)


# ---- lists and dicts -------------------------------------------------------------------------

def test_list_rules_keep_the_element_type() -> None:
    ft = TensorType(float32, (2, 3))
    lst = ListType(ft)
    assert infer("list_get", lst, IntType) == [ft]
    assert infer("list_len", lst) == [IntType]
    assert infer("list_append", lst, TensorType(int64, (5,))) == [lst]   # any tensor fits
    assert infer("list_set", ListType(FloatType), IntType, IntType) == [ListType(FloatType)]
    assert infer("list_slice", lst, NoneType, IntType, NoneType) == [lst]
    assert infer("list_contains", lst, ft) == [BoolType]
    assert infer("list_concat", ListType(IntType), ListType(IntType)) == [ListType(IntType)]
    assert infer("list_concat", ListType(IntType), ListType(StrType)) == [ListType(AnyType)]
    assert infer("list_get", AnyType, IntType) == [AnyType]
    with pytest.raises(TypeError, match=r"list_append: cannot store a str in a int\[\]"):
        infer("list_append", ListType(IntType), StrType)
    with pytest.raises(TypeError, match="expected a list"):
        infer("list_len", StrType)


def test_dict_rules() -> None:
    d = DictType(StrType, TensorType(float32, (4,)))
    assert infer("dict_get", d, StrType) == [d.value]
    assert infer("dict_set", d, StrType, TensorType(float32)) == [d]
    assert infer("dict_contains", d, StrType) == [BoolType]
    assert infer("dict_len", d) == [IntType]
    assert infer("dict_keys", d) == [ListType(StrType)]
    assert infer("dict_values", d) == [ListType(d.value)]
    assert infer("dict_items", d) == [ListType(TupleType((StrType, d.value)))]
    assert infer("dict_get", DictType(IntType, StrType), BoolType) == [StrType]   # d[True] is d[1]
    with pytest.raises(TypeError, match="key does not fit"):
        infer("dict_get", d, IntType)
    with pytest.raises(TypeError, match="cannot store a int"):
        infer("dict_set", d, StrType, IntType)
    with pytest.raises(TypeError, match="expected a Dict"):
        infer("dict_len", ListType(IntType))


def test_dict_construct_types() -> None:
    ft = TensorType(float32, (2,))
    assert infer("dict_construct", StrType, ft, StrType, ft) == [DictType(StrType, ft)]
    assert infer("dict_construct", IntType, IntType, IntType, FloatType) == [
        DictType(IntType, AnyType)]
    assert infer("dict_construct", type="Dict(str, Tensor)") == [DictType(StrType, TensorType())]
    widened = infer("dict_construct", StrType, IntType, type="Dict(str, int?)")
    assert widened == [DictType(StrType, OptionalType(IntType))]
    with pytest.raises(TypeError, match="empty dict needs its type"):
        infer("dict_construct")
    with pytest.raises(TypeError, match="all str or all int"):
        infer("dict_construct", StrType, IntType, IntType, IntType)
    with pytest.raises(TypeError, match="alternate"):
        infer("dict_construct", StrType)
    with pytest.raises(TypeError, match="does not fit"):
        infer("dict_construct", StrType, StrType, type="Dict(str, int)")
    with pytest.raises(TypeError, match="not a Dict"):
        dict_type_of("int[]")


def test_dict_type_keys_are_str_or_int() -> None:
    assert repr(DictType(IntType, ListType(StrType))) == "Dict(int, str[])"
    for bad in (FloatType, BoolType, TensorType(), AnyType):
        with pytest.raises(ValueError, match="key type must be str or int"):
            DictType(bad, IntType)


# ---- print, parse, verify, propagate -----------------------------------------------------------

GRAPH = '''graph(%x : Float(B, 4), %n : int, %m : Dict(str, Float(B, 4))):
  %l : Float(B, 4)[] = prim::ListConstruct(%x, %x)
  %l2 : Float(B, 4)[] = sm::list_append(%l, %x)
  %k : str = prim::Constant[value="w"]()
  %w : Float(B, 4) = sm::dict_get(%m, %k)
  %e : Dict(int, (str, Tensor)[]) = sm::dict_construct[type="Dict(int, (str, Tensor)[])"]()
  %items : (str, Float(B, 4))[] = sm::dict_items(%m)
  %e2 : Dict(int, (str, Tensor)[]) = sm::dict_set(%e, %n, %items)
  %y : Float(B, 4) = sm::list_get(%l2, %n)
  %len : int = sm::list_len(%l2)
  %half : float = sm::py_truediv(%len, %n)
  %big : bool = sm::py_gt(%half, %n)
  %fmt : str = prim::Constant[value="{} of {}"]()
  %s : str = sm::py_format(%fmt, %half, %y)
  %d : int = sm::dim(%x)
  %sh : int[] = sm::shape(%w)
  return (%y, %half, %big, %s, %e2, %d, %sh)
'''


def test_a_graph_of_script_ops_round_trips_and_verifies() -> None:
    g = parse(GRAPH)
    verify(g)
    assert str(g) == GRAPH
    assert str(parse(str(g))) == GRAPH
    assert g.inputs[2].type == DictType(StrType, TensorType(float32, ("B", 4)))
    ast.parse(g.code)                                   # .code stays valid Python


def test_propagate_shapes_keeps_precise_types() -> None:
    g = parse(GRAPH)
    propagate_shapes(g, [TensorType(float32, (8, 4)), IntType,
                         DictType(StrType, TensorType(float32, (8, 4)))])
    verify(g)
    types = {v.debug_name: v.type for n in g.walk() for v in n.outputs}
    f84 = TensorType(float32, (8, 4))
    assert types["y"] == f84 and types["w"] == f84 and types["l2"] == ListType(f84)
    assert types["half"] == FloatType and types["big"] == BoolType and types["s"] == StrType
    assert types["items"] == ListType(TupleType((StrType, f84)))
    assert types["e"] == DictType(IntType, ListType(TupleType((StrType, TensorType()))))


def test_builder_types_script_ops() -> None:
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(float32, (2, 3)), "x")
    n = b.op("py_add", b.op("numel", x), 2.5)
    assert n.type == FloatType
    d = b.op("dict_construct", "a", x, "b", x)
    assert d.type == DictType(StrType, TensorType(float32, (2, 3)))
    assert b.op("dict_get", d, "a").type == TensorType(float32, (2, 3))


@pytest.mark.parametrize("text,message", [
    ("Dict(float, int)", "a Dict key type must be str or int, found float"),
    ("Dict(str)", "expected ','"),
    ("Dict(str, int", "expected ')'"),
    ("Dict[str, int]", "expected"),
    ("Dict(" * 5000 + "str, int" + ")" * 5000, "nesting too deep"),
])
def test_hostile_dict_types_are_parse_errors(text: str, message: str) -> None:
    with pytest.raises(IRParseError, match=re.escape(message)):
        parse(f"graph(%d : {text}):\n  return (%d)\n")


def test_nested_dict_value_types_round_trip() -> None:
    deep = "Dict(str, " * 50 + "Float(2)" + ")" * 50
    text = f"graph(%d : {deep}):\n  return (%d)\n"
    assert str(parse(text)) == text


# ---- flags and passes --------------------------------------------------------------------------

def test_flags() -> None:
    for name in SCRIPT_OPS:
        assert REGISTRY[name].has(NONDIFF), name
    impure = {n for n in SCRIPT_OPS if REGISTRY[n].has(IMPURE)}
    assert impure == set(CONTAINER_OPS) | {"py_str", "py_format", "py_call"}


def test_dce_keeps_list_mutations_and_cse_merges_only_pure_ops() -> None:
    g = parse('''graph(%n : int):
  %a : int[] = prim::ListConstruct(%n)
  %a2 : int[] = sm::list_append(%a, %n)
  %d1 : Dict(str, int) = sm::dict_construct[type="Dict(str, int)"]()
  %d2 : Dict(str, int) = sm::dict_construct[type="Dict(str, int)"]()
  %k : str = prim::Constant[value="k"]()
  %d3 : Dict(str, int) = sm::dict_set(%d1, %k, %n)
  %l1 : int = sm::dict_len(%d2)
  %p : int = sm::py_add(%n, %n)
  %q : int = sm::py_add(%n, %n)
  %r : int = sm::py_mul(%p, %q)
  %unused : int = sm::py_neg(%n)
  return (%r, %l1)
''')
    eliminate_dead_code(eliminate_common_subexpressions(g))
    kinds = [n.kind for n in g.nodes]
    assert kinds.count("sm::list_append") == 1 and kinds.count("sm::dict_construct") == 2
    assert kinds.count("sm::dict_set") == 1 and kinds.count("sm::py_add") == 1
    assert "sm::py_neg" not in kinds


def test_folding_evaluates_pure_ops_only() -> None:
    from scriptmod.runtime.interpreter import evaluate_node
    g = parse('''graph(%n : int):
  %a : int = prim::Constant[value=7]()
  %b : int = prim::Constant[value=-2]()
  %q : int = sm::py_floordiv(%a, %b)
  %s : str = prim::Constant[value="x"]()
  %t : str = sm::py_mul(%s, %a)
  %eq : bool = sm::py_eq(%t, %s)
  %f : str = sm::py_str(%a)
  %r : int = sm::py_add(%q, %n)
  return (%r, %eq, %f)
''')
    fold_constants(g, evaluate=evaluate_node)
    eliminate_dead_code(g)
    ops = [n.kind for n in g.nodes if n.kind.startswith("sm::")]
    assert ops == ["sm::py_str", "sm::py_add"]        # py_str is IMPURE: never folded
    consts = [n.attrs["value"] for n in g.nodes if n.kind == "prim::Constant"]
    assert -4 in consts and False in consts


def test_known_value_follows_python_int_arithmetic() -> None:
    g = parse('''graph(%x : Float(6, 4)):
  %n : int = sm::size[dim=0](%x)
  %two : int = prim::Constant[value=2]()
  %h : int = sm::py_floordiv(%n, %two)
  %m : int = sm::py_mod(%h, %two)
  %c : bool = sm::py_lt(%m, %h)
  return (%h, %m, %c)
''')
    assert [known_value(v) for v in g.outputs] == [3, 1, True]


# ---- what the passes owned by others still do to lists (see the issue 13 report) ----------------

_SHARED_EMPTY = '''graph(%n : int):
  %a : int[] = prim::ListConstruct()
  %b : int[] = prim::ListConstruct()
  %a2 : int[] = sm::list_append(%a, %n)
  %len : int = sm::list_len(%b)
  return (%len)
'''


def test_cse_keeps_two_empty_lists_apart() -> None:
    from scriptmod.runtime.interpreter import run_graph
    g = eliminate_common_subexpressions(parse(_SHARED_EMPTY))
    assert run_graph(g, 5) == 0


def test_folding_does_not_share_a_mutated_list_across_runs() -> None:
    from scriptmod.runtime.interpreter import run_graph
    g = fold_constants(parse(_SHARED_EMPTY.replace("%len : int = sm::list_len(%b)",
                                                   "%len : int = sm::list_len(%a)")))
    assert run_graph(g, 5) == 1 and run_graph(g, 5) == 1
