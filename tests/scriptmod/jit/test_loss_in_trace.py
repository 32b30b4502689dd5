"""A model traced together with its loss: the loss fuses into the model's kernels
(``ir.passes.expand_losses``), and a scalar loss's call computes the gradients at a unit seed
with the forward (``jit._autodiff.unit_seeded``). ``loss.backward()`` hands those out; any
other seed (``backward(g)``, a hook that scales the gradient, ``grad_outputs``), a second
backward with ``retain_graph`` and ``create_graph=True`` run the backward graph or the
op-by-op path as before. Every case is compared with eager autograd."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from scriptmod.ir.parser import parse
from scriptmod.ir.passes import expand_losses
from tests.rss import NEEDS_STATM, assert_rss_flat

COMPILED = "CompiledFunctionBackward0"


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)
        self.prelu = nn.PReLU()

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.fc2(self.prelu(self.fc1(x)).tanh())


class WithLoss(nn.Module):
    def __init__(self, model: nn.Module, reduction: str = "mean") -> None:
        super().__init__()
        self.model, self.reduction = model, reduction

    def forward(self, x: sm.Tensor, target: sm.Tensor) -> sm.Tensor:
        return F.mse_loss(self.model(x), target, reduction=self.reduction)


def _setup(dtype=sm.float64, reduction: str = "mean", batch: int = 6):
    sm.manual_seed(0)
    model = Net().to(dtype)
    x, t = sm.randn(batch, 8, dtype=dtype), sm.randn(batch, 4, dtype=dtype)
    eager = WithLoss(model, reduction)
    return model, eager, sm.jit.trace(eager, (x, t)), x, t


def _grads(model: nn.Module) -> dict[str, np.ndarray | None]:
    out = {n: None if p.grad is None else p.grad.numpy().copy()
           for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out


def _assert_grads(got: dict, want: dict, rtol: float = 1e-9, scale: float = 1.0) -> None:
    assert got.keys() == want.keys()
    for n in want:
        assert (got[n] is None) == (want[n] is None), n
        if want[n] is not None:
            np.testing.assert_allclose(got[n], want[n] * scale, rtol=rtol, atol=rtol * 1e-3,
                                       err_msg=n)


def _assert_same_gradients(model: nn.Module, eager, traced, *args) -> None:
    """One backward of ``eager(*args)`` and one of ``traced(*args)`` give equal gradients."""
    eager(*args).backward()
    want = _grads(model)
    traced(*args).backward()
    _assert_grads(_grads(model), want)


class _Counted:
    """Counts the calls of the plan's backward program."""

    def __init__(self, run) -> None:
        self.run, self.calls = run, 0

    def __call__(self, *a):
        self.calls += 1
        return self.run(*a)


def _plan(traced, x, t):
    plan = traced.executor("forward").grad_plan_for((x, t))
    plan.backward = _Counted(plan.backward)
    return plan


@pytest.mark.parametrize("dtype,rtol", [(sm.float64, 1e-9), (sm.float32, 2e-5)])
def test_loss_backward_takes_the_gradients_computed_with_the_loss(dtype, rtol) -> None:
    model, eager, traced, x, t = _setup(dtype)
    plan = _plan(traced, x, t)
    assert plan.seeded is not None
    want_loss = eager(x, t)
    want_loss.backward()
    want = _grads(model)
    loss = traced(x, t)
    assert loss.grad_fn.name() == COMPILED
    np.testing.assert_allclose(loss.item(), want_loss.item(), rtol=rtol)
    loss.backward()
    _assert_grads(_grads(model), want, rtol)
    assert plan.backward.calls == 0          # the unit-seed gradients, not the backward graph


def test_the_fused_forward_computes_loss_and_gradients_in_one_kernel() -> None:
    model, x = nn.Sequential(nn.GELU(), nn.PReLU(), nn.Tanh()), sm.randn(64, 256)
    t = sm.randn(64, 256)
    traced = sm.jit.trace(WithLoss(model), (x, t))
    seeded = traced.executor("forward").grad_plan_for((x, t)).split.seeded
    kinds = [n.kind for n in seeded.nodes]
    assert "sm::mse_loss" not in kinds
    assert sum(k.startswith("prim::FusionGroup") for k in kinds) == 1, seeded


@pytest.mark.parametrize("how", ["backward(g)", "hook", "grad_outputs"])
def test_any_other_seed_runs_the_backward_graph(how: str) -> None:
    model, eager, traced, x, t = _setup()
    plan = _plan(traced, x, t)
    results = []
    for f in (eager, traced):
        loss = f(x, t)
        if how == "backward(g)":
            loss.backward(sm.tensor(2.5, dtype=sm.float64))
            results.append(_grads(model))
        elif how == "hook":
            loss.register_hook(lambda g: g * 3)
            loss.backward()
            results.append(_grads(model))
        else:
            gs = sm.autograd.grad(loss, list(model.parameters()),
                                  sm.tensor(0.5, dtype=sm.float64))
            results.append({n: g.numpy() for (n, _), g in zip(model.named_parameters(), gs)})
    _assert_grads(results[1], results[0])
    assert plan.backward.calls == 1


def test_autograd_grad_at_the_default_seed_leaves_dot_grad_alone() -> None:
    model, eager, traced, x, t = _setup()
    want = sm.autograd.grad(eager(x, t), list(model.parameters()))
    got = sm.autograd.grad(traced(x, t), list(model.parameters()))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-9)
    assert all(p.grad is None for p in model.parameters())


def test_retain_graph_and_accumulation_add_up_as_in_eager() -> None:
    model, eager, traced, x, t = _setup()
    eager(x, t).backward()
    once = _grads(model)
    plan = _plan(traced, x, t)
    loss = traced(x, t)
    loss.backward(retain_graph=True)
    loss.backward(retain_graph=True)
    loss.backward()
    _assert_grads(_grads(model), once, scale=3.0)
    assert plan.backward.calls == 2              # the unit-seed gradients are handed out once
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    for _ in range(2):                           # two calls accumulate into .grad
        traced(x, t).backward()
    _assert_grads(_grads(model), once, scale=2.0)


def test_inputs_and_partial_requires_grad() -> None:
    model, eager, traced, x, t = _setup()
    model.fc1.weight.requires_grad_(False)
    results = []
    for f in (eager, traced):
        xi = x.clone().requires_grad_(True)
        f(xi, t).backward()
        results.append({**_grads(model), "x": xi.grad.numpy()})
    assert results[1]["fc1.weight"] is None
    _assert_grads(results[1], results[0])


def test_a_weight_changed_in_place_before_backward_is_refused_as_in_eager() -> None:
    model, eager, traced, x, t = _setup()
    for f in (eager, traced):
        loss = f(x, t)
        with sm.no_grad():
            model.fc2.weight.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
        model.zero_grad(set_to_none=True)


def test_create_graph_gives_gradients_with_history() -> None:
    model, eager, traced, x, t = _setup()
    results = []
    for f in (eager, traced):
        gs = sm.autograd.grad(f(x, t), [model.fc2.weight], create_graph=True)
        (gs[0] ** 2).sum().backward()
        results.append({"g": gs[0].detach().numpy().copy(), **_grads(model)})
    _assert_grads(results[1], results[0])


@pytest.mark.parametrize("reduction", ["sum", "none"])
def test_other_reductions(reduction: str) -> None:
    model, eager, traced, x, t = _setup(reduction=reduction)
    plan = traced.executor("forward").grad_plan_for((x, t))
    assert (plan.seeded is not None) == (reduction == "sum")   # only a scalar is seeded
    results = []
    for f in (eager, traced):
        loss = f(x, t)
        (loss if reduction == "sum" else loss.sum()).backward()
        results.append(_grads(model))
    _assert_grads(results[1], results[0])


def _eager_then_traced(model, eager, traced, x, t) -> dict:
    """Eager's loss and gradients, then the traced call's: equal; returns eager's."""
    eager(x, t).backward()
    want = _grads(model)
    loss = traced(x, t)
    np.testing.assert_allclose(loss.item(), eager(x, t).item(), rtol=1e-9)
    loss.backward()
    _assert_grads(_grads(model), want)
    return want


def test_another_batch_size_gives_eagers_gradients() -> None:
    model, eager, traced, _, _ = _setup(batch=6)
    for batch in (6, 11, 1):
        x, t = sm.randn(batch, 8, dtype=sm.float64), sm.randn(batch, 4, dtype=sm.float64)
        want = _eager_then_traced(model, eager, traced, x, t)


def test_unfused_calls_run_the_backward_graph() -> None:
    model, eager, _, x, t = _setup()
    with sm.jit.fuser(False):
        traced = sm.jit.trace(eager, (x, t))
        plan = _plan(traced, x, t)
        assert plan.seeded is None
        _assert_same_gradients(model, eager, traced, x, t)
    assert plan.backward.calls == 1


def test_expand_losses_writes_mse_as_elementwise_ops_and_a_reduction() -> None:
    src = '''graph(%x : {t}(8, 64), %t : {t}(8, 64)):
  %l : {o} = sm::mse_loss[reduction="{r}"](%x, %t)
  return (%l)
'''
    for r, out in (("mean", "Float()"), ("sum", "Float()"), ("none", "Float(8, 64)")):
        g = expand_losses(parse(src.format(t="Float", o=out, r=r)))
        kinds = [n.kind for n in g.nodes]
        assert kinds[:2] == ["sm::sub", "sm::mul"] and "sm::mse_loss" not in kinds
        assert kinds[2:] == ([] if r == "none" else [f"sm::{r}"])
    half = expand_losses(parse(src.format(t="Half", o="Half()", r="mean")))
    assert [n.kind for n in half.nodes] == ["sm::mse_loss"]      # eager's rounding: one op


def test_in_eval_mode_the_call_runs_the_plain_forward() -> None:
    """A loss computed with grad enabled in eval mode (a validation loss without no_grad)
    does not pay for the gradients; its backward, if any, runs the backward graph."""
    model, eager, traced, x, t = _setup()
    plan = _plan(traced, x, t)
    eager.eval(), traced.eval()
    want = _eager_then_traced(model, eager, traced, x, t)
    assert plan.backward.calls == 1
    traced.train()
    traced(x, t).backward()
    _assert_grads(_grads(model), want)
    assert plan.backward.calls == 1


def test_cross_entropy_traced_with_the_model() -> None:
    sm.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5)).double()

    class CE(nn.Module):
        def __init__(self, m: nn.Module) -> None:
            super().__init__()
            self.m = m

        def forward(self, x: sm.Tensor, y: sm.Tensor) -> sm.Tensor:
            return F.cross_entropy(self.m(x), y, label_smoothing=0.1)
    x, y = sm.randn(6, 8, dtype=sm.float64), sm.tensor([0, 1, 2, 3, 4, 0])
    eager = CE(model)
    traced = sm.jit.trace(eager, (x, y))
    plan = _plan(traced, x, y)
    assert plan.seeded is not None
    _assert_same_gradients(model, eager, traced, x, y)
    assert plan.backward.calls == 0


@NEEDS_STATM
def test_training_steps_through_the_unit_seed_hold_rss_flat() -> None:
    model, eager, traced, x, t = _setup(sm.float32, batch=64)
    opt = sm.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        traced(x, t).backward()
        opt.step()
    assert_rss_flat(step)


def test_training_graph_for_shows_what_a_training_call_runs() -> None:
    model, eager, traced, x, t = _setup()
    g = traced.training_graph_for(x, t)
    n_leaves = len(list(model.parameters()))
    assert len(g.outputs) >= 1 + n_leaves          # the loss, saved values, the gradients
    assert g is traced.executor("forward").grad_plan_for((x, t)).split.seeded
    plain = sm.jit.trace(model, x)
    assert plain.training_graph_for(x) is plain.executor("forward").grad_plan_for((x,)).split.forward
    assert [v.debug_name for v in traced.backward_graph_for(x, t).inputs][-1] == "grad_0"


def test_gradients_folded_at_the_unit_seed_are_the_callers_own() -> None:
    """At seed 1 a gradient can fold to a constant (d/dx of x.sum() is ones): ``.grad``
    gets a writable array of its own, so scaling it in place (``clip_grad_norm_``) never
    changes what the next call hands out."""
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(sm.randn(4))

        def forward(self, x: sm.Tensor) -> sm.Tensor:
            return x.sum() + self.w.sum() * 2

    m, x = M(), sm.randn(3, 4).requires_grad_(True)
    traced = sm.jit.trace(m, x)
    assert traced.executor("forward").grad_plan_for((x,)).seeded is not None
    for _ in range(3):
        m.zero_grad(set_to_none=True)
        x.grad = None
        traced(x).backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.ones((3, 4)))
        np.testing.assert_array_equal(m.w.grad.numpy(), np.full(4, 2.0))
        x.grad.mul_(0.5)
        sm.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
