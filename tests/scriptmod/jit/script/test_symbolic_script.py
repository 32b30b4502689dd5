"""Issue 37 for scripted code: a scripted method's library calls (``x.reshape(b * t, d)``,
``self.fc(h)``, ``F.softmax``, ``sm.cat``...) expand at symbolic types (``frontend.
symbolic_calls``), so a sequence length that varies gets one shared symbolic specialization
after its first size, as a traced module does; a call whose library function fixes the size
stays per size, with eager's answers."""
from __future__ import annotations

import io
import math
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import jit, nn
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.graph import Prim
from scriptmod.jit import _specialize
from scriptmod.jit.frontend.symbolic_calls import _recording

LENGTHS = (5, 6, 7, 8, 9, 12, 16)


class Rows(nn.Module):
    """``B*T`` rows through a Linear and back: int arguments that are symbolic sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        b, t, d = x.shape
        h = self.fc(x.reshape(b * t, d)).reshape(b, t, d)
        return h[:, 1:] + x[:, :-1]


class SizeProduct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        n = x.size(0) * x.size(1)
        return self.fc(x.reshape(n, x.size(2))).view(x.size(0), x.size(1), 8).relu()


def flat_rows(x: sm.Tensor) -> sm.Tensor:
    d = x.size(-1)
    return x.view(-1, d).sum(0) * x.view(-1, d).mean(0)


class CausalBlock(nn.Module):
    """A transformer-ish block: LayerNorm, a Linear to q/k/v split per head, a causal mask of
    run-time length from ``sm.arange`` (on the input's device: a device is no size) and a
    comparison, softmax, the last position."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.heads = heads

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln(x)).split(c, dim=2)
        hd = c // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        pos = sm.arange(0, t, dtype=sm.int64, device=x.device)
        att = att.masked_fill(pos.view(t, 1) < pos.view(1, t), float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
        return (x + self.proj(y))[:, -1]


class TrilAttention(nn.Module):
    """A causal mask from ``sm.tril(sm.ones(t, t))``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        t = x.size(1)
        att = x @ x.transpose(1, 2)
        mask = sm.tril(sm.ones(t, t))
        return self.fc(att.masked_fill(mask == 0, float("-inf")).softmax(-1) @ x)


class Gelu(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return F.gelu(x) - F.gelu(x[:, 1:], approximate="tanh").sum(1, keepdim=True)


class CatAlongT(nn.Module):
    def forward(self, x: sm.Tensor, y: sm.Tensor) -> sm.Tensor:
        return sm.cat([x, y * 2, x[:, -1:]], 1)


def split_in_ones(x: sm.Tensor) -> sm.Tensor:
    """``split`` into T pieces: the library function's structure fixes T."""
    parts = x.split(1, dim=1)
    return sm.stack(parts, 0).sum(0) * 2


def unbind_steps(x: sm.Tensor) -> sm.Tensor:
    """``unbind`` loops over ``range(x.size(1))`` inside the library: it fixes T."""
    return sm.stack(x.unbind(1), 0).sum(0) - x.sum(1)


def halves(x: sm.Tensor) -> sm.Tensor:
    b, t, d = x.shape
    return x.view(b, t // 2, 2 * d).sum(1)


def _seq(t: int, dtype: Any) -> tuple:
    return (sm.from_numpy(np.random.RandomState(t).randn(2, t, 16)).to(dtype),)


def _seq_and_fixed(t: int, dtype: Any) -> tuple:
    rng = np.random.RandomState(t)
    return tuple(sm.from_numpy(rng.randn(2, n, 16)).to(dtype) for n in (t, 3))


CASES: dict[str, tuple[Callable[[], Any], Callable[[int, Any], tuple]]] = {
    "reshape_rows": (Rows, _seq),
    "size_product": (SizeProduct, _seq),
    "view_minus_one": (lambda: flat_rows, _seq),
    "causal_block": (CausalBlock, _seq),
    "tril_attention": (TrilAttention, _seq),
    "gelu": (Gelu, _seq),
    "cat_along_t": (CatAlongT, _seq_and_fixed),
}


def _scripted(make: Callable[[], Any], dtype: Any) -> tuple[Any, Any]:
    eager = make()
    if isinstance(eager, nn.Module):
        eager = eager.to(dtype).eval()
    return eager, jit.script(eager)


def _executor(scripted: Any) -> Any:
    module = getattr(scripted, "_module", scripted)      # a scripted function's module
    return module.executor("forward")


def _close(got: sm.Tensor, want: sm.Tensor, dtype: Any) -> None:
    tol = 1e-5 if dtype == sm.float32 else 1e-12
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [sm.float32, sm.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_length_after_the_first_shares_one_symbolic_specialization(case, dtype) -> None:
    make, inputs = CASES[case]
    eager, scripted = _scripted(make, dtype)
    with sm.no_grad():
        for t in LENGTHS:
            args = inputs(t, dtype)
            _close(scripted(*args), eager(*args), dtype)
    ex = _executor(scripted)
    assert ex.stats["specializations"] == 2
    assert [spec.symbolic for spec in ex.specs.values()] == [False, True]


def _symbolic_graph(scripted: Any, *args: sm.Tensor, names: tuple) -> Any:
    return _specialize.optimized(_executor(scripted), list(args), (), symbolic=True,
                                 names=names, fuse=False)


def test_the_symbolic_graph_reads_sizes_at_run_time_and_types_with_the_symbols() -> None:
    _, scripted = _scripted(Rows, sm.float32)
    g = _symbolic_graph(scripted, sm.randn(2, 7, 16), names=(("B", "T", None),))
    kinds = [n.kind for n in g.walk()]
    assert Prim.CALL_FUNCTION not in kinds                # every library call expanded
    rows = next(n for n in g.walk() if n.kind == "sm::reshape")
    assert str(rows.output.type) == "Float(B*T, 16)"
    size = rows.inputs[1].node.inputs[0]                  # [b * t, 16]: b * t computed
    assert size.node.kind == "sm::int_mul"
    assert str(g.outputs[0].type) == "Float(B, T-1, 16)"


def test_a_call_on_a_value_with_an_expression_dim_types_symbolically() -> None:
    _, scripted = _scripted(SizeProduct, sm.float32)
    g = _symbolic_graph(scripted, sm.randn(3, 7, 16), names=(("B", "T", None),))
    types = {str(v.type) for n in g.walk() for v in n.outputs}
    assert {"Float(B*T, 8)", "Float(B, T, 8)"} <= types
    assert str(g.outputs[0].type) == "Float(B, T, 8)"


def test_concrete_sizes_expand_as_before() -> None:
    _, scripted = _scripted(Rows, sm.float32)
    g = _specialize.optimized(_executor(scripted), [sm.randn(2, 7, 16)], (), fuse=False)
    rows = next(n for n in g.walk() if n.kind == "sm::reshape")
    assert str(rows.output.type) == "Float(14, 16)"
    assert all(not isinstance(d, str) for v in g.inputs[1:] for d in v.type.shape)


def test_two_dims_vary_together() -> None:
    eager, scripted = _scripted(Rows, sm.float64)
    with sm.no_grad():
        for b, t in [(2, 5), (3, 6), (4, 9), (5, 7), (2, 11)]:
            x = sm.randn(b, t, 16, dtype=sm.float64)
            _close(scripted(x), eager(x), sm.float64)
    assert _executor(scripted).stats["specializations"] == 2


@pytest.mark.parametrize("fn", [split_in_ones, unbind_steps], ids=["split", "unbind"])
def test_a_library_function_that_fixes_the_size_specializes_each_size(fn) -> None:
    scripted = jit.script(fn)
    with sm.no_grad():
        for t in LENGTHS:
            (x,) = _seq(t, sm.float32)
            _close(scripted(x), fn(x), sm.float32)
    assert _executor(scripted).stats["specializations"] == len(LENGTHS)


def test_sizes_the_code_rejects_raise_eagers_error() -> None:
    scripted = jit.script(halves)
    with sm.no_grad():
        for t in (6, 8, 10, 12):
            (x,) = _seq(t, sm.float64)
            _close(scripted(x), halves(x), sm.float64)
        with pytest.raises(ShapeError, match="invalid for input of size"):
            scripted(_seq(7, sm.float64)[0])
    assert _executor(scripted).stats["specializations"] == 2


def test_gradients_at_every_length_equal_eagers() -> None:
    eager, scripted = _scripted(CausalBlock, sm.float64)
    for t in (5, 6, 9):
        (x,) = _seq(t, sm.float64)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        ya, yb = scripted(xa), eager(xb)
        (ya * ya).sum().backward()
        (yb * yb).sum().backward()
        _close(ya.detach(), yb.detach(), sm.float64)
        _close(xa.grad, xb.grad, sm.float64)
    assert _executor(scripted).stats["specializations"] == 2


def test_recording_tells_apart_what_two_traces_baked() -> None:
    """Two traces record alike exactly when their ops, attributes and wiring are equal."""
    def traced(n: int) -> Any:
        return jit.trace(lambda x: x.reshape(n, -1) * 2, sm.randn(4, 6)).graph
    assert _recording(traced(2)) == _recording(traced(2))
    assert _recording(traced(2)) != _recording(traced(3))


def test_a_loaded_archive_shares_one_symbolic_specialization() -> None:
    eager, scripted = _scripted(CausalBlock, sm.float32)
    buf = io.BytesIO()
    jit.save(scripted, buf)
    buf.seek(0)
    loaded = jit.load(buf)
    with sm.no_grad():
        for t in LENGTHS:
            (x,) = _seq(t, sm.float32)
            _close(loaded(x), eager(x), sm.float32)
    assert _executor(loaded).stats["specializations"] == 2
