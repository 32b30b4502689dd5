"""Inference passes on the IR: ``fold_batchnorm``, ``remove_dropout``, ``freeze_attributes``.
Each test checks the graph's structure, that it still verifies, and that its numbers match
the graph before the pass (run by the reference interpreter)."""
import numpy as np
import pytest

from scriptmod.ir import dtypes as D
from scriptmod.ir import parse
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph
from scriptmod.ir.passes import (eliminate_dead_code, fold_batchnorm, fold_constants,
                                 freeze_attributes, remove_dropout, run_pipeline)
from scriptmod.ir.passes.freeze import KEEP
from scriptmod.ir.types import TensorType
from scriptmod.ir.verify import verify
from scriptmod.runtime.interpreter import Interpreter, evaluate_node

RNG = np.random.default_rng(0)
C = 6


def _arr(*shape, dtype=np.float32, positive=False):
    a = RNG.standard_normal(shape)
    return (np.abs(a) + 0.5 if positive else a).astype(dtype)


def _bn_args(b, dtype, affine=True, training=False):
    """Constants for batch_norm's (running_mean, running_var, weight, bias, training, count)."""
    gamma = b.constant(_arr(C, dtype=dtype)) if affine else b.constant(None)
    beta = b.constant(_arr(C, dtype=dtype)) if affine else b.constant(None)
    return (b.constant(_arr(C, dtype=dtype)), b.constant(_arr(C, dtype=dtype, positive=True)),
            gamma, beta, b.constant(training), b.constant(None))


def _conv_bn(dtype=np.float32, bias=True, affine=True, training=False, extra_use=False):
    g = Graph()
    b = Builder(g, source="m.py:1")
    x = b.input(TensorType(D.BY_NAME[np.dtype(dtype).name], ("B", 3, 5, 5)), "x")
    w = b.constant(_arr(C, 3, 3, 3, dtype=dtype))
    conv = b.op("conv2d", x, w, b.constant(_arr(C, dtype=dtype)) if bias else None,
                padding=[1, 1])
    y = b.op("batch_norm", conv, *_bn_args(b, dtype, affine, training), eps=1e-3)
    b.ret(b.op("relu", y), *([conv] if extra_use else []))
    return g


def _linear_bn(bias=True, dtype=np.float32):
    g = Graph()
    b = Builder(g, source="m.py:1")
    x = b.input(TensorType(D.BY_NAME[np.dtype(dtype).name], ("B", 4)), "x")
    y = b.op("matmul", x, b.op("transpose", b.constant(_arr(C, 4, dtype=dtype)), dim0=0, dim1=1))
    if bias:
        y = b.op("add", y, b.constant(_arr(C, dtype=dtype)))
    b.ret(b.op("batch_norm", y, *_bn_args(b, dtype)))
    return g


def _optimize(g):
    return run_pipeline(g, [("fold_constants", {"evaluate": evaluate_node}), fold_batchnorm,
                            ("fold_constants", {"evaluate": evaluate_node}),
                            "eliminate_dead_code"], verify=True)


def _ops(g):
    return [n.kind for n in g.walk() if n.kind != "prim::Constant"]


def _check_same(g, x, rtol):
    before = Interpreter(g.copy()).run(x)
    after = _optimize(g)
    verify(after)
    got = Interpreter(after).run(x)
    for u, v in zip(before if isinstance(before, tuple) else (before,),
                    got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(v, u, rtol=rtol, atol=rtol)
    return after


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_conv_bn_folds_into_the_conv(bias, affine):
    g = _check_same(_conv_bn(bias=bias, affine=affine), _arr(2, 3, 5, 5), 1e-5)
    assert _ops(g) == ["sm::conv2d", "sm::relu"]
    conv = next(n for n in g.walk() if n.kind == "sm::conv2d")
    assert tuple(conv.attrs["padding"]) == (1, 1) and conv.output.type.shape == ("B", C, 5, 5)
    assert conv.inputs[2].node.attrs["value"].shape == (C,)      # a bias, even without one


def test_float64_folds_tightly_and_keeps_its_dtype():
    g = _check_same(_conv_bn(np.float64), _arr(3, 3, 5, 5, dtype=np.float64), 1e-12)
    conv = next(n for n in g.walk() if n.kind == "sm::conv2d")
    assert conv.inputs[1].node.attrs["value"].dtype == np.float64


@pytest.mark.parametrize("bias", [True, False])
def test_linear_bn_folds_into_the_weight_and_bias(bias):
    g = _check_same(_linear_bn(bias), _arr(5, 4), 1e-5)
    assert _ops(g) == ["sm::matmul", "sm::add"]


def test_conv_read_elsewhere_keeps_the_conv_and_bn_becomes_elementwise():
    g = _check_same(_conv_bn(extra_use=True), _arr(2, 3, 5, 5), 1e-5)
    assert _ops(g) == ["sm::conv2d", "sm::mul", "sm::add", "sm::relu"]


def test_training_batch_norm_stays():
    g = _optimize(_conv_bn(training=True))
    assert "sm::batch_norm" in _ops(g)


def test_half_precision_batch_norm_stays():
    """Folding in float16 would round the folded weights: the kernel computes in float32."""
    g = _optimize(_conv_bn(np.float16))
    assert "sm::batch_norm" in _ops(g)


def test_statistics_that_are_not_constants_stay():
    g = parse('''graph(%x : Float(B, 2), %m : Float(2), %v : Float(2)):
      %none : NoneType = prim::Constant[value=None]()
      %train : bool = prim::Constant[value=0]()
      %y : Float(B, 2) = sm::batch_norm(%x, %m, %v, %none, %none, %train, %none)
      return (%y)
    ''')
    assert "sm::batch_norm" in _ops(fold_batchnorm(g))


@pytest.mark.parametrize("train,p,removed", [(False, 0.5, True), (True, 0.0, True),
                                              (True, 0.5, False)])
def test_remove_dropout(train, p, removed):
    g = parse(f'''graph(%x : Float(B, 4)):
      %train : bool = prim::Constant[value={int(train)}]()
      %y : Float(B, 4) = sm::dropout[p={p}](%x, %train)
      return (%y)
    ''')
    remove_dropout(g)
    verify(g)
    assert ("sm::dropout" not in _ops(g)) == removed
    if removed:
        assert g.outputs[0] is g.inputs[0]


def test_dropout_with_a_runtime_flag_stays():
    g = parse('''graph(%x : Float(B, 4), %train : bool):
      %y : Float(B, 4) = sm::dropout[p=0.5](%x, %train)
      return (%y)
    ''')
    assert "sm::dropout" in _ops(remove_dropout(g))


MODULE_GRAPH = '''graph(%self : __module__.Net, %x : Float(B, 2)):
  %bn : __module__.BN = prim::GetAttr[name="bn"](%self)
  %m : Float(2) = prim::GetAttr[name="running_mean"](%bn)
  %v : Float(2) = prim::GetAttr[name="running_var"](%bn)
  %t : bool = prim::GetAttr[name="training"](%bn)
  %none : NoneType = prim::Constant[value=None]()
  %y : Float(B, 2) = sm::batch_norm(%x, %m, %v, %none, %none, %t, %none)
  %s : Float(2) = prim::GetAttr[name="scale"](%self)
  %z : Float(B, 2) = sm::mul(%y, %s)
  %k : int = prim::GetAttr[name="k"](%self)
  %k1 : int = sm::int_add(%k, %k)
   = prim::SetAttr[name="k"](%self, %k1)
  return (%z)
'''


def _state(training):
    return {"bn.running_mean": np.zeros(2, np.float32), "bn.running_var": np.ones(2, np.float32),
            "bn.training": training, "scale": np.full(2, 3.0, np.float32), "k": 1}


def test_freeze_attributes_makes_reads_constants_and_keeps_written_ones():
    g = freeze_attributes(parse(MODULE_GRAPH), _state(False).__getitem__)
    verify(g)
    reads = sorted(n.attrs["name"] for n in g.walk() if n.kind == "prim::GetAttr")
    assert reads == ["k"]                       # SetAttr writes it: it stays an attribute
    consts = [n.attrs["value"] for n in g.walk() if n.kind == "prim::Constant"]
    assert any(c is False for c in consts) and sum(isinstance(c, np.ndarray) for c in consts) == 3


def test_freeze_attributes_keeps_statistics_a_training_batch_norm_updates():
    g = freeze_attributes(parse(MODULE_GRAPH), _state(True).__getitem__)
    reads = sorted(n.attrs["name"] for n in g.walk() if n.kind == "prim::GetAttr")
    assert reads == ["bn", "k", "running_mean", "running_var"]


def test_freeze_attributes_keep_list_and_keep_answer():
    state = _state(False)
    state["scale"] = KEEP
    g = freeze_attributes(parse(MODULE_GRAPH), state.__getitem__, keep=["bn.running_var"])
    reads = sorted(n.attrs["name"] for n in g.walk() if n.kind == "prim::GetAttr")
    assert reads == ["bn", "k", "running_var", "scale"]
    g = eliminate_dead_code(fold_constants(g))
    verify(g)


def test_batch_norm_after_other_ops_becomes_a_fusible_affine_map():
    """(N, C, L) after a Linear: channels are dim 1, the Linear's features the last dim."""
    g = Graph()
    b = Builder(g, source="m.py:1")
    x = b.input(TensorType(D.float32, ("B", C, 3)), "x")
    h = b.op("add", b.op("matmul", x, b.constant(_arr(3, 3))), b.constant(_arr(3)))
    b.ret(b.op("batch_norm", h, *_bn_args(b, np.float32)))
    g = _check_same(g, _arr(2, C, 3), 1e-5)
    assert _ops(g) == ["sm::matmul", "sm::add", "sm::mul", "sm::add"]


def test_batch_norm_of_an_input_plus_a_constant_is_an_affine_map():
    g = Graph()
    b = Builder(g, source="m.py:1")
    x = b.input(TensorType(D.float32, ("B", C)), "x")
    b.ret(b.op("batch_norm", b.op("add", x, b.constant(_arr(C))), *_bn_args(b, np.float32)))
    g = _check_same(g, _arr(4, C), 1e-5)
    assert "sm::batch_norm" not in _ops(g)


def test_freeze_attributes_keeps_a_buffer_written_through_a_view():
    g = parse('''graph(%self : __module__.Net, %x : Float(2)):
      %buf : Float(4) = prim::GetAttr[name="buf"](%self)
      %start : int = prim::Constant[value=0]()
      %n : int = prim::Constant[value=2]()
      %head : Float(2) = sm::narrow[dim=0](%buf, %start, %n)
      %w : Float(2) = sm::copy_(%head, %x)
      %s : Float(4) = prim::GetAttr[name="scale"](%self)
      %y : Float(4) = sm::mul(%buf, %s)
      return (%y)
    ''')
    state = {"buf": np.zeros(4, np.float32), "scale": np.ones(4, np.float32)}
    g = freeze_attributes(g, state.__getitem__)
    verify(g)
    assert [n.attrs["name"] for n in g.walk() if n.kind == "prim::GetAttr"] == ["buf"]
