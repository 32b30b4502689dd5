"""CTC loss against PyTorch: padded and concatenated targets, lengths as tensors or tuples,
unbatched input, every reduction, zero_infinity, float32 and float64, the log_softmax
gradient, and a trace at two batch sizes. (The kernels' float64 reference, an enumeration of
every alignment, is op_cases_loss's.)"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from nn_testutil import arr, assert_close_lists, leaf, run_both

T, N, C = 7, 3, 5
RNG = np.random.default_rng(5)
LOGITS = RNG.standard_normal((T, N, C))
PADDED = np.array([[1, 2, 2, 4], [3, 1, 0, 0], [4, 4, 4, 4]], dtype=np.int64)
INPUT_LENGTHS, TARGET_LENGTHS = (7, 5, 6), (3, 2, 4)       # entry 2 needs 7 steps: inf
CONCAT = np.concatenate([PADDED[n, :k] for n, k in enumerate(TARGET_LENGTHS)])


def _ctc(lib: Any, targets: np.ndarray, lengths: str, **kw: Any) -> Any:
    def fn(logits: Any) -> Any:
        il, tl = INPUT_LENGTHS, TARGET_LENGTHS
        if lengths == "tensors":
            il, tl = lib.tensor(list(il)), lib.tensor(list(tl))
        return lib.nn.functional.ctc_loss(logits.log_softmax(2), lib.tensor(targets), il, tl,
                                          **kw)
    return fn


@pytest.mark.parametrize("targets", ["padded", "concatenated"])
@pytest.mark.parametrize("lengths", ["tuples", "tensors"])
@pytest.mark.parametrize("reduction,zero_infinity", [("none", False), ("mean", True),
                                                     ("sum", True)])
def test_ctc_matches_torch(targets: str, lengths: str, reduction: str,
                           zero_infinity: bool) -> None:
    torch = pytest.importorskip("torch")
    tg = PADDED if targets == "padded" else CONCAT
    kw = {"reduction": reduction, "zero_infinity": zero_infinity}
    ours, theirs = run_both(_ctc(sm, tg, lengths, **kw), _ctc(torch, tg, lengths, **kw),
                            [LOGITS])
    assert_close_lists(ours, theirs, atol=1e-10, rtol=1e-9)


def test_ctc_log_probs_gradient_and_float32_match_torch() -> None:
    """The gradient of log_probs themselves is torch's (exp(lp) - posterior), which only
    agrees with the true one after a log_softmax; float32 follows torch's rounding."""
    torch = pytest.importorskip("torch")
    lp = torch.tensor(LOGITS, dtype=torch.float32).log_softmax(2).numpy()

    def run(lib: Any) -> Any:
        return lambda x: lib.nn.functional.ctc_loss(x, lib.tensor(PADDED), (7, 5, 7),
                                                    TARGET_LENGTHS, blank=0, reduction="sum")
    ours, theirs = run_both(run(sm), run(torch), [lp])
    assert_close_lists(ours, theirs, atol=1e-5, rtol=1e-4)


def test_ctc_unbatched_and_blank_match_torch() -> None:
    torch = pytest.importorskip("torch")

    def run(lib: Any) -> Any:
        return lambda x: lib.nn.functional.ctc_loss(
            x.log_softmax(1), lib.tensor([0, 1, 1]), lib.tensor(6), lib.tensor(3), blank=4)
    ours, theirs = run_both(run(sm), run(torch), [LOGITS[:6, 0]])
    assert_close_lists(ours, theirs, atol=1e-10, rtol=1e-9)


def test_ctc_infinite_loss_without_zero_infinity() -> None:
    loss = F.ctc_loss(sm.tensor(LOGITS).log_softmax(2), sm.tensor(PADDED), INPUT_LENGTHS,
                      TARGET_LENGTHS, reduction="none")
    got = arr(loss)
    assert np.isinf(got[2]) and np.isfinite(got[:2]).all()


def test_ctc_module_traces_at_two_batch_sizes() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj, self.loss = nn.Linear(4, C), nn.CTCLoss(zero_infinity=True)

        def forward(self, x: sm.Tensor, targets: sm.Tensor, il: sm.Tensor,
                    tl: sm.Tensor) -> sm.Tensor:
            return self.loss(self.proj(x).log_softmax(2), targets, il, tl)

    def batch(n: int) -> tuple[sm.Tensor, ...]:
        return (sm.tensor(RNG.standard_normal((T, n, 4))),
                sm.tensor(RNG.integers(1, C, (n, 3))), sm.tensor(np.full(n, T)),
                sm.tensor(RNG.integers(1, 4, n)))
    model = Model().double()
    traced = sm.jit.trace(model, batch(2))
    for n in (2, 4):
        x, *rest = batch(n)
        xe, xt = leaf(arr(x)), leaf(arr(x))
        want, got = model(xe, *rest), traced(xt, *rest)
        np.testing.assert_allclose(arr(got), arr(want), rtol=1e-10)
        want.backward()
        got.backward()
        np.testing.assert_allclose(arr(xt.grad), arr(xe.grad), rtol=1e-9, atol=1e-12)


def test_ctc_errors() -> None:
    lp = sm.zeros(3, 1, 3)
    with pytest.raises(RuntimeError, match="input_lengths"):
        F.ctc_loss(lp, sm.tensor([[1]]), [4], [1])
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(lp, sm.tensor([[1]]), [3], [1], blank=3)
    with pytest.raises(TypeError, match="must be integral"):
        F.ctc_loss(lp, sm.tensor([[1]]), sm.tensor([3.0]), [1])
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.ctc_loss(lp, sm.tensor([[1]]), [3], [1], reduction="avg")
