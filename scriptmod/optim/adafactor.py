"""Adafactor: Adam-like steps from factored second moments (a row and a column average
for each matrix instead of a full ``exp_avg_sq``), with relative step sizes.

    >>> model = nn.Linear(4, 2)
    >>> opt = Adafactor(model.parameters(), lr=1e-2)
    >>> model(scriptmod.ones(1, 4)).sum().backward(); opt.step()
    >>> sorted(opt.state[model.weight]), sorted(opt.state[model.bias])
    (['col_var', 'row_var', 'step'], ['step', 'variance'])
"""
from __future__ import annotations

from typing import Any, Iterable

from scriptmod._creation import zeros, zeros_like
from scriptmod.ir import dtypes as D
from scriptmod.optim.optimizer import Optimizer, _lerp, _new_step, _scalar
from scriptmod.tensor import Tensor

_FINFO_EPS = {D.float16: 2.0 ** -10, D.bfloat16: 2.0 ** -7, D.float32: 2.0 ** -23,
              D.float64: 2.0 ** -52}


class Adafactor(Optimizer):
    """beta2_t = 1 - t^beta2_decay; rho = min(lr, 1 / sqrt(t));
    alpha = max(eps2, rms(p)) rho; v (factored for matrices) = lerp(v, g^2, 1 - beta2_t);
    u = g / sqrt(v); p -= alpha u / max(1, rms(u) / d)."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-2,
                 beta2_decay: float = -0.8, eps: tuple[float | None, float] = (None, 1e-3),
                 d: float = 1.0, weight_decay: float = 0.0, *, foreach: bool | None = None,
                 maximize: bool = False) -> None:
        checks = [(0.0 <= _scalar(lr), f"Learning rate should be >= 0 but is: {lr}"),
                  (0.0 >= beta2_decay, f"beta2_decay should be <= 0 but is: {beta2_decay}"),
                  (eps[0] is None or 0.0 <= eps[0],
                   f"epsilon1 should be >= 0 but is: {eps[0]}"),
                  (0.0 <= eps[1], f"epsilon2 should be >= 0 but is: {eps[1]}"),
                  (1.0 <= d, f"Clipping threshold d should be >= 1 but is: {d}"),
                  (0.0 <= weight_decay, f"weight_decay should be >= 0 but is: {weight_decay}")]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        defaults = dict(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                        weight_decay=weight_decay, foreach=foreach, maximize=maximize)
        super().__init__(params, defaults)

    def _init_state(self, p: Tensor) -> dict[str, Any]:
        state = self.state[p]
        if not state:
            state["step"] = _new_step()
            if p.grad.dim() > 1:
                shape = list(p.grad.shape)
                state["row_var"] = zeros(*shape[:-1], 1, dtype=p.dtype, device=p.device)
                state["col_var"] = zeros(*shape[:-2], 1, shape[-1], dtype=p.dtype,
                                         device=p.device)
            else:
                state["variance"] = zeros_like(p.grad)
        return state

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        if p.is_complex():
            raise RuntimeError("Adafactor does not support complex parameters")
        grad = -p.grad if group["maximize"] else p.grad
        state = self._init_state(p)
        lr, (eps1, eps2), wd = _scalar(group["lr"]), group["eps"], group["weight_decay"]
        if eps1 is None:
            eps1 = _FINFO_EPS[p.dtype]
        state["step"].add_(1)
        step = float(state["step"].item())
        one_minus_beta2 = step ** group["beta2_decay"]
        rho = min(lr, 1 / (step ** 0.5))
        alpha = max(eps2, float(p.norm(2).item()) / (p.numel() ** 0.5)) * rho
        if wd != 0:
            p.mul_(1 - lr * wd)
        if grad.dim() > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            row_mean = grad.norm(dim=-1, keepdim=True).square() / grad.size(-1)
            row_var.copy_(_lerp(row_var, row_mean, one_minus_beta2))
            col_mean = grad.norm(dim=-2, keepdim=True).square() / grad.size(-2)
            col_var.copy_(_lerp(col_var, col_mean, one_minus_beta2))
            var_estimate = (row_var @ col_var) / \
                row_var.mean(dim=-2, keepdim=True).clamp(min=eps1)
        else:
            variance = state["variance"]
            variance.copy_(_lerp(variance, grad * grad, one_minus_beta2))
            var_estimate = variance
        update = var_estimate.clamp(min=eps1 * eps1).rsqrt() * grad
        denom = max(1.0, float(update.norm(2).item()) / ((update.numel() ** 0.5) * group["d"]))
        p.add_(update, alpha=-alpha / denom)
