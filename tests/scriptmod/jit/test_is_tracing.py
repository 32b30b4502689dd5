"""``jit.is_tracing()`` as ``torch.jit.is_tracing()``: True while ``jit.trace`` runs the
Python code (submodules and helpers included), False otherwise, after a failed trace, and in
``jit.script``ed code."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn


def branchy(lib):  # type: ignore[no-untyped-def]
    """A module of ``lib`` (scriptmod or torch) that doubles while traced, else triples,
    through a helper function, as user code would."""
    def factor() -> int:
        return 2 if lib.jit.is_tracing() else 3

    class Branchy(lib.nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            return x * factor()
    return Branchy()


def test_true_only_while_tracing() -> None:
    seen = []

    class Spy(nn.Module):
        def forward(self, x: sm.Tensor) -> sm.Tensor:
            seen.append(sm.jit.is_tracing())
            return x + 1
    outer = nn.Sequential(Spy(), Spy())
    assert sm.jit.is_tracing() is False
    outer(sm.ones(2))
    traced = sm.jit.trace(outer, sm.ones(2), check_trace=False)
    traced(sm.ones(2))
    assert sm.jit.is_tracing() is False
    assert seen == [False, False, True, True]        # eager call, then the trace only


def test_trace_bakes_the_tracing_branch_like_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.arange(3, dtype=np.float32)
    ours, theirs = branchy(sm), branchy(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # both warn: trace != Python result
        got = sm.jit.trace(ours, sm.from_numpy(x))(sm.from_numpy(x)).numpy()
        want = torch.jit.trace(theirs, torch.from_numpy(x))(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, want)             # x * 2
    np.testing.assert_array_equal(ours(sm.from_numpy(x)).numpy(),
                                  theirs(torch.from_numpy(x)).numpy())   # eager: x * 3


def test_false_after_a_trace_that_failed() -> None:
    class Fails(nn.Module):
        def forward(self, x: sm.Tensor) -> sm.Tensor:
            assert sm.jit.is_tracing()
            raise ValueError("inside the trace")
    with pytest.raises(ValueError, match="inside the trace"):
        sm.jit.trace(Fails(), sm.ones(1))
    assert sm.jit.is_tracing() is False


def test_false_in_scripted_code_like_torch() -> None:
    torch = pytest.importorskip("torch")

    def fn(x):  # type: ignore[no-untyped-def]
        if sm.jit.is_tracing():
            return x + 1
        return x - 1

    def torch_fn(x):  # type: ignore[no-untyped-def]
        if torch.jit.is_tracing():
            return x + 1
        return x - 1
    x = np.ones(2, dtype=np.float32)
    np.testing.assert_array_equal(sm.jit.script(fn)(sm.from_numpy(x)).numpy(),
                                  torch.jit.script(torch_fn)(torch.from_numpy(x)).numpy())
    scripted = sm.jit.script(branchy(sm))
    np.testing.assert_array_equal(scripted(sm.from_numpy(x)).numpy(), x * 3)
