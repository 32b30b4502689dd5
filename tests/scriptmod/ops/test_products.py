"""Tensor products (``scriptmod/_ops_products.py``): einsum against NumPy's, every product
against PyTorch where it is installed (dtypes, broadcasting, beta/alpha, ``out=``, in-place),
gradients by ``gradcheck``, traced einsum against eager at two batch sizes, and the error
messages of bad equations and shapes."""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import _einsum as E
from scriptmod import _ops_products as P
from scriptmod import nn
from scriptmod.autograd import gradcheck

RNG = np.random.default_rng(0)

# (equation, operand shapes): every lowering path of einsum
EQUATIONS = [
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),     # one batched matmul
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),                            # implicit output
    ("ba,aB", [(2, 3), (3, 2)]),                            # implicit: upper case first
    ("ii->i", [(3, 3)]),                                    # diagonal
    ("ii", [(3, 3)]),                                       # trace
    ("iji->j", [(3, 2, 3)]),
    ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
    ("ij->", [(2, 3)]),
    ("...ij->...ji", [(2, 3, 4)]),
    ("...i->i", [(2, 3)]),                                  # ellipsis dims summed
    ("...,...->...", [(2, 3), (4, 1, 3)]),                  # ellipses broadcast
    ("bi,oij,bj->bo", [(4, 3), (5, 3, 2), (4, 2)]),         # bilinear: three operands
    ("bi,bj->bij", [(4, 3), (4, 2)]),                       # batched outer product
    ("i,i->", [(3,), (3,)]),
    ("bi,bi->b", [(4, 3), (4, 3)]),                         # a dot per batch entry
    ("ij,ij->ij", [(2, 3), (1, 3)]),                        # size 1 broadcasts
    ("ij,ij->", [(2, 3), (2, 1)]),                          # ... also when contracted
    ("bij,bjk->bik", [(1, 2, 3), (4, 3, 5)]),
    ("i,->i", [(3,), ()]),
    ("ij,jk,kl,lm,mn->in", [(2, 3), (3, 4), (4, 5), (5, 6), (6, 2)]),   # greedy order
    ("a,b,c,d,e->", [(2,), (3,), (4,), (5,), (6,)]),
    ("i,j->", [(0,), (3,)]),                                # empty
    (" b i , b j -> b i j ", [(4, 3), (4, 2)]),             # spaces are ignored
]


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("int"):
        return RNG.integers(-3, 4, shape).astype(dtype)
    x = RNG.uniform(-2, 2, shape)
    if dtype.startswith("complex"):
        x = x + 1j * RNG.uniform(-2, 2, shape)
    return x.astype(dtype)


@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "complex128"])
def test_einsum_matches_numpy(equation: str, shapes: list, dtype: str) -> None:
    arrays = [_data(s, dtype) for s in shapes]
    ours = sm.einsum(equation, *[sm.tensor(a) for a in arrays])
    try:
        want = np.einsum(equation, *arrays)
    except ValueError:                        # NumPy never sums an ellipsis ('...i->i')
        torch = pytest.importorskip("torch")
        want = torch.einsum(equation, *[torch.tensor(a) for a in arrays]).numpy()
    assert str(ours.dtype).split(".")[-1] == want.dtype.name
    np.testing.assert_allclose(ours.numpy(), want, rtol=1e-5, atol=1e-5)


def test_einsum_call_forms_and_half() -> None:
    a, b = _data((2, 3), "float64"), _data((3, 4), "float64")
    want = a @ b
    ta, tb = sm.tensor(a), sm.tensor(b)
    np.testing.assert_allclose(sm.einsum(ta, [0, 1], tb, [1, 2], [0, 2]).numpy(), want)
    np.testing.assert_allclose(sm.einsum(ta, [Ellipsis, 1], tb, [1, 2]).numpy(), want)
    np.testing.assert_allclose(sm.einsum("ij,jk->ik", [ta, tb]).numpy(), want)
    half = sm.einsum("ij,jk->ik", ta.half(), tb.half())
    assert half.dtype is sm.float16
    np.testing.assert_allclose(half.float().numpy(), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("args,error,message", [
    (("ij,jk", (2, 3)), RuntimeError, "fewer operands were provided"),
    (("ij,jk->ik", (2, 3), (3, 4), (4, 5)), RuntimeError, "more operands were provided"),
    (("ij,jk->ik", (2, 3), (2, 3)), RuntimeError,
     ("subscript j has size 2 for operand 1 which does not broadcast with previously seen "
      "size 3")),
    (("i1,jk->ik", (2, 3), (3, 4)), RuntimeError, "invalid subscript given at index 1"),
    (("ij->k", (2, 3)), RuntimeError, "output subscript k does not appear in the equation"),
    (("ij->ii", (2, 3)), RuntimeError, "output subscript i appears more than once"),
    (("ijk->", (2, 3)), RuntimeError,
     ("the number of subscripts in the equation (3) does not match the number of dimensions "
      "(2) for operand 0 and no ellipsis was given")),
    (("i...j...->", (2, 3)), RuntimeError, "for which an ellipsis was already found"),
    (("ij.->", (2, 3)), RuntimeError, "found '.' for operand 0 that is not part of any"),
    (("ii->i", (3, 2)), RuntimeError,
     "subscript i is repeated for operand 0 but the sizes don't match, 3 != 2"),
    (("ij",), ValueError, "must specify the equation string and at least one operand"),
    (("i j , j1 k -> i k", (2, 3), (3, 4)), RuntimeError, "invalid subscript given at index 7"),
    (("ij,jk- >ik", (2, 3), (3, 4)), RuntimeError, "invalid subscript given at index 5"),
])
def test_einsum_errors_name_the_problem(args: tuple, error: type, message: str) -> None:
    operands = [sm.ones(*s) for s in args[1:]]
    with pytest.raises(error) as info:
        sm.einsum(args[0], *operands)
    assert message in str(info.value)


def test_einsum_refuses_mixed_dtypes_and_bad_sublists() -> None:
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        sm.einsum("ij,jk->ik", sm.ones(2, 3), sm.ones(3, 4, dtype=sm.float64))
    with pytest.raises(ValueError, match=r"not within the valid range \[0, 52\)"):
        sm.einsum(sm.ones(2, 3), [0, 60])


class _Attention(nn.Module):
    def forward(self, q: sm.Tensor, k: sm.Tensor) -> sm.Tensor:
        return sm.einsum("bhqd,bhkd->bhqk", q, k)


class _Bilinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(sm.tensor(_data((5, 3, 4), "float64")))

    def forward(self, x: sm.Tensor, y: sm.Tensor) -> sm.Tensor:
        return sm.einsum("bi,oij,bj->bo", x, self.weight, y)


def test_traced_einsum_is_one_matmul_and_follows_the_batch() -> None:
    q, k = sm.randn(2, 3, 4, 8), sm.randn(2, 3, 6, 8)
    traced = sm.jit.trace(_Attention(), (q, k))
    kinds = [n.kind for n in traced.graph.nodes]
    assert kinds.count("sm::matmul") == 1 and "sm::reshape" not in kinds, traced.graph
    for batch in (2, 5):
        q, k = sm.randn(batch, 3, 4, 8), sm.randn(batch, 3, 6, 8)
        np.testing.assert_allclose(traced(q, k).numpy(), _Attention()(q, k).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_traced_bilinear_einsum_equals_eager_at_two_batch_sizes() -> None:
    model = _Bilinear()
    x, y = sm.tensor(_data((2, 3), "float64")), sm.tensor(_data((2, 4), "float64"))
    traced = sm.jit.trace(model, (x, y))
    for batch in (2, 7):
        x, y = sm.tensor(_data((batch, 3), "float64")), sm.tensor(_data((batch, 4), "float64"))
        got = traced(x, y).detach().numpy()
        np.testing.assert_allclose(got, model(x, y).detach().numpy(), rtol=1e-12)
        want = np.einsum("bi,oij,bj->bo", x.numpy(), model.weight.detach().numpy(), y.numpy())
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_pair_order_is_optimal_for_a_chain() -> None:
    # (10x1000)(1000x10)(10x1000): left to right is 2e5 work, right first 1e7
    sets = [frozenset("ab"), frozenset("bc"), frozenset("cd")]
    sizes = {"a": 10, "b": 1000, "c": 10, "d": 1000}
    assert E._pair_order(sets, frozenset("ad"), sizes) == [(0, 1), (0, 1)]
    assert P._chain_order([10, 1000, 10, 1000]) == ((0, 1), 2)
    assert P._chain_order([1000, 10, 1000, 10]) == (0, (1, 2))




def D(*shape: int) -> sm.Tensor:
    return sm.tensor(RNG.standard_normal(shape), requires_grad=True)


GRADS: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "einsum": (lambda a, b, c: sm.einsum("bi,oij,bj->bo", a, b, c),
               lambda: (D(3, 4), D(2, 4, 5), D(3, 5))),
    "einsum_diagonal": (lambda a: sm.einsum("iij->ij", a), lambda: (D(3, 3, 2),)),
    "tensordot": (lambda a, b: sm.tensordot(a, b, ([0, 1], [2, 0])),
                  lambda: (D(2, 3, 4), D(3, 5, 2))),
    "addbmm": (lambda i, a, b: sm.addbmm(i, a, b, beta=0.5, alpha=2),
               lambda: (D(3, 4), D(2, 3, 5), D(2, 5, 4))),
    "baddbmm": (lambda i, a, b: sm.baddbmm(i, a, b, beta=0.5, alpha=2),
                lambda: (D(4), D(2, 3, 5), D(2, 5, 4))),
    "addmv": (lambda i, a, b: sm.addmv(i, a, b, alpha=2), lambda: (D(3), D(3, 5), D(5))),
    "addr": (lambda i, a, b: sm.addr(i, a, b, beta=0.5), lambda: (D(3, 4), D(3), D(4))),
    "vdot": (sm.vdot, lambda: (D(5), D(5))),
    "inner": (sm.inner, lambda: (D(2, 5), D(3, 5))),
    "kron": (sm.kron, lambda: (D(2, 3), D(3, 2))),
    "cdist_mm": (lambda a, b: sm.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
                 lambda: (D(3, 4), D(5, 4))),
    "cdist_p1.5": (lambda a, b: sm.cdist(a, b, p=1.5), lambda: (D(2, 3, 4), D(2, 5, 4))),
    "cross": (lambda a, b: sm.cross(a, b, dim=1), lambda: (D(2, 3), D(2, 3))),
    "trace": (sm.trace, lambda: (D(3, 4),)),
    "matrix_power": (lambda a: sm.matrix_power(a, 5), lambda: (D(2, 3, 3),)),
    "multi_dot": (lambda *m: P.multi_dot(m), lambda: (D(3), D(3, 6), D(6, 2), D(2))),
    "vander": (lambda a: P.vander(a, N=4), lambda: (D(2, 3),)),
    "vecdot": (lambda a, b: P.vecdot(a, b, dim=0), lambda: (D(3, 2), D(3, 1))),
}


@pytest.mark.parametrize("name", list(GRADS))
def test_gradcheck(name: str) -> None:
    fn, args = GRADS[name]
    assert gradcheck(fn, args())


def test_beta_zero_ignores_nan_in_input() -> None:
    nan = float("nan")
    m, v = sm.ones(2, 3), sm.ones(3)
    assert sm.addmv(sm.full((2,), nan), m, v, beta=0).tolist() == [3.0, 3.0]
    assert sm.addr(sm.full((2, 3), nan), sm.ones(2), v, beta=0).sum().item() == 6.0
    b1, b2 = sm.ones(2, 2, 3), sm.ones(2, 3, 4)
    assert sm.baddbmm(sm.full((2, 2, 4), nan), b1, b2, beta=0).sum().item() == 48.0
    assert sm.addbmm(sm.full((2, 4), nan), b1, b2, beta=0).sum().item() == 48.0
    assert math.isnan(sm.addmv(sm.full((2,), nan), m, v, beta=1).tolist()[0])


def test_out_and_in_place_forms() -> None:
    m, v, x = sm.ones(2, 3), sm.ones(3), sm.ones(2)
    out = sm.empty(2)
    assert sm.addmv(x, m, v, alpha=2, out=out) is out and out.tolist() == [7.0, 7.0]
    assert x.addmv_(m, v) is x and x.tolist() == [4.0, 4.0]
    y = sm.zeros(2, 3)
    y.addr_(sm.ones(2), v, alpha=3)
    assert y.sum().item() == 18.0
    out = sm.empty(0)
    assert sm.kron(sm.ones(2), sm.ones(3), out=out).shape == (6,)
    w = sm.zeros(2, 2, 4)
    w.baddbmm_(sm.ones(2, 2, 3), sm.ones(2, 3, 4))
    assert w.sum().item() == 48.0
    assert P.LINALG["cross"](sm.ones(3), sm.ones(3), out=sm.empty(3)).tolist() == [0, 0, 0]


@pytest.mark.parametrize("call,error,message", [
    (lambda: sm.mv(sm.ones(2, 3), sm.ones(4)), RuntimeError, "size mismatch, got mat (2x3)"),
    (lambda: sm.addmv(sm.ones(2, 2), sm.ones(2, 3), sm.ones(3)), RuntimeError,
     "vector + matrix @ vector expected, got 2, 2, 1"),
    (lambda: sm.baddbmm(sm.ones(2, 2, 3), sm.ones(2, 2, 2), sm.ones(3, 2, 3)), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [2, 2] but got: [3, 2]"),
    (lambda: sm.baddbmm(sm.ones(3).double(), sm.ones(2, 4, 5), sm.ones(2, 5, 3)),
     RuntimeError, "Input dtypes must be the same, got: input double, batch1: float"),
    (lambda: sm.addr(sm.ones(2, 3), sm.ones(2), sm.ones(3), alpha=True), RuntimeError,
     "Boolean alpha only supported for Boolean results."),
    (lambda: sm.addr(sm.ones(3, 3), sm.ones(2), sm.ones(3)), RuntimeError,
     "The expanded size of the tensor (2) must match the existing size (3)"),
    (lambda: sm.tensordot(sm.ones(2, 3), sm.ones(2, 4), ([1], [0])), RuntimeError,
     "contracted dimensions need to match, but first has size 3 in dim 1 and second has size 2"),
    (lambda: sm.tensordot(sm.ones(2, 3), sm.ones(3), -1), RuntimeError,
     "tensordot expects dims >= 0"),
    (lambda: sm.vdot(sm.ones(3), sm.ones(3).double()), RuntimeError,
     "expected both vectors to have same dtype, but found Float and Double"),
    (lambda: sm.inner(sm.ones(2, 3), sm.ones(4)), RuntimeError,
     "inner() the last dimension must match on both input tensors"),
    (lambda: sm.trace(sm.ones(3)), RuntimeError,
     "trace: expected a matrix, but got tensor with dim 1"),
    (lambda: sm.cross(sm.ones(2, 4), sm.ones(2, 4)), RuntimeError,
     "no dimension of size 3 in input"),
    (lambda: P.linalg_cross(sm.ones(2, 4), sm.ones(2, 4)), RuntimeError,
     "linalg.cross: inputs dimension -1 must have length 3. Got 4 and 4"),
    (lambda: sm.cdist(sm.ones(2, 3), sm.ones(4, 3), p=-1), RuntimeError,
     "cdist only supports non-negative p values"),
    (lambda: sm.cdist(sm.ones(2, 3), sm.ones(4, 2)), RuntimeError,
     "X1 and X2 must have the same number of columns. X1: 3 X2: 2"),
    (lambda: sm.cdist(sm.ones(2, 3), sm.ones(4, 3), compute_mode="x"), ValueError,
     "x is not a valid value for compute_mode"),
    (lambda: P.multi_dot([sm.ones(2, 3), sm.ones(4, 2)]), RuntimeError,
     "multi_dot(): tensors 0 and 1 with shapes [2, 3] and [4, 2] cannot be multiplied"),
    (lambda: P.multi_dot([sm.ones(3)]), RuntimeError, "expected at least 2 tensors but got 1"),
    (lambda: sm.matrix_power(sm.ones(2, 3), 2), RuntimeError,
     "A must be batches of square matrices, but they are 2 by 3 matrices"),
    (lambda: P.vander(sm.ones(3), N=1), RuntimeError, "N must be greater than 1."),
    (lambda: P.vecdot(sm.ones(3, dtype=sm.int64), sm.ones(3, dtype=sm.int64)), RuntimeError,
     "linalg.vecdot: Expected a floating point or complex tensor as input. Got Long"),
])
def test_error_messages(call: Callable[[], Any], error: type, message: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(error) as info:
            call()
    assert message in str(info.value)


def test_deprecation_warnings() -> None:
    with pytest.warns(UserWarning, match="torch.cross without specifying the dim"):
        assert sm.cross(sm.ones(3, 2), sm.ones(3, 2)).shape == (3, 2)
    with pytest.warns(UserWarning, match="chain_matmul is deprecated"):
        assert sm.chain_matmul(sm.ones(2, 3), sm.ones(3, 4), sm.ones(4)[:, None]).shape == (2, 1)


def test_matrix_power_negative_uses_linalg_inv() -> None:
    if not hasattr(sm.linalg, "inv"):
        pytest.skip("scriptmod.linalg.inv is not built yet")
    a = sm.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=sm.float64)
    want = np.linalg.matrix_power(a.numpy(), -3)
    np.testing.assert_allclose(sm.matrix_power(a, -3).numpy(), want, rtol=1e-12)
