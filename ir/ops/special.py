"""Schemas of special functions (torch.special and the top-level gamma/erfinv/Bessel family),
computed by SciPy's ``special`` (``runtime.kernels.special``).

Only the functions a decomposition cannot give are ops: Bessel and Airy functions, the
gamma family, ``erfcx``/``erfinv``/``ndtri``/``log_ndtr``, Hurwitz's zeta, the incomplete
gamma functions, the orthogonal polynomials (PyTorch's recurrences) and ``entr`` (whose
gradient PyTorch gives at and below zero too). ``ndtr``, ``xlog1py``, ``mvlgamma`` and the
aliases are decompositions in ``scriptmod.special``. None is
``ELEMENTWISE`` (that would need a scalar formula in ``codegen``): they run as library calls,
any rank (``ANY_RANK``), float16/bfloat16 in float32 (``UPCAST``) where PyTorch has a half
kernel at all. Integer and bool inputs give the default float dtype; complex ones and, for
the functions PyTorch has no half kernel for, half ones are refused with PyTorch's message.
"""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from .. import dtypes as D
from ..dtypes import DType
from ..errors import KernelDTypeError
from ..schema import ANY_RANK, NONDIFF, UPCAST, op

# unary ops -> (differentiable, PyTorch has a float16/bfloat16 kernel)
UNARY: dict[str, tuple[bool, bool]] = {
    "airy_ai": (False, False),
    "bessel_j0": (False, False), "bessel_j1": (False, False),
    "bessel_y0": (False, False), "bessel_y1": (False, False),
    "modified_bessel_i0": (False, False), "modified_bessel_i1": (False, False),
    "modified_bessel_k0": (False, False), "modified_bessel_k1": (False, False),
    "scaled_modified_bessel_k0": (False, False), "scaled_modified_bessel_k1": (False, False),
    "spherical_bessel_j0": (False, False),
    "i0": (True, True), "i0e": (True, True), "i1": (True, True), "i1e": (True, True),
    "erfcx": (True, False), "erfinv": (True, True), "log_ndtr": (True, False),
    "ndtri": (True, False), "lgamma": (True, True), "digamma": (True, True),
    "entr": (True, True),
}

# PyTorch's orthogonal polynomials P(x, n); none is differentiable, none has a half kernel
POLYNOMIALS = tuple(
    [f"chebyshev_polynomial_{k}" for k in "tuvw"]
    + [f"shifted_chebyshev_polynomial_{k}" for k in "tuvw"]
    + ["hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
       "legendre_polynomial_p"])

# the names PyTorch's CPU kernels report in "... not implemented for 'Half'"
KERNEL_NAMES = {"i0": "i0_vml_cpu", "erfinv": "erfinv_vml_cpu", "lgamma": "lgamma_vml_cpu",
                "digamma": "digamma", "polygamma": "trigamma"}


def special_dtype(opname: str, half: bool = True, ints: bool = True) -> Any:
    """The inputs' promoted floating dtype (integers and bools: the default float); refuses
    complex inputs, half ones unless ``half``, integer ones unless ``ints``, as PyTorch's
    kernels do."""
    kname = KERNEL_NAMES.get(opname, f"{opname}_cpu")

    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        d = R.promote(ops, attrs)
        if d.category >= D.COMPLEX or (not half and d in (D.float16, D.bfloat16)) or (
                not ints and d.category < D.FLOAT):
            raise KernelDTypeError(f"\"{kname}\" not implemented for '{d.short}'")
        return D.to_float(d)
    return rule


# ops whose kernel reads float16/bfloat16 inputs itself (PyTorch's half entr rounds log(x)
# to the half type before the product)
OWN_HALF = frozenset({"entr"})

for _name, (_diff, _half) in UNARY.items():
    op(f"{_name}(Tensor self) -> Tensor", special_dtype(_name, _half), R.same_shape, ANY_RANK,
       *((UPCAST,) if _half and _name not in OWN_HALF else ()), *(() if _diff else (NONDIFF,)))

for _name in POLYNOMIALS:
    op(f"{_name}(Tensor|Scalar self, Tensor|Scalar n) -> Tensor", special_dtype(_name, False),
       R.broadcast, ANY_RANK, NONDIFF)

# the n-th derivative of digamma (n >= 0; PyTorch's polygamma(n, input))
op("polygamma(Tensor self, *, int n) -> Tensor", special_dtype("polygamma"), R.same_shape,
   ANY_RANK, UPCAST)
# Hurwitz's zeta(x, q); differentiable in q only (PyTorch's "not implemented" for x)
op("zeta(Tensor|Scalar self, Tensor|Scalar other) -> Tensor", special_dtype("zeta", False),
   R.broadcast, ANY_RANK)
# the regularized incomplete gamma functions P(a, x) and Q(a, x); differentiable in x only
op("igamma(Tensor|Scalar self, Tensor|Scalar other) -> Tensor",
   special_dtype("igamma", ints=False), R.broadcast, ANY_RANK, UPCAST)
op("igammac(Tensor|Scalar self, Tensor|Scalar other) -> Tensor",
   special_dtype("igammac", ints=False), R.broadcast, ANY_RANK, UPCAST)
