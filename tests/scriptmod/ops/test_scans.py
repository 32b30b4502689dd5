"""Scans and statistics (``scriptmod/_ops_scans.py``): every function against PyTorch where it
is installed (dtypes from bool to complex, negative dims, 0-d and empty inputs, NaN),
gradients by ``gradcheck`` (cumprod through zeros included), a traced model against eager at
two lengths, ``out=`` and in-place forms, and the error messages. The draws are in
``test_scans_random.py``."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.autograd import gradcheck

RNG = np.random.default_rng(0)
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool",
          "complex64", "complex128"]


def _data(shape: tuple[int, ...], dtype: str, nan: bool = False) -> np.ndarray:
    if dtype == "bool":
        return np.asarray(RNG.random(shape) < 0.5)
    if dtype.startswith(("int", "uint")):
        return np.asarray(RNG.integers(0 if dtype == "uint8" else -3, 4, shape)).astype(dtype)
    x = RNG.uniform(-2, 2, shape)
    if dtype.startswith("complex"):
        x = x + 1j * RNG.uniform(-2, 2, shape)
    x = np.asarray(x).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    if nan and x.size:
        x.reshape(-1)[::5] = np.nan
    return x


def _torch(a: np.ndarray) -> Any:
    import torch
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True))


def _np(t: Any) -> Any:
    """A result as NumPy (tensors) or a list of them (tuples)."""
    if isinstance(t, (tuple, list)):
        return [_np(x) for x in t]
    if isinstance(t, sm.Tensor):
        return t.numpy() if t.dtype is not sm.bfloat16 else t.float().numpy()
    t = t.detach()
    return (t.float() if str(t.dtype) == "torch.bfloat16" else t).resolve_conj().numpy()


def _same(got: Any, want: Any, tol: float) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, tol)
        return
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


_TOL = {"float16": 4e-3, "bfloat16": 3e-2}

# (id, shapes of the tensor arguments, fn(lib, *tensors)): lib is torch or scriptmod
CASES: list[tuple[str, list[tuple[int, ...]], Callable[..., Any]]] = [
    ("cumprod", [(3, 4)], lambda L, x: L.cumprod(x, 1)),
    ("cumprod-neg-dim-3d", [(2, 3, 4)], lambda L, x: L.cumprod(x, -2)),
    ("cumprod-0d", [()], lambda L, x: L.cumprod(x, 0)),
    ("cumprod-empty", [(0, 3)], lambda L, x: L.cumprod(x, 0)),
    ("cummax", [(3, 5)], lambda L, x: tuple(L.cummax(x, 1))),
    ("cummax-dim0", [(4, 3)], lambda L, x: tuple(L.cummax(x, 0))),
    ("cummin", [(3, 5)], lambda L, x: tuple(L.cummin(x, -1))),
    ("cummin-0d", [()], lambda L, x: tuple(L.cummin(x, 0))),
    ("logcumsumexp", [(3, 4)], lambda L, x: L.logcumsumexp(x, 1)),
    ("logcumsumexp-dim0", [(4, 2)], lambda L, x: L.logcumsumexp(x, 0)),
    ("diff", [(3, 5)], lambda L, x: L.diff(x)),
    ("diff-n2-dim0", [(4, 3)], lambda L, x: L.diff(x, 2, 0)),
    ("diff-prepend-append", [(3, 4), (3, 2), (3, 1)],
     lambda L, x, p, a: L.diff(x, 1, -1, prepend=p, append=a)),
    ("diff-n-too-big", [(2, 3)], lambda L, x: L.diff(x, 4)),
    ("trapezoid", [(3, 5)], lambda L, x: L.trapezoid(x)),
    ("trapezoid-x", [(3, 5), (5,)], lambda L, y, x: L.trapezoid(y, x)),
    ("trapezoid-dx-dim0", [(3, 5)], lambda L, y: L.trapezoid(y, dx=0.5, dim=0)),
    ("trapz-x-2d", [(3, 5), (3, 5)], lambda L, y, x: L.trapz(y, x)),
    ("trapezoid-empty", [(3, 0)], lambda L, y: L.trapezoid(y)),
    ("cumulative_trapezoid", [(3, 5)], lambda L, y: L.cumulative_trapezoid(y)),
    ("cumulative_trapezoid-x", [(2, 4), (4,)], lambda L, y, x: L.cumulative_trapezoid(y, x)),
    ("aminmax", [(3, 4)], lambda L, x: tuple(L.aminmax(x))),
    ("aminmax-dim", [(3, 4)], lambda L, x: tuple(L.aminmax(x, dim=-1, keepdim=True))),
    ("mode", [(3, 7)], lambda L, x: tuple(L.mode(x))),
    ("mode-dim0-keep", [(6, 2)], lambda L, x: tuple(L.mode(x, 0, True))),
    ("msort", [(4, 3)], lambda L, x: L.msort(x)),
    ("nansum", [(3, 4)], lambda L, x: L.nansum(x, 1)),
    ("median-all", [(3, 5)], lambda L, x: L.median(x)),
    ("median-dim", [(3, 5)], lambda L, x: tuple(L.median(x, 0, True))),
    ("nanmedian-all", [(3, 5)], lambda L, x: L.nanmedian(x)),
    ("nanmedian-dim", [(3, 5)], lambda L, x: tuple(L.nanmedian(x, -1, True))),
]

FLOAT_CASES: list[tuple[str, list[tuple[int, ...]], Callable[..., Any]]] = [
    ("var_mean", [(3, 4)], lambda L, x: L.var_mean(x, 1)),
    ("var_mean-all-keep", [(3, 4)], lambda L, x: L.var_mean(x, None, keepdim=True)),
    ("std_mean-correction", [(3, 4)], lambda L, x: L.std_mean(x, [0, 1], correction=0)),
    ("std_mean-unbiased", [(3, 4)], lambda L, x: L.std_mean(x, 0, False)),
    ("nanmean", [(3, 4)], lambda L, x: L.nanmean(x, 0, True)),
    ("cov", [(3, 6)], lambda L, x: L.cov(x)),
    ("cov-1d", [(6,)], lambda L, x: L.cov(x, correction=0)),
    ("corrcoef", [(3, 6)], lambda L, x: L.corrcoef(x)),
    ("renorm", [(3, 4)], lambda L, x: L.renorm(x, 2, 0, 1.0)),
    ("renorm-p1-dim1", [(2, 3, 2)], lambda L, x: L.renorm(x, 1, 1, 0.5)),
    ("dist", [(3, 4), (4,)], lambda L, x, y: L.dist(x, y)),
    ("dist-p3", [(3, 4), (3, 4)], lambda L, x, y: L.dist(x, y, 3)),
    ("dist-inf", [(3, 4), (3, 4)], lambda L, x, y: L.dist(x, y, float("inf"))),
    ("gradient", [(4, 5)], lambda L, x: L.gradient(x)),
    ("gradient-edge2", [(4, 5)], lambda L, x: L.gradient(x, spacing=2.0, dim=1, edge_order=2)),
    ("gradient-size2", [(2, 3)], lambda L, x: L.gradient(x, spacing=[1.5, 0.5])),
]


def _run(fn: Callable[..., Any], shapes: list[tuple[int, ...]], dtype: str,
         nan: bool = False) -> None:
    torch = pytest.importorskip("torch")
    arrays = [_data(s, dtype, nan) for s in shapes]
    try:
        want = fn(torch, *[_torch(a) for a in arrays])
    except Exception as e:   # torch refuses: so must we, with the same kind of error
        with pytest.raises(Exception) as info:
            fn(sm, *[sm.tensor(a) for a in arrays])
        assert isinstance(info.value, (type(e), RuntimeError, TypeError, NotImplementedError,
                                       IndexError, ValueError)), (e, info.value)
        return
    got = fn(sm, *[sm.tensor(a) for a in arrays])
    _same(_np(got), _np(want), _TOL.get(dtype, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,shapes,fn", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name: str, shapes: list, fn: Callable[..., Any], dtype: str) -> None:
    if name.startswith("mode") and dtype.startswith("float"):
        pytest.skip("ties among random floats are rare: see test_mode_ties")
    if dtype.startswith("complex") and name.split("-")[0] in ("cummax", "cummin", "mode") and \
            name.endswith(("0d", "empty")):
        pytest.skip("PyTorch refuses complex input only when it has elements to order")
    _run(fn, shapes, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "complex64", "int64"])
@pytest.mark.parametrize("name,shapes,fn", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_statistics_match_torch(name: str, shapes: list, fn: Callable[..., Any],
                                dtype: str) -> None:
    _run(fn, shapes, dtype)


NAN_CASES = [c for c in CASES if c[0].split("-")[0] in
             ("cumprod", "cummax", "cummin", "logcumsumexp", "nansum", "nanmedian", "median",
              "aminmax")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,shapes,fn", NAN_CASES, ids=[c[0] for c in NAN_CASES])
def test_nan_as_torch(name: str, shapes: list, fn: Callable[..., Any], dtype: str) -> None:
    _run(fn, shapes, dtype, nan=True)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("op", ["quantile", "nanquantile"])
def test_quantile_matches_torch(op: str, interpolation: str) -> None:
    torch = pytest.importorskip("torch")
    for dtype in ("float32", "float64"):
        x = _data((3, 6, 4), dtype, nan=op == "nanquantile")
        q = np.array([0.0, 0.3, 0.5, 1.0], dtype)
        for args in [(0.37, 1), (q, -1, True), (q, None), (np.array(0.25, dtype),)]:
            lib_args = lambda L: [_torch(a) if isinstance(a, np.ndarray) and L is torch  # noqa: E731
                                  else sm.tensor(a) if isinstance(a, np.ndarray) else a
                                  for a in args]
            want = getattr(torch, op)(_torch(x), *lib_args(torch), interpolation=interpolation)
            got = getattr(sm, op)(sm.tensor(x), *lib_args(sm), interpolation=interpolation)
            _same(_np(got), _np(want), 1e-6)


def test_quantile_nan_rows() -> None:
    x = sm.tensor([[1.0, float("nan"), 3.0], [1.0, 2.0, 4.0], [float("nan")] * 3])
    assert sm.quantile(x, 0.5, 1).isnan().tolist() == [True, False, True]
    assert sm.nanquantile(x, 0.5, 1).tolist()[:2] == [2.0, 2.0]
    assert sm.nanquantile(x, 0.5, 1).isnan().tolist()[2]


def test_mode_ties() -> None:
    """The smallest of the equally frequent values, at the last index holding it."""
    x = sm.tensor([[2.0, 1.0, 2.0, 1.0, 3.0], [5.0, 5.0, 4.0, 4.0, 4.0]])
    values, indices = sm.mode(x, 1)
    assert values.tolist() == [1.0, 4.0] and indices.tolist() == [3, 4]


def test_cummax_nan_and_ties() -> None:
    x = sm.tensor([1.0, 3.0, 3.0, float("nan"), 5.0, float("nan")])
    values, indices = sm.cummax(x, 0)
    assert indices.tolist() == [0, 1, 2, 3, 3, 5]
    assert values[:3].tolist() == [1.0, 3.0, 3.0] and values[3:].isnan().all()


def test_logcumsumexp_far_apart_and_infinite() -> None:
    x = sm.tensor([-1000.0, 0.0, float("-inf"), 1000.0])
    np.testing.assert_allclose(sm.logcumsumexp(x, 0).numpy(), [-1000.0, 0.0, 0.0, 1000.0])
    assert sm.logcumsumexp(sm.full((3,), float("-inf")), 0).tolist() == [float("-inf")] * 3


# ---- gradients ---------------------------------------------------------------------------
def _with_zeros() -> sm.Tensor:
    x = RNG.uniform(0.5, 1.5, (3, 5))
    x[0, 2] = 0.0
    x[1, 1] = x[1, 3] = 0.0
    x[2, 0] = 0.0
    return sm.tensor(x, requires_grad=True)


def _x(*shape: int) -> sm.Tensor:
    return sm.tensor(RNG.uniform(-2, 2, shape), requires_grad=True)


GRADS: list[tuple[str, Callable[[], tuple], Callable[..., Any]]] = [
    ("cumprod", lambda: (_x(3, 5),), lambda x: sm.cumprod(x, 1)),
    ("cumprod-zeros", lambda: (_with_zeros(),), lambda x: sm.cumprod(x, 1)),
    ("cumprod-zeros-dim0", lambda: (_with_zeros(),), lambda x: x.cumprod(0)),
    ("cummax", lambda: (_x(3, 5),), lambda x: sm.cummax(x, 1).values),
    ("cummin", lambda: (_x(4, 3),), lambda x: sm.cummin(x, 0).values),
    ("logcumsumexp", lambda: (_x(3, 5),), lambda x: sm.logcumsumexp(x, -1)),
    ("mode", lambda: (_x(3, 5),), lambda x: sm.mode(x, 1).values),
    ("diff", lambda: (_x(3, 5), _x(3, 1)), lambda x, p: sm.diff(x, 2, 1, prepend=p)),
    ("trapezoid", lambda: (_x(3, 5), _x(5)), lambda y, x: sm.trapezoid(y, x)),
    ("cumulative_trapezoid", lambda: (_x(3, 5),), lambda y: sm.cumulative_trapezoid(y, dx=0.3)),
    ("gradient", lambda: (_x(4, 5),), lambda x: sm.gradient(x, edge_order=2)),
    ("gradient-coords", lambda: (_x(4, 3),),
     lambda x: sm.gradient(x, spacing=[sm.tensor([0.0, 1.0, 2.5, 3.0]),
                                       sm.tensor([1.0, 1.5, 3.0])])),
    ("var_mean", lambda: (_x(3, 4),), lambda x: sm.var_mean(x, 1)),
    ("std_mean", lambda: (_x(3, 4),), lambda x: sm.std_mean(x, 0, correction=0)),
    ("nanmean", lambda: (_x(3, 4),), lambda x: sm.nanmean(x, 1)),
    ("nanmedian", lambda: (_x(3, 5),), lambda x: sm.nanmedian(x, 1).values),
    ("quantile", lambda: (_x(3, 6),), lambda x: sm.quantile(x, sm.tensor([0.2, 0.7],
                                                                         dtype=sm.float64), 1)),
    ("nanquantile-midpoint", lambda: (_x(7),),
     lambda x: sm.nanquantile(x, 0.4, interpolation="midpoint")),
    ("cov-weights", lambda: (_x(2, 5), sm.tensor(RNG.uniform(0.5, 1, 5), requires_grad=True)),
     lambda x, w: sm.cov(x, fweights=sm.tensor([1, 2, 1, 3, 1]), aweights=w)),
    ("corrcoef", lambda: (_x(3, 5),), lambda x: sm.corrcoef(x)),
    ("renorm", lambda: (_x(3, 4),), lambda x: sm.renorm(x, 2, 0, 1.0)),
    ("dist", lambda: (_x(3, 4), _x(3, 4)), lambda x, y: sm.dist(x, y, 3)),
]


@pytest.mark.parametrize("name,inputs,fn", GRADS, ids=[g[0] for g in GRADS])
def test_gradcheck(name: str, inputs: Callable[[], tuple], fn: Callable[..., Any]) -> None:
    assert gradcheck(fn, inputs())


def test_cumprod_double_backward_through_zeros() -> None:
    """The first gradient is made of differentiable ops: its own gradient is right too."""
    def first(x: sm.Tensor) -> sm.Tensor:
        (g,) = sm.autograd.grad(sm.cumprod(x, 1).sum(), x, create_graph=True)
        return g
    assert gradcheck(first, (_with_zeros(),))


def test_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    x = _with_zeros().detach().numpy()
    w = np.cos(np.arange(x.size)).reshape(x.shape)
    for fn in (lambda L, t: L.cumprod(t, 1), lambda L, t: L.logcumsumexp(t, 0),
               lambda L, t: L.cummax(t, 1)[0], lambda L, t: L.nanmedian(t),
               lambda L, t: L.median(t)):                # ties share the gradient
        t, s = torch.tensor(x, requires_grad=True), sm.tensor(x, requires_grad=True)
        (fn(torch, t) * torch.tensor(w if fn(torch, t).ndim else 1.0)).sum().backward()
        (fn(sm, s) * sm.tensor(w if fn(sm, s).ndim else 1.0)).sum().backward()
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


# ---- traced, in place, out= ----------------------------------------------------------------
class _Scans(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        running = sm.cumprod(x, 1) + sm.logcumsumexp(x, 1) + sm.cummax(x, 1).values
        stats = sm.quantile(x, 0.3, 1, keepdim=True) + sm.corrcoef(x).sum(1, keepdim=True)
        return running + stats + sm.diff(x, 1, 1, prepend=x[:, :1])


def test_trace_follows_the_length() -> None:
    model = _Scans()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = sm.jit.trace(model, (sm.randn(3, 5),))
    for n in (5, 9):
        x = sm.randn(3, n)
        np.testing.assert_allclose(traced(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_in_place_and_out() -> None:
    x = sm.tensor([[1, 2, 3], [4, 5, 6]], dtype=sm.int32)
    assert x.clone().cumsum_(1).tolist() == [[1, 3, 6], [4, 9, 15]]
    y = x.clone()
    assert y.cumprod_(1) is y and y.dtype is sm.int32 and y.tolist() == [[1, 2, 6], [4, 20, 120]]
    out = sm.empty(0)
    assert sm.cumprod(sm.tensor([2.0, 3.0]), 0, out=out) is out and out.tolist() == [2.0, 6.0]
    values, indices = sm.empty(2), sm.empty(2, dtype=sm.int64)
    res = sm.cummax(sm.tensor([1.0, 0.5]), 0, out=(values, indices))
    assert res[0] is values and indices.tolist() == [0, 0]
    q = sm.empty(())
    sm.quantile(sm.tensor([1.0, 2.0]), 0.5, out=q)
    assert q.item() == 1.5
    r = sm.tensor([[3.0, 4.0], [0.3, 0.4]])
    assert r.renorm_(2, 0, 1.0) is r
    np.testing.assert_allclose(r.numpy(), [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)


def test_return_types() -> None:
    x = sm.tensor([[1.0, 3.0], [2.0, 2.0]])
    assert sm.cummin(x, 1).indices.tolist() == [[0, 0], [0, 1]]
    assert sm.aminmax(x).max.item() == 3.0
    assert sm.mode(x, 1).values.tolist() == [1.0, 2.0]
    assert sm.nanmedian(x, 0).indices.tolist() == [0, 1]


@pytest.mark.parametrize("call,error,message", [
    (lambda: sm.quantile(sm.tensor([1.0]), 1.5), RuntimeError, "in the range [0, 1]"),
    (lambda: sm.quantile(sm.tensor([1, 2]), 0.5), RuntimeError, "float or double"),
    (lambda: sm.quantile(sm.tensor([1.0]), sm.tensor([0.5], dtype=sm.float64)), RuntimeError,
     "same dtype"),
    (lambda: sm.quantile(sm.tensor([1.0]), 0.5, interpolation="cubic"), RuntimeError,
     "interpolation must be one of"),
    (lambda: sm.quantile(sm.tensor([]), 0.5), RuntimeError, "non-empty"),
    (lambda: sm.cummax(sm.tensor([1j]), 0), Exception, "complex"),
    (lambda: sm.logcumsumexp(sm.tensor([1, 2]), 0), Exception, "Long"),
    (lambda: sm.diff(sm.tensor(1.0)), RuntimeError, "at least one-dimensional"),
    (lambda: sm.diff(sm.tensor([1.0]), -1), RuntimeError, "non-negative"),
    (lambda: sm.cov(sm.ones(2, 2, 2)), RuntimeError, "two or fewer dimensions"),
    (lambda: sm.cov(sm.ones(2, 3), fweights=sm.tensor([1.0, 1.0, 1.0])), RuntimeError,
     "integral dtype"),
    (lambda: sm.cov(sm.ones(2, 3), aweights=sm.tensor([1.0, -1.0, 1.0])), RuntimeError,
     "cannot be negative"),
    (lambda: sm.renorm(sm.ones(3), 2, 0, 1.0), RuntimeError, "at least 2 dimensions"),
    (lambda: sm.gradient(sm.ones(1, 3)), RuntimeError, "at least edge_order+1"),
    (lambda: sm.gradient(sm.ones(3), edge_order=3), RuntimeError, "edge_order=1 and"),
    (lambda: sm.trapezoid(sm.ones(3), sm.ones(4)), RuntimeError, "one `x` value"),
    (lambda: sm.aminmax(sm.tensor([])), RuntimeError, "empty"),
    (lambda: sm.mode(sm.ones(0, 2), 0), IndexError, "non-zero size"),
])
def test_errors(call: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("+", r"\+")):
        call()


def test_cov_warns_without_degrees_of_freedom() -> None:
    with pytest.warns(UserWarning, match="degrees of freedom"):
        c = sm.cov(sm.tensor([[1.0], [2.0]]))
    assert c.shape == (2, 2) and bool(c.isnan().all())     # 0 / 0, as in PyTorch


class _Statistics(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        var, mean = sm.var_mean(x, 1, keepdim=True)
        integral = sm.trapezoid(x, dim=1).unsqueeze(1)
        return sm.diff(x, 1, 1).sum(1, keepdim=True) + var + mean + integral + sm.nansum(x, 1, True)


def test_statistics_export_to_onnx_through_their_parts(tmp_path: Any) -> None:
    ort = pytest.importorskip("onnxruntime")
    model, x = _Statistics(), sm.randn(3, 5)
    path = str(tmp_path / "statistics.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm.onnx.export(model, path, (x,))
    session = ort.InferenceSession(path)
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-5)
