"""The PyTorch columns of the training rows T2, T3, T5 and TC1, in ``torch_ref``'s child
process.

Each column trains its own twin (the scriptmod weights, train mode) with the step the
scriptmod side times (``bench.training``): ``opt.zero_grad()`` (PyTorch's default sets
the gradients to None), the row's loss of the twin with its loss (``_with_loss``,
``training.WithLoss``'s twin: ``torch.nn.functional``'s function of the name in
``training.LOSSES``), ``loss.backward()`` (``clip_grad_norm_`` for an optimizer of
``training.CLIP_NORM``) and the row's optimizer (``torch_optimizer``:
``torch.optim``'s class and options of ``training.OPTIMIZERS``, default options otherwise):

- ``torch_eager``: the twin with its loss;
- ``torch_compile``: ``torch.compile`` of the twin with its loss in ``torch_ref``'s mode, as
  the scriptmod side traces it: the loss compiles with the model; the backward runs
  through the graph it compiles (AOT autograd), the optimizer step is eager.

The first step is timed apart (``first_call_s``: torch.compile compiles the forward and
backward graphs there); its loss and gradients, computed from the scriptmod weights, are
checked against eager scriptmod's (``check.compare_all``) before the steps are timed.

    >>> train_columns(job_dir, spec)["torch_eager"]["match"]["ok"]   # doctest: +SKIP
    True

(Not run as a doctest: it needs torch and a job folder that ``torch_ref`` writes.)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from scriptmod.bench.check import compare_all
from scriptmod.bench.timing import Variant, time_once, time_variants
from scriptmod.bench.training import CLIP_NORM, LOSSES, OPTIMIZERS

BUILDERS: dict[str, Callable[[Any, str], Any]] = {
    "torch_eager": lambda twin, loss: _with_loss(twin, loss),
    "torch_compile": lambda twin, loss: _compile(_with_loss(twin, loss)),
}


def _with_loss(twin: Any, loss: str = "mse") -> Any:
    """The twin and its loss (``training.LOSSES[loss]``) as one ``torch.nn.Module``:
    ``forward(x, target)``."""
    import torch

    class WithLoss(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model
            self.loss = getattr(torch.nn.functional, LOSSES[loss])

        def forward(self, x: Any, target: Any) -> Any:
            return self.loss(self.model(x), target)
    return WithLoss(twin)


def torch_optimizer(name: str, params: Any) -> Any:
    """``torch.optim``'s optimizer ``training.OPTIMIZERS[name]`` (class and options)."""
    import torch
    cls, options = OPTIMIZERS[name]
    return getattr(torch.optim, cls)(params, **options)


def torch_step(name: str, opt: Any, params: list, loss_of: Any, x: Any, target: Any) -> Any:
    """One step as the scriptmod side's ``training.TrainStep``: zero the gradients, the
    loss, its backward, ``clip_grad_norm_`` for an optimizer of ``training.CLIP_NORM``, the
    optimizer's step; returns the loss."""
    import torch
    opt.zero_grad()
    loss = loss_of(x, target)
    loss.backward()
    if name in CLIP_NORM:
        torch.nn.utils.clip_grad_norm_(params, CLIP_NORM[name])
    opt.step()
    return loss


def _compile(module: Any) -> Any:
    import torch

    from scriptmod.bench.torch_ref import TORCH_COMPILE_MODE
    return torch.compile(module, mode=TORCH_COMPILE_MODE)


def train_columns(d: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Every column of ``BUILDERS`` in turn, each written to ``d/NAME.json`` when done; a
    column that fails is left out and named under ``"error"``."""
    import torch

    from scriptmod.bench.torch_ref import build_twin, run_columns
    weights = dict(np.load(d / "weights.npz"))
    x, target = (torch.from_numpy(np.load(d / f"{k}.npy")) for k in ("x", "target"))
    ref = dict(np.load(d / "ref.npz"))

    def column(make: Callable[[Any, str], Any]) -> dict[str, Any]:
        twin = build_twin(spec["wid"], spec["dims"], weights).train()
        return _trained_and_timed(twin, lambda t: make(t, spec["loss"]), x, target, ref, spec)
    return run_columns(d, {name: (lambda make=make: column(make))
                           for name, make in BUILDERS.items()})


def _trained_and_timed(twin: Any, make: Callable[[Any], Any], x: Any, target: Any,
                       ref: dict[str, np.ndarray], spec: dict[str, Any]) -> dict[str, Any]:
    model: list[Any] = []
    build_s = time_once(lambda: model.append(make(twin)))
    params = list(twin.parameters())
    opt = torch_optimizer(spec["optimizer"], params)

    def step() -> Any:
        return torch_step(spec["optimizer"], opt, params, model[0], x, target)

    loss: list[Any] = []
    first = time_once(lambda: loss.append(step()))
    got = {"loss": loss[0], **{f"grad {n}": p.grad for n, p in twin.named_parameters()}}
    match = compare_all(got, ref, spec["dtype"])
    timing = time_variants({"v": Variant(step)}, spec["budget"], spec["repeat"],
                           spec["min_reps"])["v"]
    return {"match": match.as_dict(), "timing": timing.as_dict(), "first_call_s": first,
            "build_s": build_s}
