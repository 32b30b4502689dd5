"""Helpers shared by the jit.script tests: run a program scripted and as plain Python on
copies of the same inputs and compare what comes back (values, or the exception raised)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

import scriptmod as sm


def tensor(*shape: int, seed: int = 0, scale: float = 1.0) -> sm.Tensor:
    """A float32 tensor of normal samples, fixed by ``seed`` (NumPy's generator, so no test
    depends on scriptmod's RNG state)."""
    data = np.random.RandomState(seed).randn(*shape) * scale
    return sm.from_numpy(np.asarray(data, dtype=np.float32))


def copied(value: Any) -> Any:
    """A deep copy of an argument: a scripted program may write into a tensor or list it
    is given, so each side runs on its own copy."""
    if isinstance(value, sm.Tensor):
        out = value.detach().clone()
        return out.requires_grad_(True) if value.requires_grad else out
    if isinstance(value, list):
        return [copied(v) for v in value]
    if isinstance(value, tuple):
        return tuple(copied(v) for v in value)
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    return value


def assert_same(got: Any, want: Any, where: str = "result") -> None:
    """Tensors allclose (rtol 1e-5, same shape and dtype), floats isclose, every other
    value equal and of the same type; containers item by item."""
    if isinstance(want, sm.Tensor):
        assert isinstance(got, sm.Tensor), f"{where}: want a Tensor, got {type(got).__name__}"
        assert tuple(got.shape) == tuple(want.shape), f"{where}: shape {tuple(got.shape)} != " \
                                                      f"{tuple(want.shape)}"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
        g, w = got.detach().numpy(), want.detach().numpy()
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=where)
        else:
            np.testing.assert_array_equal(g, w, err_msg=where)
        return
    assert type(got) is type(want), f"{where}: want {type(want).__name__} {want!r}, got " \
                                    f"{type(got).__name__} {got!r}"
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, float):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6), f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@dataclass
class Outcome:
    """What one call did: its value, or the type and message of what it raised, and the
    tensors it was given afterwards (a program may write into them)."""

    value: Any = None
    error: tuple[type, str] | None = None
    args: Sequence[Any] = ()


def assert_same_gradients(scripted: Callable, model: Any, make_x: Callable[[], Any],
                          args: Sequence[Any], where: str) -> None:
    """``(out * out).sum().backward()`` through the scripted module and the eager model: the
    same output, input gradient and parameter gradients."""
    params = dict(model.named_parameters())
    grads = []
    for fn in (scripted, model):
        model.zero_grad()
        x = make_x().requires_grad_(True)
        out = fn(x, *args)
        (out * out).sum().backward()
        grads.append((out.detach(), x.grad,
                      {n: p.grad for n, p in params.items() if p.grad is not None}))
    (got, gx, gp), (want, wx, wp) = grads
    assert_same(got, want, where)
    assert_same(gx, wx, f"{where}: input gradient")
    assert sorted(gp) == sorted(wp), f"{where}: parameters with a gradient"
    for n in wp:
        assert_same(gp[n], wp[n], f"{where}: gradient of {n}")


def call(fn: Callable, args: Sequence[Any]) -> Outcome:
    """``fn(*copies of args)``, catching any Exception."""
    args = copied(tuple(args))
    try:
        return Outcome(value=fn(*args), args=args)
    except Exception as e:                    # noqa: BLE001 - compared against Python's
        return Outcome(error=(type(e), str(e)), args=args)


def assert_same_outcome(got: Outcome, want: Outcome, label: str) -> None:
    """Both returned equal values (and left their arguments equal), or both raised the same
    exception type with the same message."""
    if want.error is not None or got.error is not None:
        assert got.error == want.error, \
            f"{label}: scripted gave {got.error or got.value!r}, " \
            f"Python {want.error or want.value!r}"
        return
    assert_same(got.value, want.value, label)
    assert_same(list(got.args), list(want.args), f"{label} (arguments afterwards)")


# ---- one model table's checks (container_models, runtime_list_models) -------------------------
# ``models``: name -> (module class, [extra argument tuples]) built on scriptmod; each model
# takes a (batch, 8) input first. The test files parametrize these over their table's names.

TABLE_BATCHES = (2, 5)


def table_model(models: dict, name: str) -> Any:
    """A fresh ``name`` of the table, with seeded parameters."""
    sm.manual_seed(0)
    return models[name][0]()


def check_table_no_grad(models: dict, name: str, again: bool = False) -> None:
    """Scripted equals eager under no_grad at each batch and argument set (``again``: a
    second call of the same specialization too)."""
    model = table_model(models, name).eval()
    scripted = sm.jit.script(model)
    for batch in TABLE_BATCHES:
        for k, args in enumerate(models[name][1]):
            x = tensor(batch, 8, seed=batch + k)
            with sm.no_grad():
                got, want = scripted(x, *args), model(x, *args)
                second = scripted(x, *args) if again else None
            assert not got.requires_grad
            assert_same(got, want, f"{name} batch {batch} args {args}")
            if again:
                assert_same(second, want, f"{name} batch {batch} args {args}, second call")


def check_table_gradients(models: dict, name: str) -> None:
    """Input and parameter gradients through the scripted model equal eager's."""
    model = table_model(models, name)
    scripted = sm.jit.script(model)
    for batch in TABLE_BATCHES:
        for k, args in enumerate(models[name][1]):
            assert_same_gradients(scripted, model, lambda: tensor(batch, 8, seed=batch + k),
                                  args, f"{name} batch {batch} args {args}")


def check_table_against_torch(models: dict, build: Callable[[Any], dict], name: str) -> None:
    """Ours scripted equals ``torch.jit.script`` of the same table entry built on torch
    (``build(torch)``), same weights."""
    import pytest
    torch = pytest.importorskip("torch")
    ours = table_model(models, name).eval()
    theirs = build(torch)[name][0]().eval()
    theirs.load_state_dict({k: torch.from_numpy(np.array(v.detach().numpy()))
                            for k, v in ours.state_dict().items()})
    s_ours, s_theirs = sm.jit.script(ours), torch.jit.script(theirs)
    for batch in TABLE_BATCHES:
        x = tensor(batch, 8, seed=batch)
        for args in models[name][1]:
            with sm.no_grad():
                got = s_ours(x, *args).numpy()
            with torch.no_grad():
                want = s_theirs(torch.from_numpy(x.numpy().copy()), *args).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} batch {batch} args {args}")
