"""The Python view of graphs: valid syntax, inlining, control flow, constants."""
import ast

from scriptmod.ir.builder import Builder
from scriptmod.ir.code import code_with_constants
from scriptmod.ir.graph import Graph
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
