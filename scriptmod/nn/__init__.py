"""``scriptmod.nn``: Module, Parameter, layers, functional, init (PyTorch's API).

    >>> from scriptmod import nn
    >>> nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    Sequential(
      (0): Linear(in_features=4, out_features=8, bias=True)
      (1): GELU(approximate='none')
      (2): Linear(in_features=8, out_features=2, bias=True)
    )
"""
from scriptmod.nn.parameter import (Buffer, Parameter, UninitializedBuffer,  # noqa: F401
                                    UninitializedParameter)
from scriptmod.nn.module import Module  # noqa: F401
from scriptmod.nn.containers import (ModuleDict, ModuleList, ParameterDict,  # noqa: F401
                                     ParameterList, Sequential)
from scriptmod.nn.modules import *  # noqa: F401,F403
from scriptmod.nn import functional, init, utils  # noqa: F401
