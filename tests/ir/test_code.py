"""The Python view of graphs: valid syntax, inlining, control flow, constants."""
import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scriptmod.ir import parse
from scriptmod.ir.builder import Builder
from scriptmod.ir.code import code_with_constants
from scriptmod.ir.graph import Graph
from scriptmod.ir.ops.scalar import INT_FUNCS
from scriptmod.ir.printer import print_graph
from scriptmod.ir.types import IntType
from irsamples import assert_golden, control_flow, mlp, t
from test_printer import FakeArray


def test_mlp_code():
    code = mlp().code
    ast.parse(code)
    assert_golden(code, """
        def forward(self, x: Tensor) -> Tensor:
            h = ops.sm.add(ops.sm.matmul(x, self.w), self.b)
            return ops.sm.sum(ops.sm.relu(h), dim=[1], keepdim=False)
        """)


def test_control_flow_code():
    code = control_flow().code
    ast.parse(code)
    assert_golden(code, """
        def forward(x: Tensor) -> Tensor:
            if ops.sm.gt(ops.sm.sum(x, keepdim=False), 0.0):
                _0 = ops.sm.neg(x)
            else:
                _0 = ops.sm.mul(x, 2.0)
            _1 = _0
            for i in range(3):
                _1 = ops.sm.add(_1, 1.0)
            _2 = _1
            return _2
        """)


def test_while_loop_unpack_side_effects_and_constants():
    g = Graph()
    b = Builder(g)
    m = b.input(__import__("scriptmod.ir").ir.types.ModuleType("M"), "self")
    x = b.input(t(2), "x.1")
    w = b.constant(FakeArray())
    c = b.op("gt", b.op("sum", x), 0.0)
    y, = b.while_loop(c, [x], lambda i, v: (b.op("lt", b.op("sum", v), 9.0), b.op("add", v, w)))
    a, = b.tuple_unpack(b.tuple_([y]))
    b.set_attr(m, "last", a)
    b.print_(a)
    b.raise_("bad", "ValueError")
    b.ret(a, b.constant(float("inf")))
    code, consts = code_with_constants(g)
    ast.parse(code)
    assert consts == {"c0": w.node.attrs["value"]}
    assert "CONSTANTS.c0" in code and "while _continue and i < " in code
    assert "a, = (y,)" not in code and "self.last = " in code
    assert "raise ValueError('bad')" in code and 'float("inf")' in code and "x_1" in code


def test_non_identifier_names_print_as_getattr_and_setattr():
    """Sequential children ("0"), keys like "1x" or keywords ("class") are not valid after a
    dot: the code writes ``getattr(self, "0")`` as torch does, and stays valid Python."""
    from scriptmod.ir.types import ModuleType
    g = Graph()
    b = Builder(g)
    m = b.input(ModuleType("nn.Sequential"), "self")
    x = b.input(t(2), "x")
    child = b.get_attr(m, "0", ModuleType("nn.Linear"))
    y, = b.call_method(child, "forward", [x], [t(2)])
    keyword_child = b.get_attr(m, "class", ModuleType("nn.ReLU"))
    z, = b.call_method(keyword_child, "for", [y], [t(2)])
    b.set_attr(m, "1x", z)
    b.ret(z)
    code, _ = code_with_constants(g, "<lambda>")
    ast.parse(code)
    assert code.startswith("def _lambda(self, x: Tensor) -> Tensor:")
    assert 'getattr(self, "0")' in code and 'getattr(self, "class")' in code
    assert 'getattr(' in code and '"for")(' in code
    assert 'setattr(self, "1x", ' in code
    assert "self.0" not in code and ".class" not in code


# ---- size arithmetic and guards -------------------------------------------------------------

SIZES_GRAPH = '''graph(%x : Float(B, 6)):
  %0 : int = sm::size[dim=0](%x)
  %1 : int = sm::size[dim=1](%x)
  %2 : int = prim::Constant[value=2]()
  %3 : int = sm::int_floordiv(%0, %2)
  %4 : int = sm::int_add(%0, %1)
  %5 : int = sm::int_mul(%4, %2)
  %6 : int = sm::int_sub(%1, %3)
  %7 : int = sm::int_sub(%0, %6)
  %8 : int = sm::int_neg(%7)
  %9 : int = sm::int_neg(%8)
  %10 : int = prim::Constant[value=-3]()
  %11 : int = sm::int_mod(%10, %0)
  %12 : int = sm::int_min(%5, %11)
  %13 : int = sm::int_max(%12, %9)
  %14 : bool = sm::int_gt(%0, %2)
  %15 : bool = sm::guard[what="x.shape[0] > 2", where="model.py:12"](%14)
  %16 : bool = sm::int_le(%3, %1)
  %17 : bool = sm::int_eq(%16, %15)
  %18 : bool = sm::guard[what="x.shape[0] // 2 <= 6", where=""](%17)
  %19 : bool = sm::int_ne(%13, %0)
  return (%13, %19)
'''


class FakeTensor:
    """Just enough of a tensor to run the printed size arithmetic: ``x.size(d)``."""

    def __init__(self, *shape: int) -> None:
        self.shape = shape

    def size(self, dim: int) -> int:
        return self.shape[dim]


def run_code(code: str, *args: object) -> object:
    """Execute a printed function whose body is pure size arithmetic and guards."""
    scope: dict = {"Tensor": FakeTensor, "Tuple": tuple, "List": list}
    exec(compile(code, "<code>", "exec"), scope)
    return scope["forward"](*args)


def test_size_arithmetic_prints_infix_and_guards_as_asserts():
    """Sizes read ``x.size(0)`` at every use, int ops are infix with only the parentheses
    Python needs (``-(-a)``, ``a - (b - c)``, ``(a + b) * 2``, ``-3 % a``, a comparison of a
    comparison), and a guard is an ``assert`` naming the trace-time condition and line."""
    g = parse(SIZES_GRAPH)
    code = g.code
    ast.parse(code)
    assert_golden(code, '''
        def forward(x: Tensor) -> Tuple[int, bool]:
            _0 = x.size(0) // 2
            _1 = max(min((x.size(0) + x.size(1)) * 2, -3 % x.size(0)), -(-(x.size(0) - (x.size(1) - _0))))
            assert x.size(0) > 2, "traced with x.shape[0] > 2 at model.py:12"
            assert (_0 <= x.size(1)) == True, "traced with x.shape[0] // 2 <= 6"
            return _1, _1 != x.size(0)
        ''')
    assert run_code(code, FakeTensor(4, 6)) == tuple(_evaluate(g, 4, 6))
    with pytest.raises(AssertionError, match=r"traced with x.shape\[0\] > 2 at model.py:12"):
        run_code(code, FakeTensor(2, 6))


def test_size_printing_leaves_graph_text_unchanged():
    """Only ``.code`` reads the int ops as Python: ``.graph`` still prints the IR ops."""
    text = print_graph(parse(SIZES_GRAPH))
    assert text == SIZES_GRAPH
    assert "sm::int_floordiv(%0, %2)" in text and 'sm::guard[what="x.shape[0] > 2"' in text


def test_size_used_in_a_nested_block_is_named_once():
    g = parse('''graph(%x : Float(B, 3), %c : bool):
  %n : int = sm::size[dim=0](%x)
  %0 : int = prim::If(%c)
    block0():
      %1 : int = sm::int_add(%n, %n)
      -> (%1)
    block1():
      -> (%n)
  return (%0)
''')
    code = g.code
    ast.parse(code)
    assert "n = x.size(0)" in code and "_0 = n + n" in code and "_0 = n\n" in code


def _evaluate(g, *shape: int) -> list:
    """The graph's outputs computed op by op with the ops' own Python meaning."""
    env: dict = {g.inputs[0]: FakeTensor(*shape)}
    for node in g.nodes:
        args = [env[v] for v in node.inputs]
        if node.kind == "prim::Constant":
            env[node.output] = node.attrs["value"]
        elif node.kind == "sm::size":
            env[node.output] = args[0].size(node.attrs["dim"])
        elif node.kind == "sm::guard":
            assert args[0]
            env[node.output] = True
        else:
            env[node.output] = INT_FUNCS[node.op_name](*args)
    return [env[v] for v in g.outputs]


INT_BINARY = ["int_add", "int_sub", "int_mul", "int_floordiv", "int_mod", "int_min", "int_max"]
INT_COMPARE = ["int_eq", "int_ne", "int_lt", "int_le", "int_gt", "int_ge"]
INT_TREES = st.recursive(
    st.sampled_from([0, 1]).map(lambda d: ("size", d)) | st.integers(-4, 4),
    lambda kids: st.tuples(st.sampled_from(INT_BINARY), kids, kids)
    | st.tuples(st.just("int_neg"), kids),
    max_leaves=10)


def _build(b: Builder, x, tree, values: dict):
    """``tree`` as int ops on ``x``'s sizes; ``values`` gets each value's trace-time int."""
    if isinstance(tree, int):
        v, value = b.constant(tree), tree
    elif tree[0] == "size":
        v, value = b.op("size", x, dim=tree[1]), (5, 3)[tree[1]]
    else:
        kind, args = tree[0], [_build(b, x, a, values) for a in tree[1:]]
        if kind in ("int_floordiv", "int_mod") and values[args[1]] == 0:
            kind = "int_sub"
        v, value = b.op(kind, *args), INT_FUNCS[kind](*(values[a] for a in args))
    values[v] = value
    return v


@st.composite
def int_expression_graphs(draw: st.DrawFn) -> Graph:
    """Random expression trees of int ops over two sizes (5 and 3 at trace time) and small
    constants, each value used once so that all of it prints as one expression; the
    comparisons of two trees (and a comparison of those) that hold at trace time are guarded."""
    g = Graph()
    b = Builder(g)
    x = b.input(t("B", "N"), "x")
    values: dict = {}
    outs = [_build(b, x, draw(INT_TREES), values) for _ in range(draw(st.integers(1, 2)))]
    conds = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(INT_COMPARE))
        lhs, rhs = (_build(b, x, draw(INT_TREES), values) for _ in range(2))
        conds.append((b.op(kind, lhs, rhs), INT_FUNCS[kind](values[lhs], values[rhs])))
    if len(conds) == 2 and draw(st.booleans()):
        (c0, v0), (c1, v1) = conds
        kind = draw(st.sampled_from(["int_eq", "int_ne"]))
        conds = [(b.op(kind, c0, c1), INT_FUNCS[kind](v0, v1))]
    for cond, holds in conds:
        b.op("guard", cond if holds else b.op("int_eq", cond, False), what="c", where="r.py:1")
    b.ret(*outs)
    return g


@given(int_expression_graphs())
@settings(max_examples=150, deadline=None)
def test_printed_size_arithmetic_computes_what_the_graph_computes(g):
    """Python, running the printed code, gets the graph's numbers: random int-op trees
    (floor division and modulo of negatives included) and guards."""
    code = g.code
    ast.parse(code)
    assert "ops.sm." not in code
    for shape in [(5, 3), (7, 2), (2, 9)]:
        try:
            expected = _evaluate(g, *shape)
        except (ZeroDivisionError, AssertionError):
            continue
        result = run_code(code, FakeTensor(*shape))
        assert list(result if isinstance(result, tuple) else (result,)) == expected, code


NESTINGS = ([(outer, inner, side) for outer in INT_BINARY + INT_COMPARE for inner in INT_BINARY
             for side in (0, 1)]
            + [(outer, inner, side) for outer in ("int_eq", "int_ne") for inner in INT_COMPARE
               for side in (0, 1)]
            + [("int_neg", inner, 0) for inner in INT_BINARY + ["int_neg"]]
            + [(outer, "int_neg", side) for outer in INT_BINARY for side in (0, 1)])


@pytest.mark.parametrize("outer, inner, side", NESTINGS)
def test_every_nesting_of_two_int_ops_keeps_its_meaning(outer, inner, side):
    """Each op inside each other op, on either side: the printed infix text parenthesizes
    exactly where Python would otherwise regroup it (``a - (b - c)``, ``-(a // b)``,
    ``(a < b) == (b < c)``), checked by running it on sizes and a negative constant."""
    g = Graph()
    b = Builder(g)
    x = b.input(t("A", "B"), "x")
    a = b.op("size", x, dim=0)
    if inner in INT_COMPARE:       # a comparison of comparisons: both sides compare
        pair = [b.op(inner, a, b.op("size", x, dim=1)), b.op("int_le", a, b.constant(-2))]
        y = b.op(outer, *(pair if side == 0 else pair[::-1]))
    else:
        nested = b.op(inner, a) if inner == "int_neg" else b.op(inner, a, b.constant(-2))
        others = [b.op("size", x, dim=1)] if outer != "int_neg" else []
        y = b.op(outer, *([nested] + others if side == 0 else others + [nested]))
    b.ret(y)
    code = g.code
    ast.parse(code)
    assert "ops.sm." not in code and "_0" not in code        # one expression
    for shape in [(7, 3), (4, 6), (9, 2), (-5, 3)]:
        try:
            expected = _evaluate(g, *shape)
        except ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                run_code(code, FakeTensor(*shape))
            continue
        assert [run_code(code, FakeTensor(*shape))] == expected, code
