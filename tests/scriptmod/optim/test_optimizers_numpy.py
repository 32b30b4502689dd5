"""The new optimizers' default updates against NumPy/float64 references of their documented
rules, and their fused kernels (the default for CPU float32/float64 parameters) against the
Python path (``foreach=False``) bit for bit, over every option that shapes the kernel."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn, optim
from scriptmod.optim import _fused

SHAPES = [(3, 4), (5,)]
STEPS = 6
Ref = Callable[[np.ndarray, np.ndarray, dict[str, Any], int], np.ndarray]


def _grads(steps: int, seed: int = 1) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(steps)]


def _train(make: Callable[[list[nn.Parameter]], optim.Optimizer], dtype: Any = np.float64,
           steps: int = STEPS) -> tuple[list[nn.Parameter], optim.Optimizer]:
    rng = np.random.default_rng(0)
    params = [nn.Parameter(sm.tensor(rng.standard_normal(s).astype(dtype))) for s in SHAPES]
    opt = make(params)
    for grads in _grads(steps):
        for p, g in zip(params, grads):
            p.grad = sm.tensor(g.astype(dtype))
        opt.step()
    return params, opt


def adadelta(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    rho, eps = 0.9, 1e-6
    s["v"] = rho * s.get("v", 0) + (1 - rho) * g * g
    delta = np.sqrt(s.get("u", 0) + eps) / np.sqrt(s["v"] + eps) * g
    s["u"] = rho * s.get("u", 0) + (1 - rho) * delta * delta
    return p - 1.0 * delta


def adagrad(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    s["sum"] = s.get("sum", 0) + g * g
    return p - 0.01 * g / (np.sqrt(s["sum"]) + 1e-10)


def adamax(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    s["m"] = 0.9 * s.get("m", 0) + 0.1 * g
    s["u"] = np.maximum(0.999 * s.get("u", 0), np.abs(g) + 1e-8)
    return p - 2e-3 / (1 - 0.9 ** t) * s["m"] / s["u"]


def asgd(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    lr, lambd, alpha, t0 = 0.01, 1e-4, 0.75, 1e6
    eta, mu = s.get("eta", float(np.float32(lr))), s.get("mu", 1.0)     # float32 tensors
    p = p * (1 - lambd * eta) - eta * g
    s["ax"] = p.copy() if mu == 1 else s["ax"] + mu * (p - s["ax"])
    s["eta"] = float(np.float32(lr / (1 + lambd * lr * t) ** alpha))    # kept as float32
    s["mu"] = 1 / max(1, t - t0)
    return p


def nadam(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    lr, b1, b2, eps, psi = 2e-3, 0.9, 0.999, 1e-8, 4e-3
    mu = b1 * (1 - 0.5 * 0.96 ** (t * psi))
    mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
    s["prod"] = float(np.float32(s.get("prod", 1.0)) * np.float32(mu))   # a float32 tensor
    s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
    denom = np.sqrt(s["v"] / (1 - b2 ** t)) + eps
    return p - lr * (1 - mu) / (1 - s["prod"]) * g / denom \
        - lr * mu_next / (1 - s["prod"] * mu_next) * s["m"] / denom


def radam(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
    m_hat = s["m"] / (1 - b1 ** t)
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
    if rho_t <= 5:
        return p - lr * m_hat
    r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
    return p - lr * m_hat * r * math.sqrt(1 - b2 ** t) / (np.sqrt(s["v"]) + eps)


def rmsprop(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    s["v"] = 0.99 * s.get("v", 0) + 0.01 * g * g
    return p - 0.01 * g / (np.sqrt(s["v"]) + 1e-8)


def rprop(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    prev = s.get("prev", np.zeros_like(g))
    size = s.get("size", np.full_like(g, 0.01))
    sign = np.sign(g * prev)
    size = np.clip(size * np.where(sign > 0, 1.2, np.where(sign < 0, 0.5, 1.0)), 1e-6, 50)
    g = np.where(sign < 0, 0.0, g)
    s["prev"], s["size"] = g, size
    return p - np.sign(g) * size


def adafactor(p: np.ndarray, g: np.ndarray, s: dict[str, Any], t: int) -> np.ndarray:
    eps1, eps2, beta2_t = np.finfo(np.float64).eps, 1e-3, 1 - t ** -0.8
    alpha = max(eps2, np.sqrt(np.mean(p * p))) * min(0.01, 1 / math.sqrt(t))
    if g.ndim == 2:
        s["r"] = beta2_t * s.get("r", 0) + (1 - beta2_t) * np.mean(g * g, axis=1, keepdims=True)
        s["c"] = beta2_t * s.get("c", 0) + (1 - beta2_t) * np.mean(g * g, axis=0, keepdims=True)
        v = s["r"] @ s["c"] / max(np.mean(s["r"]), eps1)
    else:
        v = s["v"] = beta2_t * s.get("v", 0) + (1 - beta2_t) * g * g
    u = g / np.sqrt(np.maximum(v, eps1 * eps1))
    return p - alpha * u / max(1.0, np.sqrt(np.mean(u * u)))


REFERENCES: dict[str, Ref] = {"Adadelta": adadelta, "Adagrad": adagrad, "Adamax": adamax,
                              "ASGD": asgd, "NAdam": nadam, "RAdam": radam,
                              "RMSprop": rmsprop, "Rprop": rprop, "Adafactor": adafactor}


@pytest.mark.parametrize("name", REFERENCES)
def test_default_update_matches_numpy(name: str) -> None:
    rng = np.random.default_rng(0)
    want = [rng.standard_normal(s) for s in SHAPES]
    states: list[dict[str, Any]] = [{} for _ in SHAPES]
    for t, grads in enumerate(_grads(STEPS), start=1):
        want = [REFERENCES[name](p, g, s, t) for p, g, s in zip(want, grads, states)]
    got, _ = _train(lambda ps: getattr(optim, name)(ps))
    for p, w in zip(got, want):
        np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-12, atol=1e-14)


def test_muon_orthogonalizes_the_update() -> None:
    """Muon's step direction is near-orthogonal (singular values near 1, bfloat16-rough)."""
    p = nn.Parameter(sm.zeros(6, 4, dtype=sm.float64))
    p.grad = sm.tensor(np.random.default_rng(3).standard_normal((6, 4)))
    optim.Muon([p], lr=1.0, weight_decay=0.0, nesterov=False).step()
    s = np.linalg.svd(p.detach().numpy() / math.sqrt(6 / 4), compute_uv=False)
    assert np.all((s > 0.5) & (s < 1.5))


def test_lbfgs_finds_the_least_squares_solution() -> None:
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((20, 4)), rng.standard_normal(20)
    w = nn.Parameter(sm.zeros(4, dtype=sm.float64))
    opt = optim.LBFGS([w], line_search_fn="strong_wolfe", history_size=5)
    Xt, yt = sm.tensor(X), sm.tensor(y)

    def closure() -> Any:
        opt.zero_grad()
        loss = ((Xt.matmul(w) - yt) ** 2).sum()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    np.testing.assert_allclose(w.detach().numpy(), np.linalg.lstsq(X, y, rcond=None)[0],
                               atol=1e-6)
    assert opt.state[w]["n_iter"] > 0 and len(opt.state[w]["old_dirs"]) <= 5


FUSABLE = [
    ("Adadelta", dict(weight_decay=0.1, maximize=True)), ("Adadelta", dict(rho=0.5)),
    ("Adagrad", dict(lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.2)),
    ("Adagrad", dict(maximize=True)),
    ("Adamax", dict(weight_decay=0.1, maximize=True)), ("Adamax", {}),
    ("ASGD", dict(t0=2, weight_decay=0.1)), ("ASGD", dict(maximize=True)),
    ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
    ("NAdam", dict(weight_decay=0.1, maximize=True)),
    ("RAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, betas=(0.9, 0.5))),
    ("RAdam", dict(weight_decay=0.1, maximize=True)),
    ("RMSprop", dict(centered=True, momentum=0.5, weight_decay=0.1, maximize=True)),
    ("RMSprop", {}), ("RMSprop", dict(momentum=0.9)),
]
_fids = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for n, kw in FUSABLE]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,kw", FUSABLE, ids=_fids)
def test_kernel_equals_the_python_path_bit_for_bit(name: str, kw: dict, dtype: Any) -> None:
    launches = _fused.COUNTERS["launches"]
    fast, fo = _train(lambda ps: getattr(optim, name)(ps, foreach=True, **kw), dtype)
    assert _fused.COUNTERS["launches"] - launches == STEPS * len(SHAPES)
    plain, po = _train(lambda ps: getattr(optim, name)(ps, foreach=False, **kw), dtype)
    for a, b in zip(fast, plain):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), strict=True)
        assert a._version == b._version
    sa, sb = fo.state_dict()["state"], po.state_dict()["state"]
    for k in sa:
        assert list(sa[k]) == list(sb[k])
        for n in sa[k]:
            np.testing.assert_array_equal(sa[k][n].numpy(), sb[k][n].numpy(), strict=True)


def test_adagrad_fused_runs_the_kernel() -> None:
    launches = _fused.COUNTERS["launches"]
    _train(lambda ps: optim.Adagrad(ps, fused=True), np.float32, steps=2)
    assert _fused.COUNTERS["launches"] - launches == 2 * len(SHAPES)
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        optim.Adagrad([nn.Parameter(sm.ones(2))], fused=True, foreach=True)
