"""Shape rules on symbolic dims (``ir.symdims``): each row of ``RULES`` runs an op's type
rule once with symbols and once per binding with sizes; every dim of the symbolic result,
evaluated at a binding, is the concrete rule's dim there (a None dim is allowed only where
the row says so). Then ``known_value`` of the size ops, the printer/parser round trip, and
the bench models whose symbolic graphs must have no dim of unknown size."""
import gc

import pytest

from scriptmod.ir import dtypes as D
from scriptmod.ir import schema as S
from scriptmod.ir import symdims as SD
from scriptmod.ir.builder import Builder
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.graph import Graph, known_value
from scriptmod.ir.ops.rules import broadcast_dims
from scriptmod.ir.parser import IRParseError, parse
from scriptmod.ir.types import IntType, TensorType
from scriptmod.ir.verify import verify

F, L, BOOL = D.float32, D.int64, D.bool_
BINDINGS = [{"B": 2, "T": 2, "H": 9}, {"B": 3, "T": 7, "H": 16}, {"B": 5, "T": 130, "H": 33},
            {"B": 4, "T": 128, "H": 2}]


def _t(dtype, *shape):
    return TensorType(dtype, tuple(shape))


def _slice(start=None, stop=None, step=None):
    return ("slice", start, stop, step)


ALL = _slice()

# name: (op, build(d) -> (input types, attrs, values), dims that may stay unknown);
# ``d(expr)`` is the dim ``expr`` (text over B, T, H) symbolic, or its size at a binding
RULES = {
    "arange_T": ("arange", lambda d: ([IntType] * 3, {}, [0, d("T"), 1]), ()),
    "arange_step": ("arange", lambda d: ([IntType] * 3, {}, [1, d("T"), 3]), ()),
    "arange_from_T": ("arange", lambda d: ([IntType] * 3, {}, [d("T"), d("3*T+1"), 2]), ()),
    "arange_down": ("arange", lambda d: ([IntType] * 3, {}, [d("T"), 0, -2]), ()),
    "narrow": ("narrow", lambda d: ([_t(F, d("B"), d("T"), 8), IntType, IntType],
                                    {"dim": 1}, [None, 1, d("T-1")]), ()),
    "slice_from_1": ("index", lambda d: ([_t(F, d("B"), d("T"))], {"spec": (ALL, _slice(1))},
                                         [None]), ()),
    "slice_to_-1": ("index", lambda d: ([_t(F, d("B"), d("T"))],
                                        {"spec": (ALL, _slice(None, -1))}, [None]), ()),
    "slice_step": ("index", lambda d: ([_t(F, d("T"), 4)], {"spec": (_slice(None, None, 2),)},
                                       [None]), ()),
    "slice_last_3": ("index", lambda d: ([_t(F, d("T"))], {"spec": (_slice(-3),)}, [None]), ()),
    "slice_to_T_of_128": ("index", lambda d: (
        [_t(F, 2, 128), IntType], {"spec": (ALL, _slice(None, ("input", 0)))},
        [None, d("T")]), ()),
    "slice_to_T_of_T": ("index", lambda d: (
        [_t(F, d("T"), d("T")), IntType], {"spec": (_slice(None, ("input", 0)), ALL)},
        [None, d("T")]), ()),
    "int_index": ("index", lambda d: ([_t(F, d("B"), d("T"), 8)], {"spec": (ALL, ("int", -1))},
                                      [None]), ()),
    "tensor_index": ("index", lambda d: ([_t(F, d("B"), d("T"), 8), _t(L, d("H"), 3)],
                                         {"spec": (ALL, ("tensor", 0))}, [None, None]), ()),
    "split_tensor_index": ("index", lambda d: (
        [_t(F, d("B"), d("T"), 8), _t(L, d("H")), _t(L, d("H"))],
        {"spec": (("tensor", 0), ALL, ("tensor", 1))}, [None] * 3), ()),
    "mask_index": ("index", lambda d: ([_t(F, d("B"), d("T"), 8), _t(BOOL, d("B"), d("T"))],
                                       {"spec": (("tensor", 0),)}, [None, None]), (0,)),
    "cat": ("cat", lambda d: ([_t(F, d("B"), d("T")), _t(F, d("B"), 3), _t(F, d("B"), d("T"))],
                              {"dim": 1}, [None] * 3), ()),
    "stack": ("stack", lambda d: ([_t(F, d("B"), d("T"))] * 3, {"dim": 1}, [None] * 3), ()),
    "reshape_flatten": ("reshape", lambda d: ([_t(F, d("B"), d("T"), 128), None], {},
                                              [None, [-1, 128]]), ()),
    "reshape_split": ("reshape", lambda d: ([_t(F, d("B*T"), 128), None], {},
                                            [None, [d("B"), 4, -1]]), ()),
    "reshape_heads": ("reshape", lambda d: ([_t(F, d("B"), d("T"), 256), None], {},
                                            [None, [d("B"), d("T"), 4, -1]]), ()),
    "reshape_inexact": ("reshape", lambda d: ([_t(F, d("T"), 3), None], {}, [None, [2, -1]]),
                        (0, 1)),
    "expand": ("expand", lambda d: ([_t(F, 1, d("T")), None], {}, [None, [d("B"), -1]]), ()),
    "broadcast_add": ("add", lambda d: ([_t(F, d("B"), 1, d("T")), _t(F, d("T"))], {},
                                        [None, None]), ()),
    "where": ("where", lambda d: ([_t(BOOL, 1, d("T")), _t(F, d("B"), 1), _t(F, d("T"))], {},
                                  [None] * 3), ()),
    "matmul": ("matmul", lambda d: ([_t(F, d("B"), d("T"), 64), _t(F, 64, d("H"))], {},
                                    [None, None]), ()),
    "batched_matmul": ("matmul", lambda d: ([_t(F, d("B"), 4, d("T"), 32),
                                             _t(F, d("B"), 4, 32, d("T"))], {}, [None, None]),
                       ()),
    "sum": ("sum", lambda d: ([_t(F, d("B"), d("T"), 8)], {"dim": [1]}, [None]), ()),
    "sum_keepdim": ("sum", lambda d: ([_t(F, d("B"), d("T"))], {"dim": [0], "keepdim": True},
                                      [None]), ()),
    "conv2d": ("conv2d", lambda d: ([_t(F, d("B"), 3, d("H"), d("T")), _t(F, 8, 3, 3, 3), None],
                                    {"stride": (2, 2), "padding": (1, 1), "dilation": (1, 1)},
                                    [None] * 3), ()),
    "conv2d_dilated": ("conv2d", lambda d: ([_t(F, 1, 3, d("H+8"), d("T+8")), _t(F, 8, 3, 3, 3),
                                             None], {"stride": (3, 1), "padding": (0, 2),
                                                     "dilation": (2, 3)}, [None] * 3), ()),
    "max_pool2d": ("max_pool2d", lambda d: ([_t(F, d("B"), 3, d("H"), d("T"))],
                                            {"kernel_size": (2, 2), "stride": (2, 2),
                                             "ceil_mode": False}, [None]), ()),
    "max_pool2d_ceil": ("max_pool2d", lambda d: ([_t(F, d("B"), 3, d("H"), d("T"))],
                                                 {"kernel_size": (3, 3), "stride": (2, 2),
                                                  "padding": (1, 1), "ceil_mode": True},
                                                 [None]), (2, 3)),
    "embedding": ("embedding", lambda d: ([_t(F, 65, 16), _t(L, d("B"), d("T"))], {},
                                          [None, None]), ()),
    "gather": ("gather", lambda d: ([_t(F, d("B"), 8), _t(L, d("B"), d("T"))], {"dim": 1},
                                    [None, None]), ()),
    "topk": ("topk", lambda d: ([_t(F, d("B"), d("T"))], {"k": 2, "dim": 1}, [None]), ()),
    "svdvals": ("linalg_svdvals", lambda d: ([_t(F, d("T"), d("H"))], {}, [None]), ()),
    "squeeze_names": ("squeeze", lambda d: ([_t(F, d("B"), 1, d("T"))], {}, [None]), ()),
    "transpose": ("transpose", lambda d: ([_t(F, d("B"), d("T"))], {"dim0": 0, "dim1": 1},
                                          [None]), ()),
    "full": ("full", lambda d: ([None, IntType], {}, [[d("B*T"), d("T-1")], 0]), ()),
}


def _infer(op, build, d):
    types, attrs, values = build(d)
    schema = S.get(op)
    return schema.infer([t if t is not None else IntType for t in types],
                        schema.bind_attrs(attrs), values)


def _symbolic(expr):
    return SD.parse(expr)


@pytest.mark.parametrize("name", sorted(RULES))
def test_symbolic_rule_evaluates_to_the_concrete_rule(name):
    op, build, may_be_unknown = RULES[name]
    symbolic = _infer(op, build, _symbolic)
    for out_index, out in enumerate(symbolic):
        if not isinstance(out, TensorType):
            continue
        assert out.shape is not None, f"{name}: rank unknown"
        for i, dim in enumerate(out.shape):
            assert dim is not None or i in may_be_unknown, f"{name}: dim {i} unknown: {out}"
        for env in BINDINGS:
            try:
                concrete = _infer(op, build, lambda expr: SD.evaluate(SD.parse(expr), env))
            except ShapeError:          # sizes the op refuses (an odd T for reshape_inexact)
                continue
            want = concrete[out_index].shape
            got = tuple(None if dim is None else SD.evaluate(dim, env) for dim in out.shape)
            assert len(got) == len(want) and all(
                g is None or g == w for g, w in zip(got, want)), \
                f"{name} at {env}: symbolic {out.shape} gives {got}, concrete rule {want}"


def test_symbolic_results_read_as_torch_writes_them():
    def shape(name):
        op, build, _ = RULES[name]
        return _infer(op, build, _symbolic)[0].shape
    assert shape("arange_T") == ("T",)
    assert shape("slice_from_1") == ("B", "T-1")
    assert shape("slice_to_T_of_128") == (2, "min(T,128)")
    assert shape("slice_to_T_of_T") == ("T", "T")
    assert shape("reshape_flatten") == ("B*T", 128)
    assert shape("reshape_split") == ("B", 4, "32*T")
    assert shape("cat") == ("B", "2*T+3")
    assert shape("conv2d") == ("B", 8, "(H+1)//2", "(T+1)//2")
    assert shape("svdvals") == ("min(H,T)",)


def test_squeeze_of_an_expression_that_may_be_one_has_unknown_rank():
    out = S.get("squeeze").infer([_t(F, "B", "T-1")], {"dim": None}, [None])[0]
    assert out.shape is None                      # T-1 is 1 at T=2


def test_broadcast_dims_on_symbols():
    assert broadcast_dims("B*T", "B*T") == "B*T" and broadcast_dims(1, "T") == "T"
    assert broadcast_dims("T", 8) == 8 and broadcast_dims("T", "B") is None
    with pytest.raises(ShapeError):
        broadcast_dims("T", SD.add("T", 1))        # both > 1 and provably different
    assert broadcast_dims("T-1", "T") is None      # T-1 is 1 at T=2: not provably wrong
    with pytest.raises(ShapeError):
        broadcast_dims(SD.add("T", 8), 5)          # T+8 >= 10
    with pytest.raises(ShapeError):
        broadcast_dims(3, 4)


def test_provably_different_sizes_are_refused():
    with pytest.raises(ShapeError):
        S.get("matmul").infer([_t(F, 2, "T"), _t(F, "T+1", 3)], {}, [None, None])
    with pytest.raises(ShapeError):
        S.get("cat").infer([_t(F, "T", 2), _t(F, "T+1", 2)], {"dim": 1}, [None, None])


# ---- known_value of the size ops --------------------------------------------------------

def _size_graph(kind, *operands, out_type=IntType):
    g = Graph()
    b = Builder(g, source="t.py:1")
    x = b.input(_t(F, "B", "T"), "x")
    sizes = {"B": b.node("sm::size", [x], [IntType], {"dim": 0}).output,
             "T": b.node("sm::size", [x], [IntType], {"dim": 1}).output}
    args = [sizes[o] if isinstance(o, str) else b.constant(o) for o in operands]
    return known_value(b.node(kind, args, [out_type]).output)


@pytest.mark.parametrize("kind, operands, want", [
    ("sm::int_add", ("T", 1), "T+1"), ("sm::int_sub", ("T", 1), "T-1"),
    ("sm::int_mul", ("B", "T"), "B*T"), ("sm::int_mul", ("B", 16), "16*B"),
    ("sm::int_floordiv", ("T", 2), "T//2"), ("sm::int_mod", ("T", 2), "T%2"),
    ("sm::int_max", ("T", 8), "max(T,8)"), ("sm::int_min", ("T", "B"), "min(B,T)"),
    ("sm::int_neg", ("T",), "-T"), ("sm::py_add", ("T", "B"), "B+T"),
    ("sm::py_sub", ("T", "T"), 0), ("sm::py_floordiv", ("B", 1), "B"),
    ("sm::py_min", ("T", 1), 1), ("sm::py_max", ("T", "T"), "T"), ("sm::py_neg", ("B",), "-B"),
])
def test_known_value_of_int_ops_on_symbols(kind, operands, want):
    assert _size_graph(kind, *operands) == want


def test_known_value_of_comparisons_on_symbols():
    from scriptmod.ir.types import BoolType
    assert _size_graph("sm::int_gt", "T", 1, out_type=BoolType) is True
    assert _size_graph("sm::int_eq", "T", "T", out_type=BoolType) is True
    assert _size_graph("sm::int_lt", "T", 8, out_type=BoolType) is None     # a run-time check
    assert _size_graph("sm::int_eq", "B", "T", out_type=BoolType) is None


# ---- printer and parser ---------------------------------------------------------------------

def test_symbolic_types_print_parse_and_verify():
    text = ("graph(%x : Float(B*T, 128), %y : Long(T-1), %z : Float(max(T,8), 4), "
            "%w : Float(*, 16*B), %u : Float((T+1)//2, T%2)):\n"
            "  %0 : Float(B*T, 128) = sm::neg(%x)\n"
            "  return (%0)\n")
    g = parse(text)
    assert str(g) == text and str(parse(str(g))) == text
    assert g.inputs[2].type.shape == ("max(T,8)", 4)
    verify(g)


def test_types_parse_to_canonical_dims():
    g = parse("graph(%x : Float(T * B, 2 + 1, max(8, T))):\n  return (%x)\n")
    assert g.inputs[0].type.shape == ("B*T", 3, "max(T,8)")


@pytest.mark.parametrize("dims", ["T+", "__import__(1), 2", "T**2", "-3", "T/2", "%x",
                                  "(" * 50 + "T" + ")" * 50, "max(T,8"])
def test_hostile_dims_are_parse_errors(dims):
    with pytest.raises(IRParseError):
        parse(f"graph(%x : Float({dims})):\n  return (%x)\n")


# ---- the bench models: no dim of unknown size in their symbolic graphs ------------------------

def _symbolic_graph(model, example, dims):
    import scriptmod as sm
    from scriptmod.jit import _specialize
    from scriptmod.jit._executor import Executor
    with sm.no_grad():
        tr = sm.jit.trace(model, example)
        v = tr._methods["forward"].inputs[1]
        v.type = v.type.with_(shape=dims)
        for e in [o for o in gc.get_objects() if isinstance(o, Executor)]:
            e._sym_dims = None
            e.specs.clear()
            e.fast = e.module_fast = None
        return _specialize.optimized(tr.executor("forward"), [example], (), symbolic=True)


def _unknown_dims(g):
    bad = []
    for v in list(g.inputs) + [o for n in g.walk() for o in n.outputs]:
        t = v.type
        if isinstance(t, TensorType) and (t.shape is None or None in t.shape):
            bad.append(f"{v.node.kind}: {t}")
    for n in g.walk():
        sub = n.attrs.get("subgraph")
        if isinstance(sub, Graph):
            bad += _unknown_dims(sub)
    return bad


def test_nanogpt_symbolic_graph_has_every_dim_named():
    from scriptmod.bench.dynamic import DYNAMIC
    model, prompt = DYNAMIC["G1"].build(quick=True)
    model.eval()
    g = _symbolic_graph(model, prompt, (1, "T"))
    assert _unknown_dims(g) == []
    # the causal mask of run-time length: (T, T), fed to the fused attention of each layer
    assert any(isinstance(v.type, TensorType) and v.type.shape == ("T", "T")
               for n in g.walk() for v in n.outputs)
    attention = [n for n in g.walk() if n.kind == "sm::attention"]
    assert len(attention) == model.n_layer
    assert all(n.output.type.shape == (1, 4, "T", 32) for n in attention)


def test_transformer_block_symbolic_graph_has_every_dim_named():
    import scriptmod as sm
    from scriptmod.bench.workloads import TransformerBlock
    sm.manual_seed(0)
    model = TransformerBlock(256, 4, 1024)
    model.eval()
    g = _symbolic_graph(model, sm.randn(8, 128, 256), ("B", "T", 256))
    assert _unknown_dims(g) == []


def _module(fn):
    import scriptmod.nn as nn

    class Fn(nn.Module):
        def forward(self, x):
            return fn(x)
    return Fn()


def _traced_cases():
    import scriptmod as sm
    import scriptmod.nn as nn
    import scriptmod.nn.functional as F
    mask = lambda x: sm.ones(x.size(1), x.size(1)).tril() == 0       # noqa: E731
    return {
        "chunk": (lambda x: sm.cat(x.chunk(2, dim=1)[::-1], 1), (2, 8, 4), ("B", "T", 4)),
        "split": (lambda x: x.split(3, dim=1)[0], (2, 8, 4), ("B", "T", 4)),
        "pad": (lambda x: F.pad(x, (1, 2)), (2, 8, 4), ("B", "T", "H")),
        "repeat": (lambda x: x.repeat(2, 3, 1), (2, 8, 4), ("B", "T", 4)),
        "tile": (lambda x: x.tile((1, 2)), (2, 8), ("B", "T")),
        "flatten": (lambda x: x.flatten(1), (2, 8, 4), ("B", "T", 4)),
        "view_of_a_product": (lambda x: x.view(x.size(0) * x.size(1), -1), (2, 8, 4),
                              ("B", "T", 4)),
        "causal_mask": (lambda x: x.masked_fill(mask(x), 0.0), (2, 8, 8), ("B", "T", "T")),
        "last_step": (lambda x: x[:, -1, :].softmax(-1), (2, 8, 4), ("B", "T", 4)),
        "shift": (lambda x: x[:, 1:] - x[:, :-1], (2, 8), ("B", "T")),
        "conv": (nn.Conv2d(3, 4, 3, stride=2, padding=1), (2, 3, 8, 8), ("B", 3, "H", "T")),
        "pool": (nn.MaxPool2d(2), (2, 3, 8, 8), ("B", 3, "H", "T")),
    }


@pytest.mark.parametrize("name", sorted(_traced_cases()))
def test_traced_shape_arithmetic_stays_symbolic(name):
    import scriptmod as sm
    import scriptmod.nn as nn
    fn, shape, dims = _traced_cases()[name]
    model = fn if isinstance(fn, nn.Module) else _module(fn)
    model.eval()
    x = sm.randn(*shape)
    g = _symbolic_graph(model, x, dims)
    assert _unknown_dims(g) == []
    env = {d: n for d, n in zip(dims, shape) if isinstance(d, str)}
    with sm.no_grad():
        want = tuple(model(x).shape)
    assert tuple(SD.evaluate(d, env) for d in g.outputs[0].type.shape) == want
