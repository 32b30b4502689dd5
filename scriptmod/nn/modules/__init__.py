"""PyTorch's layers, one file per family (``torch.nn.modules`` layout); each file lists its
layers in ``__all__`` and this package is their union."""
from scriptmod.nn.modules import (activation, attention, channelshuffle, conv, distance, dropout,
                                  flatten, fold, instancenorm, linear, loss, normalization,
                                  padding, pixelshuffle, pooling, rnn, sparse, transformer,
                                  upsampling)
from scriptmod.nn.modules.activation import *  # noqa: F401,F403
from scriptmod.nn.modules.attention import *  # noqa: F401,F403
from scriptmod.nn.modules.channelshuffle import *  # noqa: F401,F403
from scriptmod.nn.modules.conv import *  # noqa: F401,F403
from scriptmod.nn.modules.distance import *  # noqa: F401,F403
from scriptmod.nn.modules.dropout import *  # noqa: F401,F403
from scriptmod.nn.modules.flatten import *  # noqa: F401,F403
from scriptmod.nn.modules.fold import *  # noqa: F401,F403
from scriptmod.nn.modules.instancenorm import *  # noqa: F401,F403
from scriptmod.nn.modules.linear import *  # noqa: F401,F403
from scriptmod.nn.modules.loss import *  # noqa: F401,F403
from scriptmod.nn.modules.normalization import *  # noqa: F401,F403
from scriptmod.nn.modules.padding import *  # noqa: F401,F403
from scriptmod.nn.modules.pixelshuffle import *  # noqa: F401,F403
from scriptmod.nn.modules.pooling import *  # noqa: F401,F403
from scriptmod.nn.modules.rnn import *  # noqa: F401,F403
from scriptmod.nn.modules.sparse import *  # noqa: F401,F403
from scriptmod.nn.modules.transformer import *  # noqa: F401,F403
from scriptmod.nn.modules.upsampling import *  # noqa: F401,F403

__all__ = [name for family in (activation, linear, conv, pooling, padding, flatten, dropout,
                               normalization, instancenorm, sparse, distance, pixelshuffle,
                               upsampling, channelshuffle, fold, attention, transformer, loss, rnn)
           for name in family.__all__]
