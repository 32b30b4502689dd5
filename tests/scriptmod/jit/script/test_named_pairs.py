"""Ops that return a named (values, indices) pair, issue 35: ``v, i = x.topk(k)`` in a scripted
function raised TypeError: topk.__new__() missing 1 required positional argument, because
rebuilding the library call's namedtuple result as arrays called ``type(x)(generator)``.
Every nest of values is now rebuilt through ``runtime.trees.rebuilt``. Each op of
named_pair_programs.py runs eager, scripted and traced, its int a run-time argument, a
constant or a size, read by unpacking, position and name, with gradients, against torch."""
from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.ir.errors import TraceGuardError
from scriptmod.runtime.trees import is_namedtuple, rebuilt
from scriptmod.tensor import unwrap_tree, wrap_tree

from . import named_pair_programs as P
from .script_util import assert_same, tensor

SIZES = ((4, 6), (5, 7))


def _fn(op: str, kind: str) -> Callable:
    return getattr(P, f"{op}_{kind}")


def _x(shape: tuple[int, int], seed: int = 0) -> sm.Tensor:
    return tensor(*shape, seed=seed)        # normal samples: no ties, so indices are unique


def _as_tuple(x: Any) -> Any:
    return tuple(x) if isinstance(x, tuple) else x


@pytest.mark.parametrize("op", P.OPS)
def test_eager_results_are_named_like_torch(op: str) -> None:
    out = _fn(op, "whole")(_x(SIZES[0]))
    assert is_namedtuple(out) and type(out).__name__ == op
    assert type(out)._fields == ("values", "indices")
    v, i = out
    assert v is out.values is out[0] and i is out.indices is out[1]
    assert i.dtype == sm.int64


@pytest.mark.parametrize("op", P.OPS)
def test_scripted_with_a_run_time_int(op: str) -> None:
    scripted = sm.jit.script(_fn(op, "runtime"))
    for shape in SIZES:
        for n in P.RUNTIME_INTS[op]:
            x = _x(shape)
            assert_same(_as_tuple(scripted(x, n)), _fn(op, "runtime")(x, n), f"{op} {shape} {n}")


@pytest.mark.parametrize("kind", ["const", "sized", "whole"])
@pytest.mark.parametrize("op", P.OPS)
def test_scripted_with_a_constant_or_size(op: str, kind: str) -> None:
    fn = _fn(op, kind)
    scripted = sm.jit.script(fn)
    for shape in SIZES:
        x = _x(shape)
        got = scripted(x)
        if kind == "whole":             # a pair, as TorchScript returns it: a plain tuple
            assert type(got) is tuple
        assert_same(_as_tuple(got), _as_tuple(fn(x)), f"{op}_{kind} {shape}")


@pytest.mark.parametrize("kind", ["const", "sized", "whole"])
@pytest.mark.parametrize("op", P.OPS)
def test_traced(op: str, kind: str) -> None:
    """Traced at one size, called at both: the namedtuple result keeps its type; an int
    computed from a size follows it (kthvalue, median: op inputs) or is guarded (topk's k,
    an attribute of the op)."""
    fn = _fn(op, kind)
    traced = sm.jit.trace(fn, _x(SIZES[0]))
    for shape in SIZES:
        x = _x(shape, seed=1)
        want = fn(x)
        if op == "topk" and kind == "sized" and shape != SIZES[0]:
            with pytest.raises(TraceGuardError, match="topk_sized|x.shape"):
                traced(x)
            continue
        got = traced(x)
        if kind == "whole":
            assert type(got) is type(want)
        assert_same(_as_tuple(got), _as_tuple(want), f"{op}_{kind} {shape}")


@pytest.mark.parametrize("op", P.OPS)
def test_gradients_through_script_and_trace_equal_eager(op: str) -> None:
    fn = _fn(op, "const")
    compiled = {"script": sm.jit.script(fn), "trace": sm.jit.trace(fn, _x(SIZES[0]))}
    grads = {}
    for name, f in [("eager", fn), *compiled.items()]:
        x = _x(SIZES[0]).requires_grad_(True)
        loss = sum((t.float() * t.float()).sum() for t in f(x) if t.dtype.is_floating_point)
        loss.backward()
        grads[name] = x.grad
    for name in compiled:
        assert_same(grads[name], grads["eager"], f"{op}: gradient through {name}")


@pytest.mark.parametrize("op", P.OPS)
def test_same_as_torch(op: str) -> None:
    """Eager and torch.jit.script of the same source (no ties: indices are unique)."""
    torch = pytest.importorskip("torch")
    for kind, extra in [("const", ()), ("runtime", (P.RUNTIME_INTS[op][-1],))]:
        fn = _fn(op, kind)
        x = _x(SIZES[1])
        tx = torch.from_numpy(x.numpy().copy())
        ours = [fn(x, *extra), sm.jit.script(fn)(x, *extra)]
        theirs = torch.jit.script(fn)(tx, *extra)
        for got in ours:
            assert len(got) == len(theirs)
            for k, (g, w) in enumerate(zip(got, theirs)):
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6,
                                           err_msg=f"{op}_{kind}[{k}]")


def test_kthvalue_and_median_follow_torch_on_nan_ties_and_errors() -> None:
    torch = pytest.importorskip("torch")
    nan = float("nan")
    data = [[3.0, 1.0, 4.0, 2.0, 1.5], [5.0, nan, 1.0, 2.0, 0.0]]
    a, t = sm.tensor(data), torch.tensor(data)
    for dim in (0, 1, -1):
        for keepdim in (False, True):
            for got, want in [(a.median(dim, keepdim), t.median(dim, keepdim)),
                              (a.kthvalue(2, dim, keepdim), t.kthvalue(2, dim, keepdim))]:
                np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
                np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    assert np.isnan(a.median().item()) and a[0].median().item() == t[0].median().item()
    assert a[0].kthvalue(5).values.item() == 4.0 and sm.tensor(3.0).median(0).indices.item() == 0
    assert sm.median(sm.tensor([1, 5, 3]), 0).values.item() == 3
    for f in (lambda m: m.tensor([1.0, 2.0]).kthvalue(3), lambda m: m.tensor([1.0]).kthvalue(0),
              lambda m: m.empty(2, 0).median(1), lambda m: m.tensor([1.0]).kthvalue(1, 2)):
        with pytest.raises(Exception) as ours:
            f(sm)
        with pytest.raises(Exception) as theirs:
            f(torch)
        assert isinstance(ours.value, type(theirs.value)), (ours.value, theirs.value)


# ---- the tree helpers ----------------------------------------------------------------------

class Typed(NamedTuple):
    values: Any
    indices: Any


Plain = collections.namedtuple("Plain", ["a", "b", "c"])


class Sub(tuple):
    pass


@pytest.mark.parametrize("container", [Typed(1, 2), Plain(1, 2, 3), (1, 2), [1, 2], Sub((1, 2)),
                                       sm.tensor([1.0]).topk(1)], ids=lambda c: type(c).__name__)
def test_rebuilt_keeps_the_container_type(container: Any) -> None:
    out = rebuilt(container, (i for i in container))
    assert type(out) is type(container) and list(out) == list(container)


def test_wrap_and_unwrap_keep_namedtuples_at_any_depth() -> None:
    x = sm.randn(3, 4)
    tree = {"pair": x.topk(2), "nest": [Typed(x, (x.max(0), Plain(x, 1, "s")))]}
    arrays = unwrap_tree(tree)
    assert type(arrays["pair"]).__name__ == "topk" and isinstance(arrays["pair"].values,
                                                                  np.ndarray)
    inner = arrays["nest"][0]
    assert type(inner) is Typed and type(inner.indices[0]).__name__ == "max"
    assert type(inner.indices[1]) is Plain and inner.indices[1][1:] == (1, "s")
    back = wrap_tree(arrays)
    assert type(back["pair"]) is type(tree["pair"])
    assert_same(back["pair"].indices, tree["pair"].indices)
    assert_same(back["nest"][0].indices[0].values, tree["nest"][0].indices[0].values)


def test_a_traced_namedtuple_argument_and_result_keep_their_type() -> None:
    """An ``@ignore``-free path that rebuilds trees: tracing copies its example inputs."""
    def f(x: sm.Tensor) -> Any:
        return x.sort(0)
    traced = sm.jit.trace(f, (sm.randn(3, 2),))
    out = traced(sm.randn(5, 2))
    assert type(out).__name__ == "sort" and out.values.shape == (5, 2)


def test_scripted_print_shows_tensors_inside_tuples_and_lists(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A tuple or list holding tensors printed NumPy arrays (``(array([...]), ...)``); the
    pairs print as the plain tuples scripted code holds (as TorchScript prints them)."""
    x = _x((3, 4))
    sm.jit.script(P.print_pairs)(x, 2)
    got = capsys.readouterr().out
    want = (f"{tuple(x.topk(2))} {tuple(x.max(0))}\n"
            f"{[x.sort(0)[0], x]} {(2, (x.min(1)[1],))}\n")
    assert got == want and "array" not in got
