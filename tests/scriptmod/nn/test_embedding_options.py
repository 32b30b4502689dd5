"""``Embedding``'s options and ``EmbeddingBag`` (``F.embedding``/``F.embedding_bag``): against
torch where it is installed (values, weight and per-sample-weight gradients, the in-place
renormalization, reprs, errors), against a float64 NumPy reference, and traced at one batch
size then run at another."""
from __future__ import annotations

import io

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import functional as F

from tests.scriptmod.nn.nn_testutil import arr, torch_or_none

_IDX = np.array([1, 4, 4, 0, 2, 5, 1, 3])
_OFFSETS = np.array([0, 3, 3, 6])


def _both(fn_name: str, weight: np.ndarray, *args: object, sample_weights: bool = False,
          **kw: object) -> tuple[list, list]:
    """Run ``F.<fn_name>`` in both libraries on copies of ``weight`` (and per-sample weights
    made here when asked), backprop one cotangent; [out, weight after, weight grad, psw grad]."""
    torch = pytest.importorskip("torch")
    results = []
    for lib, make in ((F, lambda a, **k: sm.tensor(a, **k)),
                      (torch.nn.functional, lambda a, **k: torch.tensor(a, **k))):
        w = make(weight.copy(), requires_grad=True)
        extra = dict(kw)
        if sample_weights:
            extra["per_sample_weights"] = make(np.linspace(-1.0, 2.0, _IDX.size)
                                               .reshape(args[0].shape), requires_grad=True)
        if lib is not F and extra.get("scale_grad_by_freq"):
            extra.pop("sparse", None)     # torch has no sparse gradient scaled by frequency
        call_args = [make(a) if isinstance(a, np.ndarray) else a for a in args]
        y = getattr(lib, fn_name)(call_args[0], w, *call_args[1:], **extra)
        g = np.random.default_rng(5).standard_normal(tuple(y.shape))
        y.backward(make(g))
        psw = extra.get("per_sample_weights")
        grad = w.grad.to_dense() if getattr(w.grad, "is_sparse", False) else w.grad
        results.append([arr(y), arr(w), arr(grad),
                        None if psw is None else arr(psw.grad)])
    return results[0], results[1]


def _close(ours: list, theirs: list) -> None:
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a is not None or b is not None:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=f"entry {i}")


_WEIGHT = np.random.default_rng(0).standard_normal((6, 3)) * 2


@pytest.mark.parametrize("kw", [{"padding_idx": -2}, {"max_norm": 1.0},
                                {"max_norm": 0.5, "norm_type": 1.0},
                                {"scale_grad_by_freq": True}, {"sparse": True},
                                {"padding_idx": 1, "scale_grad_by_freq": True, "max_norm": 1.5}],
                         ids=str)
def test_embedding_options_against_torch(kw: dict) -> None:
    _close(*_both("embedding", _WEIGHT, _IDX.reshape(2, 4), **kw))


_BAGS = [
    ({"mode": "sum"}, False), ({"mode": "mean"}, False), ({"mode": "max"}, False),
    ({"mode": "sum"}, True), ({"mode": "sum", "padding_idx": 4}, True),
    ({"mode": "mean", "padding_idx": -2}, False), ({"mode": "max", "padding_idx": 1}, False),
    ({"mode": "mean", "include_last_offset": True, "offsets": np.array([0, 3, 3, 8])}, False),
    ({"mode": "sum", "max_norm": 1.0, "norm_type": 3.0}, True),
    ({"mode": "mean", "sparse": True}, False),
]


@pytest.mark.parametrize("kw,sample_weights", _BAGS, ids=[str(b) for b in _BAGS])
def test_embedding_bag_1d_against_torch(kw: dict, sample_weights: bool) -> None:
    """(With ``include_last_offset`` the last offset is the input's length: torch 2.13 reads
    a shorter one differently per dtype and mode.)"""
    kw = dict(kw)
    offsets = kw.pop("offsets", _OFFSETS)
    _close(*_both("embedding_bag", _WEIGHT, _IDX, offsets, sample_weights=sample_weights,
                  **kw))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_2d_against_torch(mode: str) -> None:
    """(``include_last_offset`` means nothing for a 2-D input, as in torch.)"""
    _close(*_both("embedding_bag", _WEIGHT, _IDX.reshape(2, 4), sample_weights=mode == "sum",
                  mode=mode, include_last_offset=mode == "mean"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_bag_matches_numpy(dtype: type) -> None:
    w = _WEIGHT.astype(dtype)
    got = {m: F.embedding_bag(sm.tensor(_IDX), sm.tensor(w), sm.tensor(_OFFSETS), mode=m,
                              padding_idx=4).numpy() for m in ("sum", "mean", "max")}
    bags = [[1], [], [0, 2, 5], [1, 3]]        # _IDX cut at _OFFSETS, the 4s left out
    for mode, reduce in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
        ref = [reduce(w[b].astype(np.float64), axis=0) if b else np.zeros(3) for b in bags]
        assert got[mode].dtype == dtype
        np.testing.assert_allclose(got[mode], ref, rtol=1e-6)


def test_scale_grad_by_freq_divides_by_each_index_count() -> None:
    """Each row's gradient over its count in the batch, as ``F.embedding`` (torch 2.13's CPU
    ``embedding_bag`` backward reads the count of another index: 1.5 and 1/3 here)."""
    w = sm.ones(3, 2, requires_grad=True)
    F.embedding_bag(sm.tensor([0, 0, 1, 1, 1, 2]), w, sm.tensor([0, 3]), mode="sum",
                    scale_grad_by_freq=True).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.ones((3, 2)))


def test_modules_reprs_and_from_pretrained() -> None:
    bag = nn.EmbeddingBag(10, 3, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True,
                          mode="sum", padding_idx=-2, include_last_offset=True)
    assert repr(bag) == ("EmbeddingBag(10, 3, max_norm=1.0, norm_type=1.0, "
                         "scale_grad_by_freq=True, mode='sum', padding_idx=8)")
    assert repr(nn.Embedding(10, 3, padding_idx=-1, sparse=True)) == \
        "Embedding(10, 3, padding_idx=9, sparse=True)"
    assert bag.weight.detach().numpy()[8].tolist() == [0.0, 0.0, 0.0]
    table = np.arange(12.0).reshape(4, 3)
    frozen = nn.EmbeddingBag.from_pretrained(sm.tensor(table), mode="max")
    assert not frozen.weight.requires_grad
    np.testing.assert_array_equal(frozen(sm.tensor([[0, 3], [2, 1]])).numpy(), table[[3, 2]])
    assert nn.Embedding.from_pretrained(sm.tensor(table), freeze=False).weight.requires_grad
    torch = torch_or_none()
    if torch is not None:
        assert repr(nn.EmbeddingBag(5, 2)) == repr(torch.nn.EmbeddingBag(5, 2))


def test_embedding_bag_errors() -> None:
    w = sm.randn(5, 2)
    with pytest.raises(ValueError, match="offsets has to be None"):
        F.embedding_bag(sm.tensor([[0, 1]]), w, sm.tensor([0]))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor"):
        F.embedding_bag(sm.tensor([0, 1]), w)
    with pytest.raises(NotImplementedError, match="only supported for mode='sum'"):
        F.embedding_bag(sm.tensor([0, 1]), w, sm.tensor([0]), mode="max",
                        per_sample_weights=sm.ones(2))
    with pytest.raises(ValueError, match="mode has to be one of"):
        F.embedding_bag(sm.tensor([0, 1]), w, sm.tensor([0]), mode="median")
    with pytest.raises(RuntimeError, match="offsets\\[0\\] has to be 0"):
        F.embedding_bag(sm.tensor([0, 1]), w, sm.tensor([1]))
    with pytest.raises(RuntimeError, match="can not be greater than input's length"):
        F.embedding_bag(sm.tensor([0, 1]), w, sm.tensor([0, 3]))
    with pytest.raises(ValueError, match="number of offset should be at least 1"):
        F.embedding_bag(sm.tensor([0, 1]), w, sm.zeros(0, dtype=sm.int64),
                        include_last_offset=True)
    with pytest.raises(IndexError, match="out of range"):
        F.embedding_bag(sm.tensor([0, 7]), w, sm.tensor([0]))


def test_embedding_bag_traced_at_another_batch_size() -> None:
    bag = nn.EmbeddingBag(10, 4, mode="max")
    traced = sm.jit.trace(bag, sm.tensor(np.array([[1, 2, 3], [4, 5, 6]])))
    idx = sm.tensor(np.random.default_rng(6).integers(0, 10, (5, 3)))
    y = traced(idx)
    np.testing.assert_array_equal(y.detach().numpy(), bag(idx).detach().numpy())
    y.sum().backward()
    assert bag.weight.grad.numpy().sum() == pytest.approx(20.0)     # 5 bags x 4 features


def test_embedding_bag_with_offsets_traced_and_scripted() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bag = nn.EmbeddingBag(10, 4, mode="sum")

        def forward(self, idx: sm.Tensor, offsets: sm.Tensor) -> sm.Tensor:
            return self.bag(idx, offsets) * 2.0

    net = Net()
    traced = sm.jit.trace(net, (sm.tensor([1, 2, 3, 4]), sm.tensor([0, 2])))
    scripted = sm.jit.script(net)
    idx, offsets = sm.tensor([1, 2, 3, 4, 9, 9]), sm.tensor([0, 1, 1, 3])
    for compiled in (traced, scripted):
        np.testing.assert_allclose(compiled(idx, offsets).detach().numpy(),
                                   net(idx, offsets).detach().numpy(), rtol=1e-6)


class _OtherArrays:
    """NumPy under another name: the kernels' path for array modules without ``reduceat``
    (CuPy), run on the CPU."""

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)


@pytest.mark.parametrize("kw", [{"mode": "sum"}, {"mode": "mean", "padding_idx": 4},
                                {"mode": "max", "padding_idx": 1},
                                {"mode": "sum", "include_last_offset": True}], ids=str)
def test_segment_reductions_without_reduceat_agree(kw: dict) -> None:
    from scriptmod.runtime.kernels import KERNELS
    args = (_WEIGHT, _IDX, _OFFSETS, None)
    for op, inputs in (("embedding_bag", args),
                       ("embedding_bag_grad", (np.ones((4 - kw.get("include_last_offset", 0), 3)),
                                               *args))):
        np.testing.assert_allclose(KERNELS[op](_OtherArrays(), *inputs, **kw),
                                   KERNELS[op](np, *inputs, **kw), rtol=1e-12)


_EXPORTS = [({"mode": "sum"}, True), ({"mode": "mean", "padding_idx": 9}, False),
            ({"mode": "max", "padding_idx": 1}, False),
            ({"mode": "sum", "include_last_offset": True}, False)]


@pytest.mark.parametrize("kw,two_d", _EXPORTS, ids=str)
def test_embedding_bag_onnx_export_runs_in_onnxruntime(kw: dict, two_d: bool) -> None:
    ort = pytest.importorskip("onnxruntime")
    bag = nn.EmbeddingBag(10, 4, **kw)
    idx = sm.tensor([1, 2, 3, 4, 9, 9, 0, 5])
    last = 8 if kw.get("include_last_offset") else 3
    args = (idx.reshape(2, 4),) if two_d else (idx, sm.tensor([0, 1, 1, last]))
    f = io.BytesIO()
    sm.onnx.export(bag, f, args, opset_version=18)
    session = ort.InferenceSession(f.getvalue())
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    np.testing.assert_allclose(session.run(None, feeds)[0], bag(*args).detach().numpy(),
                               rtol=1e-6, atol=1e-7)
    if kw["mode"] == "max":
        with pytest.raises(RuntimeError, match="needs opset_version >= 18"):
            sm.onnx.export(bag, io.BytesIO(), args, opset_version=17)


def test_one_hot_against_numpy_and_its_errors() -> None:
    idx = np.array([[0, 3], [2, 2]])
    np.testing.assert_array_equal(F.one_hot(sm.tensor(idx)).numpy(), np.eye(4, dtype=int)[idx])
    assert tuple(F.one_hot(sm.zeros(0, dtype=sm.int64), 3).shape) == (0, 3)
    with pytest.raises(RuntimeError, match="empty tensor"):
        F.one_hot(sm.zeros(0, dtype=sm.int64))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(sm.tensor([4]), 4)
    with pytest.raises(TypeError, match="LongTensor"):
        F.one_hot(sm.tensor([1], dtype=sm.int32), 4)
