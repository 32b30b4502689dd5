"""The reference interpreter runs any graph: ops, If, Loop, modules, calls, fusion groups."""
import numpy as np
import pytest
from hypothesis import given

from scriptmod.ir import dtypes as D
from scriptmod.ir.builder import Builder
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.graph import Graph
from scriptmod.ir.passes import run_pipeline
from scriptmod.ir.types import ModuleType
from irsamples import control_flow, mlp, random_graphs, t
from scriptmod.runtime.interpreter import Interpreter, InterpreterError, RaisedException, evaluate_node


def test_if_and_loop():
    g = control_flow()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(Interpreter(g).run(x), -x + 3)
    np.testing.assert_allclose(Interpreter(g).run(-x - 1), 2 * (-x - 1) + 3)


def test_while_loop_stops_on_condition():
    g = Graph()
    b = Builder(g)
    x = b.input(t(), "x")
    y, = b.while_loop(True, [x], lambda i, v: (b.op("lt", b.op("add", v, 1.0), 5.0),
                                                 b.op("add", v, 1.0)))
    b.ret(y)
    assert float(Interpreter(g).run(np.float32(0.0))) == 5.0


def test_modules_get_set_and_call_methods():
    callee = mlp()
    g = Graph()
    b = Builder(g)
    top = b.input(ModuleType("Top"), "self")
    x = b.input(t("B", 4), "x")
    sub = b.get_attr(top, "block", ModuleType("Block"))
    y, = b.call_method(sub, "forward", [x], [t("B")])
    b.set_attr(top, "last", y)
    b.ret(y)

    class Blk:
        w = np.ones((4, 8), np.float32)
        b = np.zeros(8, np.float32)

    class Top:
        block = Blk()
    top_obj = Top()
    out = Interpreter(g, resolve_method=lambda m, name: callee).run(top_obj, np.ones((3, 4), np.float32))
    np.testing.assert_allclose(out, np.full(3, 32.0))
    assert top_obj.last is out
    with pytest.raises(InterpreterError, match="no resolve_method"):
        Interpreter(g).run(Top(), np.ones((3, 4), np.float32))


def test_raise_and_errors_cite_source():
    g = Graph()
    b = Builder(g, source="r.py:4")
    x = b.input(t(2), "x")
    b.raise_("boom", "ValueError")
    b.ret(x)
    with pytest.raises(ValueError, match="boom"):        # a builtin kind: Python's class
        Interpreter(g).run(np.ones(2, np.float32))
    g1 = Graph()
    b1 = Builder(g1, source="r.py:5")
    x1 = b1.input(t(2), "x")
    b1.raise_("odd", "OddError")                          # anything else: RaisedException
    b1.ret(x1)
    with pytest.raises(RaisedException, match="OddError: odd"):
        Interpreter(g1).run(np.ones(2, np.float32))
    g3 = Graph()
    b3 = Builder(g3, source="r.py:7")
    x3 = b3.input(t(2), "x")
    b3.raise_("odd", "ShapeError")                        # an op error: its own class
    b3.ret(x3)
    with pytest.raises(ShapeError) as info:
        Interpreter(g3).run(np.ones(2, np.float32))
    assert str(info.value) == "odd"                       # the line is in a note
    g2 = Graph()
    b2 = Builder(g2, source="r.py:9")
    a, c = b2.input(t("N"), "a"), b2.input(t("M"), "c")
    b2.ret(b2.op("add", a, c))
    with pytest.raises(InterpreterError, match=r"^add at r.py:9: "):
        Interpreter(g2).run(np.ones(2, np.float32), np.ones(3, np.float32))


def test_subclass_overrides_one_kind():
    class Counting(Interpreter):
        calls: list = []

        def call_op(self, node, args):
            self.calls.append(node.op_name)
            return super().call_op(node, args)
    Counting(control_flow()).run(np.ones((2, 3), np.float32))
    assert Counting.calls[:3] == ["sum", "gt", "neg"] and Counting.calls.count("add") == 3


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # float16 overflow in both runs alike
@given(random_graphs())
def test_optimizing_random_graphs_keeps_their_numbers(g):
    shapes = [tuple(2 if isinstance(d, str) else d for d in v.type.shape) for v in g.inputs]
    args = [np.linspace(-1.5, 2.0, int(np.prod(s))).reshape(s).astype(D.float32.name)
            .astype(str(v.type.dtype.name)) for s, v in zip(shapes, g.inputs)]
    before = Interpreter(g.copy()).run(*args)
    run_pipeline(g, ["canonicalize", ("fold_constants", {"evaluate": evaluate_node}),
                     "eliminate_common_subexpressions", "eliminate_dead_code"], verify=True,
                 log=lambda s: None)
    after = Interpreter(g).run(*args)
    pairs = zip(before, after) if isinstance(before, tuple) else [(before, after)]
    for u, v in pairs:
        if hasattr(u, "dtype"):
            np.testing.assert_allclose(np.asarray(u, np.float64), np.asarray(v, np.float64),
                                       rtol=1e-3, equal_nan=True)
