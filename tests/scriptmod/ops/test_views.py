"""Views, copies and layout (``scriptmod/_ops_views.py``): every function against PyTorch where
it is installed (dtypes from bool to complex, negative dims, 0-d and empty inputs), view
semantics (a write through the view shows in the base), gradients by ``gradcheck``, traced
models against eager at two batch sizes, ``out=`` and in-place forms, and the error messages."""
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
DTYPES = ["float32", "float64", "bfloat16", "int64", "bool", "complex128"]


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.asarray(RNG.random(shape) < 0.5)
    if dtype.startswith(("int", "uint")):
        return RNG.integers(0 if dtype == "uint8" else -5, 6, shape).astype(dtype)
    x = RNG.uniform(-2, 2, shape)
    if dtype.startswith("complex"):
        x = x + 1j * RNG.uniform(-2, 2, shape)
    return np.asarray(x).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def _sm(a: np.ndarray) -> sm.Tensor:
    return sm.tensor(a)


def _torch(a: np.ndarray) -> Any:
    import torch
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy(order="C"))


def _np(t: Any) -> Any:
    """A result as NumPy (tensors), a list of them (tuples) or itself (sizes, numbers)."""
    if isinstance(t, (tuple, list)):
        return [_np(x) for x in t]
    if isinstance(t, sm.Tensor):
        return t.numpy() if t.dtype is not sm.bfloat16 else t.float().numpy()
    if type(t).__module__.startswith("torch") and hasattr(t, "detach"):
        t = t.detach()
        return (t.float() if str(t.dtype) == "torch.bfloat16" else t).resolve_conj().numpy()
    return list(t) if not isinstance(t, (int, float)) else t


def _same(got: Any, want: Any) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    if isinstance(want, np.ndarray):
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)
        return
    assert got == want


# (id, shapes of the tensor arguments, fn(lib, *tensors)): lib is torch or scriptmod
SHAPE_CASES: list[tuple[str, list[tuple[int, ...]], Callable[..., Any]]] = [
    ("roll-flat", [(3, 4)], lambda L, x: L.roll(x, 5)),
    ("roll-dims", [(3, 4)], lambda L, x: L.roll(x, (1, -3), (0, -1))),
    ("roll-empty", [(0, 3)], lambda L, x: L.roll(x, 1, 0)),
    ("roll-0d", [()], lambda L, x: L.roll(x, 2)),
    ("rot90-1", [(2, 3, 4)], lambda L, x: L.rot90(x, 1, (0, -1))),
    ("rot90-2", [(2, 3)], lambda L, x: L.rot90(x, 2)),
    ("rot90--1", [(2, 3)], lambda L, x: L.rot90(x, -1, [1, 0])),
    ("rot90-4", [(2, 3)], lambda L, x: L.rot90(x, 4)),
    ("fliplr", [(2, 3, 2)], lambda L, x: L.fliplr(x)),
    ("flipud", [(3,)], lambda L, x: L.flipud(x)),
    ("diag-vec", [(3,)], lambda L, x: L.diag(x, -1)),
    ("diag-mat", [(3, 4)], lambda L, x: L.diag(x, 2)),
    ("diagflat", [(2, 2)], lambda L, x: L.diagflat(x, 1)),
    ("diagflat-0d", [()], lambda L, x: L.diagflat(x)),
    ("diag_embed", [(2, 3)], lambda L, x: L.diag_embed(x, -1, 0, 2)),
    ("diagonal", [(2, 3, 4)], lambda L, x: L.diagonal(x, 1, -1, 0)),
    ("diagonal-method", [(3, 3)], lambda L, x: x.diagonal(-2)),
    ("diagonal-empty", [(2, 2)], lambda L, x: L.diagonal(x, 3)),
    ("diagonal_copy", [(3, 4)], lambda L, x: L.diagonal_copy(x, -1)),
    ("diagonal_scatter", [(3, 4), (3,)], lambda L, x, s: L.diagonal_scatter(x, s, 1)),
    ("diagonal_scatter-dims", [(2, 3, 4), (3, 2)],
     lambda L, x, s: L.diagonal_scatter(x, s, 0, 2, 0)),
    ("select_scatter", [(3, 4), (3,)], lambda L, x, s: L.select_scatter(x, s, 1, -1)),
    ("slice_scatter", [(5, 4), (2, 4)], lambda L, x, s: L.slice_scatter(x, s, 0, 1, 5, 2)),
    ("slice_scatter-default", [(2, 3), (2, 3)], lambda L, x, s: L.slice_scatter(x, s)),
    ("as_strided", [(3, 4)], lambda L, x: L.as_strided(x, (2, 3), (1, 2), 1)),
    ("as_strided-view", [(3, 4)], lambda L, x: L.as_strided(x[1:], (2, 2), (2, 1))),
    ("as_strided_copy", [(6,)], lambda L, x: L.as_strided_copy(x, (3, 2), (0, 1))),
    ("as_strided_scatter", [(3, 3), (2, 2)],
     lambda L, x, s: L.as_strided_scatter(x, s, (2, 2), (1, 2), 1)),
    ("unfold", [(3, 7)], lambda L, x: x.unfold(1, 3, 2)),
    ("unfold-neg", [(5, 2)], lambda L, x: x.unfold(-2, 2, 3)),
    ("unfold-0d", [()], lambda L, x: x.unfold(0, 1, 1)),
    ("unfold_copy", [(4,)], lambda L, x: L.unfold_copy(x, 0, 2, 1)),
    ("atleast_1d", [()], lambda L, x: L.atleast_1d(x)),
    ("atleast_2d", [(3,)], lambda L, x: L.atleast_2d(x)),
    ("atleast_3d", [(2, 3)], lambda L, x: L.atleast_3d(x)),
    ("atleast_3d-many", [(), (2,), (2, 3, 4, 5)], lambda L, *t: L.atleast_3d(*t)),
    ("atleast_2d-list", [(), (2,)], lambda L, a, b: L.atleast_2d([a, b])),
    ("block_diag", [(2, 2), (3,), ()], lambda L, *t: L.block_diag(*t)),
    ("broadcast_to", [(3, 1)], lambda L, x: L.broadcast_to(x, (2, -1, 4))),
    ("broadcast_tensors", [(3, 1), (4,), ()], lambda L, *t: L.broadcast_tensors(*t)),
    ("cartesian_prod", [(2,), (3,)], lambda L, a, b: L.cartesian_prod(a, b)),
    ("cartesian_prod-one", [(3,)], lambda L, a: L.cartesian_prod(a)),
    ("combinations", [(4,)], lambda L, x: L.combinations(x)),
    ("combinations-3-rep", [(3,)], lambda L, x: L.combinations(x, 3, True)),
    ("combinations-too-long", [(2,)], lambda L, x: L.combinations(x, 3)),
    ("column_stack", [(3,), (3, 2), (3, 1)], lambda L, *t: L.column_stack(t)),
    ("dstack", [(2,), (1, 2)], lambda L, *t: L.dstack(t)),
    ("hstack", [(2, 1), (2, 3)], lambda L, *t: L.hstack(t)),
    ("hstack-1d", [(2,), ()], lambda L, *t: L.hstack(t)),
    ("vstack", [(3,), (2, 3)], lambda L, *t: L.vstack(t)),
    ("row_stack", [(3,), (3,)], lambda L, *t: L.row_stack(t)),
    ("tensor_split-int", [(7, 2)], lambda L, x: L.tensor_split(x, 3)),
    ("tensor_split-idx", [(2, 7)], lambda L, x: L.tensor_split(x, [1, 5, 9], -1)),
    ("tensor_split-back", [(6,)], lambda L, x: x.tensor_split((4, 2))),
    ("hsplit", [(2, 6)], lambda L, x: L.hsplit(x, 3)),
    ("hsplit-1d", [(6,)], lambda L, x: L.hsplit(x, [1, 4])),
    ("vsplit", [(4, 2)], lambda L, x: L.vsplit(x, 2)),
    ("dsplit", [(1, 2, 4)], lambda L, x: L.dsplit(x, [3])),
    ("split_with_sizes", [(5, 2)], lambda L, x: x.split_with_sizes([2, 3])),
    ("split_with_sizes_copy", [(2, 5)], lambda L, x: L.split_with_sizes_copy(x, [1, 4], -1)),
    ("unsafe_split", [(5,)], lambda L, x: L.unsafe_split(x, 2)),
    ("unsafe_chunk", [(2, 5)], lambda L, x: L.unsafe_chunk(x, 3, 1)),
    ("ravel", [(2, 3)], lambda L, x: L.ravel(x.t())),
    ("repeat_interleave-int", [(2, 3)], lambda L, x: L.repeat_interleave(x, 2)),
    ("repeat_interleave-dim", [(2, 3)], lambda L, x: x.repeat_interleave(3, dim=-1)),
    ("repeat_interleave-0d", [()], lambda L, x: L.repeat_interleave(x, 2)),
    ("meshgrid-ij", [(2,), (3,), ()], lambda L, *t: L.meshgrid(*t, indexing="ij")),
    ("meshgrid-xy", [(2,), (3,)], lambda L, *t: L.meshgrid(list(t), indexing="xy")),
    ("narrow_copy", [(4, 3)], lambda L, x: x.narrow_copy(-1, 1, 2)),
    ("expand_copy", [(3, 1)], lambda L, x: L.expand_copy(x, (2, 3, 4))),
    ("permute_copy", [(2, 3, 4)], lambda L, x: L.permute_copy(x, (2, 0, 1))),
    ("squeeze_copy", [(1, 3, 1)], lambda L, x: L.squeeze_copy(x, -1)),
    ("t_copy", [(2, 3)], lambda L, x: L.t_copy(x)),
    ("transpose_copy", [(2, 3, 4)], lambda L, x: L.transpose_copy(x, 0, -1)),
    ("unbind_copy", [(2, 3)], lambda L, x: L.unbind_copy(x, 1)),
    ("unsqueeze_copy", [(2, 3)], lambda L, x: L.unsqueeze_copy(x, -1)),
    ("view_copy", [(2, 6)], lambda L, x: L.view_copy(x, (3, -1))),
    ("alias_copy", [(2,)], lambda L, x: L.alias_copy(x)),
    ("select_copy", [(2, 3)], lambda L, x: L.select_copy(x, -1, 1)),
    ("slice_copy", [(5, 2)], lambda L, x: L.slice_copy(x, 0, 1, None, 2)),
    ("moveaxis", [(2, 3, 4)], lambda L, x: L.moveaxis(x, (0, 1), (-1, 0))),
    ("swapaxes", [(2, 3, 4)], lambda L, x: L.swapdims(L.swapaxes(x, 0, -1), 1, 2)),
    ("constant_pad_nd", [(2, 3)], lambda L, x: L.constant_pad_nd(x, (1, -1, 0, 2))),
    ("adjoint", [(2, 3, 4)], lambda L, x: L.adjoint(x)),
    ("mH", [(2, 3)], lambda L, x: x.mH),
    ("H", [(2, 3)], lambda L, x: x.H),
    ("conj", [(2, 3)], lambda L, x: L.conj(x)),
    ("conj_physical", [(2, 3)], lambda L, x: L.conj_physical(x)),
    ("resolve_conj", [(2,)], lambda L, x: L.resolve_neg(L.resolve_conj(x))),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,shapes,fn", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_matches_torch(name: str, shapes: list, fn: Callable[..., Any], dtype: str) -> None:
    torch = pytest.importorskip("torch")
    if dtype == "bool" and name.startswith("constant_pad"):
        pytest.skip("torch pads bool only with a bool value")
    arrays = [_data(s, dtype) for s in shapes]
    want = _np(fn(torch, *[_torch(a) for a in arrays]))
    _same(_np(fn(sm, *[_sm(a) for a in arrays])), want)


@pytest.mark.parametrize("name,shapes,fn", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_non_contiguous_inputs_match_torch(name: str, shapes: list, fn: Callable[..., Any]) -> None:
    """Every input a strided view (every other element of its last dim)."""
    torch = pytest.importorskip("torch")
    wide = [_data(tuple(s[:-1]) + (2 * s[-1],), "float64") if s else _data(s, "float64")
            for s in shapes]
    every_other = [(slice(None),) * (a.ndim - 1) + (slice(None, None, 2),) if a.ndim else ()
                   for a in wide]
    want = _np(fn(torch, *[_torch(a)[i] for a, i in zip(wide, every_other)]))
    _same(_np(fn(sm, *[_sm(a)[i] for a, i in zip(wide, every_other)])), want)


def test_sizes_and_factories_match_torch() -> None:
    torch = pytest.importorskip("torch")
    assert tuple(sm.broadcast_shapes((2, 1), (3,), 1)) == tuple(
        torch.broadcast_shapes((2, 1), (3,), 1))
    for row, col, off in [(3, 3, 0), (4, 2, -1), (2, 5, 2), (0, 3, 0)]:
        for name in ("tril_indices", "triu_indices"):
            _same(_np(getattr(sm, name)(row, col, off)), _np(getattr(torch, name)(row, col, off)))
    _same(_np(sm.logspace(-1, 2, 5)), _np(torch.logspace(-1, 2, 5)))
    _same(_np(sm.logspace(0, 3, 4, base=2, dtype=sm.int64)),
          _np(torch.logspace(0, 3, 4, base=2, dtype=torch.int64)))
    _same(_np(sm.scalar_tensor(3)), _np(torch.scalar_tensor(3)))
    assert sm.empty_strided((2, 3), (1, 2)).stride() == torch.empty_strided((2, 3), (1, 2)).stride()
    assert sm.empty_permuted((2, 3, 4), (2, 0, 1)).stride() == \
        torch.empty_permuted((2, 3, 4), (2, 0, 1)).stride()
    x = sm.zeros(2, dtype=sm.float64).new_empty_strided((2, 2), (2, 1))
    assert (x.dtype, x.shape) == (sm.float64, (2, 2))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "complex64", "complex128"])
def test_complex_functions_match_torch(dtype: str) -> None:
    torch = pytest.importorskip("torch")
    x = _data((2, 3), dtype)
    x.flat[:3] = np.array([0, -1, np.nan if dtype[0] in "fc" else 2]).astype(x.dtype)
    _same(_np(sm.angle(_sm(x))), _np(torch.angle(_torch(x))))
    if dtype.startswith("complex"):
        for name in ("real", "imag", "view_as_real"):
            _same(_np(getattr(sm, name)(_sm(x))), _np(getattr(torch, name)(_torch(x))))
        _same(_np(_sm(x).real), _np(_torch(x).real))
        _same(_np(_sm(x).conj_physical_()), _np(_torch(x).conj_physical_()))
    if dtype.startswith("float"):
        r, i = _data((3, 1), dtype), _data((4,), dtype)
        _same(_np(sm.complex(_sm(r), _sm(i))), _np(torch.complex(_torch(r), _torch(i))))
        m = np.abs(r)
        _same(_np(sm.polar(_sm(m), _sm(r))), _np(torch.polar(_torch(m), _torch(r))))
        pairs = _data((2, 3, 2), dtype)
        _same(_np(sm.view_as_complex(_sm(pairs))), _np(torch.view_as_complex(_torch(pairs))))
        _same(_np(_sm(x).cdouble()), _np(_torch(x).cdouble()))


def test_complex_with_infinite_parts_keeps_them() -> None:
    inf = float("inf")
    out = sm.complex(sm.tensor([inf, 1.0]), sm.tensor([inf, -inf])).numpy()
    np.testing.assert_array_equal(out.real, [inf, 1.0])
    np.testing.assert_array_equal(out.imag, [inf, -inf])


# ---- views share storage with their base ---------------------------------------------------
def test_writes_through_views_show_in_the_base() -> None:
    x = sm.zeros(3, 4)
    x.diagonal().fill_(1)
    x.diagonal(1)[0] = 5
    assert x.numpy()[[0, 1, 2, 0], [0, 1, 2, 1]].tolist() == [1, 1, 1, 5]
    y = sm.arange(8.0)
    y.unfold(0, 3, 2)[1, 2] = -1            # window 1 starts at 2: element 4
    assert y[4].item() == -1
    z = sm.arange(6.0).reshape(2, 3)
    sm.as_strided(z, (2,), (4,), 1)[1] = 9  # storage element 5
    assert z[1, 2].item() == 9
    parts = sm.tensor_split(z, 3, dim=1)
    parts[2][0, 0] = 7
    assert z[0, 2].item() == 7
    z.ravel()[0] = 3
    assert z[0, 0].item() == 3


def test_complex_parts_are_views() -> None:
    c = sm.tensor([1 + 2j, 3 - 1j])
    c.real.mul_(10)
    c.imag[1] = 5
    assert c.tolist() == [10 + 2j, 30 + 5j]
    sm.view_as_real(c)[0, 1] = -1
    assert c[0].item() == 10 - 1j
    c.imag = sm.tensor([0.0, 0.0])
    assert c.tolist() == [10 + 0j, 30 + 0j]
    pairs = sm.zeros(2, 2)
    sm.view_as_complex(pairs)[1] = 1 + 1j
    assert pairs.tolist() == [[0, 0], [1, 1]]


def test_as_strided_reads_the_storage_of_a_view() -> None:
    base = sm.arange(10.0)
    view = base[4:]
    assert view.storage_offset() == 4
    assert sm.as_strided(view, (2,), (1,)).tolist() == [4.0, 5.0]       # from its own offset
    assert sm.as_strided(view, (2,), (3,), 0).tolist() == [0.0, 3.0]    # from the storage's start


def test_resize_keeps_the_storage() -> None:
    x = sm.arange(6.0)
    x.resize_(2, 2)
    assert x.tolist() == [[0, 1], [2, 3]]
    x.resize_(2, 3)                          # the old elements are still in the storage
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    x.resize_as_(sm.zeros(7))
    assert x.shape == (7,) and x[:6].tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(RuntimeError, match="require grad"):
        sm.zeros(2, requires_grad=True).resize_(3)


# ---- gradients -----------------------------------------------------------------------------
def _f64(*shape: int) -> sm.Tensor:
    return sm.tensor(RNG.uniform(-1, 1, shape), dtype=sm.float64, requires_grad=True)


GRADS: list[tuple[str, list[tuple[int, ...]], Callable[..., Any]]] = [
    ("roll", [(3, 4)], lambda x: sm.roll(x, (1, -1), (0, 1))),
    ("rot90", [(2, 3)], lambda x: sm.rot90(x, 3)),
    ("diag", [(3,)], lambda x: sm.diag(x, 1)),
    ("diag_embed", [(2, 3)], lambda x: sm.diag_embed(x, -1)),
    ("diagonal", [(3, 4)], lambda x: x.diagonal(1) * 2),
    ("diagonal_scatter", [(3, 4), (3,)], lambda x, s: sm.diagonal_scatter(x, s, -1, 1, 0)),
    ("select_scatter", [(3, 4), (4,)], lambda x, s: sm.select_scatter(x, s, 0, 1)),
    ("slice_scatter", [(4, 3), (2, 3)], lambda x, s: sm.slice_scatter(x, s, 0, 0, 4, 2)),
    ("as_strided", [(3, 4)], lambda x: sm.as_strided(x, (2, 3), (1, 2), 1)),
    ("as_strided-of-view", [(3, 4)], lambda x: sm.as_strided(x[1:], (2, 2), (1, 1))),
    ("as_strided_scatter", [(3, 3), (2, 2)],
     lambda x, s: sm.as_strided_scatter(x, s, (2, 2), (1, 2))),
    ("unfold", [(2, 7)], lambda x: x.unfold(-1, 3, 2)),
    ("unfold-gaps", [(7,)], lambda x: x.unfold(0, 2, 3)),
    ("repeat_interleave", [(2, 3)],
     lambda x: sm.repeat_interleave(x, sm.tensor([2, 0, 1]), dim=1, output_size=3)),
    ("block_diag", [(2, 2), (1, 3)], lambda a, b: sm.block_diag(a, b)),
    ("cartesian_prod", [(2,), (3,)], lambda a, b: sm.cartesian_prod(a, b)),
    ("combinations", [(4,)], lambda x: sm.combinations(x, 2, True)),
    ("hstack", [(2, 1), (2, 2)], lambda a, b: sm.hstack([a, b])),
    ("sum_to_size", [(2, 3, 4)], lambda x: x.sum_to_size(3, 1)),
    ("complex-polar", [(3,), (3,)], lambda a, b: sm.view_as_real(sm.polar(a, b))),
    ("real-imag", [(3, 2)], lambda x: sm.view_as_complex(x).imag * 3 + sm.view_as_complex(x).real),
    ("angle", [(4,)], lambda x: sm.angle(sm.complex(x, x.flip(0)))),
    ("conj", [(3, 2)], lambda x: sm.view_as_real(sm.view_as_complex(x).conj())),
]


@pytest.mark.parametrize("name,shapes,fn", GRADS, ids=[c[0] for c in GRADS])
def test_gradcheck(name: str, shapes: list, fn: Callable[..., Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        assert gradcheck(fn, tuple(_f64(*s) for s in shapes))


@pytest.mark.parametrize("name", ["diagonal", "unfold", "as_strided", "roll"])
def test_double_backward(name: str) -> None:
    fn = dict((c[0], c[2]) for c in GRADS)[name]

    def grad_of_square(x: sm.Tensor) -> sm.Tensor:
        y = (fn(x) ** 2).sum()
        return sm.autograd.grad(y, x, create_graph=True)[0]
    assert gradcheck(grad_of_square, (_f64(3, 4),))


def test_gradients_match_torch() -> None:
    torch = pytest.importorskip("torch")
    x = RNG.uniform(-1, 1, (3, 5))
    a, b = sm.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    for lib, t in ((sm, a), (torch, b)):
        y = lib.as_strided(t, (3, 3), (2, 1), 2).sum() + (t.unfold(1, 2, 1) ** 2).sum() + \
            lib.roll(t, 2).diagonal(1).sum() * 3
        y.backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy())


# ---- tracing -------------------------------------------------------------------------------
class Mixer(nn.Module):
    def forward(self, x: sm.Tensor) -> Any:
        rolled = sm.roll(x, 1, 0)
        diag = x.flip(-1).diagonal(0, -2, -1)
        stacked = sm.hstack([rolled.reshape(rolled.shape[0], -1), diag])
        windows = x.unfold(-1, 2, 1).sum(-1)
        return stacked * 2, windows, sm.rot90(x, 1, (1, 2)), sm.diag_embed(diag)


def test_traced_module_follows_the_batch_size() -> None:
    model = Mixer()
    traced = sm.jit.trace(model, sm.randn(2, 3, 3))
    for batch in (2, 5):
        x = sm.randn(batch, 3, 3)
        for got, want in zip(traced(x), model(x)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    x = sm.randn(4, 3, 3, requires_grad=True)
    ref = x.detach().clone().requires_grad_(True)
    sum(t.sum() for t in traced(x)).backward()
    sum(t.sum() for t in model(ref)).backward()
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-6)


def test_traced_splits_and_diagonals_follow_every_size() -> None:
    def parts(x: sm.Tensor) -> tuple:
        return (sm.tensor_split(x, 2, 1)[1], sm.hsplit(x, [1, 3])[1], x.diagonal(-1, 1, 0),
                x.unfold(1, 2, 1), sm.roll(x, 2, 1), sm.diag_embed(x[0]), sm.rot90(x))
    traced = sm.jit.trace(parts, sm.randn(3, 4))
    for shape in [(3, 4), (5, 7), (2, 9)]:
        x = sm.randn(*shape)
        for got, want in zip(traced(x), parts(x)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_compiled_strided_views_of_intermediates_equal_eager() -> None:
    """``as_strided`` of values the compiled program keeps in its arena (one reading before
    its view's first element, into its base's storage), and windows of windows."""
    def strided(x: sm.Tensor) -> tuple:
        y = x * 2 + 1
        return (sm.as_strided(y, (3, 2), (1, 3), 2) * 3,
                (x - 1).unfold(1, 2, 2).diagonal(0, 0, 1) * 2,
                sm.as_strided((x + 1)[1:], (2,), (2,), 1) * 1)
    traced = sm.jit.trace(strided, sm.randn(4, 4))
    x = sm.randn(4, 4)
    for got, want in zip(traced(x), strided(x)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_repeat_interleave_by_a_tensor_traces_only_with_output_size() -> None:
    counts = sm.tensor([1, 2])
    traced = sm.jit.trace(lambda x: sm.repeat_interleave(x, counts, 0, output_size=3),
                          sm.randn(2, 3))
    x = sm.randn(2, 3)
    np.testing.assert_array_equal(traced(x).numpy(), x.numpy()[[0, 1, 1]])
    with pytest.raises(Exception, match="output_size"):
        sm.jit.trace(lambda x: sm.repeat_interleave(x, counts, 0), sm.randn(2, 3))


def test_shape_rules_follow_symbolic_sizes() -> None:
    from scriptmod.ir import dtypes as D
    from scriptmod.ir import schema as S
    from scriptmod.ir import symdims as SD
    from scriptmod.ir.types import TensorType

    def infer(op: str, shape: tuple, **attrs: Any) -> tuple:
        schema = S.get(op)
        out = schema.infer([TensorType(D.float32, tuple(SD.parse(d) if isinstance(d, str)
                                                         else d for d in shape))],
                           schema.bind_attrs(attrs), [None])[0]
        return tuple(str(d) for d in out.shape)
    assert infer("diagonal", ("B", "T", 5), offset=1, dim1=1, dim2=2) == (
        "B", str(SD.maximum(SD.minimum(SD.parse("T"), 4), 0)))
    assert infer("unfold", ("B", "T"), dimension=1, size=3, step=2) == (
        "B", str(SD.add(SD.floordiv(SD.sub(SD.parse("T"), 3), 2), 1)), "3")
    assert infer("as_strided", ("B", 4), size=[2, 3], stride=[1, 2]) == ("2", "3")
    assert infer("real", ("B", "T")) == ("B", "T")


# ---- out= and in-place ---------------------------------------------------------------------
def test_out_and_inplace_forms() -> None:
    x = sm.arange(6.0).reshape(2, 3)
    out = sm.empty(2, 3)
    assert sm.slice_scatter(x, x[:, :1] * 0, 1, 1, 2, out=out) is out
    assert out.tolist() == [[0, 0, 2], [3, 0, 5]]
    out = sm.empty(0)
    sm.diag(sm.tensor([1.0, 2.0]), out=out)
    assert out.tolist() == [[1, 0], [0, 2]]
    pieces = (sm.empty(1, 3), sm.empty(1, 3))
    sm.unbind_copy(x, 0, out=[p.view(3) for p in pieces])
    assert pieces[1].tolist() == [[3, 4, 5]]
    c = sm.tensor([1 + 1j])
    assert c.conj_physical_() is c and c.item() == 1 - 1j


def test_layout_changed_in_place_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    for L in (torch, sm):
        x = L.arange(6.0).reshape(2, 3, 1)
        assert x.squeeze_(-1) is x
        x.t_().unsqueeze_(0).transpose_(0, 2).swapdims_(0, 1).swapaxes_(1, 2)
        m, c = L.zeros(5, 3), L.zeros(3, 3, 3)
        m.fill_diagonal_(2, wrap=True)
        c.fill_diagonal_(-1)
        if L is torch:
            want = [(tuple(t.shape), t.stride(), t.numpy()) for t in (x, m, c)]
    for (shape, stride, values), t in zip(want, (x, m, c)):
        assert (tuple(t.shape), t.stride()) == (shape, stride)
        np.testing.assert_array_equal(t.numpy(), values)


def test_layout_in_place_keeps_the_gradient() -> None:
    x = sm.ones(2, 1, requires_grad=True)
    y = x * 2
    y.squeeze_(1)
    (y * sm.tensor([1.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [[2.0], [6.0]]
    a = sm.ones(3, 3, requires_grad=True)
    b = a * 1
    b.fill_diagonal_(0)
    b.sum().backward()
    assert a.grad.tolist() == [[0, 1, 1], [1, 0, 1], [1, 1, 0]]


# ---- errors --------------------------------------------------------------------------------
ERRORS = [
    (lambda: sm.diag(sm.zeros(2, 2, 2)), RuntimeError, "1D or 2D"),
    (lambda: sm.zeros(3, 3).diagonal(0, 1, -1), Exception, "cannot be identical"),
    (lambda: sm.rot90(sm.zeros(2, 2), 1, (0, 0)), RuntimeError, "different"),
    (lambda: sm.rot90(sm.zeros(2), 1), RuntimeError, "total dims >= 2"),
    (lambda: sm.fliplr(sm.zeros(2)), RuntimeError, ">= 2-d"),
    (lambda: sm.roll(sm.zeros(2, 2), (1, 1), 0), RuntimeError, "must align"),
    (lambda: sm.tensor_split(sm.tensor(1.0), 2), RuntimeError, "at least a 1-dimensional"),
    (lambda: sm.hsplit(sm.zeros(2, 5), 2), RuntimeError, "not divisible"),
    (lambda: sm.imag(sm.zeros(2)), RuntimeError, "non-complex"),
    (lambda: sm.view_as_real(sm.zeros(2)), RuntimeError, "complex tensors"),
    (lambda: sm.view_as_complex(sm.zeros(2, 3)), Exception, "last dimension of size 2"),
    (lambda: sm.view_as_complex(sm.zeros(2, 2).t()), Exception, "stride 1"),
    (lambda: sm.as_strided(sm.zeros(4), (3,), (2,)), Exception, "out of bounds"),
    (lambda: sm.zeros(3).unfold(0, 4, 1), Exception, "maximum size"),
    (lambda: sm.select_scatter(sm.zeros(2, 3), sm.zeros(2), 0, 0), RuntimeError, "size equal"),
    (lambda: sm.repeat_interleave(sm.zeros(2), sm.tensor([1, -1])), RuntimeError, "negative"),
    (lambda: sm.broadcast_shapes((2,), (3,)), RuntimeError, "Shape mismatch"),
    (lambda: sm.meshgrid(sm.zeros(2), indexing="yx"), RuntimeError, "indexing"),
    (lambda: sm.complex(sm.zeros(2), sm.zeros(2, dtype=sm.float64)), Exception, "Float"),
    (lambda: sm.zeros(2, 2, 2).H, RuntimeError, "matrices"),
]


@pytest.mark.parametrize("k", range(len(ERRORS)))
def test_errors_name_what_was_wrong(k: int) -> None:
    fn, kind, words = ERRORS[k]
    with pytest.raises(kind, match=words):
        fn()


# ---- ONNX ----------------------------------------------------------------------------------
class Strided(nn.Module):
    def forward(self, x: sm.Tensor) -> Any:
        return (x.diagonal(1, -1, 1), x.unfold(-1, 2, 2), sm.as_strided(x, (2, 3), (1, 2), 1),
                sm.roll(x, 1, -1), sm.hstack([x, x]))


def test_onnx_export_matches_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    import io
    x = sm.randn(2, 3, 4)
    buf = io.BytesIO()
    traced = sm.jit.trace(Strided(), x)
    sm.onnx.export(traced, buf, (x,), input_names=["x"], dynamic_axes={"x": {0: "b"}})
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    for batch in (2, 3):
        xb = sm.randn(batch, 3, 4)
        got = sess.run(None, {"x": xb.numpy()})
        for g, w in zip(got, traced(xb)):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-6)
