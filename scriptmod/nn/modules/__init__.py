"""PyTorch's layers, one file per family (``torch.nn.modules`` layout)."""
from scriptmod.nn.modules.activation import (ELU, GELU, Hardtanh, Identity, LeakyReLU,  # noqa: F401
                                             LogSoftmax, PReLU, ReLU, ReLU6, Sigmoid, SiLU,
                                             Softmax, Softplus, Tanh, Threshold)
from scriptmod.nn.modules.linear import (LazyLinear, Linear,  # noqa: F401
                                         NonDynamicallyQuantizableLinear)
from scriptmod.nn.modules.conv import Conv2d  # noqa: F401
from scriptmod.nn.modules.pooling import AvgPool2d, MaxPool2d  # noqa: F401
from scriptmod.nn.modules.flatten import Flatten, Unflatten  # noqa: F401
from scriptmod.nn.modules.dropout import Dropout  # noqa: F401
from scriptmod.nn.modules.normalization import BatchNorm1d, BatchNorm2d, LayerNorm  # noqa: F401
from scriptmod.nn.modules.sparse import Embedding  # noqa: F401
from scriptmod.nn.modules.attention import MultiheadAttention  # noqa: F401
from scriptmod.nn.modules.loss import (BCEWithLogitsLoss, CrossEntropyLoss, L1Loss,  # noqa: F401
                                       MSELoss, NLLLoss)

__all__ = [
    "ELU", "GELU", "Hardtanh", "Identity", "LeakyReLU", "LogSoftmax", "PReLU", "ReLU", "ReLU6",
    "Sigmoid", "SiLU", "Softmax", "Softplus", "Tanh", "Threshold",
    "LazyLinear", "Linear", "NonDynamicallyQuantizableLinear", "Conv2d", "AvgPool2d",
    "MaxPool2d", "Flatten", "Unflatten", "Dropout", "BatchNorm1d", "BatchNorm2d", "LayerNorm",
    "Embedding", "MultiheadAttention",
    "BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss", "NLLLoss",
]
