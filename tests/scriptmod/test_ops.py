"""Every registry op, eager, against its float64 NumPy reference (``op_cases``), across dtypes,
shapes (broadcast, size 0 and 1, non-contiguous views); and every differentiable op through
a float64 finite-difference gradcheck built from the same table."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.ir.schema import IMPURE, NONDIFF, REGISTRY
from scriptmod._dispatch import dispatch
from scriptmod.autograd import gradcheck
from scriptmod.autograd.derivatives import DERIVATIVES
import op_cases as OC


def _wrap(x: Any) -> Any:
    return sm.from_numpy(x) if isinstance(x, np.ndarray) else x


def _unwrap(x: Any) -> Any:
    return x.numpy() if isinstance(x, sm.Tensor) else x


def eager(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """Execute through ``dispatch`` (the path every Tensor method takes)."""
    with sm.no_grad():
        out = dispatch(op, tuple(_wrap(x) for x in inputs), attrs)
    return tuple(_unwrap(o) for o in out) if isinstance(out, tuple) else _unwrap(out)


EXECUTORS: dict[str, OC.Execute] = {"eager": eager}


@pytest.fixture(params=sorted(EXECUTORS))
def execute(request: pytest.FixtureRequest) -> OC.Execute:
    return EXECUTORS[request.param]


@pytest.mark.filterwarnings("ignore:Casting complex values to real")   # cast, as torch warns
@pytest.mark.parametrize("op,dtype", OC.params())
def test_op_matches_reference(op: str, dtype: str, execute: OC.Execute) -> None:
    OC.run_case(OC.CASES[op], dtype, execute)


def test_every_registry_op_has_a_case() -> None:
    missing = sorted(set(REGISTRY) - set(OC.CASES))
    assert not missing, f"ops without a case in tests/scriptmod/op_cases.py: {missing}"


# differentiable ops whose gradient is PyTorch's and not the derivative of the op alone
NOT_GRADCHECKED = {
    "rnn_layer": "its fourth output (the saved activations) is internal and passes no "
                 "gradient; gradchecked through (output, h_n, c_n) in "
                 "tests/runtime/test_rnn_layer.py",
    "ctc_loss": "PyTorch's gradient, exp(log_probs) - posterior, is the derivative through the "
                "log_softmax that makes log_probs; checked against torch's in "
                "tests/scriptmod/nn/test_loss_ctc.py and by the ctc_loss_grad row",
    "linalg_cholesky_ex": "reads one triangle (PyTorch's gradient is symmetric); gradchecked "
                          "through A -> cholesky(A A^H + nI) in tests/scriptmod/ops/test_linalg.py",
    "linalg_eigh": "reads one triangle (PyTorch's gradient is Hermitian); gradchecked through "
                   "symmetrized inputs in tests/scriptmod/ops/test_linalg.py",
    "linalg_eig": "complex eigenvectors defined up to phase; gradchecked through gauge-invariant "
                  "losses in tests/scriptmod/ops/test_linalg.py",
    "floor_divide": "piecewise constant: PyTorch's zero gradient (div(rounding_mode='floor')), "
                    "which a finite difference across a jump does not see; checked against "
                    "torch in tests/scriptmod/ops/test_math.py",
    "nextafter": "moves by one ulp, below any finite difference's step; PyTorch's gradient "
                 "(grad, 0), checked against torch in tests/scriptmod/ops/test_math.py",
}


def test_every_differentiable_op_is_gradchecked() -> None:
    diff = {n for n, s in REGISTRY.items() if NONDIFF not in s.flags} - set(NOT_GRADCHECKED)
    unchecked = sorted(n for n in diff if not OC.grad_samples(OC.CASES[n]))
    assert not unchecked, f"differentiable ops without a gradcheck sample: {unchecked}"


def _grad_fn(op: str, sample: OC.Sample) -> tuple[Callable[..., Any], tuple]:
    """(fn of the differentiated tensors, those tensors) for one sample."""
    tensors = tuple(sm.tensor(sample.inputs[i], dtype=sm.float64, requires_grad=True)
                    for i in sample.grad)
    impure = IMPURE in REGISTRY[op].flags

    def fn(*ts: sm.Tensor) -> Any:
        args = list(_wrap(x) for x in sample.inputs)
        for i, t in zip(sample.grad, ts):
            args[i] = t
        if impure:
            sm.manual_seed(1234)   # the same draw on every evaluation
        return dispatch(op, tuple(args), dict(sample.attrs))
    return fn, tensors


GRAD_PARAMS = [(op, s.label) for op, c in sorted(OC.CASES.items()) for s in OC.grad_samples(c)]


@pytest.mark.parametrize("op,label", GRAD_PARAMS)
def test_gradcheck(op: str, label: str) -> None:
    assert op in DERIVATIVES, f"{op} has gradcheck samples but no derivative"
    sample = next(s for s in OC.grad_samples(OC.CASES[op]) if s.label == label)
    fn, tensors = _grad_fn(op, sample)
    assert gradcheck(fn, tensors, eps=OC.CASES[op].fd_eps, atol=1e-5, rtol=1e-4)
