"""Shape propagation through stores into lists and dicts (issue 35): a list of tensors holds
tensors of many shapes, so a store (``list_append``, ``list_set``, ``py_call`` of
``list.insert``/``list.extend``, ``dict_set``) widens the container's type to hold what it
stores, and a loop whose body stores into a list it carries is typed again from the wider
type. Before, every read took the first item's type: ``xs[-1].shape[0]`` after appends of
growing tensors was folded to the first item's size."""
from __future__ import annotations

from scriptmod.ir import parse, verify
from scriptmod.ir.builder import join_types
from scriptmod.ir.dtypes import float32
from scriptmod.ir.graph import known_value
from scriptmod.ir.passes import propagate_shapes
from scriptmod.ir.types import DictType, IntType, ListType, StrType, TensorType

X23 = TensorType(float32, (2, 3))

GROWING = '''graph(%x : Tensor, %n : int):
  %0 : Tensor[] = prim::ListConstruct(%x)
  %t : bool = prim::Constant[value=1]()
  %m : int = prim::Constant[value=-1]()
  %1 : Tensor[] = prim::Loop(%n, %t, %0)
    block0(%i : int, %2 : Tensor[]):
      %3 : Tensor = sm::list_get(%2, %m)
      %4 : Tensor = sm::cat[dim=0](%3, %3)
      %5 : Tensor[] = sm::list_append(%2, %4)
      -> (%t, %2)
  %6 : Tensor = sm::list_get(%1, %m)
  %7 : int = sm::size[dim=0](%6)
  return (%7)
'''


def test_a_loop_that_appends_growing_items_types_its_reads_for_every_item() -> None:
    g = propagate_shapes(parse(GROWING), [X23, IntType])
    verify(g)
    loop = next(n for n in g.block if n.kind == "prim::Loop")
    body = loop.blocks[0]
    read_in_body = next(n for n in body if n.kind == "sm::list_get")
    assert read_in_body.output.type == TensorType(float32, (None, 3))
    assert loop.output.type == ListType(TensorType(float32, (None, 3)))
    assert known_value(g.outputs[0]) is None         # the size is read when it runs


STRAIGHT = '''graph(%x : Tensor, %y : Tensor):
  %0 : Tensor[] = prim::ListConstruct(%x)
  %one : int = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %a : Tensor = sm::list_get(%0, %zero)
  %1 : Tensor[] = sm::list_append(%0, %y)
  %b : Tensor = sm::list_get(%0, %one)
  %k : str = prim::Constant[value="k"]()
  %d : Dict(str, Tensor) = sm::dict_construct(%k, %x)
  %2 : Dict(str, Tensor) = sm::dict_set(%d, %k, %y)
  %c : Tensor = sm::dict_get(%d, %k)
  return (%a, %b, %c)
'''


def test_straight_line_stores_widen_what_later_reads_see() -> None:
    g = propagate_shapes(parse(STRAIGHT), [X23, TensorType(float32, (5, 3))])
    verify(g)
    a, b, c = (v.type for v in g.outputs)
    assert a == X23                                   # read before the append: the literal
    assert b == TensorType(float32, (None, 3))
    assert c == TensorType(float32, (None, 3))


def test_join_of_dict_types_joins_their_values() -> None:
    d1, d2 = DictType(StrType, X23), DictType(StrType, TensorType(float32, (1, 3)))
    assert join_types(d1, d2) == DictType(StrType, TensorType(float32, (None, 3)))
