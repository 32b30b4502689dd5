"""Batch classes: every batch size of a traced module after the first shares one symbolic
specialization (its kernels and its plan), guarded by rank, inner dims and dtype; sizes 0
and 1 and the first size specialize concretely; a size's answer never depends on the order
of earlier calls (``_executor`` module docstring)."""
from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.ir.errors import ShapeError
from scriptmod.runtime import llvm_jit
from tests.rss import NEEDS_STATM, rss_mib


class Net(nn.Module):
    """A GEMM, a fused elementwise chain, a fused row reduction (layer norm, softmax)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.ln = nn.Linear(16, 32), nn.Linear(32, 8), nn.LayerNorm(8)

    def forward(self, x: Any) -> Any:
        h = self.a(x).relu() * 2.0 + 1.0
        return self.ln(self.b(h)).sigmoid().softmax(-1) + x.sum(-1, keepdim=True)


class Pair(nn.Module):
    def forward(self, x: Any, y: Any) -> Any:
        return (x * y).tanh() + x


def _traced(example: int = 8) -> tuple[Net, Any]:
    net = Net()
    return net, jit.trace(net, sm.randn(example, 16))


def _specs(traced: Any) -> list[tuple]:
    return [(k[0][0][1], s.symbolic) for k, s in traced.executor("forward").specs.items()]


def test_many_batch_sizes_share_one_specialization_and_compile_nothing_new(
        monkeypatch: pytest.MonkeyPatch) -> None:
    net, traced = _traced()
    rng = np.random.default_rng(0)
    with sm.no_grad():
        for b in (8, 0, 1, 5):                      # concrete: 8 (first), 0, 1; 5: symbolic
            traced(sm.randn(b, 16))
        loaded: list[str] = []                      # native code loaded from here on
        engine = llvm_jit._engine
        monkeypatch.setattr(llvm_jit, "_engine", lambda obj, what: loaded.append(what) or
                            engine(obj, what))
        for b in range(2, 400):
            x = sm.tensor(rng.standard_normal((b, 16)).astype(np.float32))
            got = traced(x)
            if b % 37 == 0 or b < 10:
                np.testing.assert_allclose(got.numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    ex = traced.executor("forward")
    assert ex.stats["specializations"] == 4
    assert sorted(_specs(traced), key=str) == sorted(
        [((8, 16), False), ((0, 16), False), ((1, 16), False), (("B", 16), True)], key=str)
    assert loaded == []


def test_a_sizes_answer_does_not_depend_on_the_order_of_calls() -> None:
    net, t1 = _traced()
    t2 = jit.trace(net, sm.randn(8, 16))
    xs = {b: sm.randn(b, 16) for b in (8, 2, 3, 17, 64, 1, 0)}
    with sm.no_grad():
        first = {b: t1(x).numpy() for b, x in xs.items()}
        second = {8: t2(xs[8]).numpy()}              # 8 first, as for t1; the rest reversed
        second.update({b: t2(x).numpy() for b, x in reversed(list(xs.items())) if b != 8})
        again = {b: t1(x).numpy() for b, x in reversed(list(xs.items()))}
    for b in xs:
        assert np.array_equal(first[b], second[b]) and np.array_equal(first[b], again[b]), b


def test_the_guard_checks_rank_inner_dims_and_dtype() -> None:
    _, traced = _traced()
    with sm.no_grad():
        traced(sm.randn(8, 16))
        traced(sm.randn(5, 16))                      # the symbolic specialization exists
        with pytest.raises(ShapeError, match="16"):
            traced(sm.randn(5, 15))
        with pytest.raises(TypeError, match="argument 'x'.*int32"):
            traced(sm.randn(5, 16).to(sm.int32))
        with pytest.raises(TypeError, match="argument 'x'.*float64"):   # eager raises too
            traced(sm.randn(5, 16).double())
        assert traced.executor("forward").stats["specializations"] == 2


def test_symbolic_dims_named_alike_must_agree() -> None:
    pair = Pair()
    traced = jit.trace(pair, (sm.randn(4, 3), sm.randn(4, 3)))
    with sm.no_grad():
        for b in (4, 6, 9):
            x, y = sm.randn(b, 3), sm.randn(b, 3)
            np.testing.assert_allclose(traced(x, y).numpy(), pair(x, y).numpy(), rtol=1e-5,
                                       atol=1e-6)
        with pytest.raises(Exception) as eager:
            pair(sm.randn(6, 3), sm.randn(5, 3))
        with pytest.raises(type(eager.value)):
            traced(sm.randn(6, 3), sm.randn(5, 3))


def test_training_with_a_ragged_last_batch_matches_eager() -> None:
    net, traced = _traced(32)
    ref = Net()
    ref.load_state_dict(net.state_dict())
    opt_t = sm.optim.SGD(traced.parameters(), lr=0.1)
    opt_e = sm.optim.SGD(ref.parameters(), lr=0.1)
    rng = np.random.default_rng(1)
    for b in (32, 32, 7, 32, 5, 5, 11):
        x = sm.tensor(rng.standard_normal((b, 16)).astype(np.float32))
        for model, opt in ((traced, opt_t), (ref, opt_e)):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    for (name, p), q in zip(traced.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4,
                                   atol=1e-6, err_msg=name)


def test_threads_calling_with_varying_sizes_are_bit_identical_to_one_thread() -> None:
    _, traced = _traced()
    sizes = [8, 3, 5, 16, 2, 33, 1, 7]
    xs = {b: sm.randn(b, 16) for b in sizes}
    with sm.no_grad():
        want = {b: traced(x).numpy() for b, x in xs.items()}
    bad: list[int] = []

    def work(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(sizes * 25)
        with sm.no_grad():
            for b in order:
                if not np.array_equal(traced(xs[int(b)]).numpy(), want[int(b)]):
                    bad.append(int(b))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_archives_keep_the_batch_class() -> None:
    import io
    net, traced = _traced()
    buf = io.BytesIO()
    jit.save(traced, buf)
    loaded = jit.load(io.BytesIO(buf.getvalue()))
    with sm.no_grad():
        for b in (3, 8, 100, 4):
            x = sm.randn(b, 16)
            np.testing.assert_allclose(loaded(x).numpy(), net(x).numpy(), rtol=1e-5, atol=1e-6)
    assert loaded.executor("forward").stats["specializations"] == 2
    gc.collect()


@NEEDS_STATM
def test_distinct_batch_sizes_keep_memory_flat(request: pytest.FixtureRequest) -> None:
    """The README figure (``--long``): 1,500 distinct batch sizes on one traced module; a
    CI-sized 300 by default. Each size is new, so nothing but the shared specialization and
    its launch table (``fusion.MAX_LAYOUTS``) can serve it."""
    n = 1500 if request.config.getoption("--long") else 300
    net, traced = _traced()
    ex = traced.executor("forward")
    with sm.no_grad():
        for b in range(2, 40):                       # the shared specialization, warm
            traced(sm.randn(b, 16))
        gc.collect()
        before = rss_mib()
        for b in range(40, 40 + n):
            traced(sm.randn(b, 16))
    gc.collect()
    grown = rss_mib() - before
    if request.config.getoption("--long"):
        print(f"\n{n} distinct batch sizes: {ex.stats['specializations']} specializations, "
              f"RSS {grown:+.1f} MiB")
    assert ex.stats["specializations"] == 2 and grown < 8.0, grown


def test_reshape_against_the_batch_keeps_its_inferred_dim() -> None:
    """(B, 16, 64) viewed as (B, 16, 4, -1): symbolic factors cancel and sizes divide, so
    the -1 is 16 for every B, the graph is typed for the class, and new sizes share it."""
    from scriptmod.ir.ops.shape import infer_reshape
    assert infer_reshape((16, "B", 64), [16, "B", 4, -1]) == (16, "B", 4, 16)
    assert infer_reshape(("B", 4, 8), ["B", -1]) == ("B", 32)
    assert infer_reshape(("B", 4, 8), [-1, 8]) == ("4*B", 8)        # a size times B
    assert infer_reshape(("4*B", 8), ["B", -1]) == ("B", 32)
    assert infer_reshape(("B", "C", 8), [-1]) == ("8*B*C",)         # a product of symbols

    class Heads(nn.Module):
        def forward(self, x: Any) -> Any:                 # x: (B, 16, 64)
            h = x.reshape(x.shape[0], 16, 4, -1).permute(0, 2, 1, 3)
            return h.softmax(-1).sum(1)

    m = Heads()
    traced = jit.trace(m, sm.randn(3, 16, 64))
    assert "Float(B, 16, 4, 16) = sm::reshape" in str(traced.graph)
    with sm.no_grad():
        for b in (3, 5, 9):
            x = sm.randn(b, 16, 64)
            np.testing.assert_allclose(traced(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)
    assert traced.executor("forward").stats["specializations"] == 2


def test_a_flatten_of_batch_and_heads_is_a_size_times_b() -> None:
    """W5's attention flattens (B, 16, 4, 16) to (16*B, 64) and back: the dim is typed
    ``16*B`` (it prints and parses), so the block shares one specialization across sizes,
    and so does its archive."""
    import io
    from scriptmod.bench.workloads import WORKLOADS
    from scriptmod.ir import parse
    from scriptmod.ir.parser import IRParseError
    g = parse("graph(%x : Float(16*B, 64)):\n  return (%x)\n")
    assert g.inputs[0].type.shape == ("16*B", 64) and "Float(16*B, 64)" in str(g)
    for bad in ("16*", "16**B", "B/16"):
        with pytest.raises(IRParseError):
            parse(f"graph(%x : Float({bad}, 64)):\n  return (%x)\n")
    wl = WORKLOADS["W5"]
    model = wl.make(True).eval()
    traced = jit.trace(model, sm.randn(*wl.quick_shape))
    assert "16*B" in str(traced.inlined_graph)
    buf = io.BytesIO()
    jit.save(traced, buf)
    loaded = jit.load(io.BytesIO(buf.getvalue()))
    with sm.no_grad():
        for b in (2, 3, 5, 8):
            x = sm.randn(b, *wl.quick_shape[1:])
            want = model(x).numpy()
            for m in (traced, loaded):
                np.testing.assert_allclose(m(x).numpy(), want, rtol=1e-5, atol=1e-5)
    for m in (traced, loaded):
        assert m.executor("forward").stats["specializations"] == 2


def test_new_sizes_with_grad_enabled_compile_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameters require grad, so the default call records autograd: a later size of the
    class runs the class's one compiled backward (nothing compiled per size), with eager's
    gradients."""
    net, traced = _traced()
    traced(sm.randn(8, 16)).sum().backward()          # the first size: compiled backward
    traced(sm.randn(5, 16)).sum().backward()          # the shared specialization, warm
    loaded: list[str] = []
    engine = llvm_jit._engine
    monkeypatch.setattr(llvm_jit, "_engine", lambda obj, what: loaded.append(what) or
                        engine(obj, what))
    for b in (3, 11, 40):
        x = sm.randn(b, 16)
        for p in traced.parameters():
            p.grad = None
        out = traced(x)
        assert out.requires_grad
        out.square().sum().backward()
        got = [p.grad.numpy().copy() for p in traced.parameters()]
        for p in net.parameters():
            p.grad = None
        net(x).square().sum().backward()
        for g, p in zip(got, net.parameters()):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert loaded == []
