"""The training rows T2, T3, T5 of ``scriptmod bench`` (one forward, MSE loss, backward and
AdamW step of W2, W3, W5): the quick run checks and reports them, the check compares
gradients, the step trains the weights the traced module shares, the floors follow the
issue's definitions, the PyTorch side trains the same weights, W4G / W4 is reported, and
``examples/train_mlp.py --compare`` trains the traced model. No timing is asserted."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.bench import floors, report, runner, torch_ref, training
from scriptmod.bench.check import compare_all
from scriptmod.bench.timing import Timing
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.cli import main

ROOT = Path(__file__).resolve().parents[2]
ROWS = ("T2", "T3", "T5")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    path = tmp_path_factory.mktemp("bench") / "t.json"
    argv = ["bench", "--quick", "--no-progress", "--no-compile-time", "--workload",
            ",".join(ROWS), "--budget", "0.02", "--json", str(path)]
    done = subprocess.run([sys.executable, "-m", "scriptmod.cli", *argv], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr, json.loads(path.read_text())


def test_quick_training_rows_match_eager_and_are_reported(quick_run: tuple[int, str, dict]) -> None:
    rc, out, data = quick_run
    assert rc == 0 and data["ok"], out
    assert [w["id"] for w in data["workloads"]] == list(ROWS)
    for w in data["workloads"]:
        assert w["match"]["fused"]["ok"] and w["match"]["unfused"]["ok"], w["match"]
        assert all(w["times"][v]["median_s"] > 0 for v in ("eager", "unfused", "fused"))
        assert w["floor"]["x_floor"]["fused"] > 0 and w["compile"]["cold_s"] > 0
    for wid in ROWS:
        assert re.search(rf"^{wid} train \S+ .* ok$", out, re.M), out
    assert "Training rows (T2, T3, T5): one training step each" in out


def test_training_rows_are_their_forward_rows_in_train_mode() -> None:
    for tid, wid in zip(ROWS, ("W2", "W3", "W5")):
        t, w = WORKLOADS[tid], WORKLOADS[wid]
        assert (t.shape, t.quick_shape, t.floor) == (w.shape, w.quick_shape, w.floor)
        assert t.train and t.grad and not w.train
        model, _ = t.build(quick=True)
        assert model.training and all(m.training for m in model.modules())
        assert not w.build(quick=True)[0].training


def test_floors_are_three_forward_gemms_and_the_input_and_target_once() -> None:
    model, x = WORKLOADS["T3"].build(quick=True)              # MLP(128, 512), x (32, 128)
    assert floors.training_work("flops", model, (32, 128), (32, 128), 4) == \
        3 * floors.matmul_flops(model, (32, 128))
    assert floors.training_work("bytes", model, (2048, 2048), (2048, 2048), 4) == \
        2 * 2048 * 2048 * 4


def test_compiled_steps_train_the_shared_weights_as_eager_does() -> None:
    model, x = WORKLOADS["T3"].build(quick=True)
    target = training.target_for(model, x)
    start = training.snapshot(model)
    traced = runner.compile_model(WORKLOADS["T3"], model, x)   # the model with its loss
    assert traced(x, target).grad_fn.name() == "CompiledFunctionBackward0"
    losses = {}
    for name, forward in (("eager", training.WithLoss(model)), ("compiled", traced)):
        training.restore(model, start)
        opt = training.make_optimizer("adamw", model.parameters())[0]
        step = training.TrainStep(forward, opt, x, target)
        losses[name] = [float(step().item()) for _ in range(3)]
        assert not np.array_equal(training.snapshot(model)["fc1.weight"], start["fc1.weight"])
    assert losses["eager"][2] < losses["eager"][0]
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=1e-5)
    training.restore(model, start)
    assert all(np.array_equal(v, start[k]) for k, v in training.snapshot(model).items())


def test_gradient_check_names_what_differs() -> None:
    model, x = WORKLOADS["T5"].build(quick=True)
    target = training.target_for(model, x)
    ref = training.gradients(training.WithLoss(model), model, x, target)
    assert "grad attn.in_proj_weight" in ref and "grad mlp.2.bias" in ref
    traced = runner.compile_model(WORKLOADS["T5"], model, x)
    assert compare_all(training.gradients(traced, model, x, target), ref, "float32").ok
    got = {**ref, "grad mlp.2.bias": ref["grad mlp.2.bias"] * 1.01}
    bad = compare_all(got, ref, "float32")
    assert not bad.ok and bad.detail.startswith("grad mlp.2.bias: max abs diff")
    missing = compare_all({**ref, "grad ln1.weight": None}, ref, "float32")
    assert missing.detail == "grad ln1.weight: no gradient"


def test_report_puts_w4g_after_w4_with_the_ratio() -> None:
    ids = list(WORKLOADS)
    assert ids.index("W4G") == ids.index("W4") + 1
    results = []
    for wid, t in (("W4", 2e-5), ("W4G", 5e-5)):
        res = runner.WorkloadResult(WORKLOADS[wid], (1, 64), (1, 64), "float32")
        res.times.update({v: Timing(t, t, t, 3, 1) for v in ("eager", "fused")})
        res.compile["torch_compile_first_call_s"] = 1.25
        results.append(res)
    machine = {"cpu": "test", "usable_cpus": 1,
               "threads": {"scriptmod": 1, "blas": 1, "blas_set_by": "default"}}
    rates = floors.Rates(1e10, 1e11, "float32", "cpu")
    text = report.format_report(runner.BenchReport(runner.BenchOptions(), machine, rates,
                                                   results))
    assert "W4G / W4 (grad enabled over no_grad" in text and "eager 2.50x, fused 2.50x" in text
    assert "torch.compile first call" in text and "W4G 1.25 s" in text


def test_torch_side_trains_the_same_weights(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    w = WORKLOADS["T3"]
    model, x = w.build(quick=True)
    target = training.target_for(model, x)
    ref = training.gradients(training.WithLoss(model), model, x, target)
    opts = runner.BenchOptions(quick=True, repeat=1, budget_s=0.001)
    side = torch_ref.TorchSide.create(w, model, x, ref, opts, target)
    assert side.columns == torch_ref.TRAIN_COLUMNS
    torch_ref.write_job(tmp_path, side.job, opts)
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: m)
    out = torch_ref._child_main(str(tmp_path))
    assert "error" not in out and set(out) == set(torch_ref.TRAIN_COLUMNS), out
    for name in torch_ref.TRAIN_COLUMNS:
        assert out[name]["match"]["ok"], (name, out[name]["match"])
        assert out[name]["timing"]["reps"] == 1 and out[name]["first_call_s"] > 0


def test_train_mlp_example_compares_eager_and_compiled_epochs() -> None:
    env = {**os.environ, "SCRIPTMOD_EXAMPLE_EPOCHS": "4"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "train_mlp.py"),
                           "--no-progress", "--compare", "--min-accuracy", "0.5"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    accuracy = re.findall(r"^(eager|compiled \(jit.trace\)): accuracy ([\d.]+)%, ([\d.]+) ms "
                          r"per epoch", done.stdout, re.M)
    assert [a[0] for a in accuracy] == ["eager", "compiled (jit.trace)"], done.stdout
    assert accuracy[0][1] == accuracy[1][1]           # same data, weights and steps
    assert "compiled / eager epoch time:" in done.stdout
    assert sm.__version__
