"""Every optimizer of PyTorch's ``optim_db`` against PyTorch itself: each config of
``optim_db`` (and a few more options) over several steps in float64 and float32, the names
in ``state`` and ``param_groups``, state-dict round trips, and a PyTorch state dict loaded
into scriptmod giving PyTorch's next steps."""
from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn, optim

torch = pytest.importorskip("torch")
torch.set_num_threads(1)    # tiny tensors: threads only contend for the shared cores

# (class name, kwargs): optim_db's configs (torch 2.13) plus options it leaves out
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("Adadelta", {}), ("Adadelta", dict(lr=0.01, weight_decay=0.1, maximize=True)),
    ("Adadelta", dict(rho=0.95, weight_decay=0.9, foreach=True)),
    ("Adagrad", {}), ("Adagrad", dict(weight_decay=0.1, maximize=True)),
    ("Adagrad", dict(initial_accumulator_value=0.1, weight_decay=0.1, fused=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.5, weight_decay=0.1, foreach=False)),
    ("Adamax", {}), ("Adamax", dict(lr=0.1, weight_decay=0.1, maximize=True)),
    ("ASGD", {}), ("ASGD", dict(lambd=0.1, lr=0.02)), ("ASGD", dict(t0=2)),
    ("ASGD", dict(weight_decay=0.1, maximize=True, alpha=0.5)),
    ("NAdam", {}), ("NAdam", dict(weight_decay=0.1, momentum_decay=0.006)),
    ("NAdam", dict(weight_decay=0.1, momentum_decay=0.006, decoupled_weight_decay=True)),
    ("NAdam", dict(weight_decay=0.1, maximize=True)),
    ("RAdam", {}), ("RAdam", dict(lr=0.002, eps=1e-6, weight_decay=0.1)),
    ("RAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", dict(weight_decay=0.1, maximize=True, betas=(0.9, 0.5))),   # rectified by step 3
    ("RMSprop", {}), ("RMSprop", dict(maximize=True, weight_decay=0.1)),
    ("RMSprop", dict(weight_decay=0.1, centered=True)),
    ("RMSprop", dict(weight_decay=0.1, centered=True, momentum=0.1, maximize=True)),
    ("RMSprop", dict(momentum=0.9, alpha=0.9)),
    ("Rprop", {}), ("Rprop", dict(lr=2e-4, etas=(0.5, 1.5))),
    ("Rprop", dict(step_sizes=(2e-6, 100), maximize=True)),
    ("Adafactor", {}), ("Adafactor", dict(weight_decay=0.1, lr=0.01, maximize=True)),
    ("Adafactor", dict(beta2_decay=-1.0, d=1.5, eps=(1e-8, 1e-3))),
    ("Muon", {}),                       # PyTorch's bfloat16 Muon is slow: one config more
    ("Muon", dict(lr=0.01, weight_decay=0.2, momentum=0.8, ns_steps=6, nesterov=False,
                  ns_coefficients=(3.4, -4.7, 2.0), adjust_lr_fn="match_rms_adamw")),
    ("LBFGS", {}), ("LBFGS", dict(lr=0.01, tolerance_grad=1e-6)),
    ("LBFGS", dict(line_search_fn="strong_wolfe")),
    ("LBFGS", dict(history_size=2, max_iter=5, line_search_fn="strong_wolfe")),
]
TENSOR_LR = ["Adadelta", "Adagrad", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop",
             "Adafactor", "Muon", "LBFGS"]
_ids = [f"{n}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for n, kw in CONFIGS]


def _problem(dtype: Any, two_d_only: bool) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(1234)
    X = rng.standard_normal((16, 4)).astype(dtype)
    y = rng.standard_normal((16, 3)).astype(dtype)
    W0 = (0.5 * rng.standard_normal((4, 3))).astype(dtype)
    b0 = (0.1 * rng.standard_normal(3)).astype(dtype)
    return (X, y, W0) if two_d_only else (X, y, W0, b0)


def _run(lib: Any, name: str, kwargs: dict[str, Any], dtype: Any, steps: int = 4,
         state: dict[str, Any] | None = None) -> tuple[list[Any], Any]:
    """``steps`` steps of ``lib.optim.<name>`` on a small regression (W, and b unless Muon);
    ``state`` (a state dict) is loaded first."""
    X, y, *inits = _problem(dtype, name == "Muon")
    mk = (lambda a: torch.nn.Parameter(torch.tensor(a))) if lib is torch else \
        (lambda a: nn.Parameter(sm.tensor(a)))
    params = [mk(a) for a in inits]
    Xt, yt = (torch.tensor(X), torch.tensor(y)) if lib is torch else (sm.tensor(X),
                                                                      sm.tensor(y))
    opt = getattr(lib.optim, name)(params, **kwargs)
    if state is not None:
        opt.load_state_dict(state)

    def closure() -> Any:
        opt.zero_grad()
        out = Xt.matmul(params[0])
        if len(params) > 1:
            out = out + params[1]
        loss = ((out - yt) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(steps if name != "LBFGS" else min(steps, 2)):   # up to 20 iterations each
        if name == "LBFGS":
            opt.step(closure)
        else:
            closure()
            opt.step()
    return params, opt


def _close(a: Any, b: Any, dtype: Any, name: str = "") -> None:
    """Near-equal in ``dtype``; Muon's update is bfloat16, where a last-bit difference in a
    float64 gradient can round an entry of the update the other way (lr * 2^-8)."""
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-6)
    if name == "Muon":
        tol = dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(b.detach().numpy()), a.detach().numpy(), **tol)


def _to_sm(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return sm.tensor(obj.detach().numpy())
    if isinstance(obj, dict):
        return {k: _to_sm(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_sm(v) for v in obj)
    return obj


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=_ids)
def test_steps_match_torch(name: str, kwargs: dict[str, Any]) -> None:
    for dtype in (np.float64,) if kwargs else (np.float64, np.float32):
        theirs, topt = _run(torch, name, kwargs, dtype)
        mine, opt = _run(sm, name, kwargs, dtype)
        for a, b in zip(theirs, mine):
            _close(a, b, dtype, name)
    assert [sorted(g) for g in opt.state_dict()["param_groups"]] == \
        [sorted(g) for g in topt.state_dict()["param_groups"]]
    assert {k: sorted(v) for k, v in opt.state_dict()["state"].items()} == \
        {k: sorted(v) for k, v in topt.state_dict()["state"].items()}


@pytest.mark.parametrize("name", TENSOR_LR)
def test_tensor_lr(name: str) -> None:
    theirs, _ = _run(torch, name, dict(lr=torch.tensor(0.01)), np.float64)
    mine, _ = _run(sm, name, dict(lr=sm.tensor(0.01)), np.float64)
    for a, b in zip(theirs, mine):
        _close(a, b, np.float32)           # torch keeps a float32 lr tensor in its arithmetic


@pytest.mark.parametrize("name,kwargs", [c for c in CONFIGS if c[1] == {}],
                         ids=[i for i, c in zip(_ids, CONFIGS) if c[1] == {}])
def test_torch_state_dict_resumes(name: str, kwargs: dict[str, Any]) -> None:
    """Two steps in PyTorch, its state dict loaded into scriptmod, two more in each."""
    _, topt = _run(torch, name, kwargs, np.float64, steps=2)
    state = copy.deepcopy(topt.state_dict())    # PyTorch's shares the live state tensors
    mine, opt = _run(sm, name, kwargs, np.float64, steps=2, state=_to_sm(state))
    theirs, _ = _run(torch, name, kwargs, np.float64, steps=2, state=state)
    for a, b in zip(theirs, mine):
        _close(a, b, np.float64, name)
    again = opt.state_dict()                # and ours round-trips through itself
    _, opt2 = _run(sm, name, kwargs, np.float64, steps=0, state=again)
    assert sorted(opt2.state_dict()["state"][0]) == sorted(again["state"][0])


def test_sparse_adam_refuses_dense_gradients_as_torch() -> None:
    for lib in (torch, sm):
        with pytest.raises(RuntimeError, match="does not support dense gradients"):
            _run(lib, "SparseAdam", {}, np.float32, steps=1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.SparseAdam([nn.Parameter(sm.ones(2))], lr=0.0)


@pytest.mark.parametrize("name,kwargs,message", [
    ("Adadelta", dict(rho=1.5), "Invalid rho value"),
    ("Rprop", dict(etas=(1.5, 1.2)), "Invalid eta values"),
    ("Adafactor", dict(d=0.5), "Clipping threshold d"),
    ("Muon", dict(adjust_lr_fn="x"), "is not supported"),
    ("RMSprop", dict(alpha=-1.0), "Invalid alpha value"),
])
def test_argument_errors_match_torch(name: str, kwargs: dict[str, Any], message: str) -> None:
    for lib, p in ((torch, torch.nn.Parameter(torch.ones(2, 2))),
                   (sm, nn.Parameter(sm.ones(2, 2)))):
        with pytest.raises(ValueError, match=message):
            getattr(lib.optim, name)([p], **kwargs)


def test_muon_refuses_non_matrices() -> None:
    with pytest.raises(ValueError, match="only supports 2D parameters"):
        optim.Muon([nn.Parameter(sm.ones(3))])


DIFFERENTIABLE = [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
                  ("Adam", dict(lr=0.1, amsgrad=True)), ("AdamW", dict(lr=0.1)),
                  ("Adadelta", dict(weight_decay=0.1)), ("Adagrad", dict(lr=0.1)),
                  ("Adamax", dict(lr=0.1, maximize=True)), ("ASGD", dict(t0=1)),
                  ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
                  ("RAdam", dict(betas=(0.9, 0.5))),
                  ("RMSprop", dict(centered=True, momentum=0.5)), ("Rprop", {})]


@pytest.mark.parametrize("name,kwargs", DIFFERENTIABLE, ids=[n for n, _ in DIFFERENTIABLE])
def test_differentiable_step_gradients_match_torch(name: str, kwargs: dict[str, Any]) -> None:
    """A step of a parameter cloned from ``w`` with its gradient made from ``g`` (PyTorch's
    differentiable steps overwrite what a second step's graph would need): the gradients of
    a loss of the new parameter and state reach ``w`` and ``g`` through the update."""
    grads = []
    for lib in (torch, sm):
        w = lib.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
        g = lib.tensor(np.array([0.3, 0.1, -0.2]), requires_grad=True)
        p = w.clone()
        opt = getattr(lib.optim, name)([p], differentiable=True, **kwargs)
        p.grad = g * 2.0
        opt.step()
        loss = (p * p).sum()
        for v in opt.state[p].values():
            if isinstance(v, (torch.Tensor, sm.Tensor)) and v.requires_grad:
                loss = loss + (v * v).sum()
        loss.backward()
        grads.append((w.grad.detach().numpy(), g.grad.detach().numpy()))
    # PyTorch's differentiable Adam takes its bias corrections from the float32 step tensor
    rtol = 1e-5 if name.startswith("Adam") else 1e-9
    for theirs, mine in zip(*grads):
        np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=1e-12)
    leaf = nn.Parameter(sm.ones(2))
    leaf.grad = sm.ones(2)
    with pytest.raises(RuntimeError, match="leaf"):
        optim.SGD([leaf], lr=0.1, differentiable=True).step()


COMPLEX = [("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.1)),
           ("Adam", dict(lr=0.1, amsgrad=True, maximize=True)), ("AdamW", dict(lr=0.1)),
           ("Adadelta", dict(weight_decay=0.1)), ("Adagrad", dict(lr=0.1, lr_decay=0.1)),
           ("Adamax", dict(lr=0.1)), ("ASGD", dict(t0=1, weight_decay=0.1)),
           ("NAdam", dict(weight_decay=0.1)), ("RAdam", dict(betas=(0.9, 0.5))),
           ("RMSprop", dict(centered=True, momentum=0.5)), ("Rprop", dict(maximize=True))]


@pytest.mark.parametrize("name,kwargs", COMPLEX, ids=[n for n, _ in COMPLEX])
def test_complex_params_step_as_pairs_of_reals_as_torch(name: str, kwargs: dict[str, Any]
                                                         ) -> None:
    rng = np.random.default_rng(5)
    start = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    grads = [rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3)) for _ in range(4)]
    out = []
    for lib in (torch, sm):
        p = (torch.nn.Parameter(torch.tensor(start)) if lib is torch
             else nn.Parameter(sm.tensor(start)))
        opt = getattr(lib.optim, name)([p], **kwargs)
        for g in grads:
            p.grad = lib.tensor(g)
            opt.step()
        out.append((p.detach().numpy(), sorted(opt.state[p])))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-9, atol=1e-12)
    assert out[1][1] == out[0][1]


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_complex_params_as_torch(line_search_fn: str | None) -> None:
    """|p - c|^2 over complex p, its gradient 2 (p - c) set by the closure."""
    rng = np.random.default_rng(6)
    c = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    out = []
    for lib in (torch, sm):
        p = lib.tensor(np.zeros(4, np.complex128))
        opt = getattr(lib.optim, "LBFGS")([p], line_search_fn=line_search_fn, max_iter=4)

        def closure() -> Any:
            diff = p - lib.tensor(c)
            p.grad = diff * 2.0
            return lib.tensor(float(np.sum(np.abs(diff.numpy()) ** 2)))

        opt.step(closure)
        out.append(p.numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-9, atol=1e-12)
    assert np.abs(out[1] - c).max() < 0.5 * np.abs(c).max()        # it moved towards c
