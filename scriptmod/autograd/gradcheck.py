"""Finite-difference gradient checking in float64 (``scriptmod.autograd.gradcheck``)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np


class GradcheckError(RuntimeError):
    pass


def _jacobians(fn: Callable, inputs: Sequence[Any], eps: float) -> tuple[list, list]:
    from scriptmod.autograd import grad
    from scriptmod.tensor import Tensor
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    diff = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    numeric, analytic = [], []
    for o in outs:
        if not (isinstance(o, Tensor) and o.requires_grad):
            continue   # integer outputs (max's indices) carry no gradient
        n_out = o.numel()
        num = {i: np.zeros((n_out, inputs[i].numel())) for i in diff}
        for i in diff:
            arr = inputs[i]._data   # perturbed in place: any layout, no reshape copy
            for j in range(arr.size):
                pos = np.unravel_index(j, arr.shape)
                orig = arr[pos]
                # grad stays on: fn may itself differentiate (gradcheck of a gradient)
                arr[pos] = orig + eps
                plus = _pick(fn(*inputs), outs, o)
                arr[pos] = orig - eps
                minus = _pick(fn(*inputs), outs, o)
                arr[pos] = orig
                num[i][:, j] = ((plus - minus) / (2 * eps)).reshape(-1)
        ana = {i: np.zeros((n_out, inputs[i].numel())) for i in diff}
        for k in range(n_out):
            go = np.zeros(n_out)
            go[k] = 1.0
            gt = Tensor._make(go.reshape(o.shape).astype(o._data.dtype))
            gs = grad([o], [inputs[i] for i in diff], [gt], retain_graph=True, allow_unused=True)
            for i, g in zip(diff, gs):
                if g is not None:
                    ana[i][k] = g._data.reshape(-1)
        numeric.append(num)
        analytic.append(ana)
    return numeric, analytic


def _pick(res: Any, outs: tuple, o: Any) -> np.ndarray:
    res = res if isinstance(res, tuple) else (res,)
    # a copy: a view output (reshape, narrow...) would otherwise follow later perturbations
    return np.array(res[[id(x) for x in outs].index(id(o))]._data, dtype=np.float64, copy=True)


def gradcheck(fn: Callable, inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """Compare autograd's Jacobian of ``fn`` with central differences (float64 inputs)."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    numeric, analytic = _jacobians(fn, inputs, eps)
    for k, (num, ana) in enumerate(zip(numeric, analytic)):
        for i in num:
            if not np.allclose(ana[i], num[i], atol=atol, rtol=rtol):
                err = np.abs(ana[i] - num[i]).max()
                if raise_exception:
                    raise GradcheckError(
                        f"Jacobian mismatch for output {k} with respect to input {i} "
                        f"(max abs error {err:.3g}),\nnumerical:{num[i]}\nanalytical:{ana[i]}")
                return False
    return True
