"""Bad calls raise the exception class torch raises, with a message that names the argument."""
from __future__ import annotations

from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402
from ._common import F, _raised, i64, t  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


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


