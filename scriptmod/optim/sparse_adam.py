"""SparseAdam: Adam for sparse gradients (embeddings with ``sparse=True`` in PyTorch).

scriptmod has no sparse tensors, so every gradient is dense, and a dense gradient is what
PyTorch's SparseAdam refuses; ``step`` raises PyTorch's error, pointing at ``Adam``. The
constructor checks its arguments as PyTorch's does, so code that builds one still imports.

    >>> opt = SparseAdam(nn.Embedding(10, 3).parameters(), lr=1e-3)
    >>> opt.param_groups[0]["betas"]
    (0.9, 0.999)
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from scriptmod.autograd.grad_mode import no_grad
from scriptmod.optim.optimizer import Optimizer, _scalar
from scriptmod.tensor import Tensor

DENSE_ERROR = "SparseAdam does not support dense gradients, please consider Adam instead"


class SparseAdam(Optimizer):
    """PyTorch's constructor checks; ``step`` refuses the dense gradients scriptmod makes."""

    def __init__(self, params: Iterable[Any], lr: float | Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 maximize: bool = False) -> None:
        if not 0.0 < _scalar(lr):
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, maximize=maximize))
        complex_params = [[i, j] for i, group in enumerate(self.param_groups)
                          for j, p in enumerate(group["params"]) if p.is_complex()]
        if complex_params:
            raise ValueError(f"Complex params at indices {complex_params}: SparseAdam does not "
                             f"support complex parameters")

    @no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Raises PyTorch's ``RuntimeError`` for the first parameter with a gradient."""
        loss = self._closure_loss(closure)
        if any(p.grad is not None for g in self.param_groups for p in g["params"]):
            raise RuntimeError(DENSE_ERROR)
        return loss
