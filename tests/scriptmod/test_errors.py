"""Bad input raises a clear Python exception naming the op, what was expected and what was
given: mismatched shapes, wrong dtypes, out-of-range dims and indices, bad devices."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import DTypeError, ShapeError, nn
from scriptmod._dispatch import dispatch

A, V = sm.ones(2, 3), sm.ones(4)

# (call, exception type, fragments that must all appear in the message)
CASES: dict[str, tuple[Callable[[], Any], type, tuple[str, ...]]] = {
    # shapes
    "broadcast": (lambda: A + V, ShapeError, ("add()", "(2, 3)", "(4)", "broadcast")),
    "broadcast-fn": (lambda: sm.maximum(sm.ones(2), sm.ones(3)), ShapeError, ("maximum()", "(2)", "(3)")),
    "matmul": (lambda: A @ sm.ones(4, 2), ShapeError, ("matmul", "(2, 3)", "(4, 2)", "3 != 4")),
    "matmul-0d": (lambda: sm.tensor(1.0) @ A, ShapeError, ("matmul", "0-dim")),
    "mm-rank": (lambda: sm.mm(sm.ones(2, 2, 2), A), RuntimeError, ("mm", "2-D", "3-D")),
    "bmm-batch": (lambda: sm.bmm(sm.ones(2, 2, 3), sm.ones(3, 3, 1)), RuntimeError, ("bmm", "2", "3")),
    "cat": (lambda: sm.cat([A, V]), ShapeError, ("cat", "(2, 3)", "(4,)")),
    "stack": (lambda: sm.stack([A, V]), ShapeError, ("stack", "(2, 3)", "(4,)")),
    "reshape": (lambda: A.reshape(4, 2), ShapeError, ("reshape", "(4, 2)", "size 6")),
    "view-two-infer": (lambda: A.view(-1, -1), ShapeError, ("reshape", "-1")),
    "view-stride": (lambda: A.t().view(6), RuntimeError, ("view", "stride", "reshape")),
    "expand": (lambda: A.expand(3, 3), ShapeError, ("expand", "2", "3")),
    "narrow": (lambda: A.narrow(1, 2, 3), ShapeError, ("narrow", "start (2)", "length (3)", "size (3)")),
    "split": (lambda: A.split([1, 1], dim=1), ShapeError, ("split", "[1, 1]", "(3)")),
    "setitem": (lambda: A.clone().__setitem__(0, sm.ones(5)), ShapeError, ("setitem", "(5,)", "(2, 3)")),
    "inplace-broadcast": (lambda: sm.zeros(3).add_(sm.zeros(2, 3)), RuntimeError, ("[3]", "[2, 3]")),
    "conv2d-channels": (lambda: dispatch("conv2d", (sm.ones(1, 3, 4, 4), sm.ones(2, 2, 3, 3), None), {}),
                        ShapeError, ("conv2d", "3 channels", "(2, 2, 3, 3)")),
    # dtypes
    "mean-int": (lambda: sm.tensor([1, 2]).mean(), DTypeError, ("mean()", "floating", "int64")),
    "softmax-int": (lambda: sm.tensor([1, 2]).softmax(0), DTypeError, ("softmax()", "int64")),
    "neg-bool": (lambda: -sm.tensor([True]), DTypeError, ("neg", "bool", "logical_not")),
    "bitwise-float": (lambda: A & A, DTypeError, ("bitwise_and", "integer or bool", "float32")),
    "bitwise-not-float": (lambda: ~A, DTypeError, ("bitwise_not", "integer or bool", "float32")),
    "where-cond": (lambda: sm.where(sm.ones(2), A, 0.0), DTypeError, ("where", "bool", "float32")),
    "gather-index": (lambda: A.gather(1, sm.ones(2, 1)), DTypeError, ("gather", "int64", "float32")),
    "index-float": (lambda: A[sm.tensor([1.0])], IndexError, ("long, int, byte or bool", "float32")),
    "pow-int-neg": (lambda: sm.tensor([2]) ** -1, ValueError, ("pow", "negative")),
    "inplace-cast": (lambda: sm.tensor([1, 2]).mul_(1.5), RuntimeError, ("Float", "Long")),
    "requires-grad-int": (lambda: sm.tensor([1], requires_grad=True), RuntimeError, ("floating", "int64")),
    "default-dtype": (lambda: sm.set_default_dtype(sm.int32), TypeError, ("set_default_dtype", "floating", "int32")),
    "bad-dtype": (lambda: sm.zeros(2, dtype="nope"), TypeError, ("dtype", "'nope'")),
    "unsupported-numpy": (lambda: sm.from_numpy(np.array(["x"])), TypeError, ("unsupported", "<U1", "float32")),
    "ragged": (lambda: sm.tensor([[1, 2], [3]]), ValueError, ("tensor()", "equal-length")),
    "operand": (lambda: sm.add(A, "x"), TypeError, ("Tensor or a number", "str")),
    # dims and indices
    "sum-dim": (lambda: A.sum(dim=5), IndexError, ("sum()", "[-2, 1]", "5")),
    "softmax-dim": (lambda: A.softmax(dim=-3), IndexError, ("softmax", "[-2, 1]", "-3")),
    "max-dim": (lambda: A.max(dim=2), IndexError, ("max", "[-2, 1]", "2")),
    "transpose-dim": (lambda: A.transpose(0, 3), IndexError, ("transpose", "[-2, 1]", "3")),
    "unsqueeze-dim": (lambda: A.unsqueeze(4), IndexError, ("unsqueeze", "[-3, 2]", "4")),
    "permute": (lambda: A.permute(0, 0), ShapeError, ("permute", "(0, 0)", "(2, 3)")),
    "cat-dim": (lambda: sm.cat([A, A], dim=2), IndexError, ("cat", "[-2, 1]", "2")),
    "size-dim": (lambda: A.size(3), IndexError, ("size", "3")),
    "index-oob": (lambda: A[5], IndexError, ("index", "5", "size 2", "(2, 3)")),
    "index-too-many": (lambda: A[0, 0, 0], IndexError, ("too many indices", "(2, 3)")),
    "index-type": (lambda: A[1.5], IndexError, ("valid indices", "float")),
    "gather-oob": (lambda: A.gather(1, sm.tensor([[5], [0]])), ShapeError, ("gather", "out of bounds", "size 3")),
    "embedding-oob": (lambda: dispatch("embedding", (sm.ones(3, 2), sm.tensor([5])), {}), IndexError,
                      ("embedding", "5", "3 rows")),
    "flatten": (lambda: A.flatten(1, 0), ShapeError, ("flatten", "start_dim (1)", "end_dim (0)")),
    # attributes and arguments
    "attr-unknown": (lambda: dispatch("sum", (A,), {"dims": [0]}), TypeError, ("sum()", "dims")),
    "attr-missing": (lambda: dispatch("softmax", (A,), {}), TypeError, ("softmax()", "'dim'")),
    "clamp-none": (lambda: A.clamp(), ValueError, ("clamp", "min", "max")),
    "randint-range": (lambda: sm.randint(5, 2, (3,)), ValueError, ("randint", "low=5", "high=2")),
    "arange-step": (lambda: sm.arange(0, 5, 0), ValueError, ("arange", "step")),
    "negative-size": (lambda: sm.zeros(-1, 2), ValueError, ("full()", "negative", "(-1, 2)")),
    "float-size": (lambda: sm.zeros(2.5), TypeError, ("size", "2.5", "float")),
    "item": (lambda: A.item(), RuntimeError, ("6 elements", "Scalar")),
    "bool": (lambda: bool(A), RuntimeError, ("6 elements", "ambiguous")),
    "backward-nonscalar": (lambda: sm.ones(2, requires_grad=True).mul(2).backward(), RuntimeError,
                           ("scalar outputs", "(2,)")),
    # devices
    "device-type": (lambda: sm.device("tpu"), ValueError, ("device()", "'cpu', 'cuda'", "'tpu'")),
    "device-unsupported": (lambda: sm.device("mps"), RuntimeError, ("'mps'", "not supported")),
    "device-string": (lambda: sm.device("cuda:x"), ValueError, ("'cuda:x'", "cuda:N")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_error_message(name: str) -> None:
    call, exc, fragments = CASES[name]
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    missing = [f for f in fragments if f not in msg]
    assert not missing, f"message {msg!r} lacks {missing}"


def test_cuda_without_cupy_or_gpu_names_the_op_and_the_device() -> None:
    from scriptmod.runtime.arrays import cuda_available
    if cuda_available():
        pytest.skip("a GPU is present")
    for call, frag in ((lambda: sm.ones(2, device="cuda"), "full()"),
                       (lambda: sm.ones(2).to("cuda:1"), "to_device()"),
                       (lambda: sm.ones(2).cuda(), "'cuda'")):
        with pytest.raises(RuntimeError) as info:
            call()
        assert frag in str(info.value) and "cuda" in str(info.value).lower()


def test_errors_are_raised_before_any_state_changes() -> None:
    t = sm.zeros(3)
    v = t._vc[0]
    with pytest.raises(RuntimeError):
        t.add_(sm.zeros(2, 3))
    assert t._vc[0] == v and t.tolist() == [0.0, 0.0, 0.0]


# ---- shape and dtype errors are RuntimeErrors, as in PyTorch ------------------------------
def _runtime_cases(lib: Any) -> dict[str, Callable[[], Any]]:
    """The same bad call for scriptmod and torch (``lib``); each raises RuntimeError in torch."""
    t, F = lib.ones, lib.nn.functional
    return {
        "broadcast": lambda: t(2, 3) + t(4),
        "broadcast-inplace": lambda: t(2).add_(t(3, 2)),
        "matmul": lambda: t(2, 3) @ t(4, 5),
        "mm": lambda: lib.mm(t(2, 3), t(4, 5)),
        "view": lambda: t(6).view(4, 2),
        "reshape": lambda: t(6).reshape(4, -1),
        "reshape-two-infer": lambda: t(6).reshape(-1, -1),
        "expand": lambda: t(3).expand(2, 4),
        "cat": lambda: lib.cat([t(2, 3), t(2, 4)]),
        "cat-0d": lambda: lib.cat([lib.tensor(1.0), lib.tensor(2.0)]),
        "stack": lambda: lib.stack([t(2), t(3)]),
        "narrow": lambda: t(3).narrow(0, 2, 5),
        "split": lambda: t(4).split([1, 2]),
        "setitem": lambda: t(2, 3).__setitem__(0, t(4)),
        "gather-index-out-of-range": lambda: lib.gather(t(3), 0, lib.tensor([5])),
        "gather-index-dtype": lambda: lib.gather(t(3), 0, t(3)),
        "index-select-dtype": lambda: t(3).index_select(0, t(1)),
        "conv-input-channels": lambda: lib.nn.Conv2d(3, 2, 3)(t(1, 2, 4, 4)),
        "conv-functional-channels": lambda: F.conv2d(t(1, 2, 4, 4), t(1, 3, 3, 3)),
        "conv-rank": lambda: F.conv2d(t(4, 4), t(1, 1, 3, 3)),
        "linear-in-features": lambda: lib.nn.Linear(5, 3)(t(2, 4)),
        "linear-functional": lambda: F.linear(t(2, 4), t(3, 5)),
        "batchnorm-channels": lambda: F.batch_norm(t(2, 3), t(4), t(4)),
        "layer-norm": lambda: lib.nn.LayerNorm(4)(t(2, 3)),
        "max-pool-rank": lambda: F.max_pool2d(t(4, 4), 2),
        "prelu-1d": lambda: lib.nn.PReLU(3)(t(3)),
        "mean-int": lambda: lib.tensor([1, 2]).mean(),
        "where-condition-dtype": lambda: lib.where(t(2), t(2), t(2)),
        "neg-bool": lambda: -lib.tensor([True]),
        "embedding-index-dtype": lambda: F.embedding(t(2), t(3, 2)),
        "inplace-result-dtype": lambda: lib.tensor([1, 2]).add_(t(2)),
    }


@pytest.mark.parametrize("name", sorted(_runtime_cases(sm)))
def test_shape_and_dtype_errors_are_runtime_errors(name: str) -> None:
    with pytest.raises(RuntimeError):
        _runtime_cases(sm)[name]()
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        _runtime_cases(torch)[name]()


def test_error_classes_keep_the_older_bases() -> None:
    assert issubclass(ShapeError, RuntimeError) and issubclass(ShapeError, ValueError)
    assert issubclass(DTypeError, RuntimeError) and issubclass(DTypeError, TypeError)
    with pytest.raises(ValueError):            # code written against older releases
        sm.ones(2, 3) + sm.ones(4)
    with pytest.raises(TypeError):
        sm.tensor([1, 2]).mean()


def test_torch_value_errors_stay_value_errors() -> None:
    """Where PyTorch raises ValueError, so do we (not a RuntimeError)."""
    F = sm.nn.functional
    for call in (lambda: F.batch_norm(sm.ones(1, 3), sm.ones(3), sm.ones(3), training=True),
                 lambda: F.dropout(sm.ones(2), p=1.5),
                 lambda: F.cross_entropy(sm.ones(2, 3), sm.tensor([0, 1, 2]))):
        with pytest.raises(ValueError) as info:
            call()
        assert not isinstance(info.value, RuntimeError)


def _traced_linear(lib: Any) -> Any:
    model = lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.ReLU()).eval()
    return lib.jit.trace(model, lib.ones(2, 4))


@pytest.mark.parametrize("bad", ["features", "features-3d"])
def test_traced_module_fed_a_wrong_feature_size_raises_runtime_error(bad: str) -> None:
    shape = (2, 5) if bad == "features" else (2, 2, 5)
    with pytest.raises(RuntimeError, match="5 != 4|4.*5"):
        _traced_linear(sm)(sm.ones(*shape))
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        _traced_linear(torch)(torch.ones(*shape))


def test_traced_module_guard_errors_are_runtime_errors() -> None:
    traced = _traced_linear(sm)
    with pytest.raises(RuntimeError, match="expected a Tensor") as info:
        traced(3)
    assert isinstance(info.value, TypeError)
    with pytest.raises(RuntimeError, match="expected 1 argument") as info:
        traced(sm.ones(2, 4), sm.ones(2, 4))
    assert isinstance(info.value, TypeError)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        _traced_linear(torch)(torch.ones(2, 4), torch.ones(2, 4))


def test_fusion_guard_errors_are_runtime_errors() -> None:
    from scriptmod.runtime.fusion import FusionGuardError
    x = sm.ones(3, 4)
    kernel = sm.jit.kernels_for(sm.jit.trace(lambda x: (x * 2).exp() + 1, x), x)[0]
    cases = [((np.ones((3, 4), np.float64),), FusionGuardError, TypeError, "expected dtype float32"),
             ((np.ones((3, 5), np.float32),), ShapeError, ValueError, "got (3, 5)"),
             ((1,), FusionGuardError, TypeError, "expected a NumPy array"),
             ((), FusionGuardError, TypeError, "expected 1 input(s), got 0")]
    for args, cls, older, fragment in cases:
        with pytest.raises(RuntimeError) as info:
            kernel.check(list(args))
        assert isinstance(info.value, cls) and isinstance(info.value, older)
        assert fragment in str(info.value)
