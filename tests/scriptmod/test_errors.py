"""Bad input raises a clear Python exception naming the op, what was expected and what was
given: mismatched shapes, wrong dtypes, out-of-range dims and indices, bad devices."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod._dispatch import dispatch

A, V = sm.ones(2, 3), sm.ones(4)

# (call, exception type, fragments that must all appear in the message)
CASES: dict[str, tuple[Callable[[], Any], type, tuple[str, ...]]] = {
    # shapes
    "broadcast": (lambda: A + V, ValueError, ("add()", "(2, 3)", "(4)", "broadcast")),
    "broadcast-fn": (lambda: sm.maximum(sm.ones(2), sm.ones(3)), ValueError, ("maximum()", "(2)", "(3)")),
    "matmul": (lambda: A @ sm.ones(4, 2), ValueError, ("matmul", "(2, 3)", "(4, 2)", "3 != 4")),
    "matmul-0d": (lambda: sm.tensor(1.0) @ A, ValueError, ("matmul", "0-dim")),
    "mm-rank": (lambda: sm.mm(sm.ones(2, 2, 2), A), RuntimeError, ("mm", "2-D", "3-D")),
    "bmm-batch": (lambda: sm.bmm(sm.ones(2, 2, 3), sm.ones(3, 3, 1)), RuntimeError, ("bmm", "2", "3")),
    "cat": (lambda: sm.cat([A, V]), ValueError, ("cat", "(2, 3)", "(4,)")),
    "stack": (lambda: sm.stack([A, V]), ValueError, ("stack", "(2, 3)", "(4,)")),
    "reshape": (lambda: A.reshape(4, 2), ValueError, ("reshape", "(4, 2)", "size 6")),
    "view-two-infer": (lambda: A.view(-1, -1), ValueError, ("reshape", "-1")),
    "view-stride": (lambda: A.t().view(6), RuntimeError, ("view", "stride", "reshape")),
    "expand": (lambda: A.expand(3, 3), ValueError, ("expand", "2", "3")),
    "narrow": (lambda: A.narrow(1, 2, 3), IndexError, ("narrow", "start (2)", "length (3)", "size (3)")),
    "split": (lambda: A.split([1, 1], dim=1), ValueError, ("split", "[1, 1]", "(3)")),
    "setitem": (lambda: A.clone().__setitem__(0, sm.ones(5)), ValueError, ("setitem", "(5,)", "(2, 3)")),
    "inplace-broadcast": (lambda: sm.zeros(3).add_(sm.zeros(2, 3)), RuntimeError, ("[3]", "[2, 3]")),
    "conv2d-channels": (lambda: dispatch("conv2d", (sm.ones(1, 3, 4, 4), sm.ones(2, 2, 3, 3), None), {}),
                        ValueError, ("conv2d", "3 channels", "(2, 2, 3, 3)")),
    # dtypes
    "mean-int": (lambda: sm.tensor([1, 2]).mean(), TypeError, ("mean()", "floating", "int64")),
    "softmax-int": (lambda: sm.tensor([1, 2]).softmax(0), TypeError, ("softmax()", "int64")),
    "neg-bool": (lambda: -sm.tensor([True]), TypeError, ("neg", "bool", "logical_not")),
    "bitwise-float": (lambda: A & A, TypeError, ("bitwise_and", "integer or bool", "float32")),
    "bitwise-not-float": (lambda: ~A, TypeError, ("bitwise_not", "integer or bool", "float32")),
    "where-cond": (lambda: sm.where(sm.ones(2), A, 0.0), TypeError, ("where", "bool", "float32")),
    "gather-index": (lambda: A.gather(1, sm.ones(2, 1)), TypeError, ("gather", "int64", "float32")),
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
    "permute": (lambda: A.permute(0, 0), ValueError, ("permute", "(0, 0)", "(2, 3)")),
    "cat-dim": (lambda: sm.cat([A, A], dim=2), IndexError, ("cat", "[-2, 1]", "2")),
    "size-dim": (lambda: A.size(3), IndexError, ("size", "3")),
    "index-oob": (lambda: A[5], IndexError, ("index", "5", "size 2", "(2, 3)")),
    "index-too-many": (lambda: A[0, 0, 0], IndexError, ("too many indices", "(2, 3)")),
    "index-type": (lambda: A[1.5], IndexError, ("valid indices", "float")),
    "gather-oob": (lambda: A.gather(1, sm.tensor([[5], [0]])), IndexError, ("gather", "out of range", "size 3")),
    "embedding-oob": (lambda: dispatch("embedding", (sm.ones(3, 2), sm.tensor([5])), {}), IndexError,
                      ("embedding", "5", "3 rows")),
    "flatten": (lambda: A.flatten(1, 0), IndexError, ("flatten", "start_dim (1)", "end_dim (0)")),
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
    from scriptmod.runtime import backend
    if backend.cuda_available():
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
