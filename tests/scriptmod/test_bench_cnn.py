"""The convolutional rows of ``scriptmod bench`` (issue 40): C1 ResNet-18, C2 MobileNetV2,
TC1 one ResNet-18 training step, M1 the MNIST net, CONV1–CONV5 single convolutions.

The architectures are torchvision's and pytorch/examples' (parameter counts, state-dict
keys), their FLOPs agree with PyTorch's own counter, the PyTorch twins hold the same
weights and compute the same outputs, the frozen rows fold BatchNorm on both sides, TC1
steps its cross-entropy with SGD and momentum on both sides, and the report gives GFLOP/s.
Quick sizes; the quick run of every row (compiled against eager) is
``test_bench_cli.test_quick_bench_every_workload_matches_eager``. No timing is asserted."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.bench import (
    cli,
    cnn,
    floors,
    report,
    runner,
    torch_ref,
    torch_train,
    training,
)
from scriptmod.bench.workloads import GROUPS, WORKLOADS


def _torch() -> Any:
    return pytest.importorskip("torch")


def _count(model: sm.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_architectures_are_torchvisions_and_pytorch_examples() -> None:
    sm.manual_seed(0)
    resnet, mobilenet = cnn.build(cnn.Recipe("ResNet")), cnn.build(cnn.Recipe("MobileNetV2"))
    # torchvision.models.resnet18() / mobilenet_v2() and pytorch/examples' mnist Net
    assert (_count(resnet), _count(mobilenet)) == (11_689_512, 3_504_872)
    assert _count(cnn.build(cnn.Recipe("MnistNet"))) == 1_199_882
    keys = set(resnet.state_dict())
    assert {"conv1.weight", "bn1.running_var", "layer2.0.downsample.0.weight",
            "layer4.1.bn2.num_batches_tracked", "fc.bias"} <= keys
    assert "layer1.0.downsample.0.weight" not in keys          # same shape: no downsample
    assert {"features.0.0.weight", "features.1.conv.0.0.weight", "features.2.conv.1.0.weight",
            "features.18.1.running_mean", "classifier.1.weight"} <= set(mobilenet.state_dict())


def test_batchnorm_statistics_are_those_of_a_trained_network() -> None:
    sm.manual_seed(0)
    bn = cnn.build(cnn.Recipe("ResNet", {"width": 8, "num_classes": 10})).bn1
    assert not np.allclose(bn.running_var.numpy(), 1) and not np.allclose(bn.weight.detach().numpy(), 1)
    assert (bn.running_var.numpy() >= 0.5).all()


@pytest.mark.parametrize("recipe, shape", [
    (cnn.Recipe("ResNet", {"width": 8, "num_classes": 10}), (3, 3, 32, 32)),
    (cnn.Recipe("MobileNetV2", {"width_mult": 0.25, "num_classes": 10}), (2, 3, 40, 40)),
    (cnn.Recipe("MnistNet"), (5, 1, 28, 28)),
    (cnn.Recipe("Conv2d", {"in_channels": 6, "out_channels": 6, "kernel_size": 3,
                           "padding": 1, "groups": 3, "bias": False}), (2, 6, 9, 7)),
])
def test_flops_agree_with_torchs_flop_counter(recipe: cnn.Recipe, shape: tuple[int, ...]) -> None:
    torch = _torch()
    from torch.utils.flop_counter import FlopCounterMode
    model = cnn.build(recipe).train()
    before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        cnn.twin(recipe, torch.nn).eval()(torch.zeros(*shape))
    assert floors.matmul_flops(model, shape) == counter.get_total_flops()
    assert all(m.training for m in model.modules())             # modes restored
    assert all(np.array_equal(v.detach().numpy(), before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("wid", ["C1", "C2", "M1", "CONV5"])
def test_twin_holds_the_same_weights_and_agrees(wid: str) -> None:
    check_twin(wid)


def check_twin(wid: str) -> None:
    """Quick ``wid``'s PyTorch twin, loaded with its weights, computes its output (the
    recurrent rows' test uses this too)."""
    torch = _torch()
    model, x = WORKLOADS[wid].build(quick=True)
    twin = torch_ref.build_twin(wid, torch_ref.dims_of(wid, model), torch_ref.weights_of(model))
    with sm.no_grad(), torch.no_grad():
        match = runner.compare(twin(torch.from_numpy(x.numpy())), runner.host64(model(x)),
                               "float32")
    assert match.ok, match.detail


def test_frozen_rows_fold_batchnorm_and_match_eager() -> None:
    w = WORKLOADS["C1"]
    model, x = w.build(quick=True)
    with sm.no_grad():
        compiled = runner.compile_model(w, model, x)
        assert list(compiled.parameters()) == [] and "batch_norm" not in str(compiled.graph)
        assert runner.compare(compiled(x), runner.host64(model(x)), "float32").ok
    assert torch_ref.columns(w.script, w.train, w.freeze) == torch_ref.FROZEN_COLUMNS


def test_tc1_steps_cross_entropy_with_sgd_momentum() -> None:
    w = WORKLOADS["TC1"]
    assert (w.train, w.loss, w.optimizer, w.shape) == (True, "cross_entropy", "sgd_momentum",
                                                       (8, 3, 64, 64))
    model, x = w.build(quick=True)
    target = training.target_for(model, x, w.loss)
    assert target.dtype == sm.int64 and tuple(target.shape) == (x.shape[0],)
    with_loss = training.WithLoss(model, w.loss)            # the compiled rows: its trace
    with sm.no_grad():
        want = sm.nn.functional.cross_entropy(model(x), target)
    assert float(with_loss(x, target)) == pytest.approx(float(want), rel=1e-6)
    step = training.compiled_step(with_loss, x, target, w.optimizer)
    assert type(step.opt).__name__ == "SGD" and step.opt.defaults["momentum"] == 0.9
    start = training.snapshot(model)
    step()
    assert not np.array_equal(training.snapshot(model)["fc.weight"], start["fc.weight"])


def _child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wid: str) -> tuple[Any, dict]:
    """The PyTorch side of quick ``wid`` run in this process (torch.compile: the identity)."""
    torch = _torch()
    w = WORKLOADS[wid]
    model, x = w.build(quick=True)
    opts = runner.BenchOptions(quick=True, repeat=1, budget_s=0.001)
    if w.train:
        target = training.target_for(model, x, w.loss)
        ref = training.gradients(training.WithLoss(model, w.loss), model, x, target)
        side = torch_ref.TorchSide.create(w, model, x, ref, opts, target)
    else:
        with sm.no_grad():
            side = torch_ref.TorchSide.create(w, model, x, runner.host64(model(x)), opts)
    torch_ref.write_job(tmp_path, side.job, opts)
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: m)
    return side, torch_ref._child_main(str(tmp_path))


def test_torch_side_of_tc1_trains_with_the_same_loss_and_optimizer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    side, out = _child(tmp_path, monkeypatch, "TC1")
    assert side.columns == torch_ref.TRAIN_COLUMNS and "error" not in out, out
    for name in torch_ref.TRAIN_COLUMNS:
        assert out[name]["match"]["ok"], (name, out[name]["match"])
    torch = _torch()
    opt = torch_train.torch_optimizer("sgd_momentum", [torch.zeros(1, requires_grad=True)])
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["momentum"] == 0.9


def test_torch_side_of_a_frozen_row_is_optimize_for_inference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    side, out = _child(tmp_path, monkeypatch, "C2")
    assert side.columns == torch_ref.FROZEN_COLUMNS and "error" not in out, out
    for name in torch_ref.FROZEN_COLUMNS:
        assert out[name]["match"]["ok"], (name, out[name]["match"])


def test_groups_name_several_rows() -> None:
    args = argparse.Namespace(workload="c1,CONV", threads=None, batch=None, repeat=None,
                              json=None, plot=None, device="cpu", quick=True, dtype="float32",
                              budget=None, compare=None, torch_compile_timeout=1.0,
                              compile_time=False, background_load=False)
    assert cli.options(args).workloads == ["C1", "CONV1", "CONV2", "CONV3", "CONV4", "CONV5"]
    assert GROUPS["CNN"] == ("C1", "C2", "TC1", "M1", "CONV1", "CONV2", "CONV3", "CONV4",
                             "CONV5")


def test_rate_table_gives_gflops_and_fused_against_torch_eager() -> None:
    res = runner.WorkloadResult(WORKLOADS["CONV1"], (8, 64, 56, 56), (8, 64, 56, 56), "float32")
    res.floor_work = 2e9                                          # 2 GFLOP per call
    res.times.update({"eager": runner.Timing(0.1, 0.1, 0.1, 3, 1),
                      "fused": runner.Timing(0.02, 0.02, 0.02, 3, 1),
                      "torch_eager": runner.Timing(0.01, 0.01, 0.01, 3, 1)})
    machine = {"cpu": "test", "usable_cpus": 1,
               "threads": {"scriptmod": 1, "blas": 1, "blas_set_by": "default"}}
    rates = floors.Rates(1e10, 2e11, "float32", "cpu")
    text = report.rate_table(runner.BenchReport(runner.BenchOptions(), machine, rates, [res]))
    assert text.splitlines()[0].split() == ["workload", "(GFLOP/s)", "eager", "fused",
                                            "torch", "eager", "fused", "/", "torch", "eager"]
    assert text.splitlines()[2].split()[-4:] == ["20.0", "100.0", "200.0", "0.50x"]
    assert "matmul peak (the floor) 200.0 GFLOP/s" in text
