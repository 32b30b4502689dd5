"""Submodule calls whose arguments are not all tensors (issue 35): a callable (the annotated
transformer's / BERT's residual wrapper ``self.sublayer(x, lambda h: ...)``), a module, a config
object, a string, None; ``module.forward(...)`` called directly; and modules outside the traced
tree (a plain list, a module passed in). Each traces: inlined into the caller's graph where a
callee graph cannot stand for the call, a ``prim::CallMethod`` where it can. Checked: eager ==
traced, another batch size, training gradients equal eager, save/load, and the graph."""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import jit, nn
from scriptmod.jit import TracerWarning
from scriptmod.ir.graph import Prim


class Residual(nn.Module):
    """SublayerConnection: x + dropout(sublayer(norm(x)))."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.drop = nn.Dropout(p)

    def forward(self, x: Any, sublayer: Callable[[Any], Any]) -> Any:
        return x + self.drop(sublayer(self.norm(x)))


class Lambda(nn.Module):
    """The issue's repro: the callable calls a module of the caller."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.sub = Residual()

    def forward(self, x: Any) -> Any:
        return self.sub(x, lambda h: self.fc(h).relu())


class ModuleArg(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.sub = Residual()

    def forward(self, x: Any) -> Any:
        return self.sub(x, self.fc)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, q: Any, k: Any, v: Any, mask: Any) -> Any:
        s = self.q(q) @ self.k(k).transpose(-2, -1) / 8 ** 0.5
        return s.masked_fill(mask == 0, -1e9).softmax(-1) @ self.v(v)


class EncoderLayer(nn.Module):
    """The annotated transformer's: clones in a ModuleList, a closure over the mask."""

    def __init__(self) -> None:
        super().__init__()
        self.self_attn = Attention()
        self.ff = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.sublayer = nn.ModuleList([Residual(), Residual()])

    def forward(self, x: Any, mask: Any) -> Any:
        x = self.sublayer[0](x, lambda h: self.self_attn(h, h, h, mask))
        return self.sublayer[1](x, self.ff)


class Outer(nn.Module):
    """A callable through two inlined levels, closing over a tensor computed by the caller."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 8)
        self.inner = nn.ModuleDict({"wrap": Wrap2()})

    def forward(self, x: Any) -> Any:
        g = self.gate(x).sigmoid()
        return self.inner["wrap"](x, lambda h: h * g)


class Wrap2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.res = Residual()

    def forward(self, x: Any, fn: Callable[[Any], Any]) -> Any:
        return self.res(x, fn) * 2


@dataclass
class Config:
    scale: float
    shift: float


class Configured(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any, cfg: Config) -> Any:
        return self.fc(x) * cfg.scale + cfg.shift


class WithConfig(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Configured()

    def forward(self, x: Any) -> Any:
        return self.a(x, Config(2.0, 0.5)) - self.a(x, Config(-1.0, 0.0))


class Mode(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any, mode: str, extra: Any = None) -> Any:
        y = self.fc(x)
        y = y.relu() if mode == "relu" else y.tanh()
        return y if extra is None else y + extra


class WithConstants(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = Mode()

    def forward(self, x: Any) -> Any:
        return self.m(x, "relu") + self.m(x, "tanh", None) + self.m(x, mode="tanh", extra=x)


class DirectForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.sub = Residual()

    def forward(self, x: Any) -> Any:
        y = self.sub.forward(x, lambda h: self.fc.forward(h))
        return self.fc.forward(y)


class TrainingFlag(nn.Module):
    """F.dropout(..., self.training) inside an inlined module reads that module's flag."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any, fn: Callable[[Any], Any]) -> Any:
        return F.dropout(fn(self.fc(x)), 0.5, self.training)


class WithTrainingFlag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = TrainingFlag()

    def forward(self, x: Any) -> Any:
        return self.body(x, lambda h: h * 3)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "lambda": Lambda, "module_arg": ModuleArg, "two_levels": Outer, "config": WithConfig,
    "constants": WithConstants, "direct_forward": DirectForward,
}


def _x(*shape: int, seed: int = 0) -> Any:
    return sm.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=sm.float32)


def _close(a: Any, b: Any, tol: float = 1e-5) -> None:
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def _trace(model: nn.Module, *args: Any) -> Any:
    sm.manual_seed(0)
    return jit.trace(model, args if len(args) > 1 else args[0])


def _calls(g: Any) -> list[str]:
    """The submodule attribute each prim::CallMethod of ``g`` calls."""
    return [n.inputs[0].node.attrs["name"] for n in g.walk() if n.kind == Prim.CALL_METHOD]


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_traced_equals_eager_at_other_batch_sizes(kind: str) -> None:
    sm.manual_seed(0)
    model = MODELS[kind]().eval()
    traced = _trace(model, _x(2, 8))
    for shape in ((2, 8), (5, 8), (1, 3, 8)):
        x = _x(*shape, seed=1)
        with sm.no_grad():
            _close(traced(x), model(x))


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_training_gradients_equal_eager(kind: str) -> None:
    sm.manual_seed(0)
    model = MODELS[kind]().train()
    traced = _trace(model, _x(2, 8))
    x = _x(4, 8, seed=2)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    model.zero_grad()
    (traced(xa) ** 2).sum().backward()
    got = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad()
    (model(xb) ** 2).sum().backward()
    for n, p in model.named_parameters():
        np.testing.assert_allclose(got[n], p.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)
    _close(xa.grad, xb.grad, 1e-4)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_save_and_load(kind: str) -> None:
    sm.manual_seed(0)
    model = MODELS[kind]().eval()
    buf = io.BytesIO()
    jit.save(_trace(model, _x(2, 8)), buf)
    buf.seek(0)
    loaded = jit.load(buf)
    x = _x(6, 8, seed=3)
    with sm.no_grad():
        _close(loaded(x), model(x))


def test_the_issue_repro_keeps_call_boundaries_where_possible() -> None:
    traced = _trace(Lambda().eval(), _x(2, 8))
    # the wrapper that takes the callable is inlined; its LayerNorm/Dropout and the
    # callable's Linear are called as methods from the caller's graph
    assert sorted(_calls(traced.graph)) == ["drop", "fc", "norm"]
    text = str(traced.graph)
    assert 'prim::GetAttr[name="sub"]' in text and "sm::relu" in text


def test_a_module_argument_is_reached_by_its_attribute() -> None:
    traced = _trace(ModuleArg().eval(), _x(2, 8))
    assert sorted(_calls(traced.graph)) == ["drop", "fc", "norm"]


def test_constant_arguments_keep_the_boundary() -> None:
    """Strings and None are baked into the callee's graph: one method per distinct call."""
    traced = _trace(WithConstants().eval(), _x(2, 8))
    assert _calls(traced.graph) == ["m", "m", "m"]
    assert len({n.attrs["name"] for n in traced.graph.walk() if n.kind == Prim.CALL_METHOD}) \
        == 3


def test_direct_forward_calls_trace_like_module_calls() -> None:
    traced = _trace(DirectForward().eval(), _x(2, 8))
    assert sorted(_calls(traced.graph)) == ["drop", "fc", "fc", "norm"]

    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            return self.fc.forward(x) + self.fc(x)

    assert _calls(_trace(Plain(), _x(2, 8)).graph) == ["fc", "fc"]


def test_annotated_transformer_encoder_layer() -> None:
    sm.manual_seed(0)
    model = EncoderLayer().eval()
    x, mask = _x(2, 5, 8), sm.ones(2, 1, 5)
    traced = _trace(model, x, mask)
    x2, mask2 = _x(3, 7, 8, seed=4), (_x(3, 1, 7, seed=5) > 0).float()
    with sm.no_grad():
        _close(traced(x2, mask2), model(x2, mask2))       # the mask is an input, not baked
    assert {"self_attn", "ff", "norm"} <= set(_calls(traced.graph))
    model.train()
    xa, xb = x2.clone().requires_grad_(), x2.clone().requires_grad_()
    model.zero_grad()
    traced(xa, mask2).sum().backward()
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    model(xb, mask2).sum().backward()
    for g, p in zip(got, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_an_inlined_module_reads_its_own_training_flag() -> None:
    sm.manual_seed(0)
    model = WithTrainingFlag().train()
    traced = jit.trace(model, _x(2, 8), check_trace=False)
    assert 'name="training"' in str(traced.graph)
    traced.eval()
    model.eval()
    x = _x(4, 8, seed=6)
    with sm.no_grad():
        _close(traced(x), model(x))
    traced.body.train()                          # only the inlined module's flag
    with sm.no_grad():
        y = traced(x)
    assert bool((y == 0).any())


class InPlainList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.Linear(8, 8)]          # not registered: no attribute path
        self.out = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return self.out(self.layers[0](x))


def test_a_module_in_a_plain_list_is_inlined_with_its_weights_baked_and_a_warning() -> None:
    sm.manual_seed(0)
    model = InPlainList().eval()
    with pytest.warns(TracerWarning, match="not a parameter or buffer of the traced module"):
        traced = _trace(model, _x(2, 8))
    x = _x(5, 8, seed=7)
    with sm.no_grad():
        _close(traced(x), model(x))
    assert _calls(traced.graph) == ["out"]
    model.layers[0].requires_grad_(False)        # frozen: baking it is what the user asked for
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)
        _trace(model, _x(2, 8))


class CallsOtherModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any, helper: Any) -> Any:
        return helper(self.fc(x))


HELPER = nn.Sequential(nn.Linear(8, 8), nn.Tanh()).eval().requires_grad_(False)


class PassesOutsideModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = CallsOtherModule()

    def forward(self, x: Any) -> Any:
        return self.body(x, HELPER)


def test_a_module_from_outside_passed_as_an_argument_is_inlined() -> None:
    sm.manual_seed(0)
    model = PassesOutsideModule().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TracerWarning)   # frozen: nothing to warn about
        traced = _trace(model, _x(2, 8))
    assert _calls(traced.graph) == ["fc"]               # body inlined, HELPER's ops baked
    assert "sm::tanh" in str(traced.graph)
    x = _x(3, 8, seed=8)
    with sm.no_grad():
        _close(traced(x), model(x))


def test_registered_module_reached_from_inside_a_child_frame() -> None:
    """A module shared by two parents is called by attribute from the one that calls it."""
    shared = nn.Linear(8, 8)

    class Child(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = shared

        def forward(self, x: Any) -> Any:
            return self.lin(x).relu()

    class Parent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = shared
            self.child = Child()

        def forward(self, x: Any) -> Any:
            return self.child(self.first(x))

    sm.manual_seed(0)
    model = Parent().eval()
    traced = _trace(model, _x(2, 8))
    x = _x(4, 8, seed=9)
    with sm.no_grad():
        _close(traced(x), model(x))


def test_torch_traces_the_issue_repro() -> None:
    torch = pytest.importorskip("torch")

    class TSub(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(8)

        def forward(self, x: Any, sublayer: Any) -> Any:
            return x + sublayer(self.norm(x))

    class TBlock(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.sub = TSub()

        def forward(self, x: Any) -> Any:
            return self.sub(x, lambda h: self.fc(h).relu())

    m = TBlock().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = torch.jit.trace(m, torch.randn(2, 8))
    x = torch.randn(5, 8)
    assert torch.allclose(tr(x), m(x))
