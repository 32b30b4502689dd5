"""The compiled backward of a symbolic specialization (issue 37): a batch class's shared
specialization (``Float(B, 64)``) gets one ``CompiledGrad``, built once from the first call
that needs a gradient and serving every later size, with eager's gradients; a derivative
that cannot be made symbolic runs op by op and names the op (``jit._grad_sizes``)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.nn import functional as F
from scriptmod.bench.workloads import TransformerBlock
from scriptmod.runtime import llvm_jit
from scriptmod.jit import _specialize
from scriptmod.jit._compiled_grad import CompiledGrad
from scriptmod.jit._grad_sizes import always

FIRST, SIZES = 4, (6, 3, 9, 17, 32)      # the class's first size, then its shared sizes


class Reductions(nn.Module):
    """LayerNorm, means over several dims (the batch among them), a view that flattens
    with the batch read at run time, a variance over the batch, broadcasts both ways."""

    def __init__(self) -> None:
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(32), nn.Linear(32, 32)

    def forward(self, x: Any) -> Any:
        h = self.ln(x)                                      # (B, 8, 32)
        h = h - h.mean(dim=(0, 2), keepdim=True) + self.fc(h).mean(1, keepdim=True)
        z = h.view(h.size(0), -1)                           # (B, 256)
        return z.sum(0) * z.var(dim=0) + z.mean() + (z * z).mean(1).unsqueeze(1).sum()


class Loss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 10)

    def forward(self, x: Any, target: Any) -> Any:
        return F.cross_entropy(self.fc(x).tanh() * 3.0, target)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int, Any], tuple]]] = {
    "mlp": (_mlp, lambda n, dt: (sm.randn(n, 64, dtype=dt, requires_grad=True),)),
    "transformer": (lambda: TransformerBlock(64, 4, 256),
                    lambda n, dt: (sm.randn(n, 16, 64, dtype=dt, requires_grad=True),)),
    "reductions": (Reductions, lambda n, dt: (sm.randn(n, 8, 32, dtype=dt, requires_grad=True),)),
    "loss": (Loss, lambda n, dt: (sm.randn(n, 16, dtype=dt, requires_grad=True),
                                  sm.randint(0, 10, (n,)))),
}
TOLERANCE = {sm.float32: dict(rtol=2e-4, atol=2e-5), sm.float64: dict(rtol=1e-10, atol=1e-12)}


def _gradients(fn: Callable[..., Any], params: list[Any], inputs: tuple, seed: int) -> list:
    """The output and the gradients of ``inputs`` (those requiring one) and ``params`` for
    a backward from a fixed random gradient (1 for a scalar loss: the unit-seed forward)."""
    for t in list(params) + [x for x in inputs if x.requires_grad]:
        t.grad = None
    out = fn(*inputs)
    if out.dim() == 0:
        out.backward()
    else:
        rng = np.random.default_rng(seed)
        out.backward(sm.tensor(rng.standard_normal(tuple(out.shape)).astype(out.detach().numpy().dtype)))
    grads = [x.grad.numpy().copy() for x in inputs if x.requires_grad]
    return [out.detach().numpy().copy()] + grads + [p.grad.numpy().copy() for p in params]


def _compiles(monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    """(grad plans built, native engines loaded), counted from now."""
    plans: list[Any] = []
    engines: list[str] = []
    compile_grad, engine = _specialize.compile_grad, llvm_jit._engine
    monkeypatch.setattr(_specialize, "compile_grad", lambda *a: plans.append(
        compile_grad(*a)) or plans[-1])
    monkeypatch.setattr(llvm_jit, "_engine", lambda obj, what: engines.append(what) or
                        engine(obj, what))
    return plans, engines


def _check_every_size(name: str, dtype: Any, monkeypatch: pytest.MonkeyPatch,
                      models: dict | None = None, tolerance: dict | None = None) -> None:
    """``models[name]`` (default ``MODELS``) traced at ``FIRST``: from the second size on,
    one symbolic compiled plan, built once, whose outputs and gradients equal eager's at
    every size (within ``tolerance[dtype]``, default ``TOLERANCE``)."""
    build, make = (models or MODELS)[name]
    sm.manual_seed(0)
    model = build().to(dtype)
    example = make(FIRST, dtype)
    traced = jit.trace(model, example if len(example) > 1 else example[0])
    params = list(model.parameters())
    for n in (FIRST,) + SIZES[:1]:              # the concrete plan, then the symbolic one
        _gradients(traced, params, make(n, dtype), n)
    plans, engines = _compiles(monkeypatch)
    ex = traced.executor("forward")
    shared = ex.grad_plan_for(list(make(SIZES[0], dtype)))
    assert isinstance(shared, CompiledGrad) and shared.symbolic
    for n in SIZES:
        inputs = make(n, dtype)
        got = _gradients(traced, params, inputs, n)
        want = _gradients(model, params, inputs, n)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, **(tolerance or TOLERANCE)[dtype])
        assert ex.grad_plan_for(list(inputs)) is shared
    assert plans == [] and engines == []          # nothing built for a new size
    assert ex.stats["specializations"] == 2


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_equal_eager_at_every_size(name: str, dtype: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _check_every_size(name, dtype, monkeypatch)


@pytest.mark.parametrize("name", ["transformer", "reductions"])
def test_unfused_gradients_equal_eager_at_every_size(name: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with jit.fuser(False):
        _check_every_size(name, sm.float64, monkeypatch)


class TwoOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        h = self.fc(x)
        return h.relu(), h.sigmoid().sum(1)


def test_an_output_without_gradient_gets_zeros_of_its_size_at_each_call() -> None:
    sm.manual_seed(0)
    model = TwoOutputs()
    traced = jit.trace(model, sm.randn(FIRST, 8))
    params = list(model.parameters())
    for n in SIZES:
        x = sm.randn(n, 8, requires_grad=True)
        got = _gradients(lambda v: traced(v)[1], params, (x,), n)   # the other output unused
        want = _gradients(lambda v: model(v)[1], params, (x,), n)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert traced.executor("forward").grad_plan_for([sm.randn(9, 8)]).symbolic


def test_create_graph_gives_eager_second_derivatives() -> None:
    """``create_graph=True`` re-runs the forward op by op from the same inputs."""
    sm.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    traced = jit.trace(model, sm.randn(FIRST, 8))
    for n in SIZES[:3]:
        x = sm.randn(n, 8, requires_grad=True)
        seconds = []
        for fn in (traced, model):
            (gx,) = sm.autograd.grad(fn(x).sum(), x, create_graph=True)
            (ggx,) = sm.autograd.grad((gx * gx).sum(), x)
            seconds.append((gx.detach().numpy().copy(), ggx.numpy().copy()))
        for g, w in zip(*seconds):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


class Sequence2d(nn.Module):
    """(B, T, 32) with both dims symbolic: a flatten to (B*T, 32), a slice to T-1, means
    over each."""

    def __init__(self) -> None:
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(32), nn.Linear(32, 32)

    def forward(self, x: Any) -> Any:
        h = self.fc(self.ln(x)).relu()
        z = h.reshape(-1, 32)
        return z.softmax(-1).sum(0) * h.mean(1).mean(0) + h[:, 1:].sum()


def test_two_symbolic_dims_and_their_expressions(monkeypatch: pytest.MonkeyPatch) -> None:
    """B and T, and the dims made of them (``B*T``, ``T-1``): one compiled backward serves
    every (B, T)."""
    sm.manual_seed(0)
    model = Sequence2d()
    traced = jit.trace(model, sm.randn(2, 8, 32), dynamic_dims={"x": {0: "B", 1: "T"}})
    params = list(model.parameters())
    ex = traced.executor("forward")
    for i, (b, t) in enumerate([(2, 8), (3, 5), (4, 9), (2, 7), (5, 16), (3, 2)]):
        if i == 2:
            plans, engines = _compiles(monkeypatch)     # the class's plan is built
        x = sm.randn(b, t, 32, requires_grad=True)
        for g, w in zip(_gradients(traced, params, (x,), b * t),
                        _gradients(model, params, (x,), b * t), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    plan = ex.grad_plan_for([sm.randn(3, 11, 32, requires_grad=True)])
    assert plan.symbolic and plans == [] and engines == []
    text = str(plan.split.backward)
    assert "Float(B*T, 32)" in text and "Float(B, T-1, 32)" in text


def test_the_backward_is_typed_with_the_symbolic_dims() -> None:
    model = _mlp()
    traced = jit.trace(model, sm.randn(FIRST, 64))
    traced(sm.randn(7, 64))
    plan = traced.executor("forward").grad_plan_for([sm.randn(7, 64)])
    backward = plan.split.backward
    assert "Float(B, 64)" in str(backward)
    values = list(backward.inputs) + [o for n in backward.walk() for o in n.outputs]
    assert not any(7 in (getattr(v.type, "shape", None) or ()) for v in values)  # none baked
    assert plan.split.saved_bytes > 0      # measured at the size the plan was built at


class FirstHalf(nn.Module):
    """The first half of the batch (``chunk``): ``narrow``'s derivative decides on the
    piece sizes, which depend on the batch's parity (``B - ceil(B/2)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return self.fc(x).chunk(2, 0)[0].tanh()


def test_a_derivative_that_cannot_be_symbolic_runs_op_by_op() -> None:
    """``narrow``'s derivative decides on a size that other batch sizes decide otherwise:
    the shared specialization's gradient runs op by op, naming the op, with eager's numbers
    (convolution and pooling no longer do: ``test_symbolic_grad_cnn``)."""
    sm.manual_seed(0)
    model = FirstHalf()
    traced = jit.trace(model, sm.randn(FIRST, 8))
    ex = traced.executor("forward")
    assert isinstance(ex.grad_plan_for([sm.randn(FIRST, 8)]), CompiledGrad)
    x = sm.randn(6, 8)
    traced(x)
    with pytest.raises(RuntimeError, match="op by op: the derivative of sm::narrow"):
        ex.grad_plan_for([x])
    params = list(model.parameters())
    for g, w in zip(_gradients(traced, params, (x,), 0), _gradients(model, params, (x,), 0)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, a, b, holds", [
    ("int_eq", "B", "B", True), ("int_le", "B", "B", True), ("int_ne", "B", "B", False),
    ("int_ne", "B", 1, True), ("int_gt", "B", 1, True), ("int_ge", 1, "B", False),
    ("int_lt", 1, "B", True), ("int_ne", "B", 0, True), ("int_ne", "B", 64, False),
    ("int_gt", "16*B", 31, True), ("int_gt", "16*B", 32, False), ("int_ne", "B*T", 3, True),
    ("int_ne", "T-1", 1, False), ("int_ge", "T-1", 1, True), ("int_eq", "B", "T", False),
    ("int_ne", "B", None, False), ("int_lt", 2, 3, True), ("int_gt", "T+1", "T", True)])
def test_always_decides_only_what_every_size_of_the_class_decides(
        op: str, a: Any, b: Any, holds: bool) -> None:
    assert always(op, a, b) is holds
