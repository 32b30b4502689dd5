"""Graphs, a golden-text helper and hypothesis strategies shared by the IR tests."""
from __future__ import annotations

import difflib
import textwrap

import pytest
from hypothesis import strategies as st

from scriptmod.ir import dtypes as D
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Value
from scriptmod.ir.types import ModuleType, TensorType

F32 = D.float32


def assert_golden(actual: str, expected: str) -> None:
    """Compare with dedented ``expected``; on mismatch print ``actual`` ready to paste."""
    expected = textwrap.dedent(expected).lstrip("\n")
    if actual != expected:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), actual.splitlines(),
                                              "expected", "actual", lineterm=""))
        pytest.fail(f"golden text differs. Actual text:\n{actual}\n{diff}", pytrace=False)


def t(*shape: object, dtype: D.DType = F32) -> TensorType:
    return TensorType(dtype, tuple(shape))


def mlp() -> Graph:
    """(B, 4) -> relu(x @ w + b).sum(1), with a module input and sources."""
    g = Graph()
    b = Builder(g, source="model.py:10")
    self_ = b.input(ModuleType("Block", (("w", t(4, 8)), ("b", t(8)))), "self")
    x = b.input(t("B", 4), "x")
    w = b.get_attr(self_, "w")
    bias = b.get_attr(self_, "b")
    with b.at_source("model.py:11"):
        h = b.op("add", b.op("matmul", x, w), bias)
        h.debug_name = "h"
    with b.at_source("model.py:12"):
        y = b.op("sum", b.op("relu", h), dim=[1])
    b.ret(y)
    return g


def control_flow() -> Graph:
    """if x.sum() > 0: y = -x else: y = x * 2; then 3 times y = y + 1."""
    g = Graph()
    b = Builder(g, source="cf.py:1")
    x = b.input(t(2, 3), "x")
    c = b.op("gt", b.op("sum", x), 0.0)
    y, = b.if_(c, lambda: b.op("neg", x), lambda: b.op("mul", x, 2.0))
    z, = b.loop(3, [y], lambda i, v: b.op("add", v, 1.0))
    b.ret(z)
    return g


NAMES = st.sampled_from([None, None, "x", "x.1", "y", "h.2", "out"])
SOURCES = st.sampled_from([None, "m.py:1", "dir with space/m.py:22", 'we"ird#.py:3'])
FLOATS = st.sampled_from([0.5, -0.0, 1e-05, 3.0, 1e20, float("inf"), float("-inf"), 2])
UNARY = ["neg", "exp", "tanh", "relu", "abs", "sigmoid"]
BINARY = ["add", "mul", "sub", "maximum", "div"]


@st.composite
def random_graphs(draw: st.DrawFn) -> Graph:
    """Random well-typed graphs: elementwise chains, reductions, constants, If and Loop."""
    g = Graph()
    b = Builder(g)
    shape = draw(st.sampled_from([(2, 3), ("B", 3), (4,), ()]))
    dtype = draw(st.sampled_from([F32, D.float64, D.float16]))
    pool: list[Value] = [b.input(TensorType(dtype, shape), draw(NAMES))
                         for _ in range(draw(st.integers(1, 3)))]
    extra: list[Value] = []
    for _ in range(draw(st.integers(0, 10))):
        with b.at_source(draw(SOURCES)):
            _random_step(draw, b, pool, extra)
        if draw(st.booleans()):
            pool[-1].debug_name = draw(NAMES)
    outs = draw(st.lists(st.sampled_from(pool + extra), min_size=1, max_size=3))
    b.ret(*outs)
    return g


def _random_step(draw: st.DrawFn, b: Builder, pool: list[Value], extra: list[Value]) -> None:
    kind = draw(st.sampled_from(["unary", "binary", "scalar", "reduce", "if", "loop",
                                 "tuple", "const", "index"]))
    pick = st.sampled_from(pool)
    if kind == "unary":
        pool.append(b.op(draw(st.sampled_from(UNARY)), draw(pick)))
    elif kind == "binary":
        pool.append(b.op(draw(st.sampled_from(BINARY)), draw(pick), draw(pick)))
    elif kind == "scalar":
        pool.append(b.op("mul", draw(pick), draw(FLOATS)))
    elif kind == "reduce":
        x = draw(pick)
        rank = x.type.rank or 0
        dims = draw(st.lists(st.integers(0, max(rank - 1, 0)), max_size=1)) if rank else None
        extra.append(b.op("sum", x, dim=dims, keepdim=draw(st.booleans())))
    elif kind == "if":
        x, y = draw(pick), draw(pick)
        c = b.op("gt", b.op("sum", x), 0.0)
        pool.extend(b.if_(c, lambda: b.op("neg", x), lambda: [b.op("exp", y)]))
    elif kind == "loop":
        n = draw(st.integers(0, 3))
        pool.extend(b.loop(n, [draw(pick)], lambda i, v: b.op("add", b.op("tanh", v), 1.0)))
    elif kind == "tuple":
        tup = b.tuple_([draw(pick), draw(pick)])
        pool.append(b.tuple_index(tup, draw(st.integers(0, 1))))
    elif kind == "const":
        extra.append(b.constant(draw(st.sampled_from(
            ["a\"b#c", [1, -2], (1, (2.5, None)), True, D.int64, float("nan")]))))
    else:
        x = draw(pick)
        if x.type.rank:
            extra.append(b.op("index", x, spec=(("slice", 0, None, 1),)))


# ---- fusion workloads (tests/ir/test_fuse.py, codegen tests) ---------------------------------

SQRT_2_PI = 0.7978845608028654
SQRT2 = 1.4142135623730951


def gelu_tanh(b: Builder, x: Value) -> Value:
    """x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): primitives only, x^3 as x*x*x."""
    cube = b.op("mul", b.op("mul", x, x), x)
    u = b.op("mul", b.op("add", x, b.op("mul", cube, 0.044715)), SQRT_2_PI)
    return b.op("div", x, b.op("add", b.op("exp", b.op("mul", u, -2.0)), 1.0))


def w1(n: int = 16) -> Graph:
    """W1: y = gelu_tanh(x * a + b) + x with row vectors a, b."""
    g = Graph()
    b = Builder(g, source="w1.py:3")
    x, a, c = b.input(t("B", n), "x"), b.input(t(n), "a"), b.input(t(n), "b")
    h = b.op("add", b.op("mul", x, a), c)
    b.ret(b.op("add", gelu_tanh(b, h), x))
    return g


def w2(n: int = 16) -> Graph:
    """W2, an activation zoo: gelu (erfc form), prelu, sigmoid*tanh, threshold, relu(h + x)."""
    g = Graph()
    b = Builder(g, source="w2.py:5")
    x, w = b.input(t("B", n), "x"), b.input(t(n), "w")
    h = b.op("mul", b.op("mul", 0.5, x), b.op("erfc", b.op("div", b.op("neg", x), SQRT2)))
    with b.at_source("w2.py:6"):
        h = b.op("where", b.op("ge", h, 0.0), h, b.op("mul", w, h))
    with b.at_source("w2.py:7"):
        h = b.op("mul", b.op("sigmoid", h), b.op("tanh", h))
    with b.at_source("w2.py:8"):
        h = b.op("where", b.op("gt", h, 0.1), h, 0.0)
    with b.at_source("w2.py:9"):
        b.ret(b.op("relu", b.op("add", h, x)))
    return g


def mlp_gelu(d: int = 8, hidden: int = 32) -> Graph:
    """Linear -> GELU(tanh) -> Linear, plus the residual x (weights are module attributes)."""
    g = Graph()
    b = Builder(g, source="mlp.py:20")
    attrs = (("w1", t(d, hidden)), ("b1", t(hidden)), ("w2", t(hidden, d)), ("b2", t(d)))
    self_ = b.input(ModuleType("MLP", attrs), "self")
    x = b.input(t("B", d), "x")
    w1_, b1, w2_, b2 = (b.get_attr(self_, name) for name, _ in attrs)
    with b.at_source("mlp.py:21"):
        h = b.op("add", b.op("matmul", x, w1_), b1)
        h.debug_name = "h"
    with b.at_source("mlp.py:22"):
        a = gelu_tanh(b, h)
    with b.at_source("mlp.py:23"):
        y = b.op("add", b.op("add", b.op("matmul", a, w2_), b2), x)
    b.ret(y)
    return g


FUSION_SHAPES = [(2, 3), (3,), (2, 1), (1, 3), ()]
FUSION_UNARY = UNARY + ["sigmoid", "erfc", "neg"]
FUSION_BINARY = BINARY + ["minimum", "pow"]


@st.composite
def fusion_graphs(draw: st.DrawFn) -> Graph:
    """Random graphs for fusion: elementwise ops over broadcast shapes (all broadcast to
    (2, 3)), scalar constants, where/compare, reductions with keepdim (they split groups and
    make cycles possible), an impure dropout, If and Loop bodies, outputs drawn at random."""
    g = Graph()
    b = Builder(g)
    dtype = draw(st.sampled_from([F32, D.float64]))
    names = ["x", "row", "col", "r", "s"][:draw(st.integers(1, 5))]
    pool: list[Value] = [b.input(TensorType(dtype, s), n) for s, n in zip(FUSION_SHAPES, names)]
    for _ in range(draw(st.integers(1, 14))):
        with b.at_source(draw(st.sampled_from([None, "f.py:1", "f.py:2"]))):
            _fusion_step(draw, b, pool)
    b.ret(*draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3)))
    return g


def _fusion_step(draw: st.DrawFn, b: Builder, pool: list[Value]) -> None:
    kind = draw(st.sampled_from(["unary", "binary", "binary", "scalar", "where", "reduce",
                                 "dropout", "if", "loop"]))
    pick = st.sampled_from(pool)
    if kind == "unary":
        pool.append(b.op(draw(st.sampled_from(FUSION_UNARY)), draw(pick)))
    elif kind == "binary":
        pool.append(b.op(draw(st.sampled_from(FUSION_BINARY)), draw(pick), draw(pick)))
    elif kind == "scalar":
        x, c = draw(pick), draw(st.sampled_from([0.5, -2.0, 3, 1e-05]))
        op = draw(st.sampled_from(["mul", "add", "sub"]))
        pool.append(b.op(op, *draw(st.permutations([x, c]))))
    elif kind == "where":
        x, y = draw(pick), draw(pick)
        other = draw(st.sampled_from([y, 0.0]))
        pool.append(b.op("where", b.op(draw(st.sampled_from(["gt", "le"])), x, 0.1), x, other))
    elif kind == "reduce":
        x = draw(pick)
        dims = [draw(st.integers(0, x.type.rank - 1))] if x.type.rank else None
        pool.append(b.op(draw(st.sampled_from(["sum", "amax"])), x, dim=dims, keepdim=True))
    elif kind == "dropout":
        pool.append(b.op("dropout", draw(pick), False, p=0.25))
    elif kind == "if":
        x = draw(pick)
        c = b.op("gt", b.op("sum", x), 0.0)
        pool.extend(b.if_(c, lambda: b.op("neg", b.op("exp", x)),
                          lambda: [b.op("add", b.op("mul", x, 2.0), x)]))
    else:
        pool.extend(b.loop(draw(st.integers(0, 2)), [draw(pick)],
                           lambda i, v: b.op("add", b.op("tanh", v), 1.0)))
