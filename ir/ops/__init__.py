"""Every tensor op's schema, by group. Importing this package fills ``ir.schema.REGISTRY``."""
from . import elementwise, nn, reduction, scalar, script, shape  # noqa: F401  (registration)
from ..schema import REGISTRY, get, ops_with

__all__ = ["REGISTRY", "get", "ops_with"]
