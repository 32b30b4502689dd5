"""What torch refuses to mix we refuse (a RuntimeError); what it promotes we promote."""
from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402
from ._common import F  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


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


