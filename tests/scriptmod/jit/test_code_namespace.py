"""``exec(module.code, jit.code_namespace(module))`` defines a function that computes what
the compiled module computes: every scripted program of the script corpus (control flow,
lists, raises, in-place writes) and module, traced modules, methods and functions, with
scripted defaults printed as torch prints them. (tests/module_checks.py runs the same check
on every module the rest of the suite compiles.)"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.ir.code import function_name

from .script import programs as P
from .script.script_util import assert_same_outcome, call


def _equal(a: sm.Tensor, b: sm.Tensor) -> bool:
    return a.shape == b.shape and bool((a == b).all())


def _exec(compiled: Any, name: str) -> Callable[..., Any]:
    ns = jit.code_namespace(compiled)
    exec(compiled.code, ns)
    return ns[function_name(name)]


@pytest.mark.parametrize("fn,args_list", P.CASES, ids=[f.__name__ for f, _ in P.CASES])
def test_every_scripted_program_runs_from_its_code(fn, args_list):
    scripted = jit.script(fn)
    from_code = _exec(scripted, fn.__name__)
    for args in args_list:
        want = call(scripted, args)
        assert_same_outcome(call(from_code, args), want, f"{fn.__name__}{args!r:.60}")


@pytest.mark.parametrize("name,make,args_list", P.MODULE_CASES,
                         ids=[c[0] for c in P.MODULE_CASES])
def test_every_scripted_module_runs_from_its_code(name, make, args_list):
    scripted = jit.script(make().eval())
    forward = _exec(scripted, "forward")
    for args in args_list:
        want = call(scripted, args)
        assert_same_outcome(call(lambda *a: forward(scripted, *a), args), want, name)


def test_the_docstring_example_and_a_method():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x).relu() * x.size(0)

        def encode(self, x):
            return self.fc(x) * 2

    x = sm.randn(2, 4)
    traced = jit.trace_module(Net().eval(), {"forward": x, "encode": x})
    with sm.no_grad():
        assert sm.allclose(_exec(traced, "forward")(traced, x), traced(x))
        assert sm.allclose(_exec(traced.encode, "encode")(traced, x), traced.encode(x))
    assert "ops" in jit.code_namespace(traced) and "CONSTANTS" in jit.code_namespace(traced)


def test_a_traced_lambda_and_its_constants():
    table = sm.arange(6.0).reshape(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(lambda x: x * table + 1, sm.ones(2, 3))
    code, consts = traced.code_with_constants
    assert "CONSTANTS.c0" in code and _equal(consts.c0, table)
    assert _equal(_exec(traced, "<lambda>")(sm.ones(2, 3)), traced(sm.ones(2, 3)))


def test_a_read_is_not_moved_past_an_in_place_write():
    """``a = x * 2; x.add_(1)``: the printed code used to inline ``x * 2`` into the return,
    after the write-back, and so read the new x."""
    def f(x):
        a = x * 2
        x.add_(1)
        return a + x * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = jit.trace(f, sm.randn(4, 3), check_trace=False)
    x = sm.randn(4, 3)
    want, x_want = f(x.clone()), x + 1
    x_got = x.clone()
    assert sm.allclose(_exec(traced, "f")(x_got), want) and sm.allclose(x_got, x_want)


def test_scripted_defaults_are_printed_and_used():
    class WithDefaults(nn.Module):
        def forward(self, x, scale: float = 2.0, mask: sm.Tensor | None = None):
            if mask is not None:
                x = x * mask
            return x * scale

    scripted = jit.script(WithDefaults())
    assert "scale: float=2.0" in scripted.code and "=None" in scripted.code
    forward = _exec(scripted, "forward")
    x = sm.randn(3)
    assert _equal(forward(scripted, x), scripted(x))
    assert _equal(forward(scripted, x, 3.0, sm.zeros(3)), scripted(x, 3.0, sm.zeros(3)))


def test_a_scripted_layer_submodule_is_callable_from_code_and_directly():
    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

        def forward(self, x, n: int):
            for layer in self.layers:
                if n > 0:
                    x = layer(x)
            return x

    sm.manual_seed(0)
    scripted = jit.script(Stack().eval())
    x = sm.randn(2, 4)
    with sm.no_grad():
        assert sm.allclose(_exec(scripted, "forward")(scripted, x, 1), scripted(x, 1))
        assert sm.allclose(scripted.layers[0](x), scripted.layers[0]._layer.instance(
            scripted.layers[0])(x))


def test_code_namespace_refuses_what_has_no_code():
    with pytest.raises(TypeError, match="code_namespace\\(\\): module must be a ScriptModule"):
        jit.code_namespace(nn.Linear(2, 2))
