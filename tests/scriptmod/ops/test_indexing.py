"""Scatter/index writes, take/put, nonzero, searchsorted, histograms and unique
(``scriptmod/_ops_indexing.py``): every op against PyTorch where it is installed (dtypes,
duplicate indices, negative dims, 0-d and empty inputs, ``out=``, in-place forms), NumPy
references otherwise, gradients by ``gradcheck``, a traced module of scatter_add/index_add
at two batch sizes against eager, the tracer's refusal of data-dependent shapes, and error
messages."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.autograd import gradcheck

RNG = np.random.default_rng(0)


@dataclass(frozen=True)
class T:
    """A tensor argument: NumPy data and the dtype both libraries build it in."""

    data: Any
    dtype: str = "float64"


def _make(lib: Any, x: Any) -> Any:
    if isinstance(x, T):
        return lib.tensor(np.asarray(x.data)).to(getattr(lib, x.dtype))
    if isinstance(x, (list, tuple)) and any(isinstance(v, T) for v in x):
        return type(x)(_make(lib, v) for v in x)
    return x


def _numpy(x: Any) -> Any:
    if isinstance(x, (tuple, list)):
        return [_numpy(v) for v in x]
    if x.dtype in (getattr(x.__class__, "bfloat16", None),) or str(x.dtype).endswith("bfloat16"):
        x = x.float()
    return x.detach().numpy() if hasattr(x, "detach") else x.numpy()


def _both(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """``fn(lib, *args)`` with ``lib`` torch and scriptmod: equal results (dtype, shape,
    values), or both raise."""
    torch = pytest.importorskip("torch")
    try:
        want = fn(torch, *[_make(torch, a) for a in args], **kwargs)
    except Exception as e:   # noqa: BLE001
        with pytest.raises(Exception):   # noqa: B017 (each error's class is checked below)
            fn(sm, *[_make(sm, a) for a in args], **kwargs)
        return e
    got = fn(sm, *[_make(sm, a) for a in args], **kwargs)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        if isinstance(w, (tuple, list)):
            for gi, wi in zip(g, w):
                _close(gi, wi)
            continue
        _close(g, w)
    return None


def _close(got: Any, want: Any) -> None:
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (got.dtype, want.dtype)
    g, w = _numpy(got), _numpy(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    tol = 2e-2 if str(want.dtype).endswith(("float16", "bfloat16")) else 1e-5
    np.testing.assert_allclose(g.astype(w.dtype), w, rtol=tol, atol=tol, equal_nan=True)


def _arr(shape: tuple, lo: float = -2, hi: float = 2) -> np.ndarray:
    return RNG.uniform(lo, hi, shape)


DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool",
          "complex64"]
IDX = T(np.array([[0, 2, 2, 1], [2, 0, 0, 0]]), "int64")        # duplicates in every column


# ---- scatter family ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_forms_match_torch(dtype: str) -> None:
    x, src = T(_arr((3, 4), 0, 3), dtype), T(_arr((2, 4), 0, 3), dtype)
    unique = T(np.array([[1, 0, 2, 1], [2, 1, 0, 0]]), "int64")
    _both(lambda L, x, i, s: x.scatter(0, i, s), x, unique, src)
    _both(lambda L, x, i: L.scatter(x, -1, i, value=1), x, T(np.array([[3], [0], [1]]), "int64"))
    _both(lambda L, x, i, s: L.scatter_add(x, 0, i, s), x, IDX, src)
    _both(lambda L, x, i, s: x.scatter_add(0, i[:, :3], s), x, IDX, src)    # src larger
    if dtype != "bool":
        _both(lambda L, x, i: x.scatter(0, i, 2, reduce="multiply"), x, IDX)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "uint8", "bool"])
def test_scatter_reduce_matches_torch(reduce: str, dtype: str) -> None:
    x, src = T(_arr((3, 4), -3, 3), dtype), T(_arr((2, 4), -3, 3), dtype)
    for include_self in (True, False):
        _both(lambda L, x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self),
              x, IDX, src)
        _both(lambda L, x, i, s: L.index_reduce(x, 1, i[0], s.t(), reduce if reduce not in
                                                ("sum",) else "prod", include_self=include_self),
              x, IDX, src)


def test_scatter_nan_and_edges_match_torch() -> None:
    x = T(np.array([1.0, np.nan, 3.0]))
    src = T(np.array([np.nan, 5.0, -1.0]))
    for reduce in ("amax", "amin", "sum", "prod", "mean"):
        _both(lambda L, x, i, s: x.scatter_reduce(0, i, s, reduce), x,
              T(np.array([0, 1, 0]), "int64"), src)
    _both(lambda L, x, i, s: x.scatter_add(0, i, s), T(np.array(2.0)), T(np.array(0), "int64"),
          T(np.array(3.0)))                                                   # 0-d
    _both(lambda L, x, i, s: x.scatter_add(0, i, s), T(_arr((3, 4))),
          T(np.zeros((0, 4)), "int64"), T(_arr((0, 4))))                      # empty index
    _both(lambda L, x, i, s: x.scatter(1, i, s), T(_arr((2, 3))),
          T(np.array([[2, 0]]), "int32"), T(_arr((1, 2))))                    # int32 index


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_ops_match_torch(dtype: str) -> None:
    x, src = T(_arr((4, 3), 0, 3), dtype), T(_arr((4, 2), 0, 3), dtype)
    i = T(np.array([2, 0, 2, 1]), "int64")
    _both(lambda L, x, i, s: x.index_add(0, i, s.repeat(1, 2)[:, :3]), x, i, src)
    _both(lambda L, x, i, s: x.index_copy(1, i[:2], s), x, T(np.array([2, 0, 9, 9]), "int64"), src)
    _both(lambda L, x, i: x.index_fill(-1, i, 1), x, T(np.array([-1, 0]), "int64"))
    _both(lambda L, x: x.index_fill(0, L.tensor([1, 1]), L.tensor(0).to(x.dtype)), x)
    _both(lambda L, x, i, s: L.index_put(x, (i[:2], i[2:]), s[0, 0], accumulate=True), x,
          T(np.array([1, 1, 0, 0]), "int64"), src)
    _both(lambda L, x, i, s: x.index_put((i,), s[:, 0:1].repeat(1, 3)), x, i, src)
    if dtype not in ("bool", "uint8"):
        _both(lambda L, x, i, s: L.index_add(x, 0, i, s.repeat(1, 2)[:, :3], alpha=2), x, i, src)
    _both(lambda L, x, i: x.index_select(-1, i[:2]), x, T(np.array([2, 0]), "int64"))


def test_index_ops_on_0d_and_empty() -> None:
    z, one = T(np.array(1.5)), T(np.array([0]), "int64")
    _both(lambda L, x, i: x.index_add(0, i, L.tensor(2.0, dtype=L.float64)), z, one)
    _both(lambda L, x, i: x.index_fill(0, i, 3.0), z, one)
    _both(lambda L, x, i: x.index_copy(0, i, L.tensor([4.0], dtype=L.float64)), z, one)
    _both(lambda L, x, i: x.index_select(0, i), z, one)
    _both(lambda L, x, i: x.index_select(0, i[0]), z, one)
    _both(lambda L, x, i: x.index_add(0, i[:0], L.zeros(0, 3, dtype=L.float64)),
          T(_arr((2, 3))), one)
    _both(lambda L, x, i: x.gather(0, i), T(_arr((5,))), T(np.zeros((2, 0)), "uint8"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_put_and_masks_match_torch(dtype: str) -> None:
    x = T(_arr((3, 4), 0, 3), dtype)
    i = T(np.array([[0, -1], [5, 5]]), "int64")
    mask = T(RNG.random((3, 4)) < 0.5, "bool")
    _both(lambda L, x, i: L.take(x, i), x, i)
    _both(lambda L, x, i: x.put(i, L.ones(2, 2).to(x.dtype)), x, i)
    if dtype not in ("bool", "uint8"):
        _both(lambda L, x, i: x.put(i, L.ones(2, 2).to(x.dtype), accumulate=True), x, i)
    _both(lambda L, x, i: L.take_along_dim(x, i.abs() % 3, 0), x, i)
    _both(lambda L, x, i: L.take_along_dim(x, i.abs() % 3), x, i)
    _both(lambda L, x, i: x.take_along_dim(i[:1] % 4, 1), x, T(np.array([[-4, 3]]), "int64"))
    _both(lambda L, x, m: L.masked_select(x, m), x, mask)
    _both(lambda L, x, m: L.masked_select(x, m[0]), x, mask)                    # broadcast
    _both(lambda L, x, m: x.masked_scatter(m, L.arange(12).reshape(3, 4).to(x.dtype)), x, mask)
    _both(lambda L, x, m: x[0].masked_scatter(m, L.arange(12).to(x.dtype)), x, mask)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nonzero_family_matches_torch(dtype: str) -> None:
    x = T(np.where(RNG.random((3, 4)) < 0.5, 0, _arr((3, 4), 1, 3)), dtype)
    for fn in (lambda L, x: L.nonzero(x), lambda L, x: x.nonzero(as_tuple=True),
               lambda L, x: L.argwhere(x), lambda L, x: L.count_nonzero(x),
               lambda L, x: L.count_nonzero(x, dim=(0, -1)), lambda L, x: x.count_nonzero(1),
               lambda L, x: L.nonzero_static(x, size=9, fill_value=-7),
               lambda L, x: L.nonzero_static(x, size=1),
               lambda L, x: L.nonzero(x[0, 0]), lambda L, x: L.nonzero(x[0, 0], as_tuple=True),
               lambda L, x: L.nonzero(x[:0])):
        _both(fn, x)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "uint8"])
def test_searchsorted_isin_match_torch(dtype: str) -> None:
    seq = T(np.sort(_arr((6,), 0, 9).round()), dtype)
    rows = T(np.sort(_arr((2, 5), 0, 9).round(), axis=-1), dtype)
    v = T(_arr((2, 3), 0, 9).round(), dtype)
    for right in (False, True):
        _both(lambda L, s, v: L.searchsorted(s, v, right=right), seq, v)
        _both(lambda L, s, v: L.searchsorted(s, v, side="right" if right else "left",
                                             out_int32=True), rows, v)
        _both(lambda L, s, v: L.bucketize(v, s, right=right), seq, v)
        _both(lambda L, s: L.bucketize(4, s, right=right), seq)
    if dtype.startswith("float"):      # a NaN bound compares as in PyTorch's own bisection
        nan_rows = T(np.array([[-1.0, 1.0, 1.0, np.nan]] * 2), dtype)
        for right in (False, True):
            _both(lambda L, s, v: L.searchsorted(s, v, right=right), nan_rows, v)
            _both(lambda L, s, v: L.searchsorted(s[0], v, right=right), nan_rows, v)
    perm = T(RNG.permutation(6), "int64")
    _both(lambda L, s, p, v: L.searchsorted(s[p.argsort()], v, sorter=p), seq, perm, v)
    _both(lambda L, s: L.searchsorted(s, 3), seq)
    _both(lambda L, a, b: L.isin(a, b), v, seq)
    _both(lambda L, a, b: L.isin(a, b, invert=True), v, seq)
    _both(lambda L, b: L.isin(3, b), seq)
    _both(lambda L, a: L.isin(a, 3), v)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_histograms_match_torch(dtype: str) -> None:
    x, w = T(_arr((4, 5), -2.1, 2.1), dtype), T(_arr((4, 5), 0, 1), dtype)
    _both(lambda L, x: L.histc(x, bins=6, min=-2, max=2), x)
    _both(lambda L, x: x.histc(5), x)
    _both(lambda L, x: L.histc(x[0, :1], 4), x)                      # one value: widened by 1
    _both(lambda L, x: L.histogram(x, 4), x)
    _both(lambda L, x, w: L.histogram(x, 3, range=(-1.0, 1.0), weight=w, density=True), x, w)
    _both(lambda L, x: L.histogram(x, L.tensor([-2.0, -0.5, 0.0, 1.0, 2.5]).to(x.dtype),
                                   density=True), x)
    _both(lambda L, x: L.histogramdd(x.reshape(10, 2), bins=[3, 4]), x)
    _both(lambda L, x, w: L.histogramdd(x.reshape(10, 2), bins=2, range=[-1.0, 1.0, -2.0, 2.0],
                                        weight=w.reshape(10, 2)[:, 0], density=True), x, w)
    if dtype == "float32":
        _both(lambda L, x: L.histc(x.half(), 4), x)


def test_bincount_unique_unravel_match_torch() -> None:
    a = T(RNG.integers(0, 6, 12), "int64")
    w = T(_arr((12,)), "float32")
    _both(lambda L, a: L.bincount(a), a)
    _both(lambda L, a: a.bincount(minlength=10), a)
    _both(lambda L, a, w: L.bincount(a, w), a, w)
    _both(lambda L, a, w: L.bincount(a, w.half()), a, w)
    _both(lambda L, a: L.bincount(a[:0]), a)
    x = T(np.array([[3.0, 1.0, 3.0], [np.nan, 1.0, np.nan], [3.0, 1.0, 3.0]]))
    rows = T(np.array([[3, 1, 3], [2, 1, 2], [3, 1, 3], [3, 1, 3]]), "int32")
    for kw in ({}, {"return_inverse": True}, {"return_counts": True}):
        _both(lambda L, x: L.unique(x, **kw), x)                    # NaNs stay distinct
        _both(lambda L, x: L.unique_consecutive(x, **kw), x)
    for kw in ({"return_inverse": True, "return_counts": True, "dim": 0},
               {"return_inverse": True, "dim": 1}, {"return_counts": True, "dim": -1}):
        _both(lambda L, x: L.unique(x, **kw), rows)
        _both(lambda L, x: L.unique_consecutive(x, **kw), rows)
    _both(lambda L, a: a.unique(sorted=False, return_counts=True), a)
    _both(lambda L, a: L.unravel_index(a, (2, 3)), a)
    _both(lambda L: L.unravel_index(L.tensor([-1, 7, 0]), (2, 3)))
    _both(lambda L: L.unravel_index(L.tensor(4), 5))


# ---- in-place and out= ------------------------------------------------------------------
def test_inplace_and_out_forms() -> None:
    torch = pytest.importorskip("torch")
    for lib in (torch, sm):
        x = lib.zeros(3, 2)
        i = lib.tensor([[0, 2], [0, 0]])
        x.scatter_add_(0, i, lib.ones(2, 2))
        x.index_add_(0, lib.tensor([1]), lib.ones(1, 2), alpha=3)
        x.index_fill_(1, lib.tensor([1]), -1.0)
        x.scatter_reduce_(0, lib.tensor([[2, 2]]), lib.full((1, 2), 5.0), "amax")
        x.index_copy_(0, lib.tensor([0]), lib.full((1, 2), 4.0))
        x.put_(lib.tensor([5]), lib.tensor([9.0]), accumulate=True)
        x.masked_scatter_(x < 0, lib.tensor([7.0, 8.0, 9.0]))
        x.index_put_((lib.tensor([1]),), lib.tensor(6.0))
        x.scatter_(1, lib.tensor([[1], [0], [1]]), 2.0, reduce="add")
        out = lib.empty(0, dtype=lib.int64)
        lib.searchsorted(lib.tensor([1.0, 5.0]), lib.tensor([3.0, 9.0]), out=out)
        hist = lib.empty(4)
        lib.histc(x, 4, out=hist)
        tgt = lib.empty(3, 2)
        lib.scatter_add(x, 0, i, lib.ones(2, 2), out=tgt)
        if lib is torch:
            want = (x.numpy(), out.numpy(), hist.numpy(), tgt.numpy())
    np.testing.assert_array_equal(x.numpy(), want[0])
    for got, w in zip((out, hist, tgt), want[1:]):
        np.testing.assert_array_equal(got.numpy(), w)
    leaf = sm.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf.scatter_add_(0, sm.tensor([0]), sm.ones(1))


# ---- gradients --------------------------------------------------------------------------
def _g(*shape: int) -> sm.Tensor:
    return sm.tensor(RNG.uniform(0.5, 2.0, shape), requires_grad=True)


GRAD_CASES: dict[str, Callable[..., Any]] = {
    "scatter": lambda x, s: x.scatter(0, sm.tensor([[1, 0, 2]]), s[:1]),
    "scatter-value": lambda x, s: x.scatter(1, sm.tensor([[2], [0], [1]]), 2.0),
    "scatter_add-dup": lambda x, s: x.scatter_add(0, sm.tensor([[1, 1, 1], [1, 0, 1]]), s),
    "index_add": lambda x, s: x.index_add(0, sm.tensor([2, 2]), s, alpha=-2),
    "index_copy": lambda x, s: x.index_copy(0, sm.tensor([2, 0]), s),
    "index_fill-value": lambda x, s: x.index_fill(1, sm.tensor([0, 2]), s[0, 0]),
    "index_put-acc": lambda x, s: sm.index_put(x, (sm.tensor([1, 1]),), s, accumulate=True),
    "masked_scatter": lambda x, s: x.masked_scatter(x > 1.2, s.repeat(2, 1)),
    "masked_select": lambda x, s: sm.masked_select(x, x > 1.0) * 2,
    "take": lambda x, s: sm.take(x, sm.tensor([[0, -1], [4, 4]])),
    "put-acc": lambda x, s: x.put(sm.tensor([1, 1, 8]), s[0], accumulate=True),
    "take_along_dim": lambda x, s: sm.take_along_dim(x, sm.tensor([[2], [0], [-1]]), 1),
    "gather-0d": lambda x, s: x[0, 0].gather(0, sm.tensor([0, 0])),
    "index_select-0d": lambda x, s: x[0, 0].index_select(0, sm.tensor([0])),
}
for _r in ("sum", "prod", "mean", "amax", "amin"):
    for _incl in (True, False):
        GRAD_CASES[f"scatter_reduce-{_r}-{int(_incl)}"] = (
            lambda x, s, r=_r, incl=_incl: x.scatter_reduce(
                0, sm.tensor([[1, 1, 0], [1, 2, 0]]), s, r, include_self=incl))
        GRAD_CASES[f"index_reduce-{_r}-{int(_incl)}"] = (
            lambda x, s, r=_r, incl=_incl: x.index_reduce(
                0, sm.tensor([1, 1]), s, "prod" if r == "sum" else r, include_self=incl))


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradcheck(name: str) -> None:
    x, s = _g(3, 3), _g(2, 3)
    assert gradcheck(GRAD_CASES[name], (x, s), eps=1e-6, atol=1e-5)


def test_prod_gradient_with_zeros_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    x0 = np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 2.0]])
    s0 = np.array([[0.0, 4.0, 5.0], [2.0, 0.0, 0.0]])
    idx = [[1, 1, 0], [1, 0, 0]]
    grads = []
    for lib in (torch, sm):
        x, s = (lib.tensor(a, requires_grad=True) for a in (x0, s0))
        x.scatter_reduce(0, lib.tensor(idx), s, "prod").sum().backward()
        grads.append((x.grad.numpy(), s.grad.numpy()))
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_allclose(got, want)


def test_scatter_double_backward() -> None:
    """The derivatives are gathers and scatters themselves: a gradient of the gradient."""
    def first(x: sm.Tensor, s: sm.Tensor) -> sm.Tensor:
        y = x.scatter_reduce(0, sm.tensor([2, 2]), s, "prod") ** 2
        gx, gs = sm.autograd.grad(y.sum(), (x, s), create_graph=True)
        return gx.sum() + gs
    assert gradcheck(first, (_g(3), _g(2)), eps=1e-6, atol=1e-5)


# ---- tracing ------------------------------------------------------------------------------
class Scatters(nn.Module):
    def forward(self, x: sm.Tensor, idx: sm.Tensor) -> Any:
        pooled = sm.zeros(4, x.shape[1]).index_add(0, idx, x)
        counts = sm.zeros(4).scatter_add(0, idx, sm.ones(x.shape[0]))
        top = sm.zeros(4, x.shape[1]).scatter_reduce(0, idx.unsqueeze(1).expand(x.shape), x,
                                                     "amax", include_self=False)
        where = sm.searchsorted(sm.tensor([0.0, 0.5]), x) + sm.isin(idx, sm.tensor([1, 3]))[0]
        return pooled / counts.clamp(min=1).unsqueeze(1), top, where, x.histc(4, -1, 1)


def test_traced_scatters_follow_the_batch_size() -> None:
    model = Scatters()
    x, idx = sm.randn(6, 3), sm.randint(0, 4, (6,))
    traced = jit.trace(model, (x, idx))
    for n in (6, 11):
        x, idx = sm.randn(n, 3), sm.randint(0, 4, (n,))
        for got, want in zip(traced(x, idx), model(x, idx)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("call", [
    lambda x: sm.unique(x, dim=0), lambda x: sm.unique_consecutive(x, dim=1),
    lambda x: sm.bincount((x > 0).long().reshape(-1)), lambda x: sm.histogramdd(x)])
def test_tracing_refuses_data_dependent_shapes(call: Callable[..., Any]) -> None:
    """(``nonzero``, ``argwhere``, ``masked_select`` and ``unique`` without ``dim`` trace:
    ``tests/scriptmod/jit/test_data_dependent_shapes.py``.)"""
    class M(nn.Module):
        def forward(self, x: sm.Tensor) -> Any:
            return call(x)
    with pytest.raises(RuntimeError, match="depends on the input's values"):
        jit.trace(M(), (sm.randn(3, 2),))


# ---- errors ------------------------------------------------------------------------------
ERRORS = [
    (lambda: sm.zeros(3).scatter(0, sm.tensor([3]), 1.0), RuntimeError,
     "index 3 is out of bounds for dimension 0 with size 3"),
    (lambda: sm.zeros(3).scatter(0, sm.tensor([-1]), 1.0), RuntimeError, "index -1 is out of"),
    (lambda: sm.zeros(3).scatter(0, sm.tensor([1.0]), 1.0), RuntimeError, "int32/int64"),
    (lambda: sm.zeros(3).scatter(0, sm.tensor([[1]]), 1.0), RuntimeError,
     "same number of dimensions"),
    (lambda: sm.zeros(2, 2).scatter(0, sm.tensor([[1, 1, 1]]), sm.ones(1, 2)), RuntimeError,
     r"Expected index \[1, 3\] to be no larger than self \[2, 2\]"),
    (lambda: sm.zeros(3).scatter_add(0, sm.tensor([1]), sm.ones(1, dtype=sm.float64)),
     RuntimeError, "self.dtype to be equal to src.dtype"),
    (lambda: sm.zeros(3).scatter_reduce(0, sm.tensor([1]), sm.ones(1), "foo"), RuntimeError,
     "must be either sum, prod, mean, amax or amin, got foo"),
    (lambda: sm.zeros(3).scatter(0, sm.tensor([1]), 1.0, reduce="foo"), RuntimeError,
     "either add or multiply"),
    (lambda: sm.zeros(3).index_add(0, sm.tensor([5]), sm.ones(1)), IndexError,
     "index out of range in self"),
    (lambda: sm.zeros(3, 2).index_add(0, sm.tensor([[0]]), sm.ones(1, 2)), IndexError,
     "Index is supposed to be a vector"),
    (lambda: sm.zeros(3, 2).index_add(0, sm.tensor([0]), sm.ones(1, 3)), RuntimeError,
     "source tensor shape must match self tensor shape"),
    (lambda: sm.zeros(3, 2).index_copy(0, sm.tensor([0]), sm.ones(2, 2)), IndexError,
     r"Number of indices \(1\) should be equal to source.size\(dim\) \(2\)"),
    (lambda: sm.zeros(3).index_copy(0, sm.tensor([-1]), sm.ones(1)), IndexError,
     "index -1 is out of bounds for dimension 0 with size 3"),
    (lambda: sm.zeros(3).index_fill(0, sm.tensor([3]), 1), IndexError,
     "index 3 is out of bounds"),
    (lambda: sm.zeros(3).index_fill(0, sm.tensor([0]), sm.ones(2)), RuntimeError,
     "0-dimensional value tensor"),
    (lambda: sm.zeros(3).index_reduce(0, sm.tensor([0]), sm.ones(1), "sum"), RuntimeError,
     "one of prod, mean, amax or amin but got sum"),
    (lambda: sm.zeros(3).take(sm.tensor([5])), IndexError,
     "tried to access index 5 on a tensor of 3 elements"),
    (lambda: sm.zeros(3).put(sm.tensor([0, 1]), sm.ones(1)), IndexError,
     "same number of elements"),
    (lambda: sm.zeros(3).gather(0, sm.tensor([3])), RuntimeError, "index 3 is out of bounds"),
    (lambda: sm.zeros(3).index_select(0, sm.tensor([3])), IndexError, "out of range"),
    (lambda: sm.take_along_dim(sm.zeros(3, 2), sm.tensor([0]), 0), RuntimeError,
     "same number of dimensions"),
    (lambda: sm.zeros(3).masked_scatter(sm.ones(3, dtype=sm.bool), sm.ones(2)), RuntimeError,
     "Number of elements of source < number of ones in mask"),
    (lambda: sm.masked_select(sm.zeros(2), sm.tensor([1, 0])), RuntimeError,
     "expected BoolTensor for mask"),
    (lambda: sm.bincount(sm.tensor([-1, 2])), RuntimeError, "non-negative integral"),
    (lambda: sm.bincount(sm.tensor([1]), sm.ones(2)), RuntimeError, "same length as input"),
    (lambda: sm.bucketize(sm.tensor([1]), sm.tensor([[1]])), RuntimeError,
     r"must be 1 dimension, but got dim\(2\)"),
    (lambda: sm.searchsorted(sm.tensor([1]), sm.tensor([1]), side="left", right=True),
     RuntimeError, "can't be set to opposites"),
    (lambda: sm.histc(sm.tensor([1, 2]), 3), NotImplementedError, "not implemented for 'Long'"),
    (lambda: sm.histc(sm.tensor([2.0, 3.0]), 4, min=3, max=2), RuntimeError,
     "max must be larger than min"),
    (lambda: sm.histogram(sm.tensor([2.0, float("nan")]), 4), RuntimeError, "is not finite"),
    (lambda: sm.unravel_index(sm.tensor([1.0]), (2,)), TypeError, "integer dtype"),
]


@pytest.mark.parametrize("call,kind,message", ERRORS, ids=[m[:40] for _, _, m in ERRORS])
def test_error_messages(call: Callable[[], Any], kind: type, message: str) -> None:
    with warnings.catch_warnings(), pytest.raises(kind, match=message):
        warnings.simplefilter("ignore")
        call()


def test_scatter_add_is_fast_on_a_large_input() -> None:
    """A million duplicate-heavy adds: one vectorized ufunc pass, not a Python loop."""
    import time
    src = sm.ones(1_000_000)
    idx = sm.randint(0, 1000, (1_000_000,))
    start = time.perf_counter()
    out = sm.zeros(1000).scatter_add(0, idx, src)
    assert time.perf_counter() - start < 2.0
    assert float(out.sum()) == 1_000_000
