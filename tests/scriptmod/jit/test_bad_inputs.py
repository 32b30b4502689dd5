"""Bad inputs to a traced module: wrong dtype, rank, size, device, a size-0 batch,
non-contiguous layouts, NaN/inf, a NumPy array, None, a list, a Python scalar, a tensor that
requires grad, wrong keywords. Each gives a correct result (equal to eager) or a clear error;
never a crash, a wrong result, or an internal error.

A clear error is an ``Exception`` that names the argument, what was expected and what was
given (``argument 'x' (position 0): expected ... got ...``), or that is eager's own error for
the same call (same class, eager's text, plus where in the graph). ``test_figures`` prints the
outcome counts for the README ("Reliability"); ``UNCLEAR`` lists the cases that do not meet
the bar yet (strict xfails: a fix makes them pass and asks for the row to go).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn


class Head(nn.Module):
    """A matmul (rank- and dtype-sensitive), fused elementwise ops, a second input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: Any, y: Any) -> Any:
        return (self.fc(x) * 2.0).relu() + y.sin()


def fused(a: Any, b: Any) -> Any:
    """Elementwise only: one fusion group, any rank."""
    return (a * b + 1.0).exp() - a.sigmoid()


@functools.cache
def _examples() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    sm.manual_seed(0)
    return {"module": (Head().eval(), (sm.randn(5, 4), sm.randn(3))),
            "fused": (fused, (sm.randn(5, 4), sm.randn(4)))}


def _traced(target: str) -> tuple[Any, Any, tuple[Any, ...]]:
    """A fresh trace (its first call done) of ``target``, its eager form, its example."""
    eager, example = _examples()[target]
    traced = sm.jit.trace(eager, example)
    traced(*example)
    return traced, eager, example


Call = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Case:
    name: str
    target: str
    make: Callable[[tuple[Any, ...]], Call]        # example -> the bad call's args, kwargs
    words: tuple[str, ...] = ()                     # what a clear error names besides the arg
    via: Callable[[Any], Any] = lambda m: m         # the module -> what is called


def _x(make: Callable[[Any], Any]) -> Callable[[tuple[Any, ...]], Call]:
    """The example call with its first argument replaced by ``make(first)``."""
    return lambda ex: ((make(ex[0]), *ex[1:]), {})


def _y(make: Callable[[Any], Any]) -> Callable[[tuple[Any, ...]], Call]:
    return lambda ex: ((ex[0], make(ex[1])), {})


def _cases() -> list[Case]:
    per_target = [
        Case("float64", "", _x(lambda x: x.double())),
        Case("float16", "", _x(lambda x: x.half())),
        Case("bfloat16", "", _x(lambda x: x.to(sm.bfloat16))),
        Case("int64", "", _x(lambda x: (x * 10).long()), ("int64",)),
        Case("uint8", "", _x(lambda x: (x.abs() * 10).to(sm.uint8)), ("uint8",)),
        Case("bool", "", _x(lambda x: x > 0), ("bool",)),
        Case("second-int64", "", _y(lambda y: (y * 10).long()), ("int64",)),
        Case("rank-1", "", _x(lambda x: x[0])),
        Case("rank-3", "", _x(lambda x: x.unsqueeze(0).expand(2, *x.shape))),
        Case("rank-0", "", _x(lambda x: sm.tensor(2.0))),
        Case("wrong-size", "", _x(lambda x: sm.randn(x.shape[0], 3)), ("3",)),
        Case("second-wrong-size", "", _y(lambda y: sm.randn(y.shape[0] + 1))),
        Case("second-size-1", "", _y(lambda y: sm.randn(1))),
        Case("batch-7", "", _x(lambda x: sm.randn(7, 4))),
        Case("batch-0", "", _x(lambda x: sm.randn(0, 4))),
        Case("transposed", "", _x(lambda x: sm.randn(4, x.shape[0]).t())),
        Case("flipped", "", _x(lambda x: x.flip(1))),
        Case("expanded", "", _x(lambda x: sm.randn(1, 4).expand(*x.shape))),
        Case("strided", "", _x(lambda x: sm.randn(x.shape[0], 8)[:, ::2])),
        Case("nan-inf", "", _x(lambda x: x * sm.tensor([float("nan"), float("inf"),
                                                         -float("inf"), 0.0]))),
        Case("requires-grad", "", _x(lambda x: x.detach().clone().requires_grad_(True))),
        Case("parameter", "", _x(lambda x: nn.Parameter(x.detach().clone()))),
        Case("numpy-array", "", _x(lambda x: x.numpy()), ("ndarray",)),
        Case("None", "", _x(lambda x: None), ("None",)),
        Case("list", "", _x(lambda x: x.tolist()), ("list",)),
        Case("python-float", "", _x(lambda x: 1.5), ("float",)),
        Case("python-int", "", _x(lambda x: 3), ("int",)),
        Case("too-few", "", lambda ex: (ex[:1], {}), ("2",)),
        Case("too-many", "", lambda ex: ((*ex, ex[1]), {}), ("2",)),
        Case("unknown-keyword", "", lambda ex: (ex[:1], {"z": ex[1]}), ("missing",)),
        Case("cuda-input", "", _x(lambda x: x.to("cuda")), ("cuda", "CuPy")),
        Case("cuda-module", "", lambda ex: (ex, {}), ("cuda", "CuPy"),   # modules only
             via=lambda m: m.to("cuda")),
    ]
    if importlib.util.find_spec("torch"):
        per_target.append(Case("torch-tensor", "", _x(lambda x: _torch_tensor(x.numpy())),
                               ("Tensor",)))
    return [dataclasses.replace(c, target=target) for target in ("module", "fused")
            for c in per_target if not (target == "fused" and c.name == "cuda-module")]


def _torch_tensor(a: np.ndarray) -> Any:
    import torch
    return torch.tensor(a)


CASES = _cases()
ARG = {"module": ("'x'", "'y'"), "fused": ("'a'", "'b'")}
# cases below the bar today, with the message they give: delete a row when it is fixed
UNCLEAR: dict[tuple[str, str], str] = {
}


def _same(a: Any, b: Any, rtol: float = 1e-5) -> bool:
    a, b = np.asarray(a.detach().numpy()), np.asarray(b.detach().numpy())
    return a.dtype == b.dtype and a.shape == b.shape and np.allclose(
        a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=rtol, equal_nan=True)


def _rtol(args: tuple[Any, ...]) -> float:
    """float16/bfloat16 inputs: compiled code keeps float32 between fused ops, eager rounds."""
    names = {str(a.dtype) for a in args if isinstance(a, sm.Tensor)}
    return 2e-2 if "scriptmod.bfloat16" in names else 2e-3 if "scriptmod.float16" in names \
        else 1e-5


def _clear(e: Exception, case: Case, eager: Any) -> bool:
    msg = str(e)
    if isinstance(eager, Exception) and isinstance(e, type(eager)) \
            and str(eager).split(": ", 1)[-1].splitlines()[0] in msg:
        return True                                  # eager's own error, with the place
    names_arg = any(a in msg for a in ARG[case.target]) or not _is_argument_case(case)
    says_what = "got" in msg or "needs" in msg or "missing" in msg
    return names_arg and says_what and all(w in msg for w in case.words)


def _is_argument_case(case: Case) -> bool:
    return not case.name.startswith(("cuda", "too-", "unknown-"))


def outcome(case: Case) -> tuple[str, str]:
    """(correct | clear error | unclear error | wrong result | crash, detail)."""
    traced, model, example = _traced(case.target)
    try:
        args, kwargs = case.make(example)
    except Exception as e:                           # noqa: BLE001 - cuda without CuPy
        return ("clear error" if _clear(e, case, None) else "unclear error"), \
            f"{type(e).__name__}: {e}"
    try:
        with sm.no_grad():
            eager: Any = case.via(model)(*args, **kwargs)
    except Exception as e:                                           # noqa: BLE001
        eager = e
    try:
        got = case.via(traced)(*args, **kwargs)
    except Exception as e:                                           # noqa: BLE001
        kind = "clear error" if _clear(e, case, eager) else "unclear error"
        return kind, f"{type(e).__name__}: {e}"
    except BaseException as e:                                       # noqa: BLE001
        return "crash", f"{type(e).__name__}: {e}"
    if isinstance(eager, Exception):
        return "wrong result", f"a result where eager raises {type(eager).__name__}: {eager}"
    if _same(eager, got, _rtol(args)):
        return "correct", ""
    return "wrong result", "differs from eager"


@functools.cache
def _outcomes() -> dict[tuple[str, str], tuple[str, str]]:
    return {(c.target, c.name): outcome(c) for c in CASES}


@pytest.mark.parametrize("case", [
    pytest.param(c, id=f"{c.target}-{c.name}", marks=[pytest.mark.xfail(
        strict=True, reason=UNCLEAR[(c.target, c.name)])] if (c.target, c.name) in UNCLEAR
        else []) for c in CASES])
def test_bad_input_gives_eagers_result_or_a_clear_error(case: Case) -> None:
    kind, detail = _outcomes()[(case.target, case.name)]
    assert kind in ("correct", "clear error"), f"{case.target} {case.name}: {kind}: {detail}"


def test_figures(capsys: pytest.CaptureFixture) -> None:
    counts = collections.Counter(kind for kind, _ in _outcomes().values())
    with capsys.disabled():
        print(f"\nbad inputs: {len(CASES)} tried: " + ", ".join(
            f"{counts[k]} {k}" for k in ("correct", "clear error", "unclear error",
                                         "wrong result", "crash")))
        for (target, name), (kind, detail) in _outcomes().items():
            if kind not in ("correct", "clear error"):
                print(f"  {target} {name}: {kind}: {detail.splitlines()[0][:200]}")
    assert counts["crash"] == counts["wrong result"] == 0
    assert counts["correct"] and counts["clear error"]


def test_a_tensor_requiring_grad_gets_eagers_gradient() -> None:
    traced, model, (x, y) = _traced("fused")
    xs = [x.detach().clone().requires_grad_(True) for _ in range(2)]
    model(xs[0], y).sum().backward()
    out = traced(xs[1], y)
    assert out.requires_grad
    out.sum().backward()
    assert _same(xs[0].grad, xs[1].grad)


def test_a_clear_error_names_the_argument_and_both_types() -> None:
    traced, _, (x, y) = _traced("fused")
    with pytest.raises(TypeError, match=r"argument 'b' \(position 1\): expected .*float32"
                                         r".* got an int64 tensor of shape \(4,\)"):
        traced(x, (y * 10).long())
