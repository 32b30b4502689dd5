"""sort, argsort, topk, randperm, isclose/allclose, cumsum and ``scriptmod.testing.assert_close``
against PyTorch (the op table in ``op_cases`` checks them against NumPy on every path)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.testing import assert_close

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool"]


def _pair(data: np.ndarray, dtype: str) -> tuple[sm.Tensor, Any]:
    """The same values as a scriptmod tensor and a torch tensor of ``dtype``."""
    t = torch.tensor(data).to(getattr(torch, dtype))
    return sm.tensor(t.float().numpy() if dtype == "bfloat16" else t.numpy()).to(
        getattr(sm, dtype)), t


def _same(ours: sm.Tensor, theirs: Any) -> None:
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(ours.float().numpy() if ours.dtype.category >= 2 else
                                  ours.numpy(), theirs.float().numpy() if theirs.is_floating_point()
                                  else theirs.numpy())


def _data(shape: tuple[int, ...], ties: bool, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(np.float64) if ties else rng.uniform(-3, 3, shape)
    if ties:
        x.reshape(-1)[::7] = np.nan
    return x


# ---- sort / argsort ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim,descending", [(-1, False), (0, True), (1, True), (-2, False)])
def test_sort_and_argsort_match_torch_stable_sort(dtype: str, dim: int, descending: bool) -> None:
    data = _data((5, 9), ties=True)
    if dtype not in ("float32", "float64", "float16", "bfloat16"):
        data = np.nan_to_num(data, nan=2.0) + (3 if dtype == "uint8" else 0)
    x, t = _pair(data, dtype)
    got = sm.sort(x, dim=dim, descending=descending)
    want = torch.sort(t, dim=dim, descending=descending, stable=True)
    _same(got.values, want.values)
    _same(got.indices, want.indices)
    _same(x.argsort(dim, descending), torch.argsort(t, dim=dim, descending=descending, stable=True))


def test_sort_puts_nan_last_ascending_and_first_descending() -> None:
    x = sm.tensor([2.0, float("nan"), -1.0, float("nan"), 5.0])
    assert x.sort().indices.tolist() == [2, 0, 4, 1, 3]
    assert x.sort(descending=True).indices.tolist() == [1, 3, 4, 0, 2]


def test_sort_results_are_named_tuples_of_values_and_int64_indices() -> None:
    x = sm.tensor([[3, 1, 2]])
    res = x.sort(stable=True)
    values, indices = res
    assert res[0] is values and res.values is values and res.indices is indices
    assert indices.dtype is sm.int64 and values.dtype is sm.int64
    assert "values=" in repr(res) and "indices=" in repr(res)
    top = sm.topk(x, 2)
    assert top.values.tolist() == [[3, 2]] and top[1].tolist() == [[0, 2]]


def test_sort_of_0d_and_empty_tensors() -> None:
    v, i = sm.tensor(4.0).sort()
    assert v.shape == () and v.item() == 4.0 and i.item() == 0
    v, i = sm.zeros(0, 3).sort(dim=0)
    assert tuple(v.shape) == (0, 3) and i.dtype is sm.int64


def test_sort_refuses_a_bad_dim_and_complex_input() -> None:
    with pytest.raises(IndexError, match="dim"):
        sm.ones(2, 3).sort(dim=2)
    with pytest.raises(TypeError, match="real"):
        sm.tensor([1 + 1j]).sort()


# ---- topk ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bool"])   # torch: no bool topk
@pytest.mark.parametrize("k,dim,largest", [(3, -1, True), (2, 0, False), (9, 1, False), (0, 1, True)])
def test_topk_matches_torch(dtype: str, k: int, dim: int, largest: bool) -> None:
    data = _data((4, 9), ties=False, seed=1)
    if dtype not in ("float32", "float64"):   # distinct values in every dtype: indices are unique
        data = np.argsort(data.reshape(-1)).reshape(4, 9).astype(np.float64)
    x, t = _pair(data, dtype)
    got = x.topk(k, dim=dim, largest=largest)
    want = torch.topk(t, k, dim=dim, largest=largest)
    _same(got.values, want.values)
    _same(got.indices, want.indices)
    _same(x.gather(dim, got.indices), want.values)


def test_topk_of_bools_is_the_stable_sort_cut_to_k() -> None:
    x = sm.tensor([[True, False, True, False, True]])
    assert x.topk(2).indices.tolist() == [[0, 2]]
    assert x.topk(3, largest=False).indices.tolist() == [[1, 3, 0]]


def test_topk_with_ties_and_nan_takes_torchs_values_and_the_first_indices() -> None:
    data = _data((3, 12), ties=True, seed=2)
    x, t = _pair(data, "float32")
    got, want = x.topk(5), torch.topk(t, 5)
    _same(got.values, want.values)
    stable = torch.sort(t, descending=True, stable=True).indices[:, :5]
    _same(got.indices, stable)


def test_topk_of_a_0d_tensor() -> None:
    v, i = sm.tensor(3.0).topk(1)
    assert v.shape == () and v.item() == 3.0 and i.item() == 0


@pytest.mark.parametrize("k", [5, -1])
def test_topk_refuses_k_out_of_range_naming_k(k: int) -> None:
    with pytest.raises(ValueError, match=rf"topk\(\): expected k in \[0, 4\].*got k={k}"):
        sm.ones(3, 4).topk(k)


def test_topk_refuses_a_float_k() -> None:
    with pytest.raises(TypeError, match="argument 'k' must be int"):
        sm.ones(4).topk(2.0)


# ---- gradients ------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["sort", "sort-desc", "topk", "topk-smallest"])
def test_gradients_scatter_back_to_the_indices_as_torch(how: str) -> None:
    data = _data((3, 6), ties=False, seed=3)
    up = np.random.default_rng(4).normal(size=(3, 6 if how.startswith("sort") else 2))
    x = sm.tensor(data, requires_grad=True)
    t = torch.tensor(data, requires_grad=True)
    run = {"sort": lambda a: a.sort(dim=1).values, "sort-desc": lambda a: a.sort(1, True).values,
           "topk": lambda a: a.topk(2).values, "topk-smallest": lambda a: a.topk(2, largest=False)[0]}
    (run[how](x) * sm.tensor(up)).sum().backward()
    (run[how](t) * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


# ---- tracing, scripting, fusion ---------------------------------------------------------------
class _Ranked(nn.Module):
    def forward(self, x: sm.Tensor):   # noqa: ANN201  (a 5-tuple)
        top = x.topk(2, dim=1)
        ordered = sm.sort(x, dim=-1, descending=True)
        near = (x * 2).isclose(x + x, rtol=1e-6) & (x.exp() > 0.5)
        return top.values * 2, top.indices, ordered.values.exp(), x.argsort(dim=0), near


def _check_against_eager(module: Any, x: sm.Tensor) -> None:
    for got, want in zip(module(x), _Ranked()(x)):
        assert_close(got, want)


def test_trace_records_sort_and_topk_and_runs_at_another_batch_size() -> None:
    traced = sm.jit.trace(_Ranked(), sm.randn(3, 5))
    kinds = {n.kind for n in traced.graph.walk()}
    assert {"sm::topk", "sm::sort", "sm::isclose"} <= kinds
    x = sm.randn(8, 5)
    _check_against_eager(traced, x)
    optimized = traced.graph_for(x)
    groups = [n for n in optimized.walk() if n.kind == "prim::FusionGroup"]
    fused = {m.kind for g in groups for m in g.attrs["subgraph"].walk()}
    assert "sm::isclose" in fused                     # elementwise: fused with its neighbours
    assert not {"sm::sort", "sm::topk"} & fused       # run by their kernels, outside groups
    assert {"sm::sort", "sm::topk"} <= {n.kind for n in optimized.walk()}


def test_script_compiles_sort_topk_argsort_and_their_fields() -> None:
    scripted = sm.jit.script(_Ranked())
    _check_against_eager(scripted, sm.randn(6, 5))


# ---- randperm -----------------------------------------------------------------------------
def test_randperm_is_a_permutation_reproducible_with_manual_seed() -> None:
    sm.manual_seed(7)
    a = sm.randperm(50)
    sm.manual_seed(7)
    b = sm.randperm(50)
    assert a.dtype is sm.int64 and sorted(a.tolist()) == list(range(50))
    assert a.tolist() == b.tolist()
    assert sm.randperm(5, dtype=sm.float32).dtype is sm.float32
    assert sm.randperm(0).shape == (0,)


def test_randperm_with_a_generator_is_reproducible_and_leaves_the_default_alone() -> None:
    g = sm.Generator().manual_seed(3)
    sm.manual_seed(0)
    first = sm.randperm(20, generator=g)
    after = sm.randn(3)
    sm.manual_seed(0)
    assert (sm.randn(3) == after).all()            # the default generator did not move
    again = sm.randperm(20, generator=sm.Generator().manual_seed(3))
    assert first.tolist() == again.tolist() and g.initial_seed() == 3
    assert sm.randperm(20, generator=g).tolist() != first.tolist()   # g advanced


@pytest.mark.parametrize("n,err,match", [(-1, ValueError, "'n' must be non-negative, got -1"),
                                         (2.5, TypeError, "'n' must be int, got float")])
def test_randperm_refuses_bad_n(n: Any, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        sm.randperm(n)


def test_traced_randperm_follows_the_batch_size() -> None:
    class Shuffle(nn.Module):
        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return x[sm.randperm(x.shape[0])]
    x = sm.arange(4.0).reshape(4, 1)
    traced = sm.jit.trace(Shuffle(), x, check_trace=False)
    assert "sm::randperm" in {n.kind for n in traced.graph.walk()}
    y = traced(sm.arange(9.0).reshape(9, 1))
    assert sorted(y.reshape(-1).tolist()) == list(range(9))


# ---- isclose / allclose -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int32", "bool"])
@pytest.mark.parametrize("kw", [{}, {"rtol": 0.1, "atol": 0.0}, {"rtol": 0.0, "atol": 0.6},
                                {"equal_nan": True}])
def test_isclose_and_allclose_match_torch(dtype: str, kw: dict) -> None:
    rng = np.random.default_rng(5)
    a = rng.uniform(0.5, 3, (4, 5))
    b = a * rng.choice([1.0, 1.05, 1.5], (4, 5))
    if dtype.startswith("float"):
        a[0, :3], b[0, 1:4] = np.nan, np.nan
    x, t = _pair(a, dtype)
    y, u = _pair(b if dtype != "bool" else a > 1.5, dtype)
    _same(sm.isclose(x, y, **kw), torch.isclose(t, u, **kw))
    _same(x.isclose(y[1], **kw), torch.isclose(t, u[1], **kw))     # broadcasting
    assert sm.allclose(x, y, **kw) is torch.allclose(t, u, **kw)
    assert sm.allclose(x, x.clone(), **kw) is torch.allclose(t, t.clone(), **kw)


def test_isclose_wants_a_tensor_of_the_same_dtype_as_torch() -> None:
    a = sm.tensor([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="same dtype.*float32.*float64"):
        sm.isclose(a, sm.tensor([1.0, 2.0, 3.1], dtype=sm.float64))     # torch: Float did not match Double
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        a.isclose(2.0)
    assert sm.isclose(a, sm.tensor([1.0, 2.0000001, 3.1])).tolist() == [True, True, False]
    assert sm.tensor([1, 2]).isclose(sm.tensor([1, 3]), rtol=0.5).tolist() == [True, True]
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.isclose(torch.ones(2), torch.ones(2, dtype=torch.float64))


def test_isclose_refuses_negative_tolerances() -> None:
    with pytest.raises(ValueError, match="rtol must be greater than or equal to zero, but got -1"):
        sm.isclose(sm.ones(2), sm.ones(2), rtol=-1)


# ---- cumsum --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_cumsum_dtypes_and_dims_match_torch(dtype: str, dim: int) -> None:
    data = np.random.default_rng(6).integers(0, 5, (3, 4)).astype(np.float64)
    x, t = _pair(data, dtype)
    _same(sm.cumsum(x, dim), torch.cumsum(t, dim))
    _same(x.cumsum(dim, dtype=sm.float64), t.cumsum(dim, dtype=torch.float64))


def test_cumsum_gradient_matches_torch() -> None:
    data = np.random.default_rng(7).normal(size=(3, 4))
    up = np.random.default_rng(8).normal(size=(3, 4))
    x, t = sm.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    (x.cumsum(-1) * sm.tensor(up)).sum().backward()
    (t.cumsum(-1) * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


# ---- scriptmod.testing.assert_close ----------------------------------------------------------
def _messages(actual: Any, expected: Any, convert: bool = True, **kw: Any) -> tuple[str, str]:
    """Our AssertionError message and torch's for the same values (tensors as torch's)."""
    with pytest.raises(AssertionError) as ours:
        assert_close(actual, expected, **kw)
    to_torch = (lambda v: torch.from_numpy(v.numpy().copy()) if isinstance(v, sm.Tensor) else
                [to_torch(i) for i in v] if isinstance(v, list) else
                {k: to_torch(i) for k, i in v.items()} if isinstance(v, dict) else v)
    with pytest.raises(AssertionError) as theirs:
        torch.testing.assert_close(to_torch(actual), to_torch(expected), **kw)
    return str(ours.value), str(theirs.value)


@pytest.mark.parametrize("actual,expected,kw", [
    (sm.tensor([1.0, 2.0, 3.0, 4.0]), sm.tensor([1.0, 2.5, 3.0, 4.0]), {}),
    (sm.tensor([[1.0, 2.0], [3.0, 4.0]]), sm.tensor([[1.0, 2.0], [3.0, 5.0]]), {}),
    (sm.tensor([1.0, 0.0]), sm.tensor([2.0, 0.0]), {}),
    (sm.tensor([1, 2, 3]), sm.tensor([1, 3, 3]), {}),
    (sm.tensor([True, False]), sm.tensor([True, True]), {}),
    (sm.tensor([float("nan")]), sm.tensor([float("nan")]), {}),
    (sm.tensor([1.0]), sm.tensor([1.0], dtype=sm.float64), {}),
    (sm.tensor([1.0]), sm.tensor([1.0, 2.0]), {}),
    (1.0, 1.1, {}), (1, 2, {}), (True, False, {}), (1, 1.0, {}),
    ([sm.tensor(1.0), sm.tensor(2.0)], [sm.tensor(1.0), sm.tensor(2.5)], {}),
    ([1, 2], [1, 2, 3], {}),
    ({"a": sm.tensor(1.0)}, {"b": sm.tensor(1.0)}, {}),
    ({"a": 1.0, "b": {"c": 1.0}}, {"a": 1.0, "b": {"c": 2.0}}, {}),
    (sm.tensor([1.0]), sm.tensor([2.0]), {"msg": "custom"}),
    (sm.tensor([1.0, 5.0]), sm.tensor([1.0, 4.0]), {"rtol": 0.1, "atol": 0.5}),
], ids=lambda v: type(v).__name__)
def test_assert_close_fails_with_torchs_message(actual: Any, expected: Any, kw: dict) -> None:
    ours, theirs = _messages(actual, expected, **kw)
    assert ours == theirs.replace("torch.", "scriptmod.")


@pytest.mark.parametrize("dtype,rtol,atol", [("float16", 1e-3, 1e-5), ("bfloat16", 1.6e-2, 1e-5),
                                             ("float32", 1.3e-6, 1e-5), ("float64", 1e-7, 1e-7)])
def test_assert_close_default_tolerances_per_dtype(dtype: str, rtol: float, atol: float) -> None:
    base = sm.tensor([1000.0], dtype=getattr(sm, dtype))
    inside = base * (1 + rtol / 2) if dtype != "bfloat16" else base   # bf16 has no step that small
    assert_close(inside, base)
    with pytest.raises(AssertionError, match=f"up to {rtol} allowed"):
        assert_close(base * (1 + 8 * rtol), base)


def test_assert_close_passes_equal_containers_nan_and_mixed_dtypes_when_asked() -> None:
    nan = sm.tensor([float("nan"), 1.0])
    assert_close({"a": [nan, 2], "b": (3.0,)}, {"a": [nan.clone(), 2], "b": [3.0]}, equal_nan=True)
    assert_close(sm.tensor([1.0]), sm.tensor([1.0], dtype=sm.float64), check_dtype=False)
    assert_close(np.arange(3), np.arange(3))
    assert_close(sm.arange(3), np.arange(3))   # unlike torch: a Tensor against an array
    assert_close(None, None)


def test_assert_close_argument_errors() -> None:
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol' must be either specified or "
                                         "omitted, but got no atol."):
        assert_close(sm.ones(1), sm.ones(1), rtol=0.1)
    with pytest.raises(TypeError, match="No comparison pair"):
        assert_close(sm.ones(()), 1.0)
    with pytest.raises(AssertionError, match="^prefix: Tensor-likes are not close!"):
        assert_close(sm.ones(1), sm.zeros(1), msg=lambda m: "prefix: " + m)
