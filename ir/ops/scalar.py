"""Integer arithmetic on sizes, so that shapes read from ``x.shape`` stay symbolic in traces
(``x.view(x.size(0) * 2, -1)`` records ``size``, ``int_mul`` and ``reshape``)."""
from . import rules as R
from ..schema import NONDIFF, op

for _name in ("int_add", "int_sub", "int_mul", "int_floordiv", "int_mod"):
    op(f"{_name}(int a, int b) -> int", R.no_dtype, R.scalar_shape, NONDIFF)
op("int_neg(int a) -> int", R.no_dtype, R.scalar_shape, NONDIFF)
