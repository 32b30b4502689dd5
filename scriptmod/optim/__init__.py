"""``scriptmod.optim``: optimizers and learning-rate schedulers with PyTorch's API and
state-dict format.

    >>> opt = optim.AdamW(model.parameters(), lr=1e-3)
    >>> loss.backward(); opt.step(); opt.zero_grad()
"""
from scriptmod.optim import lr_scheduler  # noqa: F401
from scriptmod.optim.adam import Adam, AdamW  # noqa: F401
from scriptmod.optim.optimizer import Optimizer  # noqa: F401
from scriptmod.optim.sgd import SGD  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
