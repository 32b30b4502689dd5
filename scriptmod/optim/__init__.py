"""``scriptmod.optim``: optimizers and learning-rate schedulers with PyTorch's API and
state-dict format.

    >>> from scriptmod import optim
    >>> model = nn.Linear(4, 1); before = model.weight.detach().clone()
    >>> opt = optim.AdamW(model.parameters(), lr=1e-3)
    >>> loss = model(scriptmod.ones(2, 4)).sum()
    >>> loss.backward(); opt.step(); opt.zero_grad()
    >>> bool((model.weight != before).all()), model.weight.grad
    (True, None)
"""
from scriptmod.optim import lr_scheduler  # noqa: F401
from scriptmod.optim.adam import Adam, AdamW  # noqa: F401
from scriptmod.optim.optimizer import Optimizer  # noqa: F401
from scriptmod.optim.sgd import SGD  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
