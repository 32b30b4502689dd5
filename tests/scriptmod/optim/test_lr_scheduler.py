"""Every ``lr_scheduler`` against PyTorch's, step by step: each group's lr (and momentum or
beta1 where a scheduler cycles it), ``get_last_lr()``, the closed form of ``step(epoch)``,
the state-dict keys, a state dict taken mid-way resuming the same sequence, and resuming by
``last_epoch``; plus a NumPy/float64 check of the closed forms for the default configs."""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.optim import lr_scheduler as sm_sched

torch = pytest.importorskip("torch")
torch.set_num_threads(1)    # tiny tensors: threads only contend for the shared cores

STEPS = 14


def _opt(lib: Any, kind: str = "SGD") -> Any:
    """Two groups (lr 1.0 and 0.5) of one optimizer of ``lib``."""
    if lib is torch:
        ps = [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))]
    else:
        ps = [nn.Parameter(sm.ones(2)), nn.Parameter(sm.ones(3))]
    groups = [{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.5}]
    if kind == "Adam":
        return lib.optim.Adam(groups, lr=1.0)
    return lib.optim.SGD(groups, lr=1.0, momentum=0.9)


# name -> (make(lib, opt) -> scheduler, optimizer kind, takes a metric)
SCHEDULERS: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "LambdaLR": (lambda s, o: s.LambdaLR(o, [lambda e: 0.9 ** e, lambda e: 1 / (e + 1)]), "SGD"),
    "MultiplicativeLR": (lambda s, o: s.MultiplicativeLR(o, lambda e: 0.95), "SGD"),
    "StepLR": (lambda s, o: s.StepLR(o, step_size=3, gamma=0.5), "SGD"),
    "MultiStepLR": (lambda s, o: s.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3), "SGD"),
    "ConstantLR": (lambda s, o: s.ConstantLR(o, factor=0.25, total_iters=4), "SGD"),
    "LinearLR": (lambda s, o: s.LinearLR(o, start_factor=0.2, end_factor=0.9,
                                         total_iters=6), "SGD"),
    "ExponentialLR": (lambda s, o: s.ExponentialLR(o, gamma=0.8), "SGD"),
    "PolynomialLR": (lambda s, o: s.PolynomialLR(o, total_iters=8, power=2.0), "SGD"),
    "CosineAnnealingLR": (lambda s, o: s.CosineAnnealingLR(o, T_max=5, eta_min=0.01), "SGD"),
    "CosineAnnealingWarmRestarts": (lambda s, o: s.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=0.05), "SGD"),
    "CyclicLR": (lambda s, o: s.CyclicLR(o, base_lr=0.1, max_lr=[1.0, 2.0], step_size_up=3,
                                         step_size_down=2, mode="triangular2"), "SGD"),
    "CyclicLR-exp_range-Adam": (lambda s, o: s.CyclicLR(o, base_lr=0.1, max_lr=1.0,
                                                        step_size_up=4, mode="exp_range",
                                                        gamma=0.9), "Adam"),
    "OneCycleLR": (lambda s, o: s.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=STEPS + 1),
                   "SGD"),
    "OneCycleLR-three_phase-linear-Adam": (lambda s, o: s.OneCycleLR(
        o, max_lr=1.0, epochs=3, steps_per_epoch=5, pct_start=0.25, anneal_strategy="linear",
        three_phase=True), "Adam"),
    "SequentialLR": (lambda s, o: s.SequentialLR(o, [s.ConstantLR(o, factor=0.5, total_iters=2),
                                                     s.ExponentialLR(o, gamma=0.7)],
                                                 milestones=[4]), "SGD"),
    "ChainedScheduler": (lambda s, o: s.ChainedScheduler([s.ConstantLR(o, factor=0.5,
                                                                       total_iters=3),
                                                          s.ExponentialLR(o, gamma=0.9)]),
                         "SGD"),
}
METRICS = [5.0, 4.0, 4.0, 4.0, 3.9999, 4.5, 4.4, 4.3, 4.2, 4.1, 2.0, 2.0, 2.0, 2.0]


def _step(opt: Any) -> None:
    """The optimizer's step, for scriptmod's; PyTorch's first optimizer step imports its
    compiler (seconds), and no scheduler reads what it does (the order warning is ignored)."""
    if not isinstance(opt, torch.optim.Optimizer):
        opt.step()


def _groups(opt: Any) -> list[tuple[float, ...]]:
    out = []
    for g in opt.param_groups:
        m = g["betas"][0] if "betas" in g else g.get("momentum", 0.0)
        out.append((float(g["lr"]), float(m)))
    return out


def _trace(lib: Any, make: Callable[[Any, Any], Any], kind: str, steps: int = STEPS,
           ) -> tuple[list[Any], Any]:
    sched_mod = torch.optim.lr_scheduler if lib is torch else sm_sched
    opt = _opt(lib, kind)
    sched = make(sched_mod, opt)
    seen = [(_groups(opt), list(sched.get_last_lr()))]
    for _ in range(steps):
        _step(opt)
        sched.step()
        seen.append((_groups(opt), list(sched.get_last_lr())))
    return seen, sched


@pytest.mark.parametrize("name", SCHEDULERS)
def test_steps_match_torch(name: str) -> None:
    make, kind = SCHEDULERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, tsched = _trace(torch, make, kind)
        mine, sched = _trace(sm, make, kind)
    np.testing.assert_allclose(np.array([m[0] for m in mine]),
                               np.array([t[0] for t in theirs]), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.array([m[1] for m in mine]),
                               np.array([t[1] for t in theirs]), rtol=1e-12, atol=1e-15)
    assert sorted(sched.state_dict()) == sorted(tsched.state_dict())


@pytest.mark.parametrize("name", SCHEDULERS)
def test_state_dict_resumes(name: str) -> None:
    """A scheduler given another's mid-way state dict (and its optimizer's) goes on alike."""
    make, kind = SCHEDULERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full, _ = _trace(sm, make, kind)
        half, sched = _trace(sm, make, kind, steps=6)
        opt2 = _opt(sm, kind)
        sched2 = make(sm_sched, opt2)
        opt2.load_state_dict(sched.optimizer.state_dict())
        sched2.load_state_dict(sched.state_dict())
        rest = []
        for _ in range(STEPS - 6):
            opt2.step()
            sched2.step()
            rest.append((_groups(opt2), list(sched2.get_last_lr())))
    np.testing.assert_allclose(np.array([r[1] for r in rest]),
                               np.array([f[1] for f in full[7:]]), rtol=1e-12)


@pytest.mark.parametrize("kwargs", [{}, dict(mode="max", threshold_mode="abs", patience=1),
                                    dict(patience=2, cooldown=2, factor=0.5,
                                         min_lr=[0.1, 0.2])])
def test_reduce_lr_on_plateau_matches_torch(kwargs: dict[str, Any]) -> None:
    lrs = []
    for lib, mod in ((torch, torch.optim.lr_scheduler), (sm, sm_sched)):
        opt = _opt(lib)
        sched = mod.ReduceLROnPlateau(opt, **kwargs)
        seq = []
        for m in METRICS * 2:
            _step(opt)
            sched.step(m)
            seq.append(list(sched.get_last_lr()))
        lrs.append(seq)
        keys = sorted(sched.state_dict())
        lrs.append(keys)
    assert lrs[2] == lrs[0] and lrs[3] == lrs[1]


@pytest.mark.parametrize("name,epochs", [("StepLR", [0, 4, 7, 3]),
                                         ("MultiStepLR", [1, 5, 10, 2]),
                                         ("CosineAnnealingLR", [2, 9, 4]),
                                         ("CosineAnnealingWarmRestarts", [0.5, 4, 10.25, 1]),
                                         ("PolynomialLR", [3, 12, 1]),
                                         ("LinearLR", [2, 8]), ("ConstantLR", [1, 6]),
                                         ("ExponentialLR", [3, 1])])
def test_step_with_epoch_uses_the_closed_form(name: str, epochs: list[float]) -> None:
    make, kind = SCHEDULERS[name]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lib, mod in ((torch, torch.optim.lr_scheduler), (sm, sm_sched)):
            opt = _opt(lib, kind)
            sched = make(mod, opt)
            seq = []
            for e in epochs:
                _step(opt)
                sched.step(e)
                seq.append(list(sched.get_last_lr()))
            out.append(seq)
    np.testing.assert_allclose(np.array(out[1]), np.array(out[0]), rtol=1e-12)


def test_last_epoch_resume_needs_initial_lr_and_matches_torch() -> None:
    with pytest.raises(KeyError, match="initial_lr"):
        sm_sched.StepLR(_opt(sm), step_size=2, last_epoch=3)
    seqs = []
    for lib, mod in ((torch, torch.optim.lr_scheduler), (sm, sm_sched)):
        opt = _opt(lib)
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"] * 2
        sched = mod.CosineAnnealingLR(opt, T_max=6, last_epoch=3)
        seq = [list(sched.get_last_lr())]
        for _ in range(4):
            _step(opt)
            sched.step()
            seq.append(list(sched.get_last_lr()))
        seqs.append(seq)
    np.testing.assert_allclose(np.array(seqs[1]), np.array(seqs[0]), rtol=1e-12)


def test_closed_forms_against_numpy() -> None:
    """The default configs' lrs against their closed forms in float64."""
    e = np.arange(STEPS + 1, dtype=np.float64)
    expected = {
        "StepLR": 0.5 ** (e // 3),
        "ExponentialLR": 0.8 ** e,
        "CosineAnnealingLR": 0.01 + (1 - 0.01) * (1 + np.cos(np.pi * e / 5)) / 2,
        "PolynomialLR": (1 - np.minimum(e, 8) / 8) ** 2,
        "LinearLR": 0.2 + (0.9 - 0.2) * np.minimum(e, 6) / 6,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, want in expected.items():
            make, kind = SCHEDULERS[name]
            seen, _ = _trace(sm, make, kind)
            np.testing.assert_allclose([s[1][0] for s in seen], want, rtol=1e-12, atol=1e-15,
                                       err_msg=name)


def test_warns_when_stepped_before_the_optimizer() -> None:
    opt = _opt(sm)
    sched = sm_sched.StepLR(opt, step_size=2)
    with pytest.warns(UserWarning, match="before `optimizer.step\\(\\)`"):
        sched.step()
    assert math.isclose(sched.get_last_lr()[0], 1.0)


def test_tensor_lr_is_filled_in_place() -> None:
    p = nn.Parameter(sm.ones(2))
    lr = sm.tensor(0.1)
    opt = sm.optim.SGD([p], lr=lr)
    sched = sm_sched.ExponentialLR(opt, gamma=0.5)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] is lr and math.isclose(float(lr.item()), 0.05,
                                                              rel_tol=1e-6)
