"""Golden text of the printer."""
from scriptmod.ir import dtypes as D
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph
from scriptmod.ir.printer import describe
from irsamples import assert_golden, control_flow, mlp, t


def test_mlp_golden():
    assert_golden(str(mlp()), """
        graph(%self : __module__.Block, %x : Float(B, 4)):
          %0 : Float(4, 8) = prim::GetAttr[name="w"](%self)  # model.py:10
          %1 : Float(8) = prim::GetAttr[name="b"](%self)  # model.py:10
          %2 : Float(B, 8) = sm::matmul(%x, %0)  # model.py:11
          %h : Float(B, 8) = sm::add(%2, %1)  # model.py:11
          %3 : Float(B, 8) = sm::relu(%h)  # model.py:12
          %4 : Float(B) = sm::sum[dim=[1], keepdim=0](%3)  # model.py:12
          return (%4)
        """)


def test_control_flow_golden():
    assert_golden(str(control_flow()), """
        graph(%x : Float(2, 3)):
          %0 : Float() = sm::sum[keepdim=0](%x)  # cf.py:1
          %1 : float = prim::Constant[value=0.0]()  # cf.py:1
          %2 : Bool() = sm::gt(%0, %1)  # cf.py:1
          %3 : Float(2, 3) = prim::If(%2)  # cf.py:1
            block0():
              %4 : Float(2, 3) = sm::neg(%x)  # cf.py:1
              -> (%4)
            block1():
              %5 : float = prim::Constant[value=2.0]()  # cf.py:1
              %6 : Float(2, 3) = sm::mul(%x, %5)  # cf.py:1
              -> (%6)
          %7 : int = prim::Constant[value=3]()  # cf.py:1
          %8 : bool = prim::Constant[value=1]()  # cf.py:1
          %9 : Float(2, 3) = prim::Loop(%7, %8, %3)  # cf.py:1
            block0(%i : int, %10 : Float(2, 3)):
              %11 : float = prim::Constant[value=1.0]()  # cf.py:1
              %12 : Float(2, 3) = sm::add(%10, %11)  # cf.py:1
              %13 : bool = prim::Constant[value=1]()  # cf.py:1
              -> (%13, %12)
          return (%9)
        """)


class FakeArray:
    dtype, shape = "float32", (2, 2)


def test_names_dedup_tensor_constants_multi_outputs_and_fusion():
    g = Graph()
    b = Builder(g)
    x = b.input(t(2, 2), "x")
    y = b.input(t(2, 2), "x")
    c = b.constant(FakeArray(), name="w")
    sub = Graph()
    sb = Builder(sub)
    a = sb.input(t(2, 2), "a")
    sb.ret(sb.op("exp", a))
    f, = b.fusion_group(sub, [b.op("add", x, c)])
    v, i = b.op("max_dim", f, dim=1)
    b.set_attr(b.input(__import__("scriptmod.ir").ir.types.ModuleType("M"), "self"), "cache", v)
    b.ret(i, y)
    assert_golden(str(g), """
        graph(%x : Float(2, 2), %x.1 : Float(2, 2), %self : __module__.M):
          %w : Float(2, 2) = prim::Constant[value=<Tensor>]()
          %0 : Float(2, 2) = sm::add(%x, %w)
          %1 : Float(2, 2) = prim::FusionGroup_0(%0)
          %2 : Float(2), %3 : Long(2) = sm::max_dim[dim=1, keepdim=0](%1)
          = prim::SetAttr[name="cache"](%self, %2)
          return (%3, %x.1)
        with prim::FusionGroup_0 = graph(%a : Float(2, 2)):
          %0 : Float(2, 2) = sm::exp(%a)
          return (%0)
        """)


def test_attribute_values_print_typed_and_sorted():
    g = Graph()
    b = Builder(g, source="m.py:5")
    x = b.input(t(2, 3, dtype=D.int32), "x")
    y = b.op("cast", b.op("transpose", x, dim1=1, dim0=0), dtype=D.float16)
    spec = (("slice", 0, None, 1), ("int", 1), ("none",), ("ellipsis",))
    z = b.op("index", y, spec=spec)
    b.ret(z)
    assert describe(y.node) == "%1 : Half(3, 2) = sm::cast[dtype=Half](%0)  # m.py:5"
    assert describe(x.uses[0].user) == \
        "%0 : Int(3, 2) = sm::transpose[dim0=0, dim1=1](%x)  # m.py:5"
    assert describe(z.node) == ('%2 : Half(3, 1) = sm::index[spec=(("slice", 0, None, 1), '
                                '("int", 1), ("none",), ("ellipsis",))](%1)  # m.py:5')
