"""Malformed IR text: IRParseError with line, column and what was expected."""
import pytest

from scriptmod.ir.parser import IRParseError, parse

GOOD = """graph(%x : Float(2)):
  %1 : Float(2) = sm::neg(%x)
  return (%1)
"""


def _error(text):
    with pytest.raises(IRParseError) as info:
        parse(text)
    return info.value


@pytest.mark.parametrize("bad, line, column, fragment", [
    (GOOD.replace("sm::neg(%x)", "sm::neg(%x"), 2, 29, "expected ')'"),
    (GOOD.replace("sm::neg", "sm::nope"), 2, 19, "unknown op sm::nope"),
    (GOOD.replace("neg(%x)", "neg(%y)"), 2, 27, "undefined value %y"),
    (GOOD.replace("Float(2) =", "Floot(2) ="), 2, 8, "expected a type"),
    (GOOD.replace("  return (%1)\n", ""), 3, 1, "expected a node or 'return'"),
    (GOOD.replace("%1 : Float(2) =", "%x : Float(2) ="), 2, 3, "%x is defined twice"),
    (GOOD.replace("sm::neg(%x)", "sm::neg[dim=1](%x)"), 2, 27, "no attribute 'dim'"),
    (GOOD.replace("graph(", "grph("), 1, 1, "expected 'graph'"),
    (GOOD.replace("sm::neg(%x)", "sm::neg(%x) $"), 2, 31, "unexpected character '$'"),
    (GOOD + "with prim::FusionGroup_0 = graph():\n", 5, 1, "expected a node or 'return'"),
])
def test_errors_point_at_line_and_column(bad, line, column, fragment):
    e = _error(bad)
    assert (e.line, e.column) == (line, column), str(e)
    assert fragment in str(e)
    assert f"line {line}, column {column}" in str(e)


def test_missing_fusion_subgraph_is_reported():
    text = """graph(%x : Float(2)):
  %1 : Float(2) = prim::FusionGroup_3(%x)
  return (%1)
"""
    e = _error(text)
    assert e.line == 2 and "FusionGroup_3" in str(e)


def test_blocks_must_be_numbered_in_order():
    text = """graph(%c : bool, %x : Float(2)):
  %1 : Float(2) = prim::If(%c)
    block1():
      -> (%x)
  return (%1)
"""
    e = _error(text)
    assert (e.line, e.column) == (3, 5) and "expected 'block0'" in str(e)


def test_hostile_text_always_gives_parse_errors() -> None:
    """Absurd nesting and giant literals are IRParseError, never RecursionError/ValueError."""
    from scriptmod.ir.parser import IRParseError, parse
    giant = "graph(%x : Float(" + "9" * 5000 + ")):\n  return (%x)\n"
    nested = "graph():\n  %0 : int = prim::Constant[value=" + "[" * 5000 + "]()\n  return (%0)\n"
    for text in (giant, nested):
        with pytest.raises(IRParseError):
            parse(text)
