"""A traced module whose arguments or results are containers (a tuple, a nested tuple, a list,
a dict) called with grad enabled: the compiled forward gets arrays (the tuple's items are
inputs of their own, ``_autodiff.flatten_tuple_inputs``), and ``loss.backward()`` gives
eager's gradients for the parameters and for every tensor inside a container argument that
requires grad; an optimizer step through the traced module equals eager's."""
from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Tuple

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn

COMPILED = "CompiledFunctionBackward0"
H = 8


class TupleState(nn.Module):
    """An LSTM-like step over T: ``forward(x, (h, c)) -> (y, (h, c))``."""

    def __init__(self) -> None:
        super().__init__()
        self.w_ih = nn.Parameter(sm.randn(4 * H, H) * 0.3)
        self.w_hh = nn.Parameter(sm.randn(4 * H, H) * 0.3)
        self.out = nn.Linear(H, 3)

    def forward(self, x: Any, hidden: Any) -> Any:
        h, c = hidden
        outs = []
        for t in range(x.size(0)):
            i, f, g, o = (sm.matmul(x[t], self.w_ih.t()) + sm.matmul(h, self.w_hh.t())).chunk(4, 1)
            c = sm.sigmoid(f) * c + sm.sigmoid(i) * sm.tanh(g)
            h = sm.sigmoid(o) * sm.tanh(c)
            outs.append(h)
        return self.out(sm.stack(outs, 0)), (h, c)


class NestedTuple(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(H, H)

    def forward(self, x: Any, state: Any) -> Any:
        (a, b), c = state
        y = sm.tanh(self.fc(x) + a) * b
        return (y, (y * c, a + c))


class ListArg(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(H, H)

    def forward(self, xs: Any) -> Any:
        y = self.fc(sm.cat(xs, 0))
        return [y.relu(), xs[0] * xs[1]]


class DictArg(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(H, H)

    def forward(self, d: Any) -> Any:
        return {"y": self.fc(d["x"]).sigmoid() * d["scale"], "z": d["x"] + 1.0}


class TupleAndPlain(nn.Module):
    """A plain tensor argument after the tuple: positions after a flattened tuple shift."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(H, H)

    def forward(self, pair: Any, x: Any) -> Any:
        p, q = pair
        return self.fc(x) * p - q


def _tupl() -> tuple[nn.Module, Callable[[], tuple]]:
    return TupleState(), lambda: (sm.randn(5, 3, H), (sm.randn(3, H), sm.randn(3, H)))


def _nested() -> tuple[nn.Module, Callable[[], tuple]]:
    return NestedTuple(), lambda: (sm.randn(3, H), ((sm.randn(3, H), sm.randn(3, H)),
                                                    sm.randn(3, H)))


def _list() -> tuple[nn.Module, Callable[[], tuple]]:
    return ListArg(), lambda: ([sm.randn(2, H), sm.randn(2, H)],)


def _dict() -> tuple[nn.Module, Callable[[], tuple]]:
    return DictArg(), lambda: ({"x": sm.randn(3, H), "scale": sm.randn(3, H)},)


def _plain() -> tuple[nn.Module, Callable[[], tuple]]:
    return TupleAndPlain(), lambda: ((sm.randn(3, H), sm.randn(3, H)), sm.randn(3, H))


MODELS = {"tuple": _tupl, "nested_tuple": _nested, "list": _list, "dict": _dict,
          "tuple_then_tensor": _plain}


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, sm.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _leaves(v)]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _leaves(v)]
    return []


def _clone(x: Any, grad: bool) -> Any:
    if isinstance(x, sm.Tensor):
        c = x.detach().clone()
        return c.requires_grad_(True) if grad else c
    if isinstance(x, dict):
        return {k: _clone(v, grad) for k, v in x.items()}
    return type(x)(_clone(v, grad) for v in x)


def _loss(out: Any) -> Any:
    return sum((t * t).sum() for t in _leaves(out))


def _trace(model: nn.Module, args: tuple) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sm.jit.trace(model, _clone(args, False), strict=False)


def _close(got: Any, want: Any) -> None:
    np.testing.assert_allclose(got.numpy(force=True), want.numpy(force=True), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("inputs_grad", [False, True], ids=["params", "params+inputs"])
def test_backward_through_container_arguments_equals_eager(name: str, inputs_grad: bool) -> None:
    """Gradients of the parameters and of the tensors inside the container arguments, taken
    through the compiled backward, equal eager autograd's."""
    sm.manual_seed(0)
    model, make = MODELS[name]()
    model.eval()
    args = make()
    traced = _trace(model, args)
    eager_args, traced_args = _clone(args, inputs_grad), _clone(args, inputs_grad)
    out = traced(*traced_args)
    assert any(t.grad_fn is not None and t.grad_fn.name() == COMPILED for t in _leaves(out)), \
        "the call ran op by op, not through the compiled backward"
    want_out = model(*eager_args)
    for g, w in zip(_leaves(out), _leaves(want_out)):
        _close(g, w)
    _loss(want_out).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    _loss(out).backward()
    for n, p in model.named_parameters():
        _close(p.grad, want[n])
    for got_t, want_t in zip(_leaves(traced_args), _leaves(eager_args)):
        assert (got_t.grad is None) == (want_t.grad is None)
        if want_t.grad is not None:
            _close(got_t.grad, want_t.grad)


def test_only_a_tuple_item_requires_grad() -> None:
    """No parameter requires grad, one tensor inside the tuple does: the call still records
    its gradient (the grad decision looks inside containers)."""
    sm.manual_seed(1)
    model, make = _tupl()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x, (h, c) = make()
    traced = _trace(model, (x, (h, c)))
    h_t, h_e = h.clone().requires_grad_(True), h.clone().requires_grad_(True)
    out = traced(x, (h_t, c))
    assert out[0].requires_grad
    _loss(out).backward()
    _loss(model(x, (h_e, c))).backward()
    _close(h_t.grad, h_e.grad)


@pytest.mark.parametrize("name", ["tuple", "nested_tuple", "dict"])
def test_training_steps_through_the_traced_module_equal_eager(name: str) -> None:
    """Three SGD steps through the traced module (which shares the parameters) and three
    through a copy of the eager model end at the same parameters."""
    sm.manual_seed(2)
    model, make = MODELS[name]()
    model.train()
    twin = copy.deepcopy(model)
    args = make()
    traced = _trace(model, args)
    opt = sm.optim.SGD(model.parameters(), lr=0.1)
    opt_twin = sm.optim.SGD(twin.parameters(), lr=0.1)
    for _ in range(3):
        for m, o, run in ((model, opt, traced), (twin, opt_twin, twin)):
            o.zero_grad()
            _loss(run(*_clone(args, False))).backward()
            o.step()
    for (n, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        _close(p, q)


def test_create_graph_through_a_tuple_argument() -> None:
    """Double backward re-runs the forward op by op with the call's own (tuple) arguments."""
    sm.manual_seed(3)
    model, make = _plain()
    model.eval()
    args = make()
    traced = _trace(model, args)
    (p, q), x = _clone(args, True)
    (pe, qe), xe = _clone(args, True)
    g, = sm.autograd.grad(_loss(traced((p, q), x)), [p], create_graph=True)
    ge, = sm.autograd.grad(_loss(model((pe, qe), xe)), [pe], create_graph=True)
    _close(g, ge)
    gg, = sm.autograd.grad(g.sum(), [x])
    gge, = sm.autograd.grad(ge.sum(), [xe])
    _close(gg, gge)


class _MixedTuple(nn.Module):
    """A scripted ``Tuple[Tensor, int]`` argument: not a tuple of tensors, so the compiled
    forward takes it whole and must get arrays inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(H, H)

    def forward(self, p: Tuple[sm.Tensor, int]) -> sm.Tensor:
        x, k = p
        return self.fc(x).relu()


def test_scripted_tuple_with_an_int_runs_the_compiled_backward() -> None:
    sm.manual_seed(4)
    model = _MixedTuple()
    scripted = sm.jit.script(model)
    x = sm.randn(3, H)
    out = scripted((x, 2))
    assert out.grad_fn.name() == COMPILED
    out.sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model((x, 2)).sum().backward()
    for n, p in model.named_parameters():
        _close(p.grad, want[n])
