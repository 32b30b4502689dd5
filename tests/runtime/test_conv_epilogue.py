"""A traced CNN's convolutions run with their epilogues (``runtime.epilogue`` kind ``conv``,
``runtime.conv_epilogue``): ``Conv -> BatchNorm -> ReLU``, ``... + identity``, a BatchNorm
folded into its convolution with no group after it, depthwise and strided convolutions, at
the traced batch size and another, in eval mode (folded, fused) and after ``.train()``
(batch statistics: node by node, the running statistics updated as eager updates them)."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn


class Block(nn.Module):
    """ResNet's BasicBlock with a downsample, then MobileNet's linear projection."""

    def __init__(self, c: int, o: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, o, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(o)
        self.conv2 = nn.Conv2d(o, o, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(o)
        self.down = nn.Sequential(nn.Conv2d(c, o, 1, stride, bias=False), nn.BatchNorm2d(o))
        self.dw = nn.Conv2d(o, o, 3, 1, 1, groups=o)
        self.bn3 = nn.BatchNorm2d(o)
        self.proj = nn.Conv2d(o, o, 1)
        self.bn4 = nn.BatchNorm2d(o)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        y = sm.relu(self.bn1(self.conv1(x)))
        y = sm.relu(self.bn2(self.conv2(y)) + self.down(x))
        y = nn.functional.relu6(self.bn3(self.dw(y)))
        return self.bn4(self.proj(y))


def _randomize_stats(m: nn.Module) -> None:
    rng = np.random.default_rng(0)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            c = mod.num_features
            mod.running_mean.copy_(sm.tensor(rng.standard_normal(c).astype(np.float32)))
            mod.running_var.copy_(sm.tensor(rng.uniform(0.5, 2, c).astype(np.float32)))
            mod.weight.data.copy_(sm.tensor(rng.uniform(0.5, 1.5, c).astype(np.float32)))
            mod.bias.data.copy_(sm.tensor(rng.standard_normal(c).astype(np.float32)))


def _steps(traced, x) -> dict[str, list[str]]:
    spec = traced.executor("forward").specialize((x,))
    out: dict[str, list[str]] = {}
    for node, d in spec.executable.steps.decisions.items():
        out.setdefault(node.kind, []).append(d.step)
    return out


@pytest.mark.parametrize("c, o, stride", [(16, 16, 1), (13, 24, 2)])
def test_eval_block_is_fused_and_equals_eager(c: int, o: int, stride: int) -> None:
    sm.manual_seed(0)
    m = Block(c, o, stride).eval()
    _randomize_stats(m)
    x = sm.randn(2, c, 15, 17)
    with sm.no_grad():
        traced = jit.trace(m, x)
        steps = _steps(traced, x)
        # every BatchNorm is folded: three into an epilogue group's chain, one alone
        assert steps["sm::batch_norm"].count("epilogue") == 5, steps
        assert steps["sm::conv2d"] == ["epilogue"] * 5, steps
        for batch in (2, 3, 1):
            xb = sm.randn(batch, c, 15, 17)
            np.testing.assert_allclose(traced(xb).numpy(), m(xb).numpy(), rtol=1e-4, atol=1e-4)


def test_train_mode_after_trace_uses_batch_statistics_and_updates_running_stats() -> None:
    sm.manual_seed(1)
    m = Block(8, 8, 1).eval()
    x = sm.randn(4, 8, 9, 9)
    with sm.no_grad():
        traced = jit.trace(m, x)
        traced(x)                                  # eval: folded
        twin = copy.deepcopy(m).train()
        traced.train()
        got = traced(x).numpy()
        want = twin(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for (name, a), (_, b) in zip(traced.named_buffers(), twin.named_buffers()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_gradients_through_a_traced_conv_block_equal_eager() -> None:
    sm.manual_seed(2)
    m = Block(6, 8, 2).eval()
    _randomize_stats(m)
    x = sm.randn(3, 6, 11, 10)
    traced = jit.trace(m, x)
    twin = copy.deepcopy(m)
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    traced(xs[0]).square().sum().backward()
    twin(xs[1]).square().sum().backward()
    np.testing.assert_allclose(xs[0].grad.numpy(), xs[1].grad.numpy(), rtol=1e-3, atol=1e-4)
    for (name, p), (_, q) in zip(traced.named_parameters(), twin.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-3,
                                   err_msg=name)


@pytest.mark.parametrize("rank", [1, 3])
def test_conv_relu_epilogue_at_other_ranks(rank: int) -> None:
    conv = {1: nn.Conv1d, 3: nn.Conv3d}[rank]
    sm.manual_seed(3)
    m = nn.Sequential(conv(5, 7, 3, padding=1, dilation=1, bias=True), nn.SiLU()).eval()
    x = sm.randn(2, 5, *([6] * rank))
    with sm.no_grad():
        traced = jit.trace(m, x)
        assert "epilogue" in _steps(traced, x)[f"sm::conv{rank}d"]
        np.testing.assert_allclose(traced(x).numpy(), m(x).numpy(), rtol=1e-4, atol=1e-5)


def test_non_contiguous_input_and_float64_fall_back_correctly() -> None:
    sm.manual_seed(4)
    m = nn.Sequential(nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6), nn.ReLU()).eval()
    _randomize_stats(m)
    x = sm.randn(2, 4, 12, 10)
    with sm.no_grad():
        traced = jit.trace(m, x)
        xt = sm.randn(2, 4, 10, 12).transpose(2, 3)
        np.testing.assert_allclose(traced(xt).numpy(), m(xt).numpy(), rtol=1e-4, atol=1e-5)
        m64 = copy.deepcopy(m).double()
        t64 = jit.trace(m64, x.double())
        np.testing.assert_allclose(t64(x.double()).numpy(), m64(x.double()).numpy(),
                                   rtol=1e-10, atol=1e-12)
