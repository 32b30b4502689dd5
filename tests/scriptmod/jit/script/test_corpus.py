"""The jit.script corpus: small programs (programs.py), each run scripted and as plain Python
on copies of the same inputs (several per program, taking other branches and trip counts),
compared exactly (ints, bools, strs, the exception raised) or allclose (tensors, rtol 1e-5).

Every statement and expression form of issue 13 appears at least once: assignment (tuple
unpacking, augmented, subscript stores into lists and tensors), if/elif/else, for over
range/lists/tuples/enumerate/zip/tensors/ModuleList/Sequential, while, break, continue,
return anywhere, assert, raise, pass; arithmetic, (chained) comparisons, short-circuit
and/or/not, the conditional expression, Tensor methods, ``scriptmod.*``, ``F.*``, calls of
user functions, literals, list comprehensions, indexing and slicing, the builtins, print and
f-strings, Optional refinement and both annotation spellings. What the frontend gets wrong
today runs as strict xfails (``BUG_CASES``), one small program per bug.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest

import scriptmod as sm
from scriptmod import Tensor, nn

from . import programs as P
from .script_util import assert_same, assert_same_outcome, call, copied


def _xfail(reason: str) -> Any:
    return pytest.mark.xfail(strict=True, reason=reason)


FUNCTIONS = [pytest.param(fn, inputs, id=fn.__name__) for fn, inputs in P.CASES] + [
    pytest.param(fn, inputs, id=fn.__name__, marks=_xfail(reason))
    for fn, inputs, reason in P.BUG_CASES]
MODULES = [pytest.param(make, inputs, id=name) for name, make, inputs in P.MODULE_CASES] + [
    pytest.param(make, inputs, id=name, marks=_xfail(reason))
    for name, make, inputs, reason in P.MODULE_BUG_CASES]


def test_the_corpus_has_about_sixty_programs() -> None:
    names = [c[0].__name__ for c in P.CASES + P.BUG_CASES] + [
        c[0] for c in P.MODULE_CASES + P.MODULE_BUG_CASES]
    assert len(names) == len(set(names)) and len(names) >= 60


@pytest.mark.parametrize("fn, inputs", FUNCTIONS)
def test_function_scripted_equals_python(fn: Callable, inputs: list[tuple]) -> None:
    scripted = sm.jit.script(fn)
    for k, args in enumerate(inputs):
        assert_same_outcome(call(scripted, args), call(fn, args), f"{fn.__name__} input {k}")


@pytest.mark.parametrize("fn, inputs", [pytest.param(fn, inputs, id=fn.__name__)
                                        for fn, inputs in P.CASES])
def test_second_call_equals_python(fn: Callable, inputs: list[tuple]) -> None:
    """Nothing leaks from one call into the next with the same input types (a list literal
    built once per specialization did: list_store, fibonacci, ... saw the first call's
    items)."""
    scripted = sm.jit.script(fn)
    for k, args in enumerate(inputs):
        want = call(fn, args)
        call(scripted, args)
        assert_same_outcome(call(scripted, args), want, f"{fn.__name__} input {k}, 2nd call")


@pytest.mark.parametrize("make, inputs", MODULES)
def test_module_scripted_equals_python(make: Callable[[], nn.Module],
                                       inputs: list[tuple]) -> None:
    for training in (False, True):
        model = make().train(training)
        scripted = sm.jit.script(model)
        assert isinstance(scripted, sm.jit.ScriptModule)
        assert scripted.training == training
        for k, args in enumerate(inputs):
            with sm.no_grad():
                assert_same_outcome(call(scripted, args), call(model, args),
                                    f"{type(model).__name__} training={training} input {k}")


def _printed(fn: Callable, args: tuple, capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    out = call(fn, args)
    return out, capsys.readouterr().out


@pytest.mark.parametrize("fn, args", [
    pytest.param(P.printing, (P.X4, 0), id="printing-0"),
    pytest.param(P.printing, (P.X4, 3), id="printing-3"),
    pytest.param(P.raise_after_print, (P.X4, 3), id="print-then-raise"),
    pytest.param(P.print_tensor, (P.X23,), id="print-tensor")])
def test_printed_text_matches_python(fn: Callable, args: tuple,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The same text in the same order, also when the program raises half way."""
    scripted = sm.jit.script(fn)
    want, want_text = _printed(fn, args, capsys)
    got, got_text = _printed(scripted, args, capsys)
    assert got_text == want_text
    assert (got.error is None) == (want.error is None)
    if want.error is None:
        assert_same(got.value, want.value)


FUSER_CASES = [(P.tensor_branch, (P.X4,)), (P.halve_until, (P.X4 * 8.0, 0.5)),
               (P.rnn_like, P.RNN_ARGS), (P.accumulate_rows, (P.X34.abs(), 1.0)),
               (P.for_tensor_rows, (P.X34,)), (P.augmented, (P.X23, -4, -2.0))]


@pytest.mark.parametrize("fn, args", FUSER_CASES, ids=[c[0].__name__ for c in FUSER_CASES])
def test_unfused_equals_fused_and_python(fn: Callable, args: tuple) -> None:
    scripted = sm.jit.script(fn)
    want = call(fn, args)
    assert_same_outcome(call(scripted, args), want, "fused")
    with sm.jit.fuser(False):
        assert_same_outcome(call(scripted, args), want, "unfused")
    assert_same_outcome(call(scripted, args), want, "fused again")


GRAD_CASES = [(P.tensor_branch, (P.X4,)), (P.halve_until, (P.X4 * 8.0, 0.5)),
              (P.early_return, (P.X4, 3)), (P.rnn_like, P.RNN_ARGS),
              (P.return_in_loop, (P.X4, -10.0)), (P.for_tensor_rows, (P.X34,)),
              (P.tensor_methods, (P.X34,))]


@pytest.mark.parametrize("fn, args", GRAD_CASES, ids=[c[0].__name__ for c in GRAD_CASES])
def test_grad_mode_and_no_grad(fn: Callable, args: tuple) -> None:
    """Under no_grad the outputs match and carry no graph; in grad mode they match and the
    gradients of a scalar loss with respect to every tensor input match Python's."""
    scripted = sm.jit.script(fn)
    leaves = tuple(a.detach().clone().requires_grad_(True) if isinstance(a, sm.Tensor) else a
                   for a in args)
    with sm.no_grad():
        got, want = call(scripted, leaves), call(fn, leaves)
    assert_same_outcome(got, want, "no_grad")
    assert not any(t.requires_grad for t in _tensors(got.value))
    grads, outs = [], []
    for f in (scripted, fn):
        inputs = copied(leaves)
        out = f(*inputs)
        loss = sum((t * t).sum() for t in _tensors(out))
        loss.backward()
        outs.append(out)
        grads.append([a.grad for a in inputs if isinstance(a, sm.Tensor)])
    assert_same(outs[0], outs[1], "grad-mode outputs")
    assert all(g is not None for g in grads[1])
    assert_same(grads[0], grads[1], "gradients")


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, sm.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def test_module_parameter_gradients_match_python() -> None:
    model = P._seeded(P.EarlyExit)()
    scripted = sm.jit.script(model)
    grads = []
    for m in (scripted, model):
        m.zero_grad()
        h, used = m(P.X4, 3)
        (h * h).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert_same(grads[0], grads[1], "parameter gradients")


def test_script_of_a_script_is_itself_and_calls_repeat() -> None:
    scripted = sm.jit.script(P.collatz_steps)
    assert sm.jit.script(scripted) is scripted
    for _ in range(2):
        assert [scripted(n) for n in (1, 6, 27)] == [P.collatz_steps(n) for n in (1, 6, 27)]


RAISING = [(P.assert_positive, [(P.X4, 3), (P.X4, 0), (P.X4, 100)]),
           (P.raise_constant, [(2,), (0,), (-1,)]),
           (P.raise_f_string, [(P.X4, 1), (P.X4, 3)]),
           (P.raise_after_print, [(P.X4, 1), (P.X4, 3)])]


@pytest.mark.parametrize("fn, inputs", RAISING, ids=[c[0].__name__ for c in RAISING])
def test_raise_and_assert_fire_on_the_same_inputs(fn: Callable, inputs: list[tuple]) -> None:
    """Scripted code raises exactly where Python does and returns Python's value elsewhere
    (test_function_scripted_equals_python checks the exception's class and message)."""
    scripted = sm.jit.script(fn)
    for args in inputs:
        got, want = call(scripted, args), call(fn, args)
        assert (got.error is None) == (want.error is None), (args, got.error, want.error)
        if want.error is None:
            assert_same(got.value, want.value)
