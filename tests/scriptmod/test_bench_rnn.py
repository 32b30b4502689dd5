"""The recurrent rows of ``scriptmod bench`` (issue 41): R1 pytorch/examples' word-language
LSTM, R2 a bidirectional GRU encoder, TR1 R1's training step (cross-entropy,
``clip_grad_norm_``, SGD).

The models have the example's state-dict keys, their PyTorch twins hold the same weights and
compute the same outputs, TR1 clips and steps the same way on both sides (the checked
gradients are the clipped ones), and a trace of R1 runs at another sequence length. Quick
sizes; the quick run of every row (compiled against eager) is
``test_bench_cli.test_quick_bench_every_workload_matches_eager``. No timing is asserted."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.bench import cnn, runner, torch_ref, training
from scriptmod.bench.workloads import GROUPS, WORKLOADS


def _torch() -> Any:
    return pytest.importorskip("torch")


def test_rows_and_group() -> None:
    assert GROUPS["RNN"] == ("R1", "R2", "TR1")
    r1, r2, tr1 = (WORKLOADS[w] for w in GROUPS["RNN"])
    assert (r1.shape, r1.batch_dim, r2.shape) == ((35, 16), 1, (32, 64, 128))
    assert (tr1.train, tr1.loss, tr1.optimizer) == (True, "cross_entropy", "sgd_clip")
    assert training.describe_optimizer("sgd_clip") == "clip_grad_norm_(0.25), SGD(lr=20)"
    lm = cnn.build(cnn.Recipe("WordLM"))
    assert sorted(lm.state_dict()) == sorted(
        ["encoder.weight", "decoder.weight", "decoder.bias"]
        + [f"rnn.{k}_l{i}" for i in range(2)
           for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")])
    assert cnn.config_of(lm) == cnn.Recipe("WordLM", {"ntoken": 10000, "ninp": 256,
                                                      "nhid": 512, "nlayers": 2})


@pytest.mark.parametrize("wid", ["R1", "R2"])
def test_twin_holds_the_same_weights_and_agrees(wid: str) -> None:
    from test_bench_cnn import check_twin
    check_twin(wid)


def test_a_trace_of_r1_runs_at_another_length() -> None:
    w = WORKLOADS["R1"]
    model, x = w.build(quick=True)
    with sm.no_grad():
        compiled = runner.compile_model(w, model, x)
        for t in (x.shape[0], 2 * x.shape[0] + 1):
            longer = sm.randn(t, x.shape[1])
            assert runner.compare(compiled(longer), runner.host64(model(longer)),
                                  "float32").ok


def test_tr1_clips_before_its_step_on_both_sides(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    w = WORKLOADS["TR1"]
    model, x = w.build(quick=True)
    target = training.target_for(model, x, w.loss)
    with_loss = training.WithLoss(model, w.loss)
    clipped = training.gradients(with_loss, model, x, target, 0.25)
    norm = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum())
                       for k, g in clipped.items() if k.startswith("grad ")))
    assert norm == pytest.approx(0.25, rel=1e-4)
    step = training.compiled_step(with_loss, x, target, w.optimizer)
    assert step.clip == 0.25 and type(step.opt).__name__ == "SGD"
    start = training.snapshot(model)
    step()
    moved = training.snapshot(model)["decoder.weight"] - start["decoder.weight"]
    np.testing.assert_allclose(moved, -20.0 * clipped["grad decoder.weight"], rtol=1e-4,
                               atol=1e-7)
    training.restore(model, start)
    torch = _torch()
    opts = runner.BenchOptions(quick=True, repeat=1, budget_s=0.001)
    ref = training.gradients(with_loss, model, x, target, 0.25)
    side = torch_ref.TorchSide.create(w, model, x, ref, opts, target)
    torch_ref.write_job(tmp_path, side.job, opts)
    monkeypatch.setattr(torch, "compile", lambda m, mode=None: m)
    out = torch_ref._child_main(str(tmp_path))
    assert "error" not in out, out
    for name in torch_ref.TRAIN_COLUMNS:
        assert out[name]["match"]["ok"], (name, out[name]["match"])
