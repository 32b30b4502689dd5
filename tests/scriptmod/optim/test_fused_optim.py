"""The fused optimizer step (``scriptmod.optim._fused``): one native kernel per parameter
equals the Python path bit for bit (float64 and float32: same IEEE ops in the same order, no
FMA), over many steps, every option, schedulers, groups, and state dicts moved between the
two paths; which path runs, and what it compiles, checked with ``_fused.COUNTERS``."""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn, optim
from scriptmod.optim import _fused
from scriptmod.optim import lr_scheduler
from scriptmod.optim.adam import AdamFlags
from scriptmod.optim.sgd import SGDFlags

SHAPES = [(7, 13), (5,)]
STEPS = 50

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1, maximize=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.01, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.0), weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True, maximize=True, eps=1e-6)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.3, amsgrad=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.0, maximize=True)),
]
_ids = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for name, kw in CASES]


def _params(dtype: Any, seed: int = 0) -> list[nn.Parameter]:
    rng = np.random.default_rng(seed)
    return [nn.Parameter(sm.tensor(rng.standard_normal(s).astype(dtype))) for s in SHAPES]


def _set_grads(params: list[nn.Parameter], rng: np.random.Generator, dtype: Any) -> None:
    for p in params:
        p.grad = sm.tensor(rng.standard_normal(tuple(p.shape)).astype(dtype))


def _train(make: Callable[[list[nn.Parameter]], optim.Optimizer], dtype: Any,
           steps: int = STEPS) -> tuple[list[nn.Parameter], optim.Optimizer]:
    """``steps`` steps on fixed random grads (the same stream for every call)."""
    params = _params(dtype)
    opt = make(params)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        _set_grads(params, rng, dtype)
        opt.step()
    return params, opt


def _same(a: list[nn.Parameter], b: list[nn.Parameter]) -> None:
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.detach().numpy(), y.detach().numpy(), strict=True)
        assert x._version == y._version


def _same_state(a: optim.Optimizer, b: optim.Optimizer, versions: bool = True) -> None:
    sa, sb = a.state_dict()["state"], b.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        assert list(sa[k]) == list(sb[k])
        for name in sa[k]:
            np.testing.assert_array_equal(sa[k][name].numpy(), sb[k][name].numpy(), strict=True)
            assert not versions or sa[k][name]._version == sb[k][name]._version, name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,kw", CASES, ids=_ids)
def test_fused_equals_the_python_path_bit_for_bit(name: str, kw: dict, dtype: Any) -> None:
    launches = _fused.COUNTERS["launches"]
    fused, fo = _train(lambda ps: getattr(optim, name)(ps, fused=True, **kw), dtype)
    assert _fused.COUNTERS["launches"] - launches == STEPS * len(SHAPES)
    plain, po = _train(lambda ps: getattr(optim, name)(ps, fused=False, **kw), dtype)
    _same(fused, plain)
    _same_state(fo, po)


@pytest.mark.parametrize("sched", [lambda o: lr_scheduler.StepLR(o, step_size=7, gamma=0.5),
                                   lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=10)],
                         ids=["StepLR", "CosineAnnealingLR"])
def test_a_scheduler_changes_lr_without_compiling(sched: Callable) -> None:
    runs = []
    for fused in (True, False):
        params, rng = _params(np.float32), np.random.default_rng(1)
        opt = optim.AdamW(params, lr=0.05, weight_decay=0.1, fused=fused)
        scheduler = sched(opt)
        compiles = set()
        for _ in range(STEPS):
            _set_grads(params, rng, np.float32)
            opt.step()
            scheduler.step()
            compiles.add(_fused.COUNTERS["compiles"])
        assert len(compiles) == 1 and opt.param_groups[0]["lr"] != 0.05
        runs.append(params)
    _same(*runs)


def test_param_groups_with_different_options() -> None:
    def make(fused: bool | None) -> Callable[[list[nn.Parameter]], optim.Optimizer]:
        return lambda ps: optim.SGD([{"params": [ps[0]], "momentum": 0.9, "nesterov": True},
                                     {"params": [ps[1]], "lr": 0.3, "weight_decay": 0.2,
                                      "maximize": True}], lr=0.1, fused=fused)
    fused, _ = _train(make(True), np.float64)
    plain, _ = _train(make(False), np.float64)
    _same(fused, plain)


def test_params_without_grad_are_skipped() -> None:
    a, b = _params(np.float64)
    before = b.detach().numpy().copy()
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = sm.ones(*a.shape, dtype=sm.float64)
    launches = _fused.COUNTERS["launches"]
    opt.step()
    assert _fused.COUNTERS["launches"] - launches == 1
    np.testing.assert_array_equal(b.detach().numpy(), before)
    assert b not in opt.state and float(opt.state[a]["step"].item()) == 1.0


@pytest.mark.parametrize("options,fast", [({}, True), ({"foreach": True}, True),
                                          ({"fused": True}, True), ({"fused": False}, False),
                                          ({"foreach": False}, False)])
def test_which_path_runs(options: dict, fast: bool) -> None:
    params = _params(np.float32)
    opt = optim.AdamW(params, **options)
    for p in params:
        p.grad = sm.ones(*p.shape)
    launches = _fused.COUNTERS["launches"]
    opt.step()
    assert _fused.COUNTERS["launches"] - launches == (len(params) if fast else 0)


def test_the_default_runs_the_python_path_for_half_and_complex_params() -> None:
    half = nn.Parameter(sm.ones(3, dtype=sm.float16))
    half.grad = sm.ones(3, dtype=sm.float16)
    cplx = nn.Parameter(sm.tensor(np.ones(3, np.complex128)))
    cplx.grad = sm.tensor(np.ones(3, np.complex128))
    launches = _fused.COUNTERS["launches"]
    optim.Adam([half], lr=0.5).step()
    optim.SGD([cplx], lr=0.5).step()
    assert _fused.COUNTERS["launches"] == launches
    np.testing.assert_array_equal(half.detach().numpy(), np.full(3, 0.5, np.float16))
    np.testing.assert_array_equal(cplx.detach().numpy(), np.full(3, 0.5 + 0j))


def test_fused_true_refuses_what_it_cannot_run() -> None:
    half = nn.Parameter(sm.ones(3, dtype=sm.float16))
    with pytest.raises(RuntimeError, match=r"`fused=True` requires all the params to be "
                                           r"floating point Tensors of supported devices.*"
                                           r"params\[1\] has dtype float16"):
        optim.AdamW([_params(np.float32)[0], half], fused=True)
    cplx = nn.Parameter(sm.tensor(np.ones(3, np.complex64)))
    with pytest.raises(RuntimeError, match=r"params\[0\] has dtype complex64"):
        optim.SGD([cplx], lr=0.1, fused=True)
    opt = optim.SGD(_params(np.float32), lr=0.1)
    with pytest.raises(RuntimeError, match="has dtype float16"):
        opt.add_param_group({"params": [half], "fused": True})
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        optim.Adam(_params(np.float32), fused=True, foreach=True)
    with pytest.raises(RuntimeError, match="`fused` does not support `differentiable`"):
        optim.Adam(_params(np.float32), fused=True, differentiable=True)


def test_a_strided_param_takes_the_python_path_inside_a_fused_step() -> None:
    def make_params() -> list[nn.Parameter]:
        base = np.random.default_rng(2).standard_normal((6, 4))
        return [nn.Parameter(sm.tensor(base).t()), nn.Parameter(sm.tensor(base[0].copy()))]
    results = []
    for fused in (True, False):
        params = make_params()
        assert not params[0].detach().numpy().flags.c_contiguous
        opt = optim.Adam(params, lr=0.1, fused=fused)
        launches = _fused.COUNTERS["launches"]
        for _ in range(3):
            for p in params:
                p.grad = sm.ones(*p.shape, dtype=sm.float64)
            opt.step()
        assert _fused.COUNTERS["launches"] - launches == (3 if fused else 0)
        results.append(params)
    _same(*results)


@pytest.mark.parametrize("name,kw", [CASES[2], CASES[9]], ids=[_ids[2], _ids[9]])
@pytest.mark.parametrize("first", [True, False], ids=["fused-first", "python-first"])
def test_state_dicts_move_between_the_paths(name: str, kw: dict, first: bool) -> None:
    """Half the steps on one path, its state dict loaded into an optimizer on the other for the
    rest: the same bits as the Python path all the way."""
    def make(ps: list[nn.Parameter]) -> optim.Optimizer:
        return getattr(optim, name)(ps, fused=first, **kw)
    params, opt = _train(make, np.float64, steps=STEPS // 2)
    sd = opt.state_dict()
    kinds = {k: type(v) for s in sd["state"].values() for k, v in s.items()}
    assert all(t is sm.Tensor for t in kinds.values())
    other = getattr(optim, name)(params, **kw)
    other.load_state_dict(sd)
    for g in other.param_groups:
        g["fused"] = not first
    rng = np.random.default_rng(1)
    for _ in range(STEPS // 2):                        # the grads _train drew first
        _set_grads(params, rng, np.float64)
    launches = _fused.COUNTERS["launches"]
    for _ in range(STEPS - STEPS // 2):
        _set_grads(params, rng, np.float64)
        other.step()
    fused_steps = 0 if first else STEPS - STEPS // 2
    assert _fused.COUNTERS["launches"] - launches == fused_steps * len(SHAPES)
    plain, po = _train(lambda ps: getattr(optim, name)(ps, fused=False, **kw), np.float64)
    _same(params, plain)
    _same_state(other, po, versions=False)             # loading copies the state


def test_one_kernel_per_config_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fused, "_KERNELS", {})       # none from earlier tests
    compiles = _fused.COUNTERS["compiles"]
    _train(lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True), np.float32, steps=2)
    assert _fused.COUNTERS["compiles"] == compiles + 1
    compiles += 1
    _train(lambda ps: optim.Adam(ps, lr=0.2, betas=(0.5, 0.6), amsgrad=True), np.float32,
           steps=3)
    assert _fused.COUNTERS["compiles"] == compiles
    _train(lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True), np.float64, steps=1)
    assert _fused.COUNTERS["compiles"] == compiles + 1


def test_no_fma_in_the_kernels() -> None:
    """A fused multiply-add rounds once where the Python path rounds twice: the kernels must
    have none (LLVM contracts only ``contract``-flagged ops and ``llvm.fmuladd``)."""
    for dtype in (np.float32, np.float64):
        _train(lambda ps: optim.AdamW(ps, amsgrad=True), dtype, steps=1)
        _train(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1), dtype, steps=2)
    wanted = {AdamFlags(False, True, True, True),
              SGDFlags(False, False, True, False, True, False)}
    # by type too: another optimizer's flags namedtuple with the same fields compares equal
    kernels = [k for key, k in _fused._KERNELS.items()
               if any(type(key[1]) is type(w) and key[1] == w for w in wanted)]
    assert len(kernels) == 4
    for k in kernels:
        assert re.search(r"vfn?m(add|sub)", k.compiled.asm) is None, k.compiled.asm


def test_the_update_must_take_its_numbers_as_scalars() -> None:
    def math(f: Any, t: Any, s: Any) -> dict:
        return {"param": t["param"] * 0.5}
    with pytest.raises(TypeError, match="numbers go in the plan's scalars"):
        _fused.kernel_for(math, (), sm.float32, ("param", "grad"), ())


def test_a_strided_grad_is_read_through_a_copy_inside_a_fused_step() -> None:
    """Eager's Linear weight gradient is a transposed view: the fused step still runs."""
    rng = np.random.default_rng(3)
    start, grad = rng.standard_normal((5, 3)), rng.standard_normal((3, 5))
    results = []
    for fused in (True, False):
        params = [nn.Parameter(sm.tensor(start.copy()))]
        opt = optim.AdamW(params, lr=0.1, fused=fused)
        launches = _fused.COUNTERS["launches"]
        for _ in range(3):
            params[0].grad = sm.tensor(grad).t()
            assert not params[0].grad._data.flags.c_contiguous
            opt.step()
        assert _fused.COUNTERS["launches"] - launches == (3 if fused else 0)
        results.append(params)
    _same(*results)
