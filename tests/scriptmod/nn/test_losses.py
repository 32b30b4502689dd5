"""Losses: values against float64 NumPy formulas, gradients against finite differences
and PyTorch (when installed), every ``reduction``, ``ignore_index``, label smoothing,
class weights, ``pos_weight`` and the errors."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import special

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from scriptmod.autograd.gradcheck import gradcheck
from nn_testutil import arr, assert_close_lists, leaf, run_both

RNG = np.random.default_rng(7)
LOGITS = RNG.standard_normal((5, 4)) * 2
TARGET = np.array([1, 0, 3, -100, 2])
WEIGHT = np.array([0.5, 1.0, 2.0, 1.5])


def _np_reduce(loss: np.ndarray, reduction: str) -> np.ndarray:
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_mse_loss(reduction: str) -> None:
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    y = F.mse_loss(leaf(a), leaf(b), reduction=reduction)
    np.testing.assert_allclose(arr(y), _np_reduce((a - b) ** 2, reduction), atol=1e-12)
    assert gradcheck(lambda x, t: F.mse_loss(x, t, reduction=reduction), (leaf(a), leaf(b)))


def _np_nll(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None,
            reduction: str) -> np.ndarray:
    valid = target != -100
    safe = np.where(valid, target, 0)
    w = (weight[safe] if weight is not None else np.ones(len(target))) * valid
    loss = -logp[np.arange(len(target)), safe] * w
    return loss.sum() / w.sum() if reduction == "mean" else _np_reduce(loss, reduction)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_with_class_indices(reduction: str, weighted: bool) -> None:
    w = WEIGHT if weighted else None
    y = F.cross_entropy(leaf(LOGITS), sm.tensor(TARGET), None if w is None else sm.tensor(w),
                        reduction=reduction)
    ref = _np_nll(special.log_softmax(LOGITS, axis=1), TARGET, w, reduction)
    np.testing.assert_allclose(arr(y), ref, atol=1e-12)
    assert gradcheck(lambda x: F.cross_entropy(x, sm.tensor(TARGET), reduction=reduction),
                     (leaf(LOGITS),))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_label_smoothing_matches_the_smoothed_target_form(reduction: str) -> None:
    eps, C = 0.2, 4
    t = TARGET[TARGET >= 0]
    logits = LOGITS[TARGET >= 0]
    probs = np.eye(C)[t] * (1 - eps) + eps / C
    ref = -(special.log_softmax(logits, axis=1) * probs).sum(axis=1)
    y = F.cross_entropy(leaf(logits), sm.tensor(t), label_smoothing=eps, reduction=reduction)
    np.testing.assert_allclose(arr(y), _np_reduce(ref, reduction), atol=1e-12)
    # class-probability targets give the same loss
    y2 = F.cross_entropy(leaf(logits), sm.tensor(np.eye(C)[t]), label_smoothing=eps,
                         reduction=reduction)
    np.testing.assert_allclose(arr(y2), arr(y), atol=1e-12)


def test_cross_entropy_on_spatial_and_unbatched_input() -> None:
    x = RNG.standard_normal((2, 3, 4, 5))
    t = RNG.integers(0, 3, (2, 4, 5))
    ref = -np.take_along_axis(special.log_softmax(x, axis=1), t[:, None], 1).mean()
    np.testing.assert_allclose(arr(F.cross_entropy(leaf(x), sm.tensor(t))), ref, atol=1e-12)
    one = F.cross_entropy(leaf(LOGITS[0]), sm.tensor(1))
    np.testing.assert_allclose(arr(one), -special.log_softmax(LOGITS[0])[1], atol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_with_weights_and_ignore_index(reduction: str) -> None:
    logp = special.log_softmax(LOGITS, axis=1)
    y = F.nll_loss(leaf(logp), sm.tensor(TARGET), sm.tensor(WEIGHT), reduction=reduction)
    np.testing.assert_allclose(arr(y), _np_nll(logp, TARGET, WEIGHT, reduction), atol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_bce_with_logits_pos_weight_and_weight(reduction: str) -> None:
    x, t = RNG.standard_normal((3, 4)) * 3, RNG.random((3, 4))
    w, pw = RNG.random(4), RNG.random(4) * 3
    sig = special.expit(x)
    ref = -w * (pw * t * np.log(sig) + (1 - t) * np.log(1 - sig))
    y = F.binary_cross_entropy_with_logits(leaf(x), leaf(t), sm.tensor(w), reduction=reduction,
                                           pos_weight=sm.tensor(pw))
    np.testing.assert_allclose(arr(y), _np_reduce(ref, reduction), atol=1e-12)
    assert gradcheck(lambda a, b: F.binary_cross_entropy_with_logits(
        a, b, reduction=reduction, pos_weight=sm.tensor(pw)), (leaf(x), leaf(t)))


def test_bce_with_logits_is_finite_for_huge_logits() -> None:
    x = sm.tensor([-500.0, 0.0, 500.0], requires_grad=True)
    y = F.binary_cross_entropy_with_logits(x, sm.tensor([1.0, 1.0, 0.0]), reduction="sum")
    assert arr(y) == pytest.approx(1000 + np.log(2))
    y.backward()
    np.testing.assert_allclose(arr(x.grad), [-1.0, -0.5, 1.0])


def test_loss_errors() -> None:
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.mse_loss(sm.zeros(2), sm.zeros(2), reduction="avg")
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(sm.zeros(2, 4), sm.tensor([1, 7]))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(2\) to match target batch_size \(3\)"):
        F.nll_loss(sm.zeros(2, 4), sm.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="must be the same as input size"):
        F.binary_cross_entropy_with_logits(sm.zeros(2, 3), sm.zeros(3))
    with pytest.raises(ValueError, match="label_smoothing must be between"):
        F.cross_entropy(sm.zeros(2, 4), sm.tensor([1, 2]), label_smoothing=1.5)
    with pytest.warns(UserWarning, match="different to the input size"):
        F.mse_loss(sm.zeros(2, 3), sm.zeros(3))


def test_loss_modules_keep_weights_as_buffers() -> None:
    ce = nn.CrossEntropyLoss(weight=sm.tensor(WEIGHT), ignore_index=3, label_smoothing=0.1)
    assert list(ce.state_dict()) == ["weight"]
    bce = nn.BCEWithLogitsLoss(pos_weight=sm.ones(4))
    assert list(bce.state_dict()) == ["pos_weight"]
    assert repr(nn.MSELoss(reduction="sum")) == "MSELoss()"
    y = ce(leaf(LOGITS), sm.tensor(np.array([1, 0, 3, 3, 2])))
    ref = F.cross_entropy(leaf(LOGITS), sm.tensor(np.array([1, 0, 3, 3, 2])), sm.tensor(WEIGHT),
                          ignore_index=3, label_smoothing=0.1)
    np.testing.assert_allclose(arr(y), arr(ref))
    with pytest.warns(UserWarning, match="size_average and reduce"):
        assert nn.NLLLoss(size_average=False).reduction == "sum"


def test_losses_against_torch() -> None:
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    probs = special.softmax(RNG.standard_normal((5, 4)), axis=1)
    tw, sw = torch.tensor(WEIGHT), sm.tensor(WEIGHT)
    cases = []
    for red in ("none", "mean", "sum"):
        cases += [
            (lambda x, r=red: F.cross_entropy(x, sm.tensor(TARGET), sw, reduction=r, label_smoothing=0.3),
             lambda x, r=red: TF.cross_entropy(x, torch.tensor(TARGET), tw, reduction=r, label_smoothing=0.3),
             [LOGITS]),
            (lambda x, p, r=red: F.cross_entropy(x, p, sw, reduction=r, label_smoothing=0.1),
             lambda x, p, r=red: TF.cross_entropy(x, p, tw, reduction=r, label_smoothing=0.1),
             [LOGITS, probs]),
            (lambda x, t, r=red: F.binary_cross_entropy_with_logits(x, t, sw, reduction=r, pos_weight=sw * 2),
             lambda x, t, r=red: TF.binary_cross_entropy_with_logits(x, t, tw, reduction=r, pos_weight=tw * 2),
             [LOGITS, probs]),
        ]
    for ours, theirs, arrays in cases:
        a, b = run_both(ours, theirs, arrays)
        assert_close_lists(a, b, atol=1e-10, rtol=1e-8)
