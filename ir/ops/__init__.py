"""Every tensor op's schema, by group. Importing this package fills ``ir.schema.REGISTRY``."""
from . import (conv, elementwise, layers, loss, nn, norm, pooling, reduction,  # noqa: F401
               scalar, script, shape, vision)  # (registration)
from . import (fft, indexing, linalg, math, products, rnn, scans, special,  # noqa: F401
               views)
from ..schema import REGISTRY, get, ops_with

__all__ = ["REGISTRY", "get", "ops_with"]
