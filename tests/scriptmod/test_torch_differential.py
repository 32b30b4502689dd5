"""PyTorch-differential suite: the same call through torch 2.13 and scriptmod (eager, and a
traced module where that is the point) must raise the same exception class, refuse or promote
the same dtype mixes, give the same special values, state dicts and version counters.

Each case is a function of the library module ``L`` (``torch`` or ``scriptmod``), so one
table drives both sides."""
from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


def F(L: Any) -> Any:
    return L.nn.functional


def t(L: Any, *s: int, dtype: Any = None) -> Any:
    return L.ones(*s) if dtype is None else L.ones(*s, dtype=dtype)


def i64(L: Any, vals: Any) -> Any:
    return L.tensor(vals, dtype=L.int64)


def _raised(fn: Callable[[Any], Any], L: Any) -> BaseException | None:
    try:
        fn(L)
    except Exception as e:   # noqa: BLE001 - the exception is the result under test
        return e
    return None


# ---- exceptions -------------------------------------------------------------------------------
BAD_CALLS: dict[str, Callable[[Any], Any]] = {
    # binary ops shape mismatch
    "add": lambda L: t(L,2,3) + t(L,4),
    "sub": lambda L: t(L,2,3) - t(L,2,4),
    "mul": lambda L: t(L,2,3) * t(L,3,3),
    "div": lambda L: t(L,2,3) / t(L,2),
    "pow": lambda L: t(L,2,3) ** t(L,5),
    "maximum": lambda L: L.maximum(t(L,2), t(L,3)),
    "minimum": lambda L: L.minimum(t(L,2), t(L,3)),
    "eq": lambda L: t(L,2) == t(L,3),
    "lt": lambda L: t(L,2) < t(L,3),
    "where": lambda L: L.where(t(L,2)>0, t(L,3), t(L,2)),
    "atan2": lambda L: L.atan2(t(L,2), t(L,3)),
    "remainder": lambda L: L.remainder(t(L,2), t(L,3)),
    "floor_divide": lambda L: L.floor_divide(t(L,2), t(L,3)),
    "logical_and": lambda L: L.logical_and(t(L,2), t(L,3)),
    "masked_fill": lambda L: t(L,2,3).masked_fill(L.zeros(4, dtype=L.bool), 1.0),
    "iadd": lambda L: t(L,3).add_(t(L,2,3)),
    "imul": lambda L: t(L,3).mul_(t(L,4)),
    # matmul family
    "matmul": lambda L: t(L,2,3) @ t(L,4,2),
    "matmul-1d": lambda L: t(L,3) @ t(L,4),
    "matmul-0d": lambda L: L.matmul(L.tensor(1.0), t(L,3)),
    "matmul-batch": lambda L: t(L,2,2,3) @ t(L,3,3,4),
    "mm-3d": lambda L: L.mm(t(L,2,2,2), t(L,2,3)),
    "mm-inner": lambda L: L.mm(t(L,2,3), t(L,2,3)),
    "bmm-2d": lambda L: L.bmm(t(L,2,3), t(L,3,4)),
    "bmm-batch": lambda L: L.bmm(t(L,2,2,3), t(L,3,3,1)),
    "bmm-inner": lambda L: L.bmm(t(L,2,2,3), t(L,2,4,1)),
    "dot": lambda L: L.dot(t(L,3), t(L,4)),
    "dot-2d": lambda L: L.dot(t(L,3,3), t(L,3)),
    "addmm": lambda L: L.addmm(t(L,2,4), t(L,2,3), t(L,4,4)),
    "addmm-bias": lambda L: L.addmm(t(L,3,3), t(L,2,3), t(L,3,4)),
    "outer-2d": lambda L: L.outer(t(L,2,2), t(L,3)),
    "linear-F": lambda L: F(L).linear(t(L,2,3), t(L,4,5)),
    "linear-bias": lambda L: F(L).linear(t(L,2,3), t(L,4,3), t(L,5)),
    "Linear": lambda L: L.nn.Linear(3, 4)(t(L,2,5)),
    "Linear-0d": lambda L: L.nn.Linear(3, 4)(L.tensor(1.0)),
    # conv
    "conv2d-ch": lambda L: L.nn.Conv2d(3, 4, 3)(t(L,1,2,5,5)),
    "conv2d-rank": lambda L: L.nn.Conv2d(3, 4, 3)(t(L,3,5)),
    "conv2d-small": lambda L: L.nn.Conv2d(3, 4, 5)(t(L,1,3,3,3)),
    "conv2d-F-ch": lambda L: F(L).conv2d(t(L,1,3,5,5), t(L,4,2,3,3)),
    "conv2d-groups": lambda L: L.nn.Conv2d(3, 4, 3, groups=2),
    # pooling
    "maxpool-big": lambda L: L.nn.MaxPool2d(5)(t(L,1,1,3,3)),
    "maxpool-pad": lambda L: L.nn.MaxPool2d(2, padding=2)(t(L,1,1,4,4)),
    "maxpool-zero": lambda L: L.nn.MaxPool2d(0)(t(L,1,1,4,4)),
    "avgpool-big": lambda L: L.nn.AvgPool2d(5)(t(L,1,1,3,3)),
    "avgpool-pad": lambda L: L.nn.AvgPool2d(2, padding=2)(t(L,1,1,4,4)),
    "maxpool-rank": lambda L: L.nn.MaxPool2d(2)(t(L,4)),
    # embedding
    "embedding-oob": lambda L: L.nn.Embedding(5, 2)(i64(L,[1, 5])),
    "embedding-neg": lambda L: L.nn.Embedding(5, 2)(i64(L,[-1])),
    "embedding-float": lambda L: L.nn.Embedding(5, 2)(L.tensor([1.0])),
    # losses
    "ce-oob": lambda L: F(L).cross_entropy(t(L,2,3), i64(L,[0, 3])),
    "ce-neg": lambda L: F(L).cross_entropy(t(L,2,3), i64(L,[0, -2])),
    "ce-batch": lambda L: F(L).cross_entropy(t(L,2,3), i64(L,[0, 1, 2])),
    "ce-float-target-shape": lambda L: F(L).cross_entropy(t(L,2,3), t(L,2,4)),
    "ce-int32-target": lambda L: F(L).cross_entropy(t(L,2,3), L.tensor([0,1], dtype=L.int32)),
    "nll-oob": lambda L: F(L).nll_loss(t(L,2,3), i64(L,[0, 7])),
    "mse-shape": lambda L: F(L).mse_loss(t(L,2,3), t(L,2,4)),
    # indexing
    "index-oob": lambda L: t(L,2,3)[5],
    "index-oob-neg": lambda L: t(L,2,3)[-3],
    "index-tensor-oob": lambda L: t(L,2,3)[i64(L,[0, 2])],
    "index-too-many": lambda L: t(L,2,3)[0, 0, 0],
    "index_select-oob": lambda L: L.index_select(t(L,2,3), 1, i64(L,[3])),
    "index_select-dim": lambda L: L.index_select(t(L,2,3), 2, i64(L,[0])),
    "index_select-float": lambda L: L.index_select(t(L,2,3), 0, L.tensor([0.0])),
    "index_select-2d": lambda L: L.index_select(t(L,2,3), 0, i64(L,[[0]])),
    "gather-oob": lambda L: L.gather(t(L,2,3), 1, i64(L,[[3],[0]])),
    "gather-rank": lambda L: L.gather(t(L,2,3), 1, i64(L,[0])),
    "gather-float": lambda L: L.gather(t(L,2,3), 1, L.tensor([[0.0]])),
    "gather-dim": lambda L: L.gather(t(L,2,3), 2, i64(L,[[0]])),
    "setitem-oob": lambda L: t(L,2,3).__setitem__(4, 0.0),
    # shape ops
    "cat-rank": lambda L: L.cat([t(L,2,3), t(L,3)]),
    "cat-shape": lambda L: L.cat([t(L,2,3), t(L,2,4)], dim=0),
    "cat-dim": lambda L: L.cat([t(L,2,3), t(L,2,3)], dim=2),
    "cat-empty": lambda L: L.cat([]),
    "stack-shape": lambda L: L.stack([t(L,2,3), t(L,3,2)]),
    "view-noncontig": lambda L: t(L,2,3).t().view(6),
    "view-bad": lambda L: t(L,2,3).view(4, 2),
    "view-two-neg": lambda L: t(L,2,3).view(-1, -1),
    "reshape-bad": lambda L: t(L,2,3).reshape(5, -1),
    "reshape-neg": lambda L: t(L,2,3).reshape(-2, 3),
    "expand-smaller": lambda L: t(L,2,3).expand(2, 2),
    "expand-fewer": lambda L: t(L,2,3).expand(3),
    "expand-nonsingleton": lambda L: t(L,2,3).expand(4, 3),
    "squeeze-dim": lambda L: t(L,2,1).squeeze(2),
    "squeeze-dim-neg": lambda L: t(L,2,1).squeeze(-3),
    "unsqueeze-dim": lambda L: t(L,2,1).unsqueeze(4),
    "permute-rep": lambda L: t(L,2,3).permute(0, 0),
    "permute-len": lambda L: t(L,2,3).permute(0),
    "permute-oob": lambda L: t(L,2,3).permute(0, 2),
    "transpose-dim": lambda L: t(L,2,3).transpose(0, 2),
    "t-3d": lambda L: t(L,2,3,4).t(),
    "flatten-dims": lambda L: t(L,2,3,4).flatten(2, 1),
    "flatten-oob": lambda L: t(L,2,3,4).flatten(0, 3),
    "narrow-oob": lambda L: t(L,2,3).narrow(1, 2, 3),
    "split-sizes": lambda L: t(L,2,3).split([1, 1], dim=1),
    "chunk-zero": lambda L: t(L,2,3).chunk(0),
    "unflatten-bad": lambda L: t(L,2,6).unflatten(1, (4, 2)),
    "repeat-fewer": lambda L: t(L,2,3).repeat(2),
    "sum-dim": lambda L: t(L,2,3).sum(dim=2),
    "softmax-dim": lambda L: t(L,2,3).softmax(dim=2),
    "select-oob": lambda L: t(L,2,3).select(1, 3),
    "movedim-rep": lambda L: L.movedim(t(L,2,3,4), (0, 1), (1, 1)),
    "tril-1d": lambda L: L.tril(t(L,3)),
    # norms
    "LayerNorm-shape": lambda L: L.nn.LayerNorm(4)(t(L,2,3)),
    "LayerNorm-shape2": lambda L: L.nn.LayerNorm((2, 3))(t(L,3, 3)),
    "layer_norm-F": lambda L: F(L).layer_norm(t(L,2,3), (4,)),
    "BatchNorm1d-ch": lambda L: L.nn.BatchNorm1d(4)(t(L,2,3)),
    "BatchNorm2d-ch": lambda L: L.nn.BatchNorm2d(4)(t(L,2,3,4,4)),
    "BatchNorm2d-rank": lambda L: L.nn.BatchNorm2d(3)(t(L,2,3)),
    "BatchNorm1d-rank": lambda L: L.nn.BatchNorm1d(3)(t(L,2,3,4,4)),
    "BatchNorm-batch1": lambda L: L.nn.BatchNorm1d(3)(t(L,1,3)),
    "normalize-dim": lambda L: F(L).normalize(t(L,2,3), dim=2),
    "mha-embed": lambda L: L.nn.MultiheadAttention(6, 4),
    "mha-shape": lambda L: L.nn.MultiheadAttention(4, 2)(t(L,2,3,5), t(L,2,3,5), t(L,2,3,5)),
    "sdpa-shape": lambda L: F(L).scaled_dot_product_attention(t(L,2,3,4), t(L,2,3,5), t(L,2,3,5)),
    "PReLU-ch": lambda L: L.nn.PReLU(3)(t(L,2,4)),
    "softmax-nodim-ok": lambda L: F(L).softmax(t(L,2,3), dim=5),
    "Flatten-oob": lambda L: L.nn.Flatten(2, 5)(t(L,2,3)),
    "Embedding-max_norm": lambda L: L.nn.Embedding(5, 2, padding_idx=7),
    "Dropout-p": lambda L: L.nn.Dropout(1.5),
    "Linear-neg": lambda L: L.nn.Linear(-1, 3),
    "Sequential-idx": lambda L: L.nn.Sequential(L.nn.ReLU())[3],
    "ModuleList-idx": lambda L: L.nn.ModuleList([L.nn.ReLU()])[2],
    "clamp-none": lambda L: L.clamp(t(L,2)),
    "zeros-neg": lambda L: L.zeros(-1, 2),
    "item-multi": lambda L: t(L,2).item(),
    "bool-multi": lambda L: bool(t(L,2)),
    "int-multi": lambda L: int(t(L,2)),
    "len-0d": lambda L: len(L.tensor(1.0)),
    "iter-0d": lambda L: iter(L.tensor(1.0)),
    "softmax-int": lambda L: F(L).softmax(L.tensor([1, 2]), 0),
    "mean-int": lambda L: L.tensor([1, 2]).mean(),
    "neg-bool": lambda L: -L.tensor([True]),
    "bitand-float": lambda L: t(L,2) & t(L,2),
    "randint-bad": lambda L: L.randint(5, 3, (2,)),
    "arange-bad": lambda L: L.arange(5, 0, 1),
    "arange-zero": lambda L: L.arange(0, 5, 0),
    "linspace-neg": lambda L: L.linspace(0, 1, -1),
    "eye-neg": lambda L: L.eye(-1),
    "full-bad": lambda L: L.full((2,), "x"),
    "std-int": lambda L: L.tensor([1,2]).std(),
    "cumsum-dim": lambda L: t(L,2,3).cumsum(2),
    "argmax-dim": lambda L: t(L,2,3).argmax(2),
    "one_hot-oob": lambda L: F(L).one_hot(i64(L,[3]), 3),
    "one_hot-float": lambda L: F(L).one_hot(L.tensor([1.0]), 3),
    "pad-bad": lambda L: F(L).pad(t(L,2,3), (1,)),
    "requires_grad-int": lambda L: L.tensor([1]).requires_grad_(),
    "backward-nonscalar": lambda L: (t(L,2).requires_grad_() * 2).backward(),
    "backward-nograd": lambda L: (t(L,2) * 2).sum().backward(),
    "grad-twice":
        lambda L: (lambda x: ((y := (x*x).sum()).backward(), y.backward()))(t(L,2).requires_grad_()),
    "inplace-leaf": lambda L: t(L,2).requires_grad_().add_(1),
    "inplace-cast": lambda L: L.tensor([1, 2]).mul_(1.5),
    "to-bad": lambda L: t(L,2).to("nope"),
    "load_state_dict-shape":
        lambda L: L.nn.Linear(2,3).load_state_dict({"weight": L.ones(3,3), "bias": L.ones(3)}),
    "load_state_dict-missing": lambda L: L.nn.Linear(2,3).load_state_dict({"weight": L.ones(3,2)}),
    "get_submodule": lambda L: L.nn.Sequential(L.nn.ReLU()).get_submodule("3"),
    "register_buffer-dot": lambda L: L.nn.Module().register_buffer("a.b", L.ones(1)),
    "register_parameter-tensor": lambda L: L.nn.Module().register_parameter("a", L.ones(1)),
    "add_module-bad": lambda L: L.nn.Module().add_module("a", 3),
    "setattr-param-tensor": lambda L: setattr(L.nn.Linear(2,3), "weight", L.ones(3,2)),
}

def _backward_under_no_grad(L: Any) -> None:
    x = t(L, 2).requires_grad_()
    with L.no_grad():
        y = (x * 2).sum()
    y.backward()


MORE_BAD_CALLS: dict[str, Callable[[Any], Any]] = {
    "masked_fill-float-mask": lambda L: t(L,2,3).masked_fill(t(L,2,3), 1.0),
    "masked_fill-tensor-val": lambda L: t(L,2,3).masked_fill(t(L,2,3)>0, t(L,2)),
    "where-float-cond": lambda L: L.where(t(L,2), t(L,2), t(L,2)),
    "expand-neg": lambda L: t(L,2,3).expand(-2, 3),
    "repeat-neg": lambda L: t(L,2).repeat(-1),
    "narrow-neg-len": lambda L: t(L,2,3).narrow(1, 0, -1),
    "narrow-dim": lambda L: t(L,2,3).narrow(2, 0, 1),
    "split-dim": lambda L: t(L,2,3).split(1, dim=2),
    "split-zero": lambda L: t(L,2,3).split(0, dim=1),
    "unbind-dim": lambda L: t(L,2,3).unbind(2),
    "stack-dim": lambda L: L.stack([t(L,2), t(L,2)], dim=3),
    "stack-empty": lambda L: L.stack([]),
    "cat-0d": lambda L: L.cat([L.tensor(1.0), L.tensor(2.0)]),
    "cat-tensor": lambda L: L.cat(t(L,2,3)),
    "sum-dims-rep": lambda L: t(L,2,3).sum(dim=(0, 0)),
    "mean-dim": lambda L: t(L,2,3).mean(dim=-3),
    "max-dim-empty": lambda L: L.ones(0, 3).max(dim=0),
    "argmax-empty": lambda L: L.ones(0).argmax(),
    "softmax-dim-none": lambda L: F(L).softmax(t(L,2,3), dim=3),
    "logsumexp-dim": lambda L: L.logsumexp(t(L,2,3), dim=2),
    "std-dim": lambda L: t(L,2,3).std(dim=2),
    "var-dim": lambda L: t(L,2,3).var(dim=2),
    "cumsum-int-dim": lambda L: t(L,2,3).cumsum(dim=-3),
    "prod-dim": lambda L: t(L,2,3).prod(dim=2),
    "outer-0d": lambda L: L.outer(L.tensor(1.0), t(L,3)),
    "bmm-4d": lambda L: L.bmm(t(L,1,2,2,3), t(L,1,2,3,4)),
    "mv-like": lambda L: L.mm(t(L,2,3), t(L,3)),
    "linear-3dweight": lambda L: F(L).linear(t(L,2,3), t(L,4,3,1)),
    "linear-1dweight": lambda L: F(L).linear(t(L,2,3), t(L,3)),
    "conv2d-weight-rank": lambda L: F(L).conv2d(t(L,1,3,5,5), t(L,4,3,3)),
    "conv2d-stride0": lambda L: F(L).conv2d(t(L,1,3,5,5), t(L,4,3,3,3), stride=0),
    "conv2d-negpad": lambda L: F(L).conv2d(t(L,1,3,5,5), t(L,4,3,3,3), padding=-1),
    "conv2d-bias-shape": lambda L: F(L).conv2d(t(L,1,3,5,5), t(L,4,3,3,3), t(L,3)),
    "conv2d-groups-bad": lambda L: F(L).conv2d(t(L,1,4,5,5), t(L,4,2,3,3), groups=3),
    "Conv2d-pad-str": lambda L: L.nn.Conv2d(3, 4, 3, padding="bogus"),
    "Conv2d-same-stride": lambda L: L.nn.Conv2d(3, 4, 3, padding="same", stride=2),
    "maxpool-dilation0": lambda L: F(L).max_pool2d(t(L,1,1,4,4), 2, dilation=0),
    "avgpool-div0": lambda L: F(L).avg_pool2d(t(L,1,1,4,4), 2, divisor_override=0),
    "embedding-2dweight-1d": lambda L: F(L).embedding(i64(L,[0]), t(L,3)),
    "embedding-padding": lambda L: F(L).embedding(i64(L,[0]), t(L,3,2), padding_idx=5),
    "ce-reduction": lambda L: F(L).cross_entropy(t(L,2,3), i64(L,[0,1]), reduction="bogus"),
    "mse-reduction": lambda L: F(L).mse_loss(t(L,2,3), t(L,2,3), reduction="bogus"),
    "ce-weight-shape": lambda L: F(L).cross_entropy(t(L,2,3), i64(L,[0,1]), weight=t(L,4)),
    "ce-3d-target": lambda L: F(L).cross_entropy(t(L,2,3,4), i64(L,[[0,1,2,0]]*3)),
    "ce-ls": lambda L: F(L).cross_entropy(t(L,2,3), i64(L,[0,1]), label_smoothing=1.5),
    "bce-shape": lambda L: F(L).binary_cross_entropy_with_logits(t(L,2,3), t(L,2,4)),
    "bce-posw":
        lambda L: F(L).binary_cross_entropy_with_logits(t(L,2,3), t(L,2,3), pos_weight=t(L,4)),
    "nll-1d-target-2d": lambda L: F(L).nll_loss(t(L,3), i64(L,[[0]])),
    "layer_norm-weight": lambda L: F(L).layer_norm(t(L,2,3), (3,), t(L,4)),
    "batch_norm-rm-shape": lambda L: F(L).batch_norm(t(L,2,3), t(L,4), t(L,4)),
    "sdpa-mask-shape":
        lambda L: F(L).scaled_dot_product_attention(t(L,2,3,4), t(L,2,3,4), t(L,2,3,4), attn_mask=t(L,2,5)),
    "sdpa-mask-dtype":
        lambda L: F(L).scaled_dot_product_attention(t(L,2,3,4), t(L,2,3,4), t(L,2,3,4), attn_mask=i64(L,[[0]*3]*3)),
    "sdpa-dropout":
        lambda L: F(L).scaled_dot_product_attention(t(L,2,3,4), t(L,2,3,4), t(L,2,3,4), dropout_p=2.0),
    "pad-mode": lambda L: F(L).pad(t(L,1,2,3), (1,1), mode="bogus"),
    "pad-reflect-big": lambda L: F(L).pad(t(L,1,2,3), (3,3), mode="reflect"),
    "normalize-p0": lambda L: F(L).normalize(t(L,2,3), p=0),
    "leaky-inplace-leaf": lambda L: F(L).leaky_relu(t(L,2).requires_grad_(), inplace=True),
    "gelu-approx": lambda L: F(L).gelu(t(L,2), approximate="bogus"),
    "GELU-approx": lambda L: L.nn.GELU(approximate="bogus")(t(L,2)),
    "Softmax-dim-call": lambda L: L.nn.Softmax(dim=3)(t(L,2,3)),
    "Threshold-inplace-int": lambda L: L.nn.Threshold(0.5, 2.5, inplace=True)(L.tensor([1, 0])),
    "Flatten-order": lambda L: L.nn.Flatten(2, 1)(t(L,2,3,4)),
    "Unflatten": lambda L: L.nn.Unflatten(1, (2, 2))(t(L,2,3)),
    "ParameterList-idx": lambda L: L.nn.ParameterList([L.nn.Parameter(t(L,2))])[3],
    "ModuleDict-key": lambda L: L.nn.ModuleDict({"a": L.nn.ReLU()})["b"],
    "ParameterDict-key": lambda L: L.nn.ParameterDict({"a": L.nn.Parameter(t(L,1))})["b"],
    "Sequential-slice-assign": lambda L: L.nn.Sequential(L.nn.ReLU()).__setitem__(0, 3),
    "Module-getattr": lambda L: L.nn.Linear(2,2).nothing,
    "Module-delattr": lambda L: delattr(L.nn.Linear(2,2), "nothing"),
    "get_parameter": lambda L: L.nn.Linear(2,2).get_parameter("nothing"),
    "get_buffer": lambda L: L.nn.Linear(2,2).get_buffer("weight"),
    "to-dtype-bad": lambda L: L.nn.Linear(2,2).to(L.int64),
    "register_buffer-exists":
        lambda L: (lambda m: m.register_buffer("weight", L.ones(1)))(L.nn.Linear(2,2)),
    "register_buffer-nontensor": lambda L: L.nn.Module().register_buffer("a", 3),
    "zero_grad-type": lambda L: L.optim.SGD([L.nn.Parameter(t(L,2))], lr=-1),
    "adam-betas": lambda L: L.optim.Adam([L.nn.Parameter(t(L,2))], betas=(1.5, 0.9)),
    "sgd-empty": lambda L: L.optim.SGD([], lr=0.1),
    "sgd-nesterov": lambda L: L.optim.SGD([L.nn.Parameter(t(L,2))], lr=0.1, nesterov=True),
    "tensor-ragged": lambda L: L.tensor([[1, 2], [3]]),
    "tensor-str": lambda L: L.tensor("abc"),
    "zeros-float-size": lambda L: L.zeros(2.5),
    "randn-neg": lambda L: L.randn(-2),
    "full-shape-neg": lambda L: L.full((-1,), 1.0),
    "arange-nan": lambda L: L.arange(0, float("nan")),
    "arange-inf": lambda L: L.arange(0, float("inf")),
    "item-empty": lambda L: L.ones(0).item(),
    "float-multi": lambda L: float(t(L,2)),
    "index-bool-shape": lambda L: t(L,2,3)[L.tensor([True, False, True])],
    "index-float-idx": lambda L: t(L,2,3)[1.5],
    "setitem-shape": lambda L: t(L,2,3).__setitem__(slice(None), t(L,2,4)),
    "setitem-bool-mask": lambda L: t(L,2,3).__setitem__(L.tensor([True, False, True]), 0.0),
    "pow-int-neg": lambda L: L.tensor([2]) ** -1,
    "div-int-zero": lambda L: L.tensor([2]) // 0,
    "rem-int-zero": lambda L: L.tensor([2]) % 0,
    "invert-float": lambda L: ~t(L,2),
    "xor-float": lambda L: t(L,2) ^ t(L,2),
    "logical-not-ok": lambda L: L.logical_not(t(L,2)),
    "sign-bool": lambda L: L.sign(L.tensor([True])),
    "sub-bool": lambda L: L.tensor([True]) - L.tensor([False]),
    "sub-bool-int": lambda L: L.tensor([True]) - 1,
    "rsub-bool": lambda L: 1.5 - L.tensor([True]),
    "sub-float-bool": lambda L: L.tensor([1.0]) - L.tensor([True]),
    "neg-bool2": lambda L: L.neg(L.tensor([True])),
    "topk-style": lambda L: L.clamp(t(L,2), min=t(L,3)),
    "clamp-min>max": lambda L: L.clamp(t(L,2), min=2, max=1),
    "add-alpha-float-int": lambda L: L.add(L.tensor([1]), L.tensor([1]), alpha=0.5),
    "requires-grad-nonleaf": lambda L: (t(L,2).requires_grad_() * 2).requires_grad_(False),
    "backward-grad-shape": lambda L: (t(L,2).requires_grad_() * 2).backward(t(L,3)),
    "inplace-view-leaf": lambda L: t(L,2,3).requires_grad_()[0].add_(1),
    "no_grad-backward": lambda L: _backward_under_no_grad(L),
}
BAD_CALLS.update(MORE_BAD_CALLS)


_BASES = (IndexError, TypeError, ValueError, RuntimeError, KeyError, AttributeError)


def _torch_base(e: BaseException) -> type:
    """The builtin class a PyTorch user catches: NotImplementedError is a RuntimeError, and
    torch's AssertionErrors (MultiheadAttention, Embedding) are ours to make ValueErrors."""
    if isinstance(e, AssertionError):
        return ValueError
    return next(b for b in _BASES if isinstance(e, b))


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_call_raises_torchs_exception_class(name: str) -> None:
    te, se = _raised(BAD_CALLS[name], torch), _raised(BAD_CALLS[name], sm)
    if te is None:
        assert se is None, f"torch accepts {name}; we raise {type(se).__name__}: {se}"
        return
    assert se is not None, f"torch raises {type(te).__name__}: {te}; we accept it"
    assert isinstance(se, _torch_base(te)), (
        f"torch raises {type(te).__name__}: {te}\nwe raise {type(se).__name__}: {se}")
    assert str(se).strip(), "an exception without a message"


# (call, fragments our message must contain: the op or argument, and what was given)
MESSAGES: dict[str, tuple[str, ...]] = {
    "add": ("add()", "(2, 3)", "(4)"), "matmul": ("matmul", "(2, 3)", "(4, 2)"),
    "Linear": ("Linear", "in_features", "(2, 5)"), "conv2d-F-ch": ("conv2d", "3 channels"),
    "conv2d-small": ("conv2d", "(3, 3)", "(5, 5)"), "maxpool-zero": ("max_pool2d", "stride"),
    "maxpool-big": ("max_pool2d", "(3, 3)", "(5, 5)"), "embedding-oob": ("embedding", "5"),
    "ce-oob": ("Target 3",), "ce-int32-target": ("target", "int32"),
    "index_select-oob": ("index_select", "3", "size 3"), "index_select-dim": ("index_select", "2"),
    "gather-rank": ("gather", "dimensions"), "cat-rank": ("cat", "(2, 3)", "(3,)"),
    "cat-empty": ("cat", "non-empty"), "view-noncontig": ("view", "reshape"),
    "expand-smaller": ("expand", "3", "2"), "squeeze-dim": ("squeeze", "2"),
    "permute-rep": ("permute", "(0, 0)"), "reshape-bad": ("reshape", "(5, -1)", "6"),
    "transpose-dim": ("transpose", "2"), "flatten-dims": ("flatten", "start_dim", "end_dim"),
    "flatten-oob": ("flatten", "3"), "movedim-rep": ("movedim", "destination"),
    "tril-1d": ("tril", "2 dimensions"), "chunk-zero": ("chunk", "0"),
    "LayerNorm-shape": ("LayerNorm", "[*, 4]", "(2, 3)"),
    "BatchNorm2d-ch": ("BatchNorm2d", "C=4", "(2, 3, 4, 4)"),
    "one_hot-oob": ("one_hot", "num_classes"), "one_hot-float": ("one_hot", "float32"),
    "full-bad": ("fill_value", "str"), "to-bad": ("device", "'nope'"),
    "clamp-none": ("clamp", "min", "max"), "arange-zero": ("arange", "step"),
    "sum-dims-rep": ("dim 0 appears multiple times",), "div-int-zero": ("ZeroDivisionError",),
    "maxpool-dilation0": ("max_pool2d", "dilation"), "conv2d-stride0": ("conv2d", "stride"),
    "conv2d-negpad": ("conv2d", "negative padding"), "embedding-2dweight-1d": ("weight", "2-D"),
    "add-alpha-float-int": ("alpha", "int64"), "outer-0d": ("outer", "1-D", "0-D"),
    "arange-inf": ("arange", "inf"), "sub-bool": ("Subtraction", "bool"),
}


@pytest.mark.parametrize("name", list(MESSAGES))
def test_bad_call_message_names_the_argument_and_shapes(name: str) -> None:
    se = _raised(BAD_CALLS[name], sm)
    assert se is not None
    missing = [f for f in MESSAGES[name] if f not in str(se)]
    assert not missing, f"{type(se).__name__}: {se} lacks {missing}"


def test_error_classes_are_runtime_errors_and_value_or_type_errors() -> None:
    for cls, also in ((sm.ShapeError, ValueError), (sm.DTypeError, TypeError),
                      (sm.DeviceError, ValueError), (sm.ArgumentValueError, ValueError)):
        assert issubclass(cls, RuntimeError) and issubclass(cls, also)
    with pytest.raises(sm.DeviceError, match="'nope'"):
        sm.ones(2).to("nope")


# ---- dtype mixing: what torch refuses we refuse (a RuntimeError), what it promotes we promote --
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64")


def r(L: Any, shape: tuple[int, ...], dt: str, seed: int = 0) -> Any:
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return L.tensor(a).to(getattr(L, dt))


def idx(L: Any, vals: Any, dt: str = "int64") -> Any:
    return L.tensor(vals).to(getattr(L, dt))


MIXES: dict[str, Callable[[Any, str, str], Any]] = {
    "linear": lambda L,a,b: F(L).linear(r(L,(2,3),a), r(L,(4,3),b)),
    "linear-bias": lambda L,a,b: F(L).linear(r(L,(2,3),a), r(L,(4,3),a), r(L,(4,),b)),
    "matmul": lambda L,a,b: r(L,(2,3),a) @ r(L,(3,4),b),
    "bmm": lambda L,a,b: L.bmm(r(L,(2,2,3),a), r(L,(2,3,4),b)),
    "addmm": lambda L,a,b: L.addmm(r(L,(2,4),a), r(L,(2,3),b), r(L,(3,4),b)),
    "addmm2": lambda L,a,b: L.addmm(r(L,(2,4),a), r(L,(2,3),a), r(L,(3,4),b)),
    "conv2d": lambda L,a,b: F(L).conv2d(r(L,(1,2,4,4),a), r(L,(3,2,3,3),b)),
    "embedding": lambda L,a,b: F(L).embedding(idx(L,[0,1]), r(L,(3,2),a)) + r(L,(2,2),b),
    "layer_norm": lambda L,a,b: F(L).layer_norm(r(L,(2,3),a), (3,), r(L,(3,),b), r(L,(3,),b)),
    "batch_norm":
        lambda L,a,b: F(L).batch_norm(r(L,(2,3),a), r(L,(3,),b), r(L,(3,),b).abs(), training=False),
    "sdpa":
        lambda L,a,b: F(L).scaled_dot_product_attention(r(L,(1,2,4),a), r(L,(1,2,4),b), r(L,(1,2,4),b)),
    "ce-weight":
        lambda L,a,b: F(L).cross_entropy(r(L,(2,3),a), idx(L,[0,1]), weight=r(L,(3,),b).abs()),
    "nll-weight": lambda L,a,b: F(L).nll_loss(r(L,(2,3),a), idx(L,[0,1]), weight=r(L,(3,),b).abs()),
    "index_select": lambda L,a,b: L.index_select(r(L,(2,3),a), 1, idx(L,[0,1],b)),
    "gather": lambda L,a,b: L.gather(r(L,(2,3),a), 1, idx(L,[[0],[1]],b)),
    "add": lambda L,a,b: r(L,(2,3),a) + r(L,(2,3),b),
    "mul": lambda L,a,b: r(L,(2,3),a) * r(L,(3,),b),
    "div": lambda L,a,b: r(L,(2,3),a) / r(L,(3,),b),
    "where": lambda L,a,b: L.where(r(L,(2,3),a) > 0, r(L,(2,3),a), r(L,(2,3),b)),
    "cat": lambda L,a,b: L.cat([r(L,(2,3),a), r(L,(1,3),b)]),
    "stack": lambda L,a,b: L.stack([r(L,(2,3),a), r(L,(2,3),b)]),
    "lt": lambda L,a,b: r(L,(2,3),a) < r(L,(2,3),b),
    "eq": lambda L,a,b: r(L,(2,3),a) == r(L,(3,),b),
    "clamp-t": lambda L,a,b: L.clamp(r(L,(2,3),a), min=r(L,(3,),b)),
    "clamp-t2": lambda L,a,b: L.clamp(r(L,(2,3),a), r(L,(3,),b), r(L,(3,),b)+1),
    "maximum": lambda L,a,b: L.maximum(r(L,(2,3),a), r(L,(2,3),b)),
    "masked_fill": lambda L,a,b: r(L,(2,3),a).masked_fill(r(L,(2,3),b) > 0, r(L,(),b)),
    "iadd": lambda L,a,b: r(L,(2,3),a).add_(r(L,(2,3),b)),
    "copy_": lambda L,a,b: r(L,(2,3),a).copy_(r(L,(2,3),b)),
    "setitem": lambda L,a,b: (lambda x: (x.__setitem__(0, r(L,(3,),b)), x)[1])(r(L,(2,3),a)),
    "pow": lambda L,a,b: r(L,(2,3),a).abs() ** r(L,(2,3),b),
    "atan2": lambda L,a,b: L.atan2(r(L,(2,3),a), r(L,(2,3),b)),
    "dot": lambda L,a,b: L.dot(r(L,(3,),a), r(L,(3,),b)),
    "mse": lambda L,a,b: F(L).mse_loss(r(L,(2,3),a), r(L,(2,3),b)),
}


def _result(fn: Callable[[Any, str, str], Any], L: Any, a: str, b: str) -> Any:
    try:
        return fn(L, a, b)
    except Exception as e:   # noqa: BLE001
        return e


@pytest.mark.parametrize("name", list(MIXES))
def test_dtype_mix_refused_or_promoted_as_torch(name: str) -> None:
    """Every ordered pair of distinct dtypes: both orders, halves, float64 and int64."""
    for a, b in itertools.permutations(DTYPES, 2):
        te, se = _result(MIXES[name], torch, a, b), _result(MIXES[name], sm, a, b)
        where = f"{name}({a}, {b})"
        if isinstance(te, Exception):
            assert isinstance(se, RuntimeError), f"{where}: torch raises {te!r}; we give {se!r}"
            continue
        assert not isinstance(se, Exception), f"{where}: torch gives {te.dtype}; we raise {se!r}"
        assert str(se.dtype).split(".")[-1] == str(te.dtype).split(".")[-1], where
        np.testing.assert_allclose(np.asarray(se.detach().double().numpy()),
                                   te.detach().double().numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=where)


def test_cross_entropy_probability_target_promotes_like_torch() -> None:
    for L in (torch, sm):
        out = F(L).cross_entropy(r(L, (2, 3), "float32"), r(L, (2, 3), "float32").softmax(1),
                                 weight=r(L, (3,), "float64").abs())
        assert str(out.dtype).endswith("float64")


# ---- special values: every activation on nan, +-inf, +-0, +-max, denormals -------------------
def _layers(L: Any) -> dict[str, Any]:
    nn = L.nn
    return {"GELU": nn.GELU(), "GELU-tanh": nn.GELU(approximate="tanh"), "SiLU": nn.SiLU(),
            "Softplus": nn.Softplus(beta=2.0, threshold=5.0), "Softplus-default": nn.Softplus(),
            "ELU": nn.ELU(alpha=0.7), "LeakyReLU": nn.LeakyReLU(0.2),
            "Hardtanh": nn.Hardtanh(-2.0, 3.0), "ReLU6": nn.ReLU6(), "ReLU": nn.ReLU(),
            "Threshold": nn.Threshold(0.1, 20.0), "Sigmoid": nn.Sigmoid(), "Tanh": nn.Tanh(),
            "Softmax": nn.Softmax(dim=-1), "LogSoftmax": nn.LogSoftmax(dim=-1),
            "PReLU": nn.PReLU(), "LayerNorm": nn.LayerNorm(8, elementwise_affine=False)}


FLOATS = ("float32", "float64", "float16", "bfloat16")


def _special_rows(dt: str) -> np.ndarray:
    """Rows of 8: the special values, an all -inf row (softmax gives nan), +inf/nan among
    finite values, a constant row (LayerNorm of zero variance), zeros, -inf first."""
    fi = torch.finfo(getattr(torch, dt))
    mx, den = float(fi.max), float(fi.smallest_normal) / 4
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, mx, -mx, den, -den, 1.0]
    return np.array([special[:8], [-np.inf] * 8, [np.inf, 1, 2, 3, 4, 5, 6, 7],
                     [np.nan, 1, 2, 3, 4, 5, 6, 7], [5.0] * 8, [0.0] * 8, special[2:],
                     [-np.inf, 0, 1, 2, 3, 4, 5, 6]])


def _check_special(name: str, dt: str, got: Any, want: Any, x: np.ndarray) -> None:
    tol = 1e-2 if dt in ("float16", "bfloat16") else 1e-5
    ok = np.isclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    bad = [(float(x[tuple(i)]), float(want[tuple(i)]), float(got[tuple(i)]))
           for i in np.argwhere(~ok)[:4]]
    assert not bad, f"{name} {dt}: (input, torch, ours) {bad}"


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name", list(_layers(sm)))
def test_special_values_eager_and_traced_match_torch(name: str, dt: str) -> None:
    """Eager, then a trace taken at batch 3 run at batch 8 (fused where the op fuses)."""
    x = _special_rows(dt)
    theirs = _layers(torch)[name].to(getattr(torch, dt))
    ours = _layers(sm)[name].to(getattr(sm, dt))
    with torch.no_grad():
        want = theirs(torch.tensor(x).to(getattr(torch, dt))).double().numpy()
    sx = sm.tensor(x).to(getattr(sm, dt))
    _check_special(name, dt, np.asarray(ours(sx).detach().double().numpy()), want, x)
    traced = sm.jit.trace(ours, sm.randn(3, 8).to(getattr(sm, dt)))
    _check_special(f"traced {name}", dt, np.asarray(traced(sx).detach().double().numpy()), want, x)


FUNCTIONAL_SPECIALS: dict[str, Callable[[Any], Any]] = {
    "normalize of zeros": lambda L: F(L).normalize(L.zeros(2, 3), dim=1),
    "log_softmax of -inf": lambda L: F(L).log_softmax(
        L.tensor([[-float("inf"), 0.0], [-float("inf")] * 2]), dim=1),
    "softplus beyond threshold": lambda L: F(L).softplus(
        L.tensor([float("nan"), 1e30, -1e30, 2.4, 2.6]), beta=2, threshold=5),
    "clamp with nan bounds": lambda L: L.tensor([float("nan"), 2.0, -1.0]).clamp(
        L.tensor([0.0, float("nan"), 0.0])),
    "layer_norm constant row": lambda L: F(L).layer_norm(L.full((2, 4), 3.0), (4,)),
    "threshold of nan": lambda L: F(L).threshold(L.tensor([float("nan"), 0.05, 1.0]), 0.1, 20.0),
    "gelu tanh of -inf": lambda L: F(L).gelu(L.tensor([-float("inf"), float("inf")]),
                                             approximate="tanh"),
}


@pytest.mark.parametrize("name", list(FUNCTIONAL_SPECIALS))
def test_functional_special_values_match_torch(name: str) -> None:
    want = FUNCTIONAL_SPECIALS[name](torch).numpy()
    got = np.asarray(FUNCTIONAL_SPECIALS[name](sm).numpy())
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)


# ---- state dicts and version counters ---------------------------------------------------------
def _nested(L: Any) -> Any:
    nn = L.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn, self.ln = nn.BatchNorm1d(4), nn.LayerNorm(4)
            self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(),
                                     nn.ModuleList([nn.Linear(4, 4), nn.BatchNorm1d(4)]))
            self.md = nn.ModuleDict({"a": nn.Embedding(5, 4), "b": nn.BatchNorm2d(3)})
            self.register_buffer("buf", L.ones(2))
            self.register_buffer("scratch", L.ones(2), persistent=False)
            self.p = nn.Parameter(L.ones(3))
    return Block()


def test_state_dict_keys_and_metadata_equal_torchs() -> None:
    theirs, ours = _nested(torch).state_dict(), _nested(sm).state_dict()
    assert list(ours) == list(theirs)
    assert dict(ours._metadata) == dict(theirs._metadata)


@pytest.mark.parametrize("with_metadata", [True, False])
def test_old_torch_checkpoint_loads_strictly(with_metadata: bool) -> None:
    """A torch state dict as NumPy arrays, as an old checkpoint: no num_batches_tracked and
    every module at _metadata version 1 (or no _metadata at all)."""
    import collections
    src = _nested(torch)
    for p in src.parameters():
        torch.nn.init.normal_(p)
    sd = src.state_dict()
    old: Any = collections.OrderedDict((k, v.numpy()) for k, v in sd.items()
                                       if not k.endswith("num_batches_tracked"))
    if with_metadata:
        old._metadata = collections.OrderedDict((k, {"version": 1}) for k in sd._metadata)
    ours = _nested(sm)
    result = ours.load_state_dict(old, strict=True)
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    for k, v in ours.state_dict().items():
        want = np.zeros(()) if k.endswith("num_batches_tracked") else sd[k].numpy()
        np.testing.assert_array_equal(v.numpy(), want, err_msg=k)


def _versions(L: Any) -> list[Any]:
    """Version counters through in-place ops, views, .data/.detach aliases, no_grad writes,
    inplace functionals, optimizer steps, BatchNorm running stats and load_state_dict."""
    out: list[Any] = []
    x = L.zeros(4, 3)
    x.add_(1)
    x[0] = 2.0
    out.append(x._version)
    v = x[1]
    v.mul_(3)
    t = x.t()
    t.zero_()
    vv = x.view(12)
    vv.fill_(1.0)
    out += [x._version, v._version, t._version, vv._version]
    d = x.detach()
    d.add_(1)
    dd = x.data
    dd.add_(1)
    out += [x._version, d._version, dd._version]
    with L.no_grad():
        x.sub_(1)
    out += [x._version, x.clone()._version]
    for step in (lambda: x.copy_(L.ones(4, 3)), lambda: x.clamp_(min=0), lambda: x.relu_(),
                 lambda: x.masked_fill_(x > 0, 1.0), lambda: x[:, 1].add_(1),
                 lambda: F(L).relu(x, inplace=True), lambda: x.copy_(x),
                 lambda: F(L).dropout(x, 0.5, False, True)):
        step()
        out.append(x._version)
    e = L.ones(4)
    e.expand(1, 4).mul_(2)
    out.append(e._version)
    lin = L.nn.Linear(3, 2)
    w = lin.weight
    for opt in (L.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9),
                L.optim.Adam(lin.parameters(), lr=0.1), L.optim.AdamW(lin.parameters(), lr=0.1)):
        for _ in range(2):
            opt.zero_grad()
            lin(L.ones(1, 3)).sum().backward()
            opt.step()
            out.append((w._version, w.grad._version))
    bn = L.nn.BatchNorm1d(3)
    bn(L.randn(4, 3))
    lin.load_state_dict(lin.state_dict())
    L.nn.init.zeros_(lin.weight)
    out += [bn.running_mean._version, bn.num_batches_tracked._version, lin.weight._version]
    return out


def test_version_counters_equal_torchs() -> None:
    assert _versions(sm) == _versions(torch)


EXPAND_WRITES: dict[str, Callable[[Any], Any]] = {
    "add_ overlapping": lambda L: L.ones(3, 1).expand(3, 4).add_(1),
    "setitem overlapping": lambda L: L.ones(3, 1).expand(3, 4).__setitem__(0, 2.0),
    "copy_ overlapping": lambda L: L.ones(3, 1).expand(3, 4).copy_(L.zeros(3, 4)),
    "row of overlapping": lambda L: L.ones(3, 1).expand(3, 4)[0].add_(1),
}


@pytest.mark.parametrize("name", list(EXPAND_WRITES))
def test_inplace_on_overlapping_expand_raises_torchs_error(name: str) -> None:
    for L in (torch, sm):
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            EXPAND_WRITES[name](L)


def test_inplace_on_non_overlapping_expand_writes_through_as_torch() -> None:
    for L in (torch, sm):
        a, b = L.ones(3, 4), L.ones(4)
        a.expand(3, 4).add_(1)
        b.expand(1, 4).mul_(3)
        assert (a.sum().item(), b.sum().item(), a._version, b._version) == (24.0, 12.0, 1, 1)


# ---- PReLU ------------------------------------------------------------------------------------
PRELU_SHAPES = [(), (1,), (3,), (4,), (2, 3), (2, 4), (2, 3, 5), (2, 3, 4, 4), (2, 1, 4, 4),
                (3, 3), (0, 3)]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("shape", PRELU_SHAPES, ids=str)
def test_prelu_matches_torch(n: int, shape: tuple[int, ...]) -> None:
    """num_parameters 1 and 3 on 0-d to 4-d inputs: the same values, or both refuse (ours a
    RuntimeError, as torch's 'Mismatch of parameter numbers and input channel size')."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    te = _raised(lambda L: L.nn.PReLU(n, init=0.3)(L.tensor(x)), torch)
    if te is not None:
        with pytest.raises(RuntimeError):
            sm.nn.PReLU(n, init=0.3)(sm.tensor(x))
        return
    with torch.no_grad():
        want = torch.nn.PReLU(n, init=0.3)(torch.tensor(x)).numpy()
    got = sm.nn.PReLU(n, init=0.3)(sm.tensor(x)).detach().numpy()
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_prelu_gradients_and_traced_batch_match_torch() -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    grads = []
    for L in (torch, sm):
        m, xt = L.nn.PReLU(3), L.tensor(x).requires_grad_()
        m(xt).sum().backward()
        grads.append((np.asarray(m.weight.grad.numpy()), np.asarray(xt.grad.numpy())))
    for g, w in zip(grads[1], grads[0]):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    traced = sm.jit.trace(sm.nn.PReLU(3, init=0.1), sm.randn(5, 3, 4))
    with torch.no_grad():
        want = torch.nn.PReLU(3, init=0.1)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(np.asarray(traced(sm.tensor(x)).detach().numpy()), want, rtol=1e-6)


# ---- the Ivy surface leaves torch-style modules alone -----------------------------------------
def _torch_style(L: Any) -> dict[str, Callable[[], Any]]:
    """User modules whose names collide with the Ivy surface (v, device, dtype, training,
    buffers, module_dict), a forward taking `v`/`buffers`, an __init__(self, v)."""
    nn = L.nn

    class Attrs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.v, self.device, self.dtype, self.module_dict = 5, "mine", "d", {"x": 1}
            self.training = False

        def forward(self, x: Any) -> Any:
            return self.fc(x) * self.v

    class VArg(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x: Any, v: float = 2.0, buffers: Any = None) -> Any:
            return self.fc(x) * v + (0 if buffers is None else buffers)

    class VInit(nn.Module):
        def __init__(self, v: int) -> None:
            super().__init__()
            self.fc = nn.Linear(3, v)

        def forward(self, x: Any) -> Any:
            return self.fc(x)

    class SubNames(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.v, self.device = nn.Linear(3, 2), nn.Linear(2, 2)
            self.register_buffer("dtype", L.ones(2))

        def forward(self, x: Any) -> Any:
            return self.device(self.v(x)) + self.dtype
    return {"Attrs": Attrs, "VArg": VArg, "VInit": lambda: VInit(4), "SubNames": SubNames}


@pytest.mark.parametrize("name", list(_torch_style(torch)))
def test_torch_style_module_with_ivy_names_behaves_as_in_torch(name: str) -> None:
    theirs, ours = _torch_style(torch)[name](), _torch_style(sm)[name]()
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    for attr in ("v", "device", "dtype", "training", "module_dict"):
        if not hasattr(theirs, attr):   # ours has the Ivy attribute; torch has none to match
            continue
        a, b = getattr(theirs, attr), getattr(ours, attr)
        if isinstance(a, (torch.nn.Module, torch.Tensor)):
            assert type(b).__name__ == type(a).__name__, attr
        else:
            assert b == a, attr
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    calls = [{}] + ([{"v": 3.0}, {"buffers": 1.0}] if name == "VArg" else [])
    for kw in calls:
        with torch.no_grad():
            want = theirs(torch.tensor(x), **kw).numpy()
        np.testing.assert_allclose(np.asarray(ours(sm.tensor(x), **kw).detach().numpy()), want,
                                   rtol=1e-5, atol=1e-6, err_msg=str(kw))
    traced = sm.jit.trace(ours, sm.tensor(x[:1]))
    np.testing.assert_allclose(np.asarray(traced(sm.tensor(x)).detach().numpy()), want if not calls[1:]
                               else theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def _ivy_net(**kw: Any) -> Any:
    nn = sm.nn

    class Net(nn.Module):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.fc1, self.bn, self.fc2 = nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)

        def forward(self, x: Any) -> Any:
            return self.fc2(self.bn(self.fc1(x)).relu())
    return Net(**kw)


def test_ivy_variables_give_torchs_numbers() -> None:
    """Construct-with-v, call-with-v/buffers (eager and traced at another batch),
    store_vars=False and functional_call all equal torch's forward with those tensors."""
    tn = torch.nn.Sequential()
    tn.fc1, tn.bn, tn.fc2 = torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)
    tn.bn.running_mean.uniform_()
    tn.eval()
    sd = {k: v.detach().numpy() for k, v in tn.state_dict().items()}
    names = dict(tn.named_parameters())
    v = {k: sm.tensor(a) for k, a in sd.items() if k in names}
    bufs = {k: sm.tensor(a) for k, a in sd.items() if k not in names}
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    with torch.no_grad():
        want = torch.nn.functional.linear(torch.relu(tn.bn(tn.fc1(torch.tensor(x)))),
                                          tn.fc2.weight, tn.fc2.bias).numpy()
    net = _ivy_net(training=False)
    traced = net.trace_graph(sm.tensor(x[:2]))
    got = {"construct": _ivy_net(v=v, buffers=bufs, training=False)(sm.tensor(x)),
           "call": net(sm.tensor(x), v=v, buffers=bufs),
           "traced call": traced(sm.tensor(x), v=v, buffers=bufs),
           "store_vars": _ivy_net(store_vars=False, training=False)(sm.tensor(x), v=v,
                                                                    buffers=bufs),
           "functional_call": sm.func.functional_call(net, {**v, **bufs}, (sm.tensor(x),))}
    for label, out in got.items():
        np.testing.assert_allclose(np.asarray(out.detach().numpy()), want, rtol=1e-5,
                                   atol=1e-6, err_msg=label)


def test_ivy_store_vars_partial_v_and_build_modes() -> None:
    bare = _ivy_net(store_vars=False)
    assert bare.v == {} and list(bare.state_dict()) == [
        "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    with pytest.raises(RuntimeError, match="store_vars=False"):
        bare(sm.ones(2, 3))
    part = {"fc1": {"weight": sm.full((4, 3), 0.5), "bias": sm.zeros(4)}}
    assert (_ivy_net(v=part, with_partial_v=True).fc1.weight.detach().numpy() == 0.5).all()
    with pytest.raises(sm.ShapeError, match="Missing key"):
        _ivy_net(v=part)
    for mode in ("on_init", "on_call", "explicit"):
        lazy = sm.nn.LazyLinear(2, build_mode=mode)
        assert repr(lazy) == repr(torch.nn.LazyLinear(2))
        if mode == "explicit":
            with pytest.raises(RuntimeError, match="explicit"):
                lazy(sm.ones(5, 3))
            lazy.build(sm.ones(5, 3))
        assert tuple(lazy(sm.ones(5, 3)).shape) == (5, 2) and lazy.built
        assert repr(lazy) == "Linear(in_features=3, out_features=2, bias=True)"


COSINE_CASES: dict[str, Callable[[Any], Any]] = {
    "zeros and tiny rows": lambda L: F(L).cosine_similarity(
        L.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [1e-20, 0.0, 0.0]]),
        L.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])),
    "broadcast": lambda L: F(L).cosine_similarity(L.tensor([[1.0, 2.0], [3.0, -4.0]]),
                                                  L.tensor([1.0, 0.0])),
    "dim 0, all zeros": lambda L: F(L).cosine_similarity(L.zeros(2, 3), L.zeros(2, 3), dim=0),
    "inf": lambda L: F(L).cosine_similarity(L.tensor([[float("inf"), 1.0]]),
                                            L.tensor([[1.0, 1.0]])),
    "float64 and float32": lambda L: F(L).cosine_similarity(
        L.tensor([[1.0, 2.0]], dtype=L.float64), L.tensor([[2.0, 1.0]])),
}


@pytest.mark.parametrize("name", list(COSINE_CASES))
def test_cosine_similarity_matches_torch(name: str) -> None:
    want, got = COSINE_CASES[name](torch), COSINE_CASES[name](sm)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(np.asarray(got.numpy()), want.numpy(), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("target_dtype", ["int64", "uint8"])
def test_class_index_targets_torch_accepts(target_dtype: str) -> None:
    """Long and Byte targets work (int32 is refused, in BAD_CALLS), weighted and ignored."""
    got, want = [], []
    for L, out in ((torch, want), (sm, got)):
        x = L.tensor([[1.0, 2.0, 3.0], [0.0, 1.0, -1.0], [2.0, 0.5, 0.0]])
        t = L.tensor([2, 0, 1]).to(getattr(L, target_dtype))
        w = L.tensor([0.2, 1.0, 3.0])
        out += [F(L).cross_entropy(x, t, weight=w).item(),
                F(L).nll_loss(x.log_softmax(1), t, ignore_index=0).item(),
                F(L).cross_entropy(x, t, label_smoothing=0.1).item()]
    np.testing.assert_allclose(got, want, rtol=1e-6)
