"""if/else inside loops over module containers (unrolled when scripted), issue 35: a branch
whose layers run natively read their weights from module state while the submodule's
``GetAttr`` stays outside the ``if``, and the generated program ``del``-ed that never-bound
local after the ``if`` (UnboundLocalError at every call). Every model of
container_models.py runs scripted against eager on every branch, under no_grad and with grad
(outputs, input and parameter gradients), at two batch sizes, and against torch.jit.script of
the same source where torch is installed."""
from __future__ import annotations

import pytest

import scriptmod as sm
from scriptmod import Tensor, nn
from scriptmod.jit import FrontendError

from . import container_models
from .script_util import (assert_same, check_table_against_torch, check_table_gradients,
                          check_table_no_grad, table_model, tensor)

MODELS = container_models.build(sm)
NAMES = sorted(MODELS)


def _model(name: str) -> nn.Module:
    return table_model(MODELS, name)


@pytest.mark.parametrize("name", NAMES)
def test_scripted_equals_eager_under_no_grad(name: str) -> None:
    check_table_no_grad(MODELS, name)


@pytest.mark.parametrize("name", NAMES)
def test_scripted_gradients_equal_eager(name: str) -> None:
    check_table_gradients(MODELS, name)


@pytest.mark.parametrize("name", NAMES)
def test_second_call_and_fused_off_agree(name: str) -> None:
    """The same specialization called again, and the unfused program, give the same."""
    model = _model(name).eval()
    scripted = sm.jit.script(model)
    x = tensor(3, 8, seed=11)
    for args in MODELS[name][1]:
        with sm.no_grad():
            want = model(x, *args)
            assert_same(scripted(x, *args), want, f"{name} {args}")
            assert_same(scripted(x, *args), want, f"{name} {args}, again")
            with sm.jit.fuser(False):
                assert_same(scripted(x, *args), want, f"{name} {args}, unfused")


@pytest.mark.parametrize("name", NAMES)
def test_same_as_torch_jit_script(name: str) -> None:
    check_table_against_torch(MODELS, container_models.build, name)


def test_the_generated_program_binds_every_name_it_deletes() -> None:
    """issue 35's repro, directly: no call raises, whatever ``depth`` and grad mode."""
    scripted = sm.jit.script(_model("Gated").eval())
    for depth in range(-1, 5):
        with sm.no_grad():
            scripted(sm.randn(2, 8), depth)
        scripted(sm.randn(2, 8), depth).sum()


class _BreakInModuleLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x: Tensor, stop: int) -> Tensor:
        for i, layer in enumerate(self.layers):
            if i >= stop:
                break
            x = layer(x)
        return x


class _ContinueInModuleLoop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

    def forward(self, x: Tensor, skip: int) -> Tensor:
        for i, layer in enumerate(self.layers):
            if i == skip:
                continue
            x = layer(x)
        return x


@pytest.mark.parametrize("cls", [_BreakInModuleLoop, _ContinueInModuleLoop])
def test_break_and_continue_in_an_unrolled_loop_are_refused_as_torch(cls: type) -> None:
    """An unrolled loop has no loop to leave: refused with the line, as TorchScript does."""
    with pytest.raises(FrontendError, match="break/continue in a loop over modules") as info:
        sm.jit.script(cls())
    assert "for i, layer in enumerate(self.layers):" in str(info.value)
