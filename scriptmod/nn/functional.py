"""``scriptmod.nn.functional``: the stateless forms of every layer (PyTorch's signatures).

Activations are decompositions into primitive ops (``ir.ops``), written in numerically safe
forms, so a backend only implements the primitives and the tracer sees plain elementwise
chains that fuse::

    >>> import scriptmod.nn.functional as F
    >>> F.gelu(scriptmod.tensor([0.0, 1.0]))
    tensor([0.0000, 0.8413])

``inplace=True`` writes the result into the input tensor and returns that same object.
Each family lives in its own module below this one (none imports it back) and lists its
public names in ``__all__``; this module is their union.
"""
from __future__ import annotations

from scriptmod.nn import (_functional_activation, _functional_attention, _functional_conv,
                          _functional_distance, _functional_dropout, _functional_layers,
                          _functional_loss,
                          _functional_norm, _functional_pooling, _functional_vision)
from scriptmod.nn._functional_activation import *  # noqa: F401,F403
from scriptmod.nn._functional_activation import (_apply, _floating, _opmath, _pair, _rounded_once,
                                                 _softplus, _tracing)  # noqa: F401
from scriptmod.nn._functional_attention import *  # noqa: F401,F403
from scriptmod.nn._functional_conv import *  # noqa: F401,F403
from scriptmod.nn._functional_distance import *  # noqa: F401,F403
from scriptmod.nn._functional_dropout import *  # noqa: F401,F403
from scriptmod.nn._functional_layers import *  # noqa: F401,F403
from scriptmod.nn._functional_loss import *  # noqa: F401,F403
from scriptmod.nn._functional_norm import *  # noqa: F401,F403
from scriptmod.nn._functional_pooling import *  # noqa: F401,F403
from scriptmod.nn._functional_vision import *  # noqa: F401,F403

__all__ = [name for family in (_functional_activation, _functional_layers, _functional_conv,
                               _functional_pooling, _functional_norm, _functional_dropout,
                               _functional_vision, _functional_distance, _functional_attention,
                               _functional_loss)
           for name in family.__all__]
