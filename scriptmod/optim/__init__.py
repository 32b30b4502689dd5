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
from scriptmod.optim import lr_scheduler, swa_utils  # noqa: F401
from scriptmod.optim.adadelta import Adadelta  # noqa: F401
from scriptmod.optim.adafactor import Adafactor  # noqa: F401
from scriptmod.optim.adagrad import Adagrad  # noqa: F401
from scriptmod.optim.adam import Adam, AdamW  # noqa: F401
from scriptmod.optim.adamax import Adamax  # noqa: F401
from scriptmod.optim.asgd import ASGD  # noqa: F401
from scriptmod.optim.lbfgs import LBFGS  # noqa: F401
from scriptmod.optim.muon import Muon  # noqa: F401
from scriptmod.optim.nadam import NAdam  # noqa: F401
from scriptmod.optim.optimizer import Optimizer  # noqa: F401
from scriptmod.optim.radam import RAdam  # noqa: F401
from scriptmod.optim.rmsprop import RMSprop  # noqa: F401
from scriptmod.optim.rprop import Rprop  # noqa: F401
from scriptmod.optim.sgd import SGD  # noqa: F401
from scriptmod.optim.sparse_adam import SparseAdam  # noqa: F401

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "Adafactor", "Adagrad", "Adamax",
           "ASGD", "LBFGS", "Muon", "NAdam", "RAdam", "RMSprop", "Rprop", "SparseAdam",
           "lr_scheduler", "swa_utils"]
