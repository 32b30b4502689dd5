"""What model files call outside ``nn``: ``scriptmod._assert``, the constants ``pi``/``e``/
``inf``/``nan``, ``jit.is_scripting``/``is_tracing``/``script_if_tracing`` and ``fx.wrap``."""
import math
import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import fx


def test_constants_are_torchs():
    assert (sm.pi, sm.e, sm.inf) == (math.pi, math.e, math.inf)
    assert math.isnan(sm.nan)


@pytest.mark.parametrize("good", [True, 1, sm.tensor(True), sm.tensor([2.0])])
def test_assert_passes(good):
    assert sm._assert(good, "never shown") is None


@pytest.mark.parametrize("bad", [False, 0, sm.tensor(False), sm.tensor(0.0)])
def test_assert_raises_with_message(bad):
    with pytest.raises(AssertionError, match="^Expected 4-D input$"):
        sm._assert(bad, "Expected 4-D input")


def test_assert_on_many_elements_is_ambiguous():
    with pytest.raises(RuntimeError, match="ambiguous"):
        sm._assert(sm.ones(2), "m")


class _Checked(sm.nn.Module):
    """torchvision's ViT style: shape checks on Python ints and a check on values."""

    def forward(self, x):
        sm._assert(x.dim() == 2, f"Wrong rank {x.dim()}")
        sm._assert(x.shape[1] == 3, f"Wrong width: expected 3 but got {x.shape[1]}")
        sm._assert((x > -100).all(), "values out of range")
        return x * 2


def test_assert_while_tracing():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        traced = sm.jit.trace(_Checked(), sm.ones(2, 3))
    # the size checks are guards (their own warnings); the value check is no baked-in read
    assert not [w for w in seen if "converting a tensor" in str(w.message)]
    np.testing.assert_array_equal(traced(sm.ones(4, 3)).numpy(), np.full((4, 3), 2.0))
    with pytest.raises(sm.jit.TraceGuardError):       # the width check became a guard
        traced(sm.ones(4, 5))
    with pytest.raises(AssertionError, match="Wrong width: expected 3 but got 5"):
        sm.jit.trace(_Checked(), sm.ones(2, 5))
    with pytest.raises(AssertionError, match="values out of range"):
        sm.jit.trace(_Checked(), sm.full((2, 3), -200.0))


def test_is_scripting_and_is_tracing():
    seen = []

    def f(x):
        seen.append((sm.jit.is_scripting(), sm.jit.is_tracing()))
        return x + 1

    f(sm.ones(1))
    sm.jit.trace(f, sm.ones(1), check_trace=False)
    assert seen == [(False, False), (False, True)]


@sm.jit._script_if_tracing
def _halve_while_large(x: sm.Tensor) -> sm.Tensor:
    while bool(x.abs().max() > 1.0):
        x = x / 2
    return x


def test_script_if_tracing_keeps_control_flow_in_the_trace():
    assert _halve_while_large.__name__ == "_halve_while_large"
    np.testing.assert_allclose(_halve_while_large(sm.tensor([8.0])).numpy(), [1.0])
    traced = sm.jit.trace(lambda x: _halve_while_large(x) + 0, sm.tensor([8.0]))
    # the loop ran 3 times on the example; a baked-in trace would halve 64 three times too
    np.testing.assert_allclose(traced(sm.tensor([64.0])).numpy(), [1.0])
    assert sm.jit.script_if_tracing is sm.jit._script_if_tracing


def _calls_the_decorated(x: sm.Tensor) -> sm.Tensor:
    return _halve_while_large(x) * 2


@pytest.mark.parametrize("fn", [_halve_while_large, _calls_the_decorated])
def test_a_script_if_tracing_function_scripts_with_its_own_globals(fn):
    """``jit.script`` of the decorated function (or of code calling it) compiles the
    function's own source against its own module (torchvision's ``encode_boxes``), not the
    decorator's wrapper."""
    x = sm.tensor([64.0, 3.0])
    np.testing.assert_allclose(sm.jit.script(fn)(x).numpy(), fn(x).numpy())


def _leaf(x):
    return x


fx.wrap("len")
fx.wrap(_leaf)


def test_fx_wrap_registers_and_returns_its_argument():
    assert {(__name__, "len"), (__name__, "_leaf")} <= fx.wrapped_functions()
    assert sm.fx is fx


def test_fx_wrap_errors_like_torch():
    with pytest.raises(NotImplementedError, match="top level of a module"):
        fx.wrap("len")
    with pytest.raises(RuntimeError, match="Unsupported type"):
        fx.wrap(3)
