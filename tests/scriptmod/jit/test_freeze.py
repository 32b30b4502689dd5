"""``jit.freeze`` / ``jit.optimize_for_inference``: parameters, buffers and flags become
constants of the graph, BatchNorm folds into the layer before it, dropout goes; outputs stay
eager's at any batch size, and the frozen module saves and loads (PyTorch's semantics)."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.fc, self.bn3 = nn.Linear(8, 6), nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(6, 4)

    def forward(self, x):
        y = self.bn1(self.conv1(x)).relu()
        y = self.bn2(self.conv2(y)).relu().mean(dim=(2, 3))
        return self.head(self.drop(self.bn3(self.fc(y)).relu()))

    def encode(self, x):
        return self.bn1(self.conv1(x))


def _randomize_stats(model: nn.Module) -> None:
    """Non-trivial running statistics and affine parameters (fresh ones are 0/1)."""
    with sm.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.running_mean.copy_(sm.randn(m.num_features))
                m.running_var.copy_(sm.rand(m.num_features) + 0.5)
                m.weight.copy_(sm.randn(m.num_features))
                m.bias.copy_(sm.randn(m.num_features))


def _convnet(dtype=sm.float32):
    sm.manual_seed(0)
    model = ConvNet()
    _randomize_stats(model)
    return model.eval().to(dtype)


def _x(batch=4, dtype=sm.float32):
    return sm.randn(batch, 3, 10, 10).to(dtype)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def _kinds(module, method="forward"):
    return [n.kind for n in module._method_graph(method).walk()]


@pytest.mark.parametrize("batch", [4, 1, 9])
def test_frozen_outputs_equal_eager_at_any_batch(batch):
    model = _convnet()
    frozen = jit.freeze(jit.trace(model, _x()))
    x = _x(batch)
    with sm.no_grad():
        _close(frozen(x), model(x))


def test_float64_frozen_outputs_are_tight():
    model = _convnet(sm.float64)
    frozen = jit.freeze(jit.trace(model, _x(dtype=sm.float64)))
    x = _x(5, sm.float64)
    with sm.no_grad():
        _close(frozen(x), model(x), 1e-11)


def test_the_frozen_graph_reads_no_module_state():
    frozen = jit.freeze(jit.trace(_convnet(), _x()))
    kinds = _kinds(frozen)
    for gone in ("prim::GetAttr", "sm::batch_norm", "sm::dropout", "sm::transpose"):
        assert gone not in kinds
    assert kinds.count("sm::conv2d") == 2
    assert list(frozen.parameters()) == [] and list(frozen.buffers()) == []
    assert frozen.state_dict() == {}
    with pytest.raises(AttributeError, match="has no attribute 'training'"):
        frozen.training                                 # torch's frozen module has none
    assert isinstance(frozen, jit.ScriptModule) and len(frozen.code_with_constants[1]) >= 6


def test_a_frozen_sequential_is_a_module_without_members():
    frozen = jit.freeze(jit.trace(nn.Sequential(nn.Linear(3, 2), nn.ReLU()).eval(),
                                  sm.randn(2, 3)))
    assert bool(frozen) and list(frozen.children()) == []
    with pytest.raises(TypeError, match="does not support indexing"):
        frozen[0]


def test_unoptimized_freeze_keeps_batch_norm_as_constants():
    model = _convnet()
    frozen = jit.freeze(jit.trace(model, _x()), optimize_numerics=False)
    kinds = _kinds(frozen)
    assert kinds.count("sm::batch_norm") == 3 and "prim::GetAttr" not in kinds
    assert "sm::dropout" not in kinds
    x = _x(3)
    with sm.no_grad():
        _close(frozen(x), model(x), 1e-6)


def test_changing_the_original_afterwards_does_not_reach_the_frozen_module():
    model = _convnet()
    traced = jit.trace(model, _x())
    frozen = jit.freeze(traced)
    x = _x()
    with sm.no_grad():
        before = frozen(x).clone()
        model.conv1.weight.mul_(3.0)
        model.bn1.running_mean.add_(1.0)
        _close(frozen(x), before, 0)
        assert not np.allclose(traced(x).numpy(), before.numpy())


def test_training_mode_is_refused_with_pytorchs_message():
    traced = jit.trace(_convnet(), _x())
    traced.train()
    with pytest.raises(RuntimeError, match="only implemented for modules in eval mode"):
        jit.freeze(traced)


def test_a_plain_module_is_refused():
    with pytest.raises(RuntimeError, match="expects a ScriptModule"):
        jit.freeze(_convnet())
    with pytest.raises(RuntimeError, match="expects a ScriptModule"):
        jit.optimize_for_inference(_convnet())


def _traced_methods():
    model = _convnet()
    x = _x()
    return model, jit.trace_module(model, {"forward": x, "encode": x})


def test_preserved_method_stays_and_others_go():
    model, traced = _traced_methods()
    assert "encode" not in jit.freeze(traced)._methods
    frozen = jit.freeze(traced, preserved_attrs=["encode"])
    x = _x(2)
    with sm.no_grad():
        _close(frozen.encode(x), model.encode(x))
        _close(frozen(x), model(x))
    assert "sm::batch_norm" not in _kinds(frozen, "encode")


def test_preserved_attribute_stays_an_attribute_of_the_frozen_module():
    model, traced = _traced_methods()
    frozen = jit.freeze(traced, preserved_attrs=["head.bias"])
    assert [name for name, _ in frozen.named_parameters()] == ["head.bias"]
    reads = [n.attrs["name"] for n in frozen.graph.walk() if n.kind == "prim::GetAttr"]
    assert reads == ["head", "bias"]
    x = _x(2)
    with sm.no_grad():
        before = frozen(x)
        frozen.head.bias.add_(1.0)                  # still read at run time
        _close(frozen(x), before + 1.0)
        assert frozen.head.bias is model.head.bias          # shared, as in torch


def test_preserved_submodule_and_flag():
    model, traced = _traced_methods()
    frozen = jit.freeze(traced, preserved_attrs=["bn1", "drop.training"])
    assert sorted(dict(frozen.named_buffers())) == ["bn1.num_batches_tracked",
                                                    "bn1.running_mean", "bn1.running_var"]
    kinds = _kinds(frozen)                                  # both read at run time
    assert "sm::batch_norm" in kinds and "sm::dropout" in kinds and not frozen.drop.training
    x = _x(2)
    with sm.no_grad():
        _close(frozen(x), model(x))
        before = frozen(x)
        frozen.bn1.running_mean.add_(1.0)               # the original's buffer (torch too)
        assert not np.allclose(frozen(x).numpy(), before.numpy())
        _close(frozen(x), model(x))


def test_unknown_preserved_name():
    _, traced = _traced_methods()
    with pytest.raises(RuntimeError, match="'nope'"):
        jit.freeze(traced, preserved_attrs=["nope"])
    with pytest.raises(TypeError, match="preserved_attrs"):
        jit.freeze(traced, preserved_attrs="encode")


class Tied(nn.Module):
    """Shared parameters, a buffer, a plain attribute and two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(5, 5)
        self.b = nn.Linear(5, 5)
        self.b.weight = self.a.weight
        self.register_buffer("offset", sm.randn(5))
        self.scale = 0.5

    def forward(self, x):
        h = self.a(x) + self.offset
        return self.b(h) * self.scale, h.sum(dim=1)


def test_shared_parameters_buffers_and_several_outputs():
    sm.manual_seed(1)
    model = Tied().eval()
    frozen = jit.freeze(jit.trace(model, sm.randn(2, 5)))
    x = sm.randn(6, 5)
    with sm.no_grad():
        for got, want in zip(frozen(x), model(x)):
            _close(got, want)
    assert "prim::GetAttr" not in _kinds(frozen)


def test_save_and_load_a_frozen_module(tmp_path):
    model = _convnet()
    frozen = jit.freeze(jit.trace(model, _x()))
    path = tmp_path / "frozen.smod"
    frozen.save(path)
    again = jit.load(path)
    x = _x(3)
    with sm.no_grad():
        _close(again(x), model(x))
    assert "prim::GetAttr" not in _kinds(again) and list(again.parameters()) == []
    assert "<Tensor>" in str(again.graph)       # payloads live in the archive's weights


def test_optimize_for_inference_removes_batch_norm_and_dropout():
    model = _convnet()
    traced = jit.trace(model, _x())
    fast = jit.optimize_for_inference(traced)
    kinds = _kinds(fast)
    assert "sm::batch_norm" not in kinds and "sm::dropout" not in kinds
    x = _x(7)
    with sm.no_grad():
        _close(fast(x), model(x))


def test_optimize_for_inference_puts_the_module_in_eval_mode_and_keeps_other_methods():
    model, traced = _traced_methods()
    traced.train()
    fast = jit.optimize_for_inference(traced, other_methods=["encode"])
    assert not traced.training
    x = _x(2)
    with sm.no_grad():
        _close(fast.encode(x), model.eval().encode(x))


def test_optimize_for_inference_refuses_a_training_dropout_frozen_in():
    model = _convnet()
    traced = jit.trace(model, _x())
    traced.drop.train()                      # the root is in eval mode, one submodule is not
    frozen = jit.freeze(traced)
    assert "sm::dropout" in _kinds(frozen)
    with pytest.raises(RuntimeError, match="dropout in training mode"):
        jit.optimize_for_inference(frozen)


def test_scripted_module_freezes(tmp_path):
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.bn = nn.Linear(4, 3), nn.BatchNorm1d(3)
            self.register_buffer("shift", sm.ones(3))
            self.scale = 2.0

        def forward(self, x):
            y = self.bn(self.fc(x))
            if self.training:
                y = y * 0.0
            return y * self.scale + self.shift

    sm.manual_seed(2)
    model = Scaled()
    _randomize_stats(model)
    frozen = jit.freeze(jit.script(model.eval()))
    kinds = _kinds(frozen)
    assert "prim::If" not in kinds and "shift" not in dict(frozen.named_buffers())
    x = sm.randn(5, 4)
    with sm.no_grad():
        _close(frozen(x), model(x))
        model.fc.weight.mul_(2.0)      # BatchNorm was folded into it: the fold keeps the old
        assert not np.allclose(frozen(x).numpy(), model(x).numpy())
    # layer calls expand per call signature; each specialization is frozen after expansion
    run = [n.kind for n in frozen.graph_for(x).walk()]
    assert "prim::GetAttr" not in run and "sm::batch_norm" not in run
    frozen.save(tmp_path / "scripted.smod")     # its layers' tensors, folded again at load
    with sm.no_grad():
        _close(jit.load(tmp_path / "scripted.smod")(x), model(x))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")     # torch.jit is deprecated
def test_matches_torch_jit_freeze():
    torch = pytest.importorskip("torch")
    tn = torch.nn

    class TorchNet(tn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = tn.Conv2d(3, 8, 3, padding=1), tn.BatchNorm2d(8)
            self.conv2, self.bn2 = tn.Conv2d(8, 8, 3, padding=1, bias=False), tn.BatchNorm2d(8)
            self.fc, self.bn3 = tn.Linear(8, 6), tn.BatchNorm1d(6)
            self.drop = tn.Dropout(0.3)
            self.head = tn.Linear(6, 4)

        def forward(self, x):
            y = self.bn1(self.conv1(x)).relu()
            y = self.bn2(self.conv2(y)).relu().mean(dim=(2, 3))
            return self.head(self.drop(self.bn3(self.fc(y)).relu()))

    model = _convnet()
    ref = TorchNet()
    ref.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy())
                         for k, v in model.state_dict().items()})
    ref.eval()
    x = _x(3)
    tx = torch.from_numpy(x.numpy().copy())
    want = torch.jit.freeze(torch.jit.trace(ref, tx))(tx).detach().numpy()
    got = jit.freeze(jit.trace(model, x))(x)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-5, atol=1e-5)


def test_gradients_flow_to_the_input_through_constants():
    model = _convnet()
    frozen = jit.freeze(jit.trace(model, _x()))
    a = _x(2).requires_grad_()
    b = a.detach().clone().requires_grad_()
    frozen(a).sum().backward()
    model(b).sum().backward()
    _close(a.grad, b.grad)
