"""``scriptmod.nn.utils``: gradient clipping, parameter-vector conversion and ``rnn`` (packed
and padded sequences), torch's API.

    >>> import scriptmod as sm
    >>> w = sm.nn.Parameter(sm.ones(4))
    >>> w.grad = sm.full((4,), 2.0)
    >>> sm.nn.utils.clip_grad_norm_(w, max_norm=1.0), w.grad
    (tensor(4.), tensor([0.5000, 0.5000, 0.5000, 0.5000]))
"""
from scriptmod.nn.utils.clip_grad import (clip_grad_norm_, clip_grad_value_,  # noqa: F401
                                          clip_grads_with_norm_, get_total_norm)
from scriptmod.nn.utils.convert_parameters import (parameters_to_vector,  # noqa: F401
                                                   vector_to_parameters)
from scriptmod.nn.utils import rnn  # noqa: F401
