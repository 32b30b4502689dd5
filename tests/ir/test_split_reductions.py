"""``split_reductions``: few-row sums and means over several dims split in two; the result is
unchanged within float rounding, and reductions that already have rows stay whole."""
from __future__ import annotations

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.ir import parse
from scriptmod.ir.passes import split_reductions
from scriptmod.ir.verify import verify


def _graph(shape: str, op: str, attrs: str = "", out: str = "Float()") -> str:
    return (f"graph(%x : Float({shape})):\n  %s : {out} = sm::{op}{attrs}(%x)\n"
            f"  return (%s)\n")


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_a_full_reduction_with_one_row_is_split(op: str) -> None:
    g = split_reductions(parse(_graph("64, 4096", op)))
    verify(g)
    kinds = [n.kind for n in g.nodes]
    assert kinds.count(f"sm::{op}") == 2 and "sm::reshape" in kinds
    assert str(parse(str(g))) == str(g)


@pytest.mark.parametrize("text", [
    _graph("4096, 64", "sum", "[dim=[1], keepdim=1]", "Float(4096, 1)"),   # one dim: rows
    _graph("64, 16", "sum"),                                              # small
    _graph("64, 4096", "amax"),                                           # not a sum/mean
    _graph("64, 4096", "sum", "[dim=[0]]", "Float(4096)"),                # not the last dim
])
def test_other_reductions_stay_whole(text: str) -> None:
    g = parse(text)
    before = str(g)
    assert str(split_reductions(g)) == before


@pytest.mark.parametrize("keepdim", [False, True])
def test_compiled_results_equal_float64(keepdim: bool) -> None:
    x = sm.randn(3, 40, 2000)
    traced = sm.jit.trace(lambda x: (x.exp() * 0.5).sum(dim=(0, 1, 2), keepdim=keepdim)
                          + (x * x).mean(dim=(1, 2), keepdim=keepdim).sum(), x)
    with sm.no_grad():
        got = traced(x).numpy()
    x64 = x.numpy().astype(np.float64)
    want = (np.exp(x64) * 0.5).sum(axis=(0, 1, 2), keepdims=keepdim) \
        + (x64 * x64).mean(axis=(1, 2), keepdims=keepdim).sum()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-6)
    text = str(traced.graph_for(x))           # fusion groups print their bodies too
    assert text.count("sm::sum[") >= 2 and text.count("sm::mean[") == 2
