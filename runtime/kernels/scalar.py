"""Reference kernels of the integer size arithmetic ops (``ir.ops.scalar``)."""
from __future__ import annotations

from . import kernel

kernel("int_add")(lambda xp, a, b: int(a) + int(b))
kernel("int_sub")(lambda xp, a, b: int(a) - int(b))
kernel("int_mul")(lambda xp, a, b: int(a) * int(b))
kernel("int_floordiv")(lambda xp, a, b: int(a) // int(b))
kernel("int_mod")(lambda xp, a, b: int(a) % int(b))
kernel("int_neg")(lambda xp, a: -int(a))
