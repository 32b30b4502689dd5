"""Row kernels (``codegen.rows`` -> ``codegen.llvm_rows``) against float64 NumPy references:
every row op over 1, 7, 128, 1023 and 4097 reduced elements, float32 and float64, with an
elementwise prologue and epilogue; rows of NaN and infinities and all-masked rows; strided,
broadcast and scalar inputs; per-row outputs; half dtypes."""
from __future__ import annotations

import math

import numpy as np
import pytest

from scriptmod.codegen.rows import lower_row_group, plan_row_layout
from scriptmod.ir import parse
from scriptmod.runtime.targets import LLVM

SIZES = (1, 7, 128, 1023, 4097)
ROWS = 5


def _lse(a: np.ndarray) -> np.ndarray:
    m = a.max(-1, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    return np.log(np.exp(a - m).sum(-1, keepdims=True)) + m


def _softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# op -> (IR attributes, output is reduced, float64 reference over the last dim)
OPS = {
    "sum": ("[dim=[-1], keepdim=1]", True, lambda a: a.sum(-1, keepdims=True)),
    "mean": ("[dim=[-1], keepdim=1]", True, lambda a: a.mean(-1, keepdims=True)),
    "amax": ("[dim=[-1], keepdim=1]", True, lambda a: a.max(-1, keepdims=True)),
    "amin": ("[dim=[-1], keepdim=1]", True, lambda a: a.min(-1, keepdims=True)),
    "var": ("[dim=[-1], keepdim=1]", True,
            lambda a: a.var(-1, ddof=1, keepdims=True) if a.shape[-1] > 1
            else np.full(a.shape[:-1] + (1,), np.nan)),
    "logsumexp": ("[dim=[-1], keepdim=1]", True, _lse),
    "softmax": ("[dim=-1]", False, _softmax),
    "log_softmax": ("[dim=-1]", False, lambda a: np.log(_softmax(a))),
}
TYPE = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16"}


def _np(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def run_rows(src: str, inputs: list[np.ndarray], full: tuple[int, ...]) -> list[np.ndarray]:
    """Lower, lay out, compile and run a row subgraph on ``inputs``; outputs in C order."""
    spec = lower_row_group(parse(src))
    laid, meta = plan_row_layout(spec, [a.shape for a in inputs],
                                 [[s // a.itemsize for s in a.strides] for a in inputs], full)
    rows = int(np.prod(meta[:laid.rank - 1]))
    outs = [np.empty(tuple(t.shape), _np(d.name)) for t, d in zip(spec.out_types, spec.out_dtypes)]
    LLVM.caller(LLVM.compile(laid), laid, meta, rows, None)(inputs, outs)
    return outs


def _prologue_epilogue(op: str, dtype: str, n: int) -> str:
    """``y = op(x * 0.5 + b) * 2 - 1``: a prologue and an epilogue around the row op."""
    attrs, reduced, _ = OPS[op]
    T = TYPE[dtype]
    out = f"{T}({ROWS}, 1)" if reduced else f"{T}({ROWS}, {n})"
    return f"""graph(%x : {T}({ROWS}, {n}), %b : {T}({n})):
  %h : float = prim::Constant[value=0.5]()
  %s : {T}({ROWS}, {n}) = sm::mul(%x, %h)
  %a : {T}({ROWS}, {n}) = sm::add(%s, %b)
  %r : {out} = sm::{op}{attrs}(%a)
  %two : float = prim::Constant[value=2.0]()
  %one : float = prim::Constant[value=1.0]()
  %m : {out} = sm::mul(%r, %two)
  %y : {out} = sm::sub(%m, %one)
  return (%y)
"""


def _tol(dtype: str, n: int) -> dict:
    return {"float32": {"rtol": 2e-5, "atol": 2e-6 * math.sqrt(n)},
            "float64": {"rtol": 1e-12, "atol": 1e-12 * math.sqrt(n)}}[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_row_op_matches_float64_reference_over_sizes(op: str, dtype: str) -> None:
    rng = np.random.default_rng(0)
    for n in SIZES:
        x = (rng.standard_normal((ROWS, n)) * 3).astype(dtype)
        b = rng.standard_normal(n).astype(dtype)
        y, = run_rows(_prologue_epilogue(op, dtype, n), [x, b], (ROWS, n))
        a = x.astype(np.float64) * 0.5 + b.astype(np.float64)
        ref = OPS[op][2](a) * 2 - 1
        np.testing.assert_allclose(y, ref, **_tol(dtype, n), err_msg=f"{op} n={n}")


SPECIAL_ROWS = [
    [np.nan, 0.0, 1.0, 2.0],
    [np.inf, 0.0, 1.0, 2.0],
    [-np.inf, 0.0, 1.0, 2.0],
    [np.inf, -np.inf, 1.0, 2.0],
    [-np.inf] * 4,                        # an all-masked row
    [np.inf] * 4,
    [1e30, 2e30, 3.0, 1e-30],
    [0.0, -0.0, 0.0, 0.0],
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_row_op_nan_and_inf_rows_match_the_eager_kernel(op: str, dtype: str) -> None:
    from scriptmod.runtime.kernels import KERNELS
    x = np.array(SPECIAL_ROWS, dtype)
    T = TYPE[dtype]
    attrs, reduced, _ = OPS[op]
    out = f"{T}(8, 1)" if reduced else f"{T}(8, 4)"
    src = f"""graph(%x : {T}(8, 4)):
  %y : {out} = sm::{op}{attrs}(%x)
  return (%y)
"""
    y, = run_rows(src, [x], (8, 4))
    kw = {"dim": [-1], "keepdim": True} if reduced else {"dim": -1}
    with np.errstate(all="ignore"):
        ref = np.asarray(KERNELS[op](np, x, **kw))
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-30, equal_nan=True,
                               err_msg=f"{op} on special rows")


def test_all_masked_softmax_row_is_nan_as_in_torch() -> None:
    x = np.zeros((3, 5), np.float32)
    mask = np.array([[0, 0, 1, 1, 1], [1] * 5, [0] * 5], bool)
    src = """graph(%x : Float(3, 5), %m : Bool(3, 5)):
  %ninf : float = prim::Constant[value=-inf]()
  %a : Float(3, 5) = sm::where(%m, %ninf, %x)
  %y : Float(3, 5) = sm::softmax[dim=-1](%a)
  return (%y)
"""
    y, = run_rows(src, [x, mask], (3, 5))
    np.testing.assert_allclose(y[0], [0.5, 0.5, 0, 0, 0], rtol=1e-6)
    assert np.isnan(y[1]).all()
    np.testing.assert_allclose(y[2], [0.2] * 5, rtol=1e-6)
    torch = pytest.importorskip("torch")
    ref = torch.softmax(torch.from_numpy(x).masked_fill(torch.from_numpy(mask), -math.inf), -1)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-6, equal_nan=True)


def test_strided_broadcast_and_scalar_inputs() -> None:
    """A transposed operand (the reduced dim strided), a padding mask broadcast over heads
    and query rows, a per-row bias and a 0-d scale: every input kind in one kernel."""
    rng = np.random.default_rng(1)
    B, H, T = 2, 3, 9
    s = rng.standard_normal((B, H, T, T)).astype(np.float32)
    st = np.ascontiguousarray(np.swapaxes(s, -1, -2)).swapaxes(-1, -2)   # same values, F-ish
    mask = rng.standard_normal((B, 1, 1, T)).astype(np.float32)
    rowb = rng.standard_normal((B, H, T, 1)).astype(np.float32)
    scale = np.array(0.125, np.float32)
    src = f"""graph(%s : Float({B}, {H}, {T}, {T}), %m : Float({B}, 1, 1, {T}), %r : Float({B}, {H}, {T}, 1), %k : Float()):
  %a : Float({B}, {H}, {T}, {T}) = sm::mul(%s, %k)
  %c : Float({B}, {H}, {T}, {T}) = sm::add(%a, %m)
  %d : Float({B}, {H}, {T}, {T}) = sm::add(%c, %r)
  %y : Float({B}, {H}, {T}, {T}) = sm::softmax[dim=-1](%d)
  %l : Float({B}, {H}, {T}, 1) = sm::logsumexp[dim=[-1], keepdim=1](%d)
  return (%y, %l)
"""
    y, lse = run_rows(src, [st, mask, rowb, scale], (B, H, T, T))
    a = s.astype(np.float64) * 0.125 + mask + rowb
    np.testing.assert_allclose(y, _softmax(a), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(lse, _lse(a), rtol=1e-5, atol=1e-6)


def test_reducing_several_trailing_dims_and_no_keepdim() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 5)).astype(np.float64)
    src = """graph(%x : Double(4, 3, 5)):
  %m : Double(4) = sm::mean[dim=[-2, -1]](%x)
  %v : Double(4, 1, 1) = sm::var[dim=[1, 2], keepdim=1, correction=0](%x)
  return (%m, %v)
"""
    spec = lower_row_group(parse(src))
    assert spec.cols == 2 and spec.per_row == (True, True)
    m, v = run_rows(src, [x], (4, 3, 5))
    np.testing.assert_allclose(m.reshape(4), x.mean((1, 2)), rtol=1e-13)
    np.testing.assert_allclose(v.reshape(4), x.var((1, 2)), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs_compute_in_float32(dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 300)).astype(_np(dtype))
    T = TYPE[dtype]
    src = f"""graph(%x : {T}(6, 300)):
  %y : {T}(6, 300) = sm::softmax[dim=-1](%x)
  %s : {T}(6, 1) = sm::sum[dim=[-1], keepdim=1](%x)
  return (%y, %s)
"""
    y, s = run_rows(src, [x], (6, 300))
    a = x.astype(np.float64)
    tol = 1e-2 if dtype == "bfloat16" else 2e-3
    np.testing.assert_allclose(y.astype(np.float64), _softmax(a), rtol=tol, atol=1e-4)
    np.testing.assert_allclose(s.astype(np.float64), a.sum(-1, keepdims=True), rtol=tol,
                               atol=tol)


def test_softmax_stores_exp_once_and_scales_in_place() -> None:
    """The last pass of a softmax reads the exps its sum pass stored instead of computing
    them again: one exp loop, not two."""
    from scriptmod.codegen.llvm_ir import render_llvm
    src = """graph(%x : Float(4, 64)):
  %y : Float(4, 64) = sm::softmax[dim=-1](%x)
  return (%y)
"""
    spec = lower_row_group(parse(src))
    laid, _ = plan_row_layout(spec, [(4, 64)], [(64, 1)], (4, 64))
    text = render_llvm(laid).text
    import re
    assert len(re.findall(r"^col\.header[.\d]*:", text, re.M)) == 3   # max, exp+sum, scale
    # the exp's range reduction (a multiply by log2(e)) is emitted once
    assert text.count("0x3FF7154760000000") + text.count("1.44269") <= 2


def test_rows_of_a_column_that_does_not_walk_uniformly_are_refused() -> None:
    x = np.zeros((4, 3, 5), np.float32)[:, :, ::2]               # (4, 3, 3), inner stride 2
    y = np.zeros((4, 6, 5), np.float32)[:, ::2, :]               # reduced dims not mergeable
    src = """graph(%x : Float(4, 3, 5)):
  %y : Float(4, 1, 1) = sm::sum[dim=[1, 2], keepdim=1](%x)
  return (%y)
"""
    spec = lower_row_group(parse(src))
    with pytest.raises(NotImplementedError, match="uniformly"):
        plan_row_layout(spec, [y.shape], [[s // 4 for s in y.strides]], (4, 3, 5))
    assert x.shape == (4, 3, 3)


def test_several_row_ops_in_one_kernel_do_not_clobber_each_other() -> None:
    """An output ``a * r`` stored in an early pass must not be read back by a later pass as
    ``a`` (an RMS norm beside a log_softmax of the same ``a``)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 33))
    mask = rng.random((6, 33)) < 0.3
    src = """graph(%x : Double(6, 33), %m : Bool(6, 33)):
  %one : float = prim::Constant[value=1.0]()
  %a : Double(6, 33) = sm::mul(%x, %one)
  %ninf : float = prim::Constant[value=-inf]()
  %c : Double(6, 33) = sm::where(%m, %ninf, %a)
  %p : Double(6, 33) = sm::softmax[dim=-1](%c)
  %lp : Double(6, 33) = sm::log_softmax[dim=-1](%a)
  %two : int = prim::Constant[value=2]()
  %q : Double(6, 33) = sm::pow(%a, %two)
  %ms : Double(6, 1) = sm::mean[dim=[-1], keepdim=1](%q)
  %r : Double(6, 1) = sm::rsqrt(%ms)
  %rms : Double(6, 33) = sm::mul(%a, %r)
  return (%rms, %lp, %p)
"""
    rms, lp, p = run_rows(src, [a, mask], (6, 33))
    np.testing.assert_allclose(rms, a / np.sqrt((a * a).mean(-1, keepdims=True)), rtol=1e-13)
    np.testing.assert_allclose(lp, np.log(_softmax(a)), rtol=1e-13)
    np.testing.assert_allclose(p, _softmax(np.where(mask, -np.inf, a)), rtol=1e-13, atol=1e-300)


def test_fused_kernel_runs_a_row_group_at_any_batch_and_splits_rows() -> None:
    """Outside a native program (a symbolic batch), a row group's ``FusedKernel`` lays the
    kernel out per call; from ``MIN_SPLIT`` elements its rows are split over the threads."""
    from scriptmod.runtime import threads
    from scriptmod.runtime.fusion import FusedKernel
    sub = parse("""graph(%x : Float(B, 256), %w : Float(256)):
  %m : Float(B, 1) = sm::mean[dim=[-1], keepdim=1](%x)
  %d : Float(B, 256) = sm::sub(%x, %m)
  %y : Float(B, 256) = sm::mul(%d, %w)
  %s : Float(B) = sm::amax[dim=[-1]](%y)
  return (%y, %m, %s)
""")
    fk = FusedKernel(sub, name="rows")
    rng = np.random.default_rng(6)
    w = rng.standard_normal(256).astype(np.float32)
    before = threads.get_num_threads()
    threads.set_num_threads(2)
    try:
        for batch in (3, 1, threads.MIN_SPLIT // 256 + 5):
            x = rng.standard_normal((batch, 256)).astype(np.float32)
            y, m, s = fk([x, w])
            assert (y.shape, m.shape, s.shape) == ((batch, 256), (batch, 1), (batch,))
            d = x.astype(np.float64) - x.mean(-1, keepdims=True)
            np.testing.assert_allclose(m, x.astype(np.float64).mean(-1, keepdims=True),
                                       rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(y, d * w, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(s, (d * w).max(-1), rtol=1e-5, atol=1e-6)
        xt = np.ascontiguousarray(rng.standard_normal((256, 7)).astype(np.float32)).T
        y, m, s = fk([xt, w])                                    # a transposed input
        np.testing.assert_allclose(m[:, 0], xt.astype(np.float64).mean(-1), rtol=1e-5,
                                   atol=1e-6)
    finally:
        threads.set_num_threads(before)
    assert fk.spec.is_row and "row" in fk.llvm_ir[:40]


@pytest.mark.parametrize("offset", [0.0, 1e4, -3e6])
def test_layer_norm_moments_in_one_pass_stay_accurate_far_from_zero(offset: float) -> None:
    """``mean`` then ``mean((x - mean)**2)`` is rewritten into one pass of sums shifted by each
    row's first element: a large common offset (where the naive ``E[x²] - E[x]²`` loses every
    digit) costs nothing."""
    n = 300
    src = f"""graph(%x : Float(6, {n})):
  %m : Float(6, 1) = sm::mean[dim=[-1], keepdim=1](%x)
  %d : Float(6, {n}) = sm::sub(%x, %m)
  %q : Float(6, {n}) = sm::mul(%d, %d)
  %v : Float(6, 1) = sm::mean[dim=[-1], keepdim=1](%q)
  %eps : float = prim::Constant[value=1e-05]()
  %ve : Float(6, 1) = sm::add(%v, %eps)
  %r : Float(6, 1) = sm::rsqrt(%ve)
  %y : Float(6, {n}) = sm::mul(%d, %r)
  return (%y, %v)
"""
    spec = lower_row_group(parse(src))
    assert [s.op for s in spec.ops].count("row_first") == 1
    from scriptmod.codegen.llvm_rows import levels
    lv = levels(spec)
    assert max(lv[len(spec.inputs):]) == 1          # one pass of sums, one of outputs
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, n)) * 3 + offset).astype(np.float32)
    x[2, 0] = offset + 40.0                          # a first element far from its row's mean
    y, v = run_rows(src, [x], (6, n))
    xd = x.astype(np.float64)
    m32 = xd.mean(-1, keepdims=True).astype(np.float32).astype(np.float64)   # the graph's mean
    var = ((xd - m32) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(v, var, rtol=1e-5)
    np.testing.assert_allclose(y, (xd - m32) / np.sqrt(var + 1e-5), rtol=1e-4, atol=2e-4)


def test_an_input_broadcast_inside_the_reduced_dims_runs_on_a_copy() -> None:
    """``(x * b).sum()`` with ``b`` broadcast along one of the reduced dims cannot walk them
    as one dim: the FusedKernel gives the kernel a C-ordered copy of its broadcast (the
    native planner leaves the group to it); a strided slice likewise."""
    from scriptmod.runtime.fusion import FusedKernel
    sub = parse("""graph(%x : Float(3, 2, 4), %b : Float(4)):
  %p : Float(3, 2, 4) = sm::mul(%x, %b)
  %s : Float(3, 1, 1) = sm::sum[dim=[-2, -1], keepdim=1](%p)
  return (%s)
""")
    fk = FusedKernel(sub, name="broadcast_rows")
    rng = np.random.default_rng(8)
    b = rng.standard_normal(4).astype(np.float32)
    for x in (rng.standard_normal((3, 2, 4)).astype(np.float32),
              rng.standard_normal((3, 4, 4)).astype(np.float32)[:, ::2]):
        s, = fk([x, b])
        np.testing.assert_allclose(s.reshape(3), (x.astype(np.float64) * b).sum((1, 2)),
                                   rtol=1e-5, atol=1e-6)
