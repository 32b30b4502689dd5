"""Optimizer hooks (step, state-dict and load-state-dict; per optimizer and global) in
PyTorch's order, and PyTorch's refusal of ``capturable=True`` for CPU parameters."""
from __future__ import annotations

from typing import Any

import pytest

import scriptmod as sm
from scriptmod import nn, optim
from scriptmod.optim import optimizer as optimizer_module


def _opt(cls: Any = optim.SGD, **kw: Any) -> optim.Optimizer:
    p = nn.Parameter(sm.ones(2))
    p.grad = sm.ones(2)
    return cls([p], **kw)


def test_step_hooks_run_in_pytorchs_order_and_can_be_removed() -> None:
    opt, calls = _opt(lr=0.1), []
    handles = [optimizer_module.register_optimizer_step_pre_hook(
                   lambda o, a, k: calls.append("global pre")),
               opt.register_step_pre_hook(lambda o, a, k: calls.append("pre")),
               opt.register_step_post_hook(lambda o, a, k: calls.append("post")),
               optimizer_module.register_optimizer_step_post_hook(
                   lambda o, a, k: calls.append("global post"))]
    try:
        opt.step()
    finally:
        for h in handles:
            h.remove()
    opt.step()
    assert calls == ["global pre", "pre", "post", "global post"]


def test_a_pre_hook_can_replace_the_arguments() -> None:
    opt = _opt(optim.LBFGS, max_iter=1)
    p = opt.param_groups[0]["params"][0]
    seen = []

    def closure() -> Any:
        seen.append(1)
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    opt.register_step_pre_hook(lambda o, args, kwargs: ((closure,), {}))
    opt.step(lambda: None)                      # the hook swaps in the real closure
    assert seen
    bad = _opt()
    bad.register_step_pre_hook(lambda o, a, k: "nope")
    with pytest.raises(RuntimeError, match="must return None or a tuple"):
        bad.step()


def test_super_step_runs_the_hooks_once() -> None:
    class Counting(optim.SGD):
        def step(self, closure: Any = None) -> Any:
            return super().step(closure)

    opt, calls = _opt(Counting, lr=0.1), []
    opt.register_step_pre_hook(lambda o, a, k: calls.append(1))
    opt.step()
    assert calls == [1]


def test_state_dict_hooks() -> None:
    opt = _opt(optim.Adam)
    opt.step()
    calls: list[str] = []
    opt.register_state_dict_pre_hook(lambda o: calls.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    sd = opt.state_dict()
    assert calls == ["pre"] and sd["extra"] == 1
    other = _opt(optim.Adam)
    other.register_load_state_dict_pre_hook(
        lambda o, sd: {k: v for k, v in sd.items() if k != "extra"})
    other.register_load_state_dict_post_hook(lambda o: calls.append("loaded"))
    other.load_state_dict(sd)
    assert calls[-1] == "loaded" and float(other.state_dict()["state"][0]["step"]) == 1.0


@pytest.mark.parametrize("cls", [optim.Adam, optim.RMSprop, optim.NAdam, optim.Rprop])
def test_capturable_refused_on_cpu_as_pytorch(cls: Any) -> None:
    with pytest.raises(AssertionError, match="If capturable=True"):
        _opt(cls, capturable=True).step()
