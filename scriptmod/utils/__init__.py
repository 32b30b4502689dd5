"""Utilities, as ``torch.utils``: ``scriptmod.utils.data`` (datasets, samplers,
``DataLoader``).

    >>> import scriptmod as sm
    >>> sm.utils.data.DataLoader.__name__
    'DataLoader'
"""
from scriptmod.utils import data  # noqa: F401
