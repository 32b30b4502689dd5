"""The Tensor surface: factories, interop, devices, function and method forms, reductions,
shape ops, indexing reads and writes, in-place forms, metadata, repr (checked against torch)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm


def arr(t: sm.Tensor) -> np.ndarray:
    return t.detach().numpy()


# ---- factories ------------------------------------------------------------------------
@pytest.mark.parametrize("data,dtype", [
    ([1, 2], sm.int64), ([1.0, 2], sm.float32), ([True], sm.bool), (3, sm.int64), (2.5, sm.float32),
    ([[1 + 1j]], sm.complex64), (np.zeros(2, np.int16), sm.int16), (np.float64(1), sm.float64),
])
def test_tensor_infers_dtype(data: Any, dtype: sm.dtype) -> None:
    t = sm.tensor(data)
    assert t.dtype is dtype and t.shape == np.asarray(data).shape


def test_tensor_copies_but_from_numpy_and_as_tensor_share() -> None:
    a = np.arange(6.0).reshape(2, 3)
    t, f, s = sm.tensor(a), sm.from_numpy(a), sm.as_tensor(a)
    a[0, 0] = 9
    assert t[0, 0].item() == 0 and f[0, 0].item() == 9 and s[0, 0].item() == 9
    assert sm.as_tensor(a, dtype=sm.float32).dtype is sm.float32
    assert sm.tensor(a.T).is_contiguous()
    assert sm.tensor([sm.tensor(1.0), sm.tensor(2.0)]).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("make,shape,dtype", [
    (lambda: sm.zeros(2, 3), (2, 3), sm.float32), (lambda: sm.ones((2, 3)), (2, 3), sm.float32),
    (lambda: sm.empty([4]), (4,), sm.float32), (lambda: sm.zeros(()), (), sm.float32),
    (lambda: sm.full((2,), 7), (2,), sm.int64), (lambda: sm.full((2,), 0.5), (2,), sm.float32),
    (lambda: sm.full([1], True), (1,), sm.bool), (lambda: sm.ones(2, dtype=sm.int8), (2,), sm.int8),
    (lambda: sm.arange(5), (5,), sm.int64), (lambda: sm.arange(0, 1, 0.25), (4,), sm.float32),
    (lambda: sm.linspace(0, 1, 5), (5,), sm.float32), (lambda: sm.eye(3), (3, 3), sm.float32),
    (lambda: sm.eye(2, 4, dtype=sm.int32), (2, 4), sm.int32), (lambda: sm.rand(2, 2), (2, 2), sm.float32),
    (lambda: sm.randn(3, dtype=sm.float64), (3,), sm.float64), (lambda: sm.randint(5, (2, 3)), (2, 3), sm.int64),
    (lambda: sm.randint(-2, 2, (4,), dtype=sm.int8), (4,), sm.int8),
])
def test_factories(make: Callable[[], sm.Tensor], shape: tuple, dtype: sm.dtype) -> None:
    t = make()
    assert t.shape == shape and t.dtype is dtype and not t.requires_grad


def test_factory_values() -> None:
    assert sm.arange(1, 8, 3).tolist() == [1, 4, 7]
    np.testing.assert_allclose(arr(sm.linspace(-1, 1, 5)), [-1, -0.5, 0, 0.5, 1])
    np.testing.assert_array_equal(arr(sm.eye(2, 3)), np.eye(2, 3))
    assert sm.ones(2, requires_grad=True).requires_grad
    r = sm.randint(3, 6, (200,))
    assert r.min().item() >= 3 and r.max().item() <= 5
    u = sm.rand(1000)
    assert 0 <= u.min().item() and u.max().item() < 1 and 0.4 < u.mean().item() < 0.6


@pytest.mark.parametrize("like,base", [(sm.zeros_like, 0), (sm.ones_like, 1), (sm.empty_like, None),
                                       (sm.rand_like, None), (sm.randn_like, None)])
def test_like_factories(like: Callable[..., sm.Tensor], base: Any) -> None:
    x = sm.ones(2, 3, dtype=sm.float64)
    t = like(x)
    assert t.shape == x.shape and t.dtype is sm.float64
    if base is not None:
        assert (t == base).all().item()
    assert like(x, dtype=sm.float16).dtype is sm.float16
    assert sm.full_like(x, 4).tolist() == [[4.0] * 3] * 2
    assert sm.randint_like(x, 3).dtype is sm.float64


def test_manual_seed_is_reproducible() -> None:
    draws = []
    for _ in range(2):
        sm.manual_seed(123)
        draws.append((sm.randn(4).tolist(), sm.rand(3).tolist(), sm.randint(10, (5,)).tolist()))
    assert draws[0] == draws[1]
    sm.manual_seed(124)
    assert sm.randn(4).tolist() != draws[0][0]
    assert sm.initial_seed() == 124


# ---- interop --------------------------------------------------------------------------
def test_numpy_array_tolist_item() -> None:
    t = sm.tensor([[1.5, 2.0]])
    assert t.numpy().dtype == np.float32 and np.shares_memory(t.numpy(), t._data)
    assert np.asarray(t).shape == (1, 2) and np.asarray(t, dtype=np.float64).dtype == np.float64
    assert t.tolist() == [[1.5, 2.0]] and sm.tensor(3).tolist() == 3
    assert t[0, 1].item() == 2.0 and isinstance(sm.tensor(3).item(), int)
    assert float(sm.tensor([2.5])) == 2.5 and int(sm.tensor(7)) == 7 and bool(sm.tensor([1]))
    with pytest.raises(RuntimeError, match="2 elements"):
        t.item()
    with pytest.raises(RuntimeError, match="requires grad"):
        sm.ones(1, requires_grad=True).numpy()


def test_dlpack_both_ways_with_numpy() -> None:
    t = sm.arange(6.0).reshape(2, 3)
    a = np.from_dlpack(t)
    a[0, 0] = 42
    assert t[0, 0].item() == 42            # no copy
    b = np.arange(4, dtype=np.int32)
    s = sm.from_dlpack(b)
    assert s.dtype is sm.int32 and np.shares_memory(s.numpy(), b)


def test_dlpack_with_torch() -> None:
    torch = pytest.importorskip("torch")
    t = sm.tensor([1.0, 2.0])
    tt = torch.from_dlpack(t)
    assert tt.tolist() == [1.0, 2.0] and tt.dtype == torch.float32
    back = sm.from_dlpack(torch.arange(3, dtype=torch.float64))
    assert back.dtype is sm.float64 and back.tolist() == [0.0, 1.0, 2.0]


# ---- devices and dtypes -----------------------------------------------------------------
@pytest.mark.parametrize("spec,type_,index", [("cpu", "cpu", None), ("cuda", "cuda", None),
                                              ("cuda:1", "cuda", 1), (0, "cuda", 0)])
def test_device_parsing(spec: Any, type_: str, index: Any) -> None:
    d = sm.device(spec)
    assert (d.type, d.index) == (type_, index) and sm.device(str(d)) == d


def test_device_properties_and_to() -> None:
    x = sm.ones(2)
    assert x.device == sm.device("cpu") and x.device == "cpu" and not x.is_cuda and x.is_cpu
    assert x.cpu() is x and x.to("cpu") is x
    y = x.to("cpu", sm.float64)
    assert y.dtype is sm.float64 and x.to(dtype=sm.int32).dtype is sm.int32
    assert x.to(sm.ones(1, dtype=sm.float16)).dtype is sm.float16
    assert x.to(x.dtype, copy=True) is not x
    assert x.double().dtype is sm.float64 and x.half().dtype is sm.float16
    assert x.long().dtype is sm.int64 and x.bool().dtype is sm.bool and x.int().dtype is sm.int32


def test_cuda_without_gpu_is_a_clear_error() -> None:
    from scriptmod.runtime.arrays import cuda_available
    if cuda_available():
        pytest.skip("a GPU is present")
    for call in (lambda: sm.ones(2).cuda(), lambda: sm.ones(2).to("cuda:0"),
                 lambda: sm.zeros(2, device="cuda")):
        with pytest.raises(RuntimeError, match="CuPy|CUDA"):
            call()


# ---- function and method forms ----------------------------------------------------------
X = np.array([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]], dtype=np.float32)
Y = np.array([[1.5, 0.5, -2.0], [0.5, 2.0, 1.0]], dtype=np.float32)
UNARY = {"exp": np.exp, "log": lambda a: np.log(np.abs(a)), "log1p": lambda a: np.log1p(np.abs(a)),
         "expm1": np.expm1, "sqrt": lambda a: np.sqrt(np.abs(a)), "rsqrt": lambda a: 1 / np.sqrt(np.abs(a)),
         "abs": np.abs, "neg": np.negative, "sign": np.sign, "sin": np.sin, "cos": np.cos,
         "tanh": np.tanh, "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0)}
POSITIVE = {"log", "log1p", "sqrt", "rsqrt"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_function_method_and_inplace_forms(name: str) -> None:
    x = sm.tensor(np.abs(X) if name in POSITIVE else X)
    want = UNARY[name](X)
    for got in (getattr(sm, name)(x), getattr(x, name)()):
        np.testing.assert_allclose(arr(got), want, rtol=1e-6)
    y = x.clone()
    assert getattr(y, name + "_")() is y
    np.testing.assert_allclose(arr(y), want, rtol=1e-6)


@pytest.mark.parametrize("name,fn,dunder", [
    ("add", np.add, "__add__"), ("sub", np.subtract, "__sub__"), ("mul", np.multiply, "__mul__"),
    ("div", np.divide, "__truediv__"), ("pow", lambda a, b: np.abs(a) ** b, "__pow__"),
    ("maximum", np.maximum, None), ("minimum", np.minimum, None), ("eq", np.equal, "__eq__"),
    ("ne", np.not_equal, "__ne__"), ("lt", np.less, "__lt__"), ("le", np.less_equal, "__le__"),
    ("gt", np.greater, "__gt__"), ("ge", np.greater_equal, "__ge__"), ("remainder", np.remainder, "__mod__"),
    ("floor_divide", np.floor_divide, "__floordiv__"), ("atan2", np.arctan2, None),
])
def test_binary_forms(name: str, fn: Callable, dunder: str | None) -> None:
    a = np.abs(X) if name == "pow" else X
    x, y = sm.tensor(a), sm.tensor(Y)
    want = fn(X, Y)
    forms = [getattr(sm, name)(x, y), getattr(x, name)(y)] + ([getattr(x, dunder)(y)] if dunder else [])
    for got in forms:
        np.testing.assert_allclose(arr(got).astype(np.float64), want, rtol=1e-5)


def test_reflected_operators_and_scalars() -> None:
    x = sm.tensor([1.0, 2.0])
    assert (1 - x).tolist() == [0.0, -1.0] and (2 / x).tolist() == [2.0, 1.0]
    assert (2 ** x).tolist() == [2.0, 4.0] and (3 * x).tolist() == [3.0, 6.0]
    assert (-x).tolist() == [-1.0, -2.0] and abs(-x).tolist() == [1.0, 2.0]
    assert (~sm.tensor([True, False])).tolist() == [False, True]
    assert (sm.tensor([6]) & 3).tolist() == [2] and (sm.tensor([4]) | 1).tolist() == [5]
    assert x.add(x, alpha=2).tolist() == [3.0, 6.0] and x.sub(1, alpha=2).tolist() == [-1.0, 0.0]
    assert sm.tensor([-7.0]).div(2, rounding_mode="trunc").tolist() == [-3.0]
    assert sm.tensor([-7.0]).div(2, rounding_mode="floor").tolist() == [-4.0]


def test_logical_where_clamp() -> None:
    a, b = sm.tensor([True, False, True]), sm.tensor([True, True, False])
    assert sm.logical_and(a, b).tolist() == [True, False, False]
    assert sm.logical_or(a, b).tolist() == [True, True, True]
    assert sm.logical_xor(a, b).tolist() == [False, True, True]
    assert sm.logical_not(a).tolist() == [False, True, False]
    x = sm.tensor([-2.0, 0.5, 3.0])
    assert sm.where(x > 0, x, 0.0).tolist() == [0.0, 0.5, 3.0]
    assert x.clamp(-1, 1).tolist() == [-1.0, 0.5, 1.0] and sm.clamp(x, min=0).tolist() == [0.0, 0.5, 3.0]
    assert x.clamp(max=sm.tensor([0.0, 0.0, 2.0])).tolist() == [-2.0, 0.0, 2.0]
    assert sm.tensor([1, 2, 3]).clamp(min=1.5).tolist() == [1.5, 2.0, 3.0]
    assert x.erf().shape == (3,) and sm.erfc(x).shape == (3,)
    assert sm.maximum(x, sm.tensor(1.0)).tolist() == [1.0, 1.0, 3.0]


# ---- reductions -------------------------------------------------------------------------
R = np.array([[1.0, 5.0, 2.0], [4.0, 3.0, 6.0]], dtype=np.float64)


@pytest.mark.parametrize("name,np_fn", [("sum", np.sum), ("mean", np.mean), ("prod", np.prod),
                                        ("amax", np.max), ("amin", np.min),
                                        ("var", lambda a, **k: np.var(a, ddof=1, **k)),
                                        ("std", lambda a, **k: np.std(a, ddof=1, **k)),
                                        ("logsumexp", None)])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False), ((0, 1), False)])
def test_reductions_with_dim_and_keepdim(name: str, np_fn: Any, dim: Any, keepdim: bool) -> None:
    import scipy.special as sps
    np_fn = np_fn or sps.logsumexp
    want = np_fn(R, axis=dim, keepdims=keepdim)
    for got in (getattr(sm.tensor(R), name)(dim, keepdim=keepdim),
                getattr(sm, name)(sm.tensor(R), dim=dim, keepdim=keepdim)):
        np.testing.assert_allclose(arr(got), want, rtol=1e-12)


def test_max_min_with_indices_and_arg_forms() -> None:
    x = sm.tensor(R)
    v, i = x.max(dim=1)
    assert v.tolist() == [5.0, 6.0] and i.tolist() == [1, 2] and x.max(1).indices.tolist() == [1, 2]
    v, i = sm.min(x, dim=0, keepdim=True)
    assert v.tolist() == [[1.0, 3.0, 2.0]] and i.tolist() == [[0, 1, 0]]
    assert x.max().item() == 6.0 and x.min().item() == 1.0
    assert x.argmax().item() == 5 and x.argmin(dim=1).tolist() == [0, 1]
    assert sm.argmax(x, dim=0, keepdim=True).tolist() == [[1, 0, 1]]


def test_softmax_family_and_cumsum() -> None:
    x = sm.tensor(R)
    e = np.exp(R - R.max(1, keepdims=True))
    np.testing.assert_allclose(arr(x.softmax(1)), e / e.sum(1, keepdims=True))
    np.testing.assert_allclose(arr(sm.log_softmax(x, dim=1)), np.log(e / e.sum(1, keepdims=True)))
    np.testing.assert_allclose(arr(sm.cumsum(x, 1)), np.cumsum(R, 1))
    assert sm.tensor([1, 2]).softmax(0, dtype=sm.float64).dtype is sm.float64
    assert sm.tensor([[1, 2]]).cumsum(dim=1).dtype is sm.int64


# ---- matmul and shape ops --------------------------------------------------------------
def test_matmul_forms() -> None:
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    ta, tb = sm.tensor(a), sm.tensor(b)
    for got in (ta @ tb, sm.matmul(ta, tb), ta.mm(tb), sm.mm(ta, tb)):
        np.testing.assert_allclose(arr(got), a @ b)
    ba, bb = np.ones((2, 2, 3)), np.ones((2, 3, 4))
    np.testing.assert_allclose(arr(sm.bmm(sm.tensor(ba), sm.tensor(bb))), ba @ bb)
    assert (sm.ones(3) @ sm.ones(3)).item() == 3.0


S = np.arange(24.0).reshape(2, 3, 4)


@pytest.mark.parametrize("call,want", [
    (lambda t: t.reshape(4, 6), S.reshape(4, 6)), (lambda t: t.view(-1, 4), S.reshape(-1, 4)),
    (lambda t: t.permute(2, 0, 1), S.transpose(2, 0, 1)), (lambda t: t.transpose(0, 2), S.swapaxes(0, 2)),
    (lambda t: t[0].t(), S[0].T), (lambda t: t.unsqueeze(1), S[:, None]), (lambda t: t[:1].squeeze(0), S[0]),
    (lambda t: t.flatten(), S.reshape(-1)), (lambda t: t.flatten(1), S.reshape(2, 12)),
    (lambda t: t[:, :1].expand(2, 3, 4), np.broadcast_to(S[:, :1], (2, 3, 4))),
    (lambda t: t.transpose(1, 2).contiguous(), S.swapaxes(1, 2)),
    (lambda t: sm.cat([t, t], dim=1), np.concatenate([S, S], 1)),
    (lambda t: sm.stack([t, t], dim=-1), np.stack([S, S], -1)),
    (lambda t: t.narrow(2, 1, 2), S[:, :, 1:3]), (lambda t: t.split(1, dim=1)[2], S[:, 2:3]),
    (lambda t: t.split([1, 3], dim=2)[1], S[:, :, 1:]), (lambda t: t.chunk(2, dim=2)[1], S[:, :, 2:]),
    (lambda t: t.gather(2, sm.tensor([[[0], [3], [1]]] * 2)), np.take_along_axis(S, np.array([[[0], [3], [1]]] * 2), 2)),
    (lambda t: sm.reshape(t, (3, 8)), S.reshape(3, 8)), (lambda t: sm.transpose(t, 1, 0), S.swapaxes(0, 1)),
    (lambda t: sm.squeeze(t[None]), S), (lambda t: sm.unsqueeze(t, -1), S[..., None]),
])
def test_shape_ops(call: Callable[[sm.Tensor], sm.Tensor], want: np.ndarray) -> None:
    np.testing.assert_array_equal(arr(call(sm.tensor(S))), want)


def test_views_share_storage() -> None:
    t = sm.zeros(2, 3)
    for v in (t.view(6), t.reshape(3, 2), t.t(), t[0], t.unsqueeze(0), t.narrow(1, 0, 1)):
        assert np.shares_memory(v.numpy(), t.numpy())
    t.view(6)[0] = 1.0
    assert t[0, 0].item() == 1.0


# ---- indexing -------------------------------------------------------------------------------
@pytest.mark.parametrize("idx", [
    1, -1, (0, 2), slice(1, None), (slice(None), 1), (Ellipsis, 0), (None, 0), (slice(None, None, 2),),
    [1, 0], (slice(None), [2, 0, 2]), ([0, 1], [1, 2]),
])
def test_index_reads(idx: Any) -> None:
    t = sm.tensor(S)
    tidx = tuple(sm.tensor(i) if isinstance(i, list) else i for i in idx) if isinstance(idx, tuple) \
        else (sm.tensor(idx) if isinstance(idx, list) else idx)
    np.testing.assert_array_equal(arr(t[tidx]), S[idx])


def test_bool_mask_and_tensor_scalar_index() -> None:
    t = sm.tensor(S)
    np.testing.assert_array_equal(arr(t[t > 10]), S[S > 10])
    np.testing.assert_array_equal(arr(t[sm.tensor(1)]), S[1])
    np.testing.assert_array_equal(arr(t[:, sm.tensor([True, False, True])]), S[:, [True, False, True]])


@pytest.mark.parametrize("idx,value", [
    ((0, 1), 7.0), ((slice(None), 0), sm.tensor([1.0, 2.0, 3.0, 4.0])), (Ellipsis, 0.0),
    ("mask", -1.0), ("ints", sm.tensor(5.0)),
])
def test_index_writes(idx: Any, value: Any) -> None:
    t, a = sm.tensor(S), S.copy()
    if idx == "mask":
        t[t > 10] = value
        a[a > 10] = value
    elif idx == "ints":
        t[sm.tensor([0, 1]), sm.tensor([2, 0])] = value
        a[[0, 1], [2, 0]] = value.item()
    else:
        t[idx] = value
        a[idx] = value.numpy() if isinstance(value, sm.Tensor) else value
    np.testing.assert_array_equal(arr(t), a)


# ---- in-place ---------------------------------------------------------------------------------
@pytest.mark.parametrize("call,want", [
    (lambda t: t.add_(1), [2.0, -1.0, 4.0]), (lambda t: t.add_(t, alpha=2), [3.0, -6.0, 9.0]),
    (lambda t: t.sub_(1), [0.0, -3.0, 2.0]), (lambda t: t.mul_(2), [2.0, -4.0, 6.0]),
    (lambda t: t.div_(2), [0.5, -1.0, 1.5]), (lambda t: t.zero_(), [0.0, 0.0, 0.0]),
    (lambda t: t.fill_(4), [4.0, 4.0, 4.0]), (lambda t: t.fill_(sm.tensor(2.0)), [2.0, 2.0, 2.0]),
    (lambda t: t.copy_(sm.tensor([7, 8, 9])), [7.0, 8.0, 9.0]), (lambda t: t.copy_(sm.tensor(5.0)), [5.0] * 3),
    (lambda t: t.clamp_(-1, 1), [1.0, -1.0, 1.0]), (lambda t: t.clamp_(min=0), [1.0, 0.0, 3.0]),
    (lambda t: t.abs_(), [1.0, 2.0, 3.0]), (lambda t: t.neg_(), [-1.0, 2.0, -3.0]),
    (lambda t: t.pow_(2), [1.0, 4.0, 9.0]), (lambda t: t.__iadd__(1), [2.0, -1.0, 4.0]),
    (lambda t: t.__imul__(sm.tensor(2.0)), [2.0, -4.0, 6.0]), (lambda t: t.relu_(), [1.0, 0.0, 3.0]),
    (lambda t: t.masked_fill_(t < 0, 0.0), [1.0, 0.0, 3.0]),
])
def test_inplace_forms(call: Callable[[sm.Tensor], sm.Tensor], want: list) -> None:
    t = sm.tensor([1.0, -2.0, 3.0])
    version = t._vc[0]
    out = call(t)
    assert out is t and t.tolist() == want and t._vc[0] > version


def test_inplace_keeps_dtype_and_refuses_unsafe_casts() -> None:
    t = sm.tensor([1, 2])
    t.add_(sm.tensor([1, 1], dtype=sm.int8))
    assert t.dtype is sm.int64 and t.tolist() == [2, 3]
    with pytest.raises(RuntimeError, match="can't be cast"):
        t.mul_(1.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        sm.zeros(3).add_(sm.zeros(2, 3))
    h = sm.zeros(2, dtype=sm.float16)
    h.add_(sm.ones(2, dtype=sm.float64))
    assert h.dtype is sm.float16


# ---- metadata and repr -------------------------------------------------------------------------
def test_metadata() -> None:
    t = sm.zeros(2, 3, 4, dtype=sm.float64)
    assert t.size() == (2, 3, 4) and t.size(1) == 3 and t.size(-1) == 4 and t.shape == (2, 3, 4)
    assert t.dim() == t.ndim == 3 and t.numel() == 24 and sm.numel(t) == 24 and t.dtype is sm.float64
    assert repr(t.shape) == "scriptmod.Size([2, 3, 4])" and t.element_size() == 8
    assert t.stride() == (12, 4, 1) and t.transpose(0, 2).stride() == (1, 4, 12)
    assert t.is_floating_point() and not t.is_complex() and len(t) == 2
    assert sm.is_tensor(t) and not sm.is_tensor(3)


REPR_CASES = [np.array(3.5, np.float32), np.array([[1, 2], [3, 40]]), np.array([1e-5, 1.0, 1e5], np.float32),
              np.array([True, False]), np.array([1 + 2j, -1.5j], np.complex64), np.array([np.nan, 1.0, np.inf], np.float32),
              np.arange(30.0, dtype=np.float32), np.arange(8).reshape(2, 2, 2), np.array([1e9, 1.0], np.float32),
              np.zeros((0, 3), np.float32), np.array([1.5], np.float16), np.array([-7, 123456789], np.int32),
              np.arange(2000.0, dtype=np.float32).reshape(2, 1000), np.arange(1200).reshape(10, 10, 12),
              np.linspace(-3, 3, 48).reshape(4, 12), np.array([0.1, -2.5], np.float64), np.zeros(0, np.int64)]


@pytest.mark.parametrize("k", range(len(REPR_CASES)))
def test_repr_matches_torch(k: int) -> None:
    torch = pytest.importorskip("torch")
    a = REPR_CASES[k]
    assert repr(sm.tensor(a)) == repr(torch.tensor(a)).replace("torch.", "scriptmod.")


def test_repr_autograd_suffixes() -> None:
    assert repr(sm.ones(2, requires_grad=True)) == "tensor([1., 1.], requires_grad=True)"
    assert repr(sm.ones(2, requires_grad=True) * 2) == "tensor([2., 2.], grad_fn=<MulBackward0>)"
    assert repr(sm.tensor([1.5], dtype=sm.bfloat16)) == "tensor([1.5000], dtype=scriptmod.bfloat16)"


def test_overhead_benchmark_reports_both_ops() -> None:
    from scriptmod.bench.overhead import format_table, measure_overhead
    res = measure_overhead(number=10, rounds=1)
    assert set(res) == {"add", "relu"} and all(r["scriptmod"] > 0 for r in res.values())
    assert "overhead" in format_table(res)


@pytest.mark.parametrize("shape", [(0, 8), (3, 0, 2), (0,), (0, 1, 5)])
def test_a_zero_size_tensor_has_torchs_strides_and_takes_in_place_ops(shape):
    """Issue 44, item 5: ``zeros(0, 8).stride()`` was ``(0, 0)`` (NumPy's strides of an empty
    array; torch: ``(8, 1)``), and an in-place op on it raised the "refers to a single memory
    location" error of expanded tensors. (A view of a zero-size tensor, ``.t()``, still
    reports contiguous strides of its own shape.)"""
    x = sm.zeros(*shape)
    step, want = 1, []
    for n in reversed(shape):
        want.append(step)
        step *= max(n, 1)
    assert x.stride() == tuple(reversed(want))
    x.add_(1)
    x.mul_(2).fill_(3.0)
    assert tuple(x.shape) == shape
