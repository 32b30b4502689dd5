"""The loss catalogue (issue 38): every functional loss against PyTorch (forward and input
gradients, float64 and float32, the options that change the formula), the core numbers
against float64 NumPy formulas, traces at two batch sizes, the modules' reprs and state."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from nn_testutil import arr, assert_close_lists, leaf, run_both

RNG = np.random.default_rng(38)


def _r(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape)


def _signs(*shape: int) -> np.ndarray:
    return np.where(RNG.random(shape) < 0.5, 1.0, -1.0)


def _labels(n: int, classes: int) -> np.ndarray:
    return RNG.integers(0, classes, n).astype(np.int64)


# name -> (function name, arrays, keyword arguments); every float array is differentiated
# (soft_margin_loss's target cannot be, as in torch: a constant there)
CASES: dict[str, tuple[str, list[np.ndarray], dict[str, Any]]] = {
    "bce": ("binary_cross_entropy", [_r(3, 4, lo=0.05, hi=0.95), _r(3, 4, lo=0, hi=1)], {}),
    "bce-sum": ("binary_cross_entropy", [_r(5, lo=0.05, hi=0.95), _r(5, lo=0, hi=1)],
                {"reduction": "sum"}),
    "kl": ("kl_div", [_r(3, 4), _r(3, 4, lo=0.1, hi=1)], {"reduction": "batchmean"}),
    "kl-log-target": ("kl_div", [_r(3, 4), _r(3, 4)], {"reduction": "none", "log_target": True}),
    "smooth-l1": ("smooth_l1_loss", [_r(4, 3), _r(4, 3)], {"beta": 0.5}),
    "smooth-l1-beta0": ("smooth_l1_loss", [_r(4, 3), _r(4, 3)], {"beta": 0.0,
                                                                 "reduction": "sum"}),
    "huber": ("huber_loss", [_r(4, 3), _r(4, 3)], {"delta": 0.7, "reduction": "none"}),
    "soft-margin": ("soft_margin_loss", [_r(4, 3)], {"target": _signs(4, 3)}),
    "multilabel-soft": ("multilabel_soft_margin_loss",
                        [_r(4, 3), (RNG.random((4, 3)) > 0.5).astype(float)],
                        {"reduction": "none"}),
    "poisson": ("poisson_nll_loss", [_r(4, 3), _r(4, 3, lo=0, hi=4)], {"full": True}),
    "poisson-rate": ("poisson_nll_loss", [_r(4, 3, lo=0.1, hi=3), _r(4, 3, lo=0, hi=4)],
                     {"log_input": False, "reduction": "sum"}),
    "gaussian": ("gaussian_nll_loss", [_r(4, 3), _r(4, 3), _r(4, 3, lo=0.1, hi=2)],
                 {"full": True}),
    "gaussian-homosced": ("gaussian_nll_loss", [_r(4, 3), _r(4, 3), _r(4, lo=0.1, hi=2)],
                          {"reduction": "none"}),
    "gaussian-one-dim": ("gaussian_nll_loss", [_r(2, 3, 4), _r(2, 3, 4),
                                               _r(2, 1, 4, lo=1e-8, hi=2)], {"eps": 1e-3}),
    "margin-ranking": ("margin_ranking_loss", [_r(5), _r(5), _signs(5)], {"margin": 0.3}),
    "hinge": ("hinge_embedding_loss", [_r(5), _signs(5)], {"margin": 0.5}),
    "cosine-embedding": ("cosine_embedding_loss", [_r(4, 3), _r(4, 3), _signs(4)],
                         {"margin": 0.2, "reduction": "none"}),
    "cosine-embedding-0d": ("cosine_embedding_loss", [_r(3), _r(3), np.array(-1.0)], {}),
    "multi-margin": ("multi_margin_loss", [_r(4, 5), _labels(4, 5)], {}),
    "multi-margin-p2": ("multi_margin_loss", [_r(4, 5), _labels(4, 5)],
                        {"p": 2, "margin": 0.5, "weight": None, "reduction": "none"}),
    "multi-margin-1d": ("multi_margin_loss", [_r(5), np.array(2)], {"reduction": "none"}),
    "multilabel-margin": ("multilabel_margin_loss",
                          [_r(3, 4), np.array([[3, 0, -1, 1], [1, 1, 2, -1], [0, 1, 2, 3]])],
                          {"reduction": "none"}),
    "multilabel-margin-1d": ("multilabel_margin_loss", [_r(4), np.array([2, -1, 0, 0])], {}),
    "triplet": ("triplet_margin_loss", [_r(4, 3), _r(4, 3), _r(4, 3)], {"margin": 0.5}),
    "triplet-swap-p1": ("triplet_margin_loss", [_r(4, 3), _r(4, 3), _r(4, 3)],
                        {"p": 1.0, "swap": True, "reduction": "none"}),
    "triplet-distance": ("triplet_margin_with_distance_loss", [_r(4, 3), _r(4, 3), _r(4, 3)],
                         {"swap": True}),
    "pairwise": ("pairwise_distance", [_r(4, 3), _r(4, 3)], {}),
    "pairwise-inf-keepdim": ("pairwise_distance", [_r(4, 3), _r(1, 3)],
                             {"p": float("inf"), "keepdim": True}),
    "pairwise-half": ("pairwise_distance", [_r(4, 3), _r(4, 3)], {"p": 0.5, "eps": 0.0}),
    "pdist": ("pdist", [_r(5, 3)], {}),
    "pdist-p1": ("pdist", [_r(4, 3)], {"p": 1.0}),
    "pdist-inf": ("pdist", [_r(4, 3)], {"p": float("inf")}),
    "cosine-similarity": ("cosine_similarity", [_r(4, 3), _r(1, 3)], {"dim": 1}),
    "cosine-similarity-zero": ("cosine_similarity", [np.zeros((2, 3)), _r(2, 3)], {}),
    "cosine-similarity-tiny": ("cosine_similarity", [_r(2, 3) * 1e-10, _r(2, 3)], {}),
}


def _call(lib: Any, name: str, kwargs: dict[str, Any]) -> Callable[..., Any]:
    fn = getattr(lib.nn.functional, name)
    kwargs = {k: lib.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    return lambda *xs: fn(*xs, **kwargs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_matches_torch(case: str) -> None:
    torch = pytest.importorskip("torch")
    name, arrays, kwargs = CASES[case]
    ours, theirs = run_both(_call(sm, name, kwargs), _call(torch, name, kwargs), arrays)
    assert_close_lists(ours, theirs, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("case", ["bce", "kl", "huber", "multi-margin-p2", "multilabel-margin",
                                  "gaussian-homosced", "pdist", "triplet-swap-p1"])
def test_loss_matches_torch_float32(case: str) -> None:
    torch = pytest.importorskip("torch")
    name, arrays, kwargs = CASES[case]
    arrays = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in arrays]
    ours, theirs = run_both(_call(sm, name, kwargs), _call(torch, name, kwargs), arrays)
    assert_close_lists(ours, theirs, atol=1e-5, rtol=1e-4)


# ---- the core numbers against float64 NumPy formulas ----------------------------------------
def test_bce_clamps_its_logs_at_minus_100() -> None:
    x, t = np.array([0.0, 1.0, 0.3]), np.array([1.0, 0.0, 0.5])
    got = arr(F.binary_cross_entropy(sm.tensor(x), sm.tensor(t), reduction="none"))
    with np.errstate(divide="ignore"):
        want = -(t * np.maximum(np.log(x), -100) + (1 - t) * np.maximum(np.log1p(-x), -100))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[0] == 100.0 and got[1] == 100.0


def test_multi_margin_against_a_loop() -> None:
    x, y, w = _r(3, 4), np.array([0, 3, 1]), np.array([0.5, 1.0, 2.0, 1.5])
    want = [sum(w[y[i]] * max(0.0, 0.7 - x[i, y[i]] + x[i, j]) ** 2
                for j in range(4) if j != y[i]) / 4 for i in range(3)]
    got = F.multi_margin_loss(sm.tensor(x), sm.tensor(y), p=2, margin=0.7, weight=sm.tensor(w),
                              reduction="none")
    np.testing.assert_allclose(arr(got), want, rtol=1e-12)


def test_multilabel_margin_against_a_loop() -> None:
    x = _r(2, 4)
    y = np.array([[3, 0, -1, 1], [2, 2, 1, -1]])
    want = []
    for i in range(2):
        listed = list(y[i][:list(y[i]).index(-1)])
        want.append(sum(max(0.0, 1 - (x[i, j] - x[i, k])) for j in listed
                        for k in range(4) if k not in listed) / 4)
    got = F.multilabel_margin_loss(sm.tensor(x), sm.tensor(y), reduction="none")
    np.testing.assert_allclose(arr(got), want, rtol=1e-12)


def test_pdist_against_a_loop() -> None:
    x = _r(5, 3)
    want = [np.linalg.norm(x[i] - x[j], 3) for i in range(5) for j in range(i + 1, 5)]
    np.testing.assert_allclose(arr(F.pdist(sm.tensor(x), p=3.0)), want, rtol=1e-12)
    assert tuple(F.pdist(sm.zeros(1, 3)).shape) == (0,)


def test_gaussian_nll_homoscedastic_and_float_var() -> None:
    x, t, v = _r(4, 3), _r(4, 3), _r(4, lo=0.5, hi=2)
    want = 0.5 * (np.log(v)[:, None] + (x - t) ** 2 / v[:, None])
    got = F.gaussian_nll_loss(sm.tensor(x), sm.tensor(t), sm.tensor(v), reduction="none")
    np.testing.assert_allclose(arr(got), want, rtol=1e-12)
    got = F.gaussian_nll_loss(sm.tensor(x), sm.tensor(t), 2.0, reduction="sum")
    np.testing.assert_allclose(arr(got), (0.5 * (np.log(2.0) + (x - t) ** 2 / 2.0)).sum())


def test_kl_div_zero_targets_contribute_zero() -> None:
    """xlogy(0, 0) = 0: no NaN in the value or the input's gradient (torch's target gradient
    is NaN there; ours is 0)."""
    x = sm.tensor([[-1.0, -2.0]], requires_grad=True)
    loss = F.kl_div(x, sm.tensor([[0.0, 1.0]]), reduction="sum")
    np.testing.assert_allclose(arr(loss), 2.0)
    loss.backward()
    np.testing.assert_array_equal(arr(x.grad), [[0.0, -1.0]])


def test_cross_entropy_with_every_target_ignored_has_zero_gradients() -> None:
    """torch: the mean is 0/0 = nan, the input's gradient 0 (issue 38's wrong result)."""
    for smoothing in (0.0, 0.2):
        x = sm.tensor(_r(3, 4), requires_grad=True)
        loss = F.cross_entropy(x, sm.tensor([-100, -100, -100]), label_smoothing=smoothing)
        assert np.isnan(arr(loss))
        loss.backward()
        np.testing.assert_array_equal(arr(x.grad), np.zeros((3, 4)))


def test_weighted_mse_and_l1_means_divide_by_the_weights() -> None:
    x, t, w = _r(2, 3), _r(2, 3), _r(2, 3, lo=0.1, hi=1)
    got = F.mse_loss(sm.tensor(x), sm.tensor(t), weight=sm.tensor(w))
    np.testing.assert_allclose(arr(got), (w * (x - t) ** 2).sum() / w.sum(), rtol=1e-12)
    got = F.l1_loss(sm.tensor(x), sm.tensor(t), weight=sm.tensor(w))
    np.testing.assert_allclose(arr(got), (w * abs(x - t)).sum() / w.sum(), rtol=1e-12)


# ---- linear_cross_entropy -----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["plain", "bias-smoothing", "k-dim", "probabilities"])
def test_linear_cross_entropy_matches_torch(kind: str) -> None:
    torch = pytest.importorskip("torch")
    x, w, b = _r(4, 3), _r(5, 3), _r(5)
    target: np.ndarray = _labels(4, 5)
    kwargs: dict[str, Any] = {}
    if kind == "bias-smoothing":
        kwargs = {"label_smoothing": 0.1, "ignore_index": 2}
    elif kind == "k-dim":
        w, b, target = _r(5, 2, 3), _r(5, 2), RNG.integers(0, 5, (4, 2))
    elif kind == "probabilities":
        target = _r(4, 5, lo=0, hi=1)
        target = target / target.sum(1, keepdims=True)

    def run(lib: Any) -> Callable[..., Any]:
        return lambda x_, w_, b_, t_: lib.nn.functional.linear_cross_entropy(
            x_, w_, t_, linear_bias=b_, **kwargs)
    ours, theirs = run_both(run(sm), run(torch), [x, w, b, target])
    assert_close_lists(ours, theirs, atol=1e-10, rtol=1e-9)


def test_linear_cross_entropy_loss_loads_torchs_state() -> None:
    torch = pytest.importorskip("torch")
    theirs = torch.nn.LinearCrossEntropyLoss(3, 4, out_features=(2,), bias=True)
    ours = nn.LinearCrossEntropyLoss(3, 4, out_features=(2,), bias=True)
    ours.load_state_dict({k: sm.tensor(v.detach().numpy()) for k, v in
                          theirs.state_dict().items()}, strict=True)
    x, t = _r(5, 3).astype(np.float32), RNG.integers(0, 4, (5, 2))
    want = theirs(torch.tensor(x), torch.tensor(t)).item()
    np.testing.assert_allclose(arr(ours(sm.tensor(x), sm.tensor(t))), want, rtol=1e-5)
    assert repr(ours) == repr(theirs)


# ---- modules: torch's constructors, attributes and reprs ----------------------------------
MODULES: list[tuple[str, dict[str, Any]]] = [
    ("BCELoss", {}), ("KLDivLoss", {"reduction": "batchmean", "log_target": True}),
    ("SmoothL1Loss", {"beta": 0.5}), ("HuberLoss", {"delta": 2.0}), ("SoftMarginLoss", {}),
    ("MultiLabelMarginLoss", {}), ("MultiLabelSoftMarginLoss", {}),
    ("MultiMarginLoss", {"p": 2, "margin": 0.5}), ("MarginRankingLoss", {"margin": 0.1}),
    ("HingeEmbeddingLoss", {"margin": 2.0}), ("CosineEmbeddingLoss", {"margin": 0.1}),
    ("TripletMarginLoss", {"p": 1.0, "swap": True}), ("TripletMarginWithDistanceLoss", {}),
    ("PoissonNLLLoss", {"log_input": False, "full": True}), ("GaussianNLLLoss", {"full": True}),
    ("CTCLoss", {"blank": 1, "zero_infinity": True}), ("PairwiseDistance", {"p": 3.0}),
    ("CosineSimilarity", {"dim": 0}),
]
ATTRS = ("reduction", "log_target", "beta", "delta", "p", "margin", "eps", "swap", "log_input",
         "full", "blank", "zero_infinity", "norm", "keepdim", "dim")


@pytest.mark.parametrize("name,kwargs", MODULES, ids=[m[0] for m in MODULES])
def test_module_attributes_and_repr_match_torch(name: str, kwargs: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs = getattr(nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    for attr in ATTRS:
        assert getattr(ours, attr, None) == getattr(theirs, attr, None), attr
    assert repr(ours) == repr(theirs)


def test_module_legacy_reduction_arguments() -> None:
    with pytest.warns(UserWarning):
        loss = nn.BCELoss(size_average=False)
    assert loss.reduction == "sum"
    with pytest.raises(ValueError, match="TripletMarginLoss: expected margin"):
        nn.TripletMarginLoss(margin=0.0)
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        nn.MultiMarginLoss(p=3)


# ---- tracing at two batch sizes --------------------------------------------------------------
class _Losses(nn.Module):
    """Several losses of one batch, summed: one trace covers their decompositions."""

    def __init__(self) -> None:
        super().__init__()
        self.margin = nn.MultiMarginLoss(p=2, weight=sm.tensor([1.0, 2.0, 0.5, 1.0]))
        self.multilabel = nn.MultiLabelMarginLoss()
        self.gaussian = nn.GaussianNLLLoss()

    def forward(self, x: sm.Tensor, y: sm.Tensor, labels: sm.Tensor) -> sm.Tensor:
        return (self.margin(x, y) + self.multilabel(x, labels)
                + self.gaussian(x, x * 0.9, (x * x).sum(1)) + F.pdist(x).sum()
                + F.kl_div(x.log_softmax(1), x.softmax(0), reduction="batchmean")
                + F.binary_cross_entropy(x.sigmoid(), (x > 0).float()))


def _batch(n: int) -> tuple[sm.Tensor, ...]:
    labels = np.tile(np.array([[2, 0, -1, 1]]), (n, 1))
    return (sm.tensor(_r(n, 4)), sm.tensor(_labels(n, 4)), sm.tensor(labels))


def test_losses_trace_at_two_batch_sizes_with_gradients() -> None:
    model = _Losses()
    traced = sm.jit.trace(model, _batch(3))
    for n in (3, 6):
        x, y, labels = _batch(n)
        xe, xt = leaf(arr(x)), leaf(arr(x))
        want, got = model(xe, y, labels), traced(xt, y, labels)
        np.testing.assert_allclose(arr(got), arr(want), rtol=1e-10)
        want.backward()
        got.backward()
        np.testing.assert_allclose(arr(xt.grad), arr(xe.grad), rtol=1e-9, atol=1e-12)


def test_errors_name_the_problem() -> None:
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(sm.tensor([1.5]), sm.tensor([1.0]))
    with pytest.raises(RuntimeError, match="target out of range"):
        F.multi_margin_loss(sm.tensor([[0.5, 1.0]]), sm.tensor([2]))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        F.triplet_margin_loss(sm.zeros(1, 2), sm.zeros(2), sm.zeros(1, 2))
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(sm.zeros(1, 2), sm.zeros(1, 2), sm.ones(1, 3))
    with pytest.raises(RuntimeError, match="1D target tensor expects 2D input"):
        F.cosine_embedding_loss(sm.zeros(2), sm.zeros(2), sm.ones(1))
    with pytest.raises(RuntimeError, match="pdist only supports 2D"):
        F.pdist(sm.zeros(2, 2, 2))
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        F.kl_div(sm.zeros(2), sm.zeros(2), reduction="avg")
    with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'target'"):
        F.soft_margin_loss(sm.zeros(2), sm.ones(2, requires_grad=True))


class _Triplets(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.triplet = nn.TripletMarginLoss(swap=True)

    def forward(self, x: sm.Tensor, y: sm.Tensor) -> sm.Tensor:
        return self.triplet(x, x * 0.5, -x) + F.multi_margin_loss(x, y) + F.pdist(x).sum()


def test_losses_script() -> None:
    model = _Triplets()
    scripted = sm.jit.script(model)
    for n in (3, 5):
        x, y, _ = _batch(n)
        np.testing.assert_allclose(arr(scripted(x, y)), arr(model(x, y)), rtol=1e-10)


def test_triplet_with_a_distance_module_and_a_function_match_torch() -> None:
    """op_db's samples pass torch's PairwiseDistance module, which its harness cannot convert."""
    torch = pytest.importorskip("torch")
    a, p, n = _r(4, 3), _r(4, 3), _r(4, 3)
    for make in (lambda lib: lib.nn.PairwiseDistance(p=1.0),
                 lambda lib: lambda x, y: 1 - lib.nn.functional.cosine_similarity(x, y)):
        def run(lib: Any, make: Any = make) -> Callable[..., Any]:
            return lambda *xs: lib.nn.functional.triplet_margin_with_distance_loss(
                *xs, distance_function=make(lib), margin=0.5, swap=True, reduction="none")
        ours, theirs = run_both(run(sm), run(torch), [a, p, n])
        assert_close_lists(ours, theirs, atol=1e-10, rtol=1e-9)


def test_linear_cross_entropy_options_give_the_unchunked_value() -> None:
    x, w, t = sm.tensor(_r(4, 3)), sm.tensor(_r(5, 3)), sm.tensor(_labels(4, 5))
    plain = F.linear_cross_entropy(x, w, t, reduction="none")
    chunked = F.linear_cross_entropy(x, w, t, reduction="none", options=object())
    np.testing.assert_array_equal(arr(chunked), arr(plain))
