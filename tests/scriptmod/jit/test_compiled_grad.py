"""The compiled backward (``jit._autodiff``, ``jit._compiled_grad``): a traced module called
with grad enabled runs its compiled forward and attaches one autograd node whose backward is
a compiled graph. Gradients equal eager autograd on the op table and W1–W5; the engine's
features (hooks, retain_graph, accumulation, partial requires_grad, inputs that need grad,
double backward) behave as in eager; the backward graph verifies and round-trips."""
from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.autograd import gradcheck
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.ir.parser import parse
from scriptmod.ir.verify import verify
from tests.rss import NEEDS_STATM, assert_rss_flat

sys.path.insert(1, __file__.rsplit("/jit/", 1)[0])    # tests/scriptmod: the op table
import op_cases as OC  # noqa: E402
from test_ops import GRAD_PARAMS, _grad_fn  # noqa: E402

COMPILED = "CompiledFunctionBackward0"
# ops whose derivative may not be built in the IR (dropout with p = 1 replays its rule's
# special case, a boolean mask's size is data): some samples' gradients run op by op
OP_BY_OP = {"dropout", "index", "index_put"}


def _flat(x):
    return list(x) if isinstance(x, tuple) else [x]


@pytest.mark.parametrize("op,label", GRAD_PARAMS)
def test_op_table_gradients_through_the_compiled_path(op: str, label: str) -> None:
    """float64: the traced op's gradient equals eager autograd's, and passes gradcheck."""
    sample = next(s for s in OC.grad_samples(OC.CASES[op]) if s.label == label)
    fn, tensors = _grad_fn(op, sample)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = sm.jit.trace(fn, tuple(t.detach().requires_grad_(True) for t in tensors))
    outs = [o for o in _flat(traced(*tensors)) if o.requires_grad]
    if not outs:
        return
    if op not in OP_BY_OP and not any(o is t for o in outs for t in tensors):
        assert outs[0].grad_fn.name() == COMPILED, f"{op}[{label}] ran op by op"
    if op == "dropout":
        return        # a traced draw is not replayed by the seed inside fn: no gradcheck
    rng = np.random.default_rng(0)
    gs = [sm.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype) for o in outs]
    got = sm.autograd.grad(outs, tensors, gs, allow_unused=True)
    want = sm.autograd.grad([o for o in _flat(fn(*tensors)) if o.requires_grad], tensors, gs,
                            allow_unused=True)
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if g is not None:
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-9, atol=1e-12)
    assert gradcheck(traced, tensors, eps=OC.CASES[op].fd_eps, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("wid", ["W1", "W2", "W3", "W4", "W5"])
def test_workload_gradients_equal_eager(wid: str) -> None:
    model, x = WORKLOADS[wid].build(quick=True)
    model, x = model.double().train(), x.double()
    traced = sm.jit.trace(model, x)
    xe, xc = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (model(xe) ** 2).sum().backward()
    want = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    y = traced(xc)
    assert y.grad_fn.name() == COMPILED
    (y ** 2).sum().backward()
    for n, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[n], rtol=1e-9, atol=1e-12, err_msg=n)
    np.testing.assert_allclose(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-9, atol=1e-12)


def _mlp() -> nn.Module:
    sm.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 3))


def test_float32_gradients_and_the_default_call_path() -> None:
    model = _mlp()
    x = sm.randn(5, 6)
    traced = sm.jit.trace(model, x)
    model(x).sum().backward()
    want = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    y = traced(x)                       # no no_grad(): parameters require grad
    assert y.grad_fn.name() == COMPILED and y.requires_grad and not y.is_leaf
    y.sum().backward()
    for p, w in zip(model.parameters(), want):
        np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-5, atol=1e-6)


def test_accumulation_retain_graph_and_the_second_backward_error() -> None:
    model = _mlp()
    x = sm.randn(4, 6)
    traced = sm.jit.trace(model, x)
    y = traced(x).sum()
    y.backward(retain_graph=True)
    once = model[0].weight.grad.numpy().copy()
    y.backward()                           # the retained graph runs again: grads add up
    np.testing.assert_allclose(model[0].weight.grad.numpy(), 2 * once, rtol=1e-6)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()
    traced(x).sum().backward()             # a fresh call accumulates into .grad as well
    np.testing.assert_allclose(model[0].weight.grad.numpy(), 3 * once, rtol=1e-6)


def test_hooks_on_parameters_and_outputs() -> None:
    model = _mlp()
    x = sm.randn(4, 6)
    traced = sm.jit.trace(model, x)
    seen = []
    h = model[2].bias.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2)
    y = traced(x)
    y.register_hook(lambda g: g * 3)
    y.sum().backward()
    h.remove()
    np.testing.assert_allclose(seen[0], np.full(3, 3.0 * 4), rtol=1e-6)   # dL/db = 3 * batch
    np.testing.assert_allclose(model[2].bias.grad.numpy(), np.full(3, 24.0), rtol=1e-6)


def test_only_some_parameters_require_grad_and_inputs_that_need_grad() -> None:
    model = _mlp()
    x = sm.randn(4, 6)
    traced = sm.jit.trace(model, x)
    model[0].weight.requires_grad_(False)
    a = sm.randn(4, 6, requires_grad=True)
    xin = a * 2                            # a non-leaf input: the gradient flows on to a
    traced(xin).sum().backward()
    assert model[0].weight.grad is None and model[0].bias.grad is not None
    got_a, got_b = a.grad.numpy().copy(), model[0].bias.grad.numpy().copy()
    a.grad = None
    model.zero_grad(set_to_none=True)
    model(a * 2).sum().backward()
    np.testing.assert_allclose(got_a, a.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, model[0].bias.grad.numpy(), rtol=1e-5, atol=1e-6)
    model[0].weight.requires_grad_(True)   # another pattern: another plan, same results
    traced(x).sum().backward()
    assert model[0].weight.grad is not None


def test_nothing_requires_grad_gives_plain_outputs() -> None:
    model = _mlp()
    x = sm.randn(4, 6)
    traced = sm.jit.trace(model, x)
    for p in model.parameters():
        p.requires_grad_(False)
    y = traced(x)
    assert not y.requires_grad and y.grad_fn is None


def test_other_batch_sizes_get_their_own_backward() -> None:
    model = _mlp()
    traced = sm.jit.trace(model, sm.randn(4, 6))
    for n in (1, 7):
        x = sm.randn(n, 6)
        traced(x).pow(2).sum().backward()
        got = model[0].weight.grad.numpy().copy()
        model.zero_grad(set_to_none=True)
        model(x).pow(2).sum().backward()
        np.testing.assert_allclose(got, model[0].weight.grad.numpy(), rtol=1e-5, atol=1e-6)
        model.zero_grad(set_to_none=True)


def test_double_backward_reruns_op_by_op(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SCRIPTMOD_LOG", "autograd")
    sm.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1)).double()
    x = sm.randn(4, 3, dtype=sm.float64, requires_grad=True)
    traced = sm.jit.trace(model, x)
    (gx,) = sm.autograd.grad(traced(x).sum(), x, create_graph=True)
    gx.pow(2).sum().backward()
    got = model[0].weight.grad.numpy().copy()
    model.zero_grad(set_to_none=True)
    (ge,) = sm.autograd.grad(model(x).sum(), x, create_graph=True)
    ge.pow(2).sum().backward()
    np.testing.assert_allclose(gx.detach().numpy(), ge.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(got, model[0].weight.grad.numpy(), rtol=1e-10)
    assert "create_graph=True" in capsys.readouterr().err


def test_parameter_changed_in_place_before_backward_is_an_error() -> None:
    model = _mlp()
    x = sm.randn(4, 6)
    traced = sm.jit.trace(model, x)
    y = traced(x).sum()
    with sm.no_grad():
        model[2].weight.mul_(2)            # saved for the backward (dL/dh = g W2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    y = traced(x).sum()
    with sm.no_grad():
        model[0].weight.add_(1)            # not saved (x needs no gradient): no error, and
    y.backward()                           # the gradients are those of the forward that ran
    got = model[0].weight.grad.numpy().copy()
    with sm.no_grad():
        model[0].weight.sub_(1)
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()             # (w + 1 - 1 rounds: float32 tolerance)
    np.testing.assert_allclose(got, model[0].weight.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_what_cannot_be_compiled_runs_op_by_op_and_says_why(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SCRIPTMOD_LOG", "autograd")
    sm.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
    x = sm.randn(3, 4)
    traced = sm.jit.trace(lambda x: model(x[x > 0].reshape(1, -1)[:, :4]).sum(), x,
                          check_trace=False, strict=False)
    xs = sm.tensor(np.abs(x.numpy()) + 0.1, requires_grad=True)   # every element kept
    y = traced(xs)
    assert y.grad_fn.name() != COMPILED
    y.backward()
    got = xs.grad.numpy().copy()
    xs.grad = None
    model(xs[xs > 0].reshape(1, -1)[:, :4]).sum().backward()
    np.testing.assert_allclose(got, xs.grad.numpy(), rtol=1e-6)
    assert "runs op by op" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="op by op"):
        traced.backward_graph_for(xs)


def test_a_convolutional_net_trains_compiled() -> None:
    """conv2d, BatchNorm2d, max and average pooling: their backward kernels are registry ops,
    so the compiled backward records them."""
    sm.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, stride=2, groups=2),
                          nn.AvgPool2d(2), nn.Flatten(), nn.Linear(8, 4)).double().train()
    x = sm.randn(2, 3, 12, 12, dtype=sm.float64, requires_grad=True)
    traced = sm.jit.trace(model, x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    y = traced(x)
    assert y.grad_fn.name() == COMPILED
    (y ** 2).sum().backward()
    got = [p.grad.numpy().copy() for p in model.parameters()] + [x.grad.numpy().copy()]
    model.load_state_dict(state)
    model.zero_grad(set_to_none=True)
    x.grad = None
    (model(x) ** 2).sum().backward()
    want = [p.grad.numpy() for p in model.parameters()] + [x.grad.numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_backward_graph_verifies_round_trips_and_has_kernels() -> None:
    model = _mlp()
    x = sm.randn(4, 6)
    traced = sm.jit.trace(model, x)
    g = traced.backward_graph_for(x)
    assert g is traced.graph_for(x, backward=True)
    verify(g)
    assert str(parse(str(g))) == str(g)
    assert g.inputs[-1].debug_name == "grad_0" and len(g.outputs) == 4
    assert any(n.kind == "prim::FusionGroup" for n in g.nodes)
    ks = sm.jit.kernels_for(traced, x, backward=True)
    assert ks and "define void" in ks[0].llvm_ir


def test_recomputation_saves_only_the_gemm_output() -> None:
    """GELU's chain is recomputed in the backward from the first Linear's GEMM output."""
    model = _mlp()
    x = sm.randn(32, 6)
    traced = sm.jit.trace(model, x)
    plan = traced.executor("forward").grad_plan_for((x,))
    assert plan.split.saved_bytes == 32 * 16 * 4
    assert plan.split.saved_bytes_unpruned > 3 * plan.split.saved_bytes


@NEEDS_STATM
def test_training_steps_hold_rss_flat() -> None:
    model = _mlp()
    x, t = sm.randn(64, 6), sm.randn(64, 3)
    traced = sm.jit.trace(model, x)
    opt = sm.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        ((traced(x) - t) ** 2).mean().backward()
        opt.step()
    assert_rss_flat(step)


def test_dropout_saves_its_mask_and_matches_eager_draw_for_draw() -> None:
    sm.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2)).train()
    x = sm.randn(5, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = sm.jit.trace(model, x, check_trace=False)
    sm.manual_seed(3)
    y = traced(x)
    assert y.grad_fn.name() == COMPILED
    y.pow(2).sum().backward()
    got = model[0].weight.grad.numpy().copy()
    model.zero_grad(set_to_none=True)
    sm.manual_seed(3)
    ye = model(x)
    ye.pow(2).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ye.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(got, model[0].weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    model.eval()                         # the mask is ones: eval's output and gradient
    traced(x).sum().backward()


def test_weight_gradients_come_out_contiguous() -> None:
    """A Linear's weight gradient is computed as gᵀx, not as the transposed view (xᵀg)ᵀ."""
    model = _mlp()
    x = sm.randn(4, 6)
    traced = sm.jit.trace(model, x)
    traced(x).sum().backward()
    assert all(p.grad._data.flags.c_contiguous for p in model.parameters())
    assert "sm::transpose[dim0=0, dim1=1](%" not in str(traced.backward_graph_for(x)).split(
        "return")[-2].splitlines()[-1]


def test_a_scripted_sequential_trains_through_the_compiled_backward(tmp_path) -> None:
    """``jit.script(nn.Sequential(...))`` (its own forward takes ``Any``) scripts, saves,
    loads, and its gradient is compiled; a scripted loop on the gradient's path is not."""
    model = _mlp()
    x = sm.randn(4, 6)
    scripted = sm.jit.script(model)
    scripted.save(str(tmp_path / "seq.smod"))
    loaded = sm.jit.load(str(tmp_path / "seq.smod"))
    for compiled in (scripted, loaded):
        y = compiled(x)
        assert y.grad_fn.name() == COMPILED
        y.sum().backward()
    model.zero_grad(set_to_none=True)
    scripted(x).sum().backward()
    got = model[0].weight.grad.numpy().copy()
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    np.testing.assert_allclose(got, model[0].weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_batch_norm_trains_compiled_in_both_modes() -> None:
    """batch_norm's backward differs between training and eval: grad plans are keyed by the
    module flags the graph reads, and the fast path notices a .train()/.eval() switch."""
    sm.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    model = model.double().train()
    x = sm.randn(6, 4, dtype=sm.float64)
    traced = sm.jit.trace(model, x)
    for mode in ("train", "eval", "train", "eval"):
        getattr(model, mode)()
        getattr(traced, mode)()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        model.zero_grad(set_to_none=True)
        y = traced(x)
        assert y.grad_fn.name() == COMPILED
        (y ** 2).sum().backward()
        got = [p.grad.numpy().copy() for p in model.parameters()]
        stats = model[1].running_mean.numpy().copy()
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        (model(x) ** 2).sum().backward()
        for g, p in zip(got, model.parameters()):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stats, model[1].running_mean.numpy(), rtol=1e-12)


def test_a_parameter_rewrapped_around_the_same_array_gets_the_gradient() -> None:
    sm.manual_seed(0)
    traced = sm.jit.trace(nn.Sequential(nn.Linear(4, 3)), sm.randn(2, 4))
    x = sm.randn(2, 4)
    traced(x).sum().backward()
    layer = getattr(traced, "0")
    old = layer.weight
    before = old.grad.numpy().copy()
    layer.weight = nn.Parameter(old.detach())        # same array, another Parameter
    traced(x).sum().backward()
    assert layer.weight.grad is not None
    np.testing.assert_array_equal(old.grad.numpy(), before)


def test_detach_and_data_are_recorded_and_cut_the_gradient() -> None:
    """``x.detach()``/``x.data`` in traced code read the value at run time (they used to be
    baked in as constants) and stop the gradient, compiled or not."""
    traced = sm.jit.trace(lambda x: x.data * 2 + x.detach().exp() + x * x, sm.randn(3))
    x = sm.tensor([0.5, 1.0, -2.0], requires_grad=True)
    y = traced(x)
    want = 2 * x.detach().numpy() + np.exp(x.detach().numpy()) + x.detach().numpy() ** 2
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-6)
    assert y.grad_fn.name() == COMPILED
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-6)


def test_unfused_specializations_compile_their_backward_too() -> None:
    """With fusion off the backward is compiled unfused, without recomputation (each
    recomputed op would be a pass of its own)."""
    model = _mlp()
    x = sm.randn(5, 6)
    traced = sm.jit.trace(model, x)
    with sm.jit.fuser(False):
        y = traced(x)
        assert y.grad_fn.name() == COMPILED
        y.pow(2).sum().backward()
        plan = traced.executor("forward").grad_plan_for((x,))
    assert plan.split.saved_bytes == plan.split.saved_bytes_unpruned
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model(x).pow(2).sum().backward()
    for g, p in zip(got, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)
