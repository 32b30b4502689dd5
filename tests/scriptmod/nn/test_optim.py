"""``scriptmod.optim``: updates against hand-computed steps (and PyTorch over several steps
when installed), state dicts in PyTorch's format, groups, zero_grad, schedulers."""
from __future__ import annotations

import math

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn, optim
from scriptmod.optim import lr_scheduler
from nn_testutil import arr, torch_or_none

RNG = np.random.default_rng(11)


def _p(values: list[float]) -> nn.Parameter:
    return nn.Parameter(sm.tensor(values, dtype=sm.float64))


def _step(opt: optim.Optimizer, p: nn.Parameter, grad: list[float]) -> np.ndarray:
    p.grad = sm.tensor(grad, dtype=sm.float64)
    opt.step()
    return arr(p)


def test_sgd_plain_weight_decay_and_maximize() -> None:
    p = _p([1.0, -2.0])
    np.testing.assert_allclose(_step(optim.SGD([p], lr=0.1), p, [0.5, 1.0]), [0.95, -2.1])
    p = _p([1.0, -2.0])
    np.testing.assert_allclose(_step(optim.SGD([p], lr=0.1, weight_decay=0.5), p, [0.5, 1.0]),
                               [1 - 0.1 * 1.0, -2 - 0.1 * 0.0])
    p = _p([1.0])
    np.testing.assert_allclose(_step(optim.SGD([p], lr=0.1, maximize=True), p, [2.0]), [1.2])


def test_sgd_momentum_dampening_and_nesterov() -> None:
    p = _p([0.0])
    opt = optim.SGD([p], lr=1.0, momentum=0.9, dampening=0.5)
    assert _step(opt, p, [1.0])[0] == pytest.approx(-1.0)              # buf = g
    assert _step(opt, p, [1.0])[0] == pytest.approx(-1.0 - 1.4)        # buf = .9 + .5
    p = _p([0.0])
    opt = optim.SGD([p], lr=1.0, momentum=0.9, nesterov=True)
    assert _step(opt, p, [1.0])[0] == pytest.approx(-1.9)              # g + .9 * buf
    assert _step(opt, p, [1.0])[0] == pytest.approx(-1.9 - (1 + 0.9 * 1.9))
    assert "momentum_buffer" in opt.state[p]


def test_adam_first_two_steps_by_hand() -> None:
    p = _p([1.0])
    opt = optim.Adam([p], lr=0.1, betas=(0.9, 0.99), eps=1e-8)
    # step 1: m_hat = g, v_hat = g^2 -> p -= lr * sign(g)
    p1 = _step(opt, p, [3.0])[0]
    assert p1 == pytest.approx(1 - 0.1 * 3 / (3 + 1e-8), rel=1e-15)
    m, v = 0.9 * 0.3 + 0.1 * 1.0, 0.99 * 0.09 + 0.01 * 1.0
    expected = p1 - 0.1 * (m / (1 - 0.81)) / (math.sqrt(v / (1 - 0.9801)) + 1e-8)
    assert _step(opt, p, [1.0])[0] == pytest.approx(expected, rel=1e-12)
    assert float(opt.state[p]["step"].item()) == 2.0


def test_adamw_decays_before_the_adam_step_and_adam_couples_it() -> None:
    p = _p([2.0])
    assert _step(optim.AdamW([p], lr=0.1, weight_decay=0.5), p, [1.0])[0] == \
        pytest.approx(2.0 * (1 - 0.05) - 0.1, rel=1e-9)
    p = _p([2.0])   # coupled: g + wd * p = 2 -> still a unit first step
    assert _step(optim.Adam([p], lr=0.1, weight_decay=0.5), p, [1.0])[0] == pytest.approx(1.9)


def test_amsgrad_keeps_the_running_max() -> None:
    p = _p([0.0])
    opt = optim.Adam([p], lr=0.1, amsgrad=True)
    _step(opt, p, [10.0])
    _step(opt, p, [0.1])
    st = opt.state[p]
    assert arr(st["max_exp_avg_sq"])[0] >= arr(st["exp_avg_sq"])[0]
    assert list(st) == ["step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]


def test_updates_run_in_place_under_no_grad() -> None:
    p = _p([1.0, 2.0])
    ptr = p.data_ptr()
    opt = optim.Adam([p])
    (p * p).sum().backward()
    opt.step()
    assert p.data_ptr() == ptr and p.is_leaf and p.grad_fn is None


def test_zero_grad_and_param_groups() -> None:
    a, b = _p([1.0]), _p([2.0])
    opt = optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["momentum"] == 0.9
    a.grad, b.grad = sm.ones(1, dtype=sm.float64), sm.ones(1, dtype=sm.float64)
    opt.zero_grad(set_to_none=False)
    assert arr(a.grad)[0] == 0
    opt.zero_grad()
    assert a.grad is None and b.grad is None
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        optim.SGD({a}, lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        optim.Adam([a], lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        optim.SGD([a], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([a * 2], lr=0.1)


def test_state_dict_format_and_round_trip() -> None:
    a, b = _p([1.0, 2.0]), _p([3.0])
    opt = optim.Adam([{"params": [a]}, {"params": [b], "lr": 0.01}])
    for p in (a, b):
        p.grad = sm.ones(*p.shape, dtype=sm.float64)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0], [1]]
    assert set(sd["state"]) == {0, 1} and set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert sd["param_groups"][0]["betas"] == (0.9, 0.999)
    c, d = _p([1.0, 2.0]), _p([3.0])
    opt2 = optim.Adam([{"params": [c]}, {"params": [d]}])
    opt2.load_state_dict(sd)
    assert opt2.param_groups[1]["lr"] == 0.01 and opt2.param_groups[1]["params"][0] is d
    np.testing.assert_allclose(arr(opt2.state[c]["exp_avg"]), arr(opt.state[a]["exp_avg"]))
    assert opt2.state[c]["exp_avg"] is not opt.state[a]["exp_avg"]
    with pytest.raises(ValueError, match="different number of parameter groups"):
        optim.Adam([c]).load_state_dict(sd)


def test_step_lr_and_cosine_annealing() -> None:
    opt = optim.SGD([_p([1.0])], lr=1.0)
    sched = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.25]
    opt = optim.SGD([_p([1.0])], lr=1.0)
    cos = lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=0.1)
    got = []
    for _ in range(9):
        got.append(cos.get_last_lr()[0])
        opt.step()
        cos.step()
    want = [0.1 + 0.9 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(9)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    sd = cos.state_dict()
    assert "optimizer" not in sd and sd["last_epoch"] == 9 and sd["base_lrs"] == [1.0]


# ---- the PyTorch oracle ---------------------------------------------------------------------
OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.8, nesterov=True, maximize=True)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=0.01, maximize=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.3)),
]


@pytest.mark.parametrize("name,kw", OPTIMIZERS)
def test_optimizers_match_torch_over_several_steps(name: str, kw: dict) -> None:
    torch = pytest.importorskip("torch")
    init = RNG.standard_normal((3, 4))
    ours, theirs = _p(init.tolist()), torch.nn.Parameter(torch.tensor(init))
    o, t = getattr(optim, name)([ours], **kw), getattr(torch.optim, name)([theirs], **kw)
    for _ in range(5):
        g = RNG.standard_normal((3, 4))
        ours.grad, theirs.grad = sm.tensor(g), torch.tensor(g)
        o.step()
        t.step()
    np.testing.assert_allclose(arr(ours), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)
    ours_sd, theirs_sd = o.state_dict(), t.state_dict()
    assert ours_sd["param_groups"] == theirs_sd["param_groups"]
    assert ours_sd["state"].keys() == theirs_sd["state"].keys()
    for k, v in theirs_sd["state"][0].items():
        np.testing.assert_allclose(arr(ours_sd["state"][0][k]), v.numpy(), rtol=1e-10)


def test_torch_optimizer_state_dict_loads() -> None:
    torch = pytest.importorskip("torch")
    tp = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    topt = torch.optim.Adam([tp], lr=0.05)
    tp.grad = torch.tensor([1.0, -1.0], dtype=torch.float64)
    topt.step()
    sd = topt.state_dict()
    ours_sd = {"param_groups": sd["param_groups"],
               "state": {k: {n: sm.tensor(v.numpy()) for n, v in s.items()}
                         for k, s in sd["state"].items()}}
    p = _p([float(x) for x in tp.detach().numpy()])
    opt = optim.Adam([p])
    opt.load_state_dict(ours_sd)
    g = [0.5, 0.25]
    _step(opt, p, g)
    tp.grad = torch.tensor(g, dtype=torch.float64)
    topt.step()
    np.testing.assert_allclose(arr(p), tp.detach().numpy(), rtol=1e-12)


def test_schedulers_match_torch() -> None:
    torch = pytest.importorskip("torch")
    for make in (lambda o, m: m.StepLR(o, 3, 0.3), lambda o, m: m.CosineAnnealingLR(o, 5, 0.01)):
        o = optim.SGD([_p([1.0])], lr=0.5)
        t = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.5)
        s, ts = make(o, lr_scheduler), make(t, torch.optim.lr_scheduler)
        for _ in range(12):
            o.step()
            t.step()
            s.step()
            ts.step()
            assert s.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
        assert set(s.state_dict()) == set(ts.state_dict())


def test_torch_oracle_is_optional() -> None:
    assert torch_or_none() is None or hasattr(torch_or_none(), "optim")
