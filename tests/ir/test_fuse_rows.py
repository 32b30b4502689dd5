"""``fuse_rows``: which ops join a row op's group, and which stay out."""
from __future__ import annotations

from scriptmod.ir import parse, verify
from scriptmod.ir.graph import Prim
from scriptmod.ir.passes import fuse_elementwise, fuse_rows, run_pipeline


def _groups(g) -> list[list[str]]:
    return [[n.op_name for n in node.attrs["subgraph"].nodes if n.is_op]
            for node in g.nodes if node.kind == Prim.FUSION_GROUP]


def test_layer_norm_with_affine_and_residual_is_one_group() -> None:
    g = parse('''graph(%x : Float(B, 16), %w : Float(16), %b : Float(16)):
  %m : Float(B, 1) = sm::mean[dim=[-1], keepdim=1](%x)
  %d : Float(B, 16) = sm::sub(%x, %m)
  %q : Float(B, 16) = sm::mul(%d, %d)
  %v : Float(B, 1) = sm::mean[dim=[-1], keepdim=1](%q)
  %eps : float = prim::Constant[value=1e-05]()
  %ve : Float(B, 1) = sm::add(%v, %eps)
  %r : Float(B, 1) = sm::rsqrt(%ve)
  %n : Float(B, 16) = sm::mul(%d, %r)
  %a : Float(B, 16) = sm::mul(%n, %w)
  %y : Float(B, 16) = sm::add(%a, %b)
  %z : Float(B, 16) = sm::add(%y, %x)
  return (%z)
''')
    fuse_rows(g)
    verify(g)
    assert _groups(g) == [["mean", "sub", "mul", "mean", "add", "rsqrt", "mul", "mul", "add",
                           "add"]]


def test_softmax_takes_its_scale_and_mask_prologue() -> None:
    g = parse('''graph(%s : Float(2, 4, 8, 8), %mask : Bool(8, 8)):
  %k : float = prim::Constant[value=0.125]()
  %a : Float(2, 4, 8, 8) = sm::mul(%s, %k)
  %ninf : float = prim::Constant[value=-inf]()
  %c : Float(2, 4, 8, 8) = sm::where(%mask, %ninf, %a)
  %p : Float(2, 4, 8, 8) = sm::softmax[dim=-1](%c)
  return (%p)
''')
    fuse_rows(g)
    assert _groups(g) == [["mul", "where", "softmax"]]
    assert [v.debug_name for v in g.nodes[-1].inputs] == ["s", "mask"]


def test_a_prologue_used_elsewhere_is_returned_by_the_group() -> None:
    g = parse('''graph(%x : Float(3, 8), %h : Float(3, 8)):
  %s : Float(3, 8) = sm::add(%x, %h)
  %m : Float(3, 1) = sm::amax[dim=[-1], keepdim=1](%s)
  %e : Float(3, 8) = sm::exp(%s)
  return (%m, %e)
''')
    fuse_rows(g)
    fuse_elementwise(g)
    verify(g)
    groups = [n for n in g.nodes if n.kind == Prim.FUSION_GROUP]
    assert _groups(g)[0] == ["add", "amax", "exp"]
    assert len(groups[0].outputs) == 2


def test_a_reduced_value_without_kept_dims_is_not_broadcast_in_the_group() -> None:
    """``sum(x, -1)`` of shape (B,) added to a (B,) tensor is per-row, but its uses by a
    (4, 4) op would broadcast along the wrong dim: it leaves the group as an output."""
    g = parse('''graph(%x : Float(4, 4)):
  %s : Float(4) = sm::sum[dim=[-1]](%x)
  %y : Float(4, 4) = sm::add(%x, %s)
  return (%y)
''')
    fuse_rows(g)
    assert _groups(g) == [["sum"]]
    assert g.nodes[-1].op_name == "add"


def test_row_ops_over_other_dims_stay_apart() -> None:
    g = parse('''graph(%x : Float(4, 6)):
  %a : Float(1, 6) = sm::mean[dim=[0], keepdim=1](%x)
  %b : Float(4, 6) = sm::softmax[dim=-1](%x)
  %c : Float(4, 1) = sm::amax[dim=[-1], keepdim=1](%b)
  %t : Float(6, 4) = sm::transpose[dim0=0, dim1=1](%x)
  %d : Float(6, 1) = sm::sum[dim=[-1], keepdim=1](%t)
  return (%a, %c, %d)
''')
    fuse_rows(g)
    verify(g)
    assert sorted(_groups(g)) == [["softmax", "amax"], ["sum"]]
    assert any(n.op_name == "mean" for n in g.nodes if n.is_op)   # dim 0 is not trailing


def test_means_over_symbolic_dims_and_vetoed_ops_stay_unfused() -> None:
    """A softmax over a symbolic dim groups (its row kernel reads the length per call); a
    mean over one does not (its formula holds the length: ``COUNTED``)."""
    g = parse('''graph(%x : Float(4, N), %y : Float(4, 8)):
  %a : Float(4, N) = sm::softmax[dim=-1](%x)
  %b : Float(4, 8) = sm::softmax[dim=-1](%y)
  %c : Float(4, 1) = sm::mean[dim=[-1], keepdim=1](%x)
  return (%a, %b, %c)
''')
    fuse_rows(g, supported=lambda n: n.inputs[0].debug_name != "y")
    assert _groups(g) == [["softmax"]]
    assert any(n.op_name == "mean" for n in g.nodes if n.is_op)


def test_no_cycle_through_a_node_outside() -> None:
    """``e`` needs the row group's max through ``m2`` (not fusible): pulling ``e`` in would
    make the group feed ``m2`` and read it back."""
    g = parse('''graph(%x : Float(3, 8)):
  %m : Float(3, 1) = sm::amax[dim=[-1], keepdim=1](%x)
  %m2 : Float(3, 1) = sm::cumsum[dim=0](%m)
  %e : Float(3, 8) = sm::sub(%x, %m2)
  %f : Float(3, 8) = sm::sub(%x, %m)
  %y : Float(3, 8) = sm::mul(%e, %f)
  return (%y)
''')
    fuse_rows(g)
    verify(g)
    assert _groups(g) == [["amax", "sub"]]
    assert [n.op_name for n in g.nodes if n.is_op] == ["cumsum", "sub", "mul"]


def test_registered_in_the_pipeline() -> None:
    g = parse('''graph(%x : Float(2, 8)):
  %y : Float(2, 8) = sm::log_softmax[dim=1](%x)
  return (%y)
''')
    run_pipeline(g, ["fuse_rows"], verify=True)
    assert _groups(g) == [["log_softmax"]]
