"""Reusable dtype and shape rules for op declarations (see ``ir.schema``).

Operands: a tensor is ``(dtype, shape)``; a Python number is its type; anything else None.
Shapes may hold symbolic dims (``str``) and unknown dims (``None``).
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import dtypes as D
from .. import symdims as SD
from ..errors import DTypeError, KernelDTypeError, ShapeError
from ..dtypes import DType
from ..types import Dim, Shape


def is_tensor(o: Any) -> bool:
    return isinstance(o, tuple)


def tensors(ops: Sequence[Any]) -> list[tuple]:
    return [o for o in ops if isinstance(o, tuple)]


# ---- dtype rules ---------------------------------------------------------------------

def same(ops: Sequence[Any], attrs: dict) -> DType:
    return tensors(ops)[0][0]


def promote(ops: Sequence[Any], attrs: dict) -> DType:
    dim: list[DType] = []
    zero: list[DType] = []
    scalars: list[type] = []
    for o in ops:
        if isinstance(o, tuple):
            (zero if o[1] is not None and len(o[1]) == 0 else dim).append(o[0])
        elif o in (bool, int, float, complex):
            scalars.append(o)
    return D.result_type(dim, zero, scalars)


def sub_dtype(ops: Sequence[Any], attrs: dict) -> DType:
    """``promote``, but like PyTorch refuse a bool operand (``~``/``^`` are what users mean)."""
    bools = [o for o in ops if o is bool or isinstance(o, tuple) and o[0] is D.bool_]
    if len(bools) == 2:
        raise DTypeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                         "Use the `^` or `logical_xor()` operator instead.")
    if bools:
        raise DTypeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                         "If you are trying to invert a mask, use the `~` or `logical_not()` "
                         "operator instead.")
    return promote(ops, attrs)


def promote_float(ops: Sequence[Any], attrs: dict) -> DType:
    return D.to_float(promote(ops, attrs))


def same_float(ops: Sequence[Any], attrs: dict) -> DType:
    return D.to_float(same(ops, attrs))


def to_bool(ops: Sequence[Any], attrs: dict) -> DType:
    return D.bool_


def to_int64(ops: Sequence[Any], attrs: dict) -> DType:
    return D.int64


def real_of(ops: Sequence[Any], attrs: dict) -> DType:
    return D.to_real(same(ops, attrs))


def from_attr(default: str = "default") -> Any:
    """dtype taken from the ``dtype`` attribute; else the default float (or the input's)."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        d = attrs.get("dtype")
        if d is not None:
            return d if isinstance(d, DType) else D.BY_NAME[d]
        if default == "input":
            return same(ops, attrs)
        return D.get_default_dtype()
    return rule


def sum_like(ops: Sequence[Any], attrs: dict) -> DType:
    d = attrs.get("dtype")
    if d is not None:
        return d if isinstance(d, DType) else D.BY_NAME[d]
    t = same(ops, attrs)
    return D.int64 if t.category <= D.INT else t


def float_only(opname: str, kernel: bool = False) -> Any:
    """The input's dtype, which must be floating or complex unless ``dtype=`` is given;
    ``kernel``: PyTorch has no kernel for the others (its NotImplementedError)."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        d = attrs.get("dtype")
        if d is not None:
            return d if isinstance(d, DType) else D.BY_NAME[d]
        t = same(ops, attrs)
        if t.category < D.FLOAT:
            if kernel:
                raise no_kernel(opname, t)
            raise DTypeError(f"{opname}(): expected a floating point or complex input, "
                             f"got {t.name}; pass dtype= or convert with .float()")
        return t
    return rule


def no_kernel(opname: str, d: DType) -> KernelDTypeError:
    """PyTorch's message for an op without a kernel for ``d`` (``d.short``: 'Long')."""
    return KernelDTypeError(f"\"{opname}\" not implemented for '{d.short}': {opname} takes a "
                            f"floating-point tensor, got {d.name} (convert it with .float())")


def not_bool(opname: str) -> Any:
    """The input's dtype, any but bool (PyTorch: 'Boolean inputs not supported for relu')."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        t = same(ops, attrs)
        if t is D.bool_:
            raise DTypeError(f"Boolean inputs not supported for {opname}")
        return t
    return rule


def pair(first: Any, second: Any) -> Any:
    def rule(ops: Sequence[Any], attrs: dict) -> tuple:
        return first(ops, attrs), second(ops, attrs)
    return rule


def no_dtype(ops: Sequence[Any], attrs: dict) -> None:
    return None


# ---- ops that refuse mixed dtypes (PyTorch's messages) -------------------------------

_C_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half",
            "bfloat16": "c10::BFloat16", "int64": "long int", "int32": "int",
            "int16": "short int", "int8": "signed char", "uint8": "unsigned char", "bool": "bool"}


def c_name(d: DType) -> str:
    """How PyTorch's kernels name a dtype in errors ("float", "double", "c10::BFloat16")."""
    return _C_NAMES.get(d.name, d.name)


def matmul_dtype(ops: Sequence[Any], attrs: dict) -> DType:
    """Both operands of one dtype: matmul/mm/bmm/linear never mix precisions silently."""
    a, b = ops[0][0], ops[1][0]
    if a is not b:
        raise DTypeError(f"expected m1 and m2 to have the same dtype, but got: {c_name(a)} != "
                         f"{c_name(b)}")
    return a


def conv_dtype(ops: Sequence[Any], attrs: dict) -> DType:
    """Input, weight and bias (if any) of one dtype, as PyTorch's convolutions require."""
    x, w = ops[0][0], ops[1][0]
    bias = ops[2][0] if len(ops) > 2 and is_tensor(ops[2]) else None
    if bias is not None and bias is not x:
        raise DTypeError(f"Input type ({c_name(x)}) and bias type ({c_name(bias)}) should be "
                         f"the same")
    if w is not x:
        raise DTypeError(f"Input type ({c_name(x)}) and weight type ({c_name(w)}) should be "
                         f"the same")
    return x


def norm_params_dtype(opname: str, first_param: int = 1) -> Any:
    """A normalization's parameters share the input's dtype, except float32 parameters of a
    float16/bfloat16 input (PyTorch's CPU "mixed dtype" rule)."""
    def rule(ops: Sequence[Any], attrs: dict) -> DType:
        x = ops[0][0]
        for o in ops[first_param:]:
            if is_tensor(o) and o[0] is not x and o[0].category >= D.FLOAT and not (
                    x in (D.float16, D.bfloat16) and o[0] is D.float32):
                raise DTypeError(f"{opname}: mixed dtype (CPU): all inputs must share same "
                                 f"datatype (input is {x.name}, a parameter or running "
                                 f"statistic is {o[0].name})")
        return x
    return rule


def embedding_dtype(ops: Sequence[Any], attrs: dict) -> DType:
    """The weight's dtype; the indices must be integers."""
    idx = ops[1][0]
    if idx.category != D.INT:
        raise DTypeError(f"Expected tensor for argument #1 'indices' to have one of the "
                         f"following scalar types: Long, Int; but got {idx.name} instead "
                         f"(while checking arguments for embedding)")
    return ops[0][0]


# ---- shape rules ---------------------------------------------------------------------

def broadcast_dims(a: Dim, b: Dim) -> Dim:
    """The broadcast of two dims: equal ones (equal symbolic text is one size), a 1 against
    anything, a size against a symbol (the size wins: a guard checks the symbol); None for
    two different symbols; ShapeError where they provably differ and neither can be 1
    (``3`` and ``4``, ``T`` and ``T+1``, ``T+8`` and ``5``)."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if SD.compare("!=", a, b) and SD.compare(">", a, 1) and SD.compare(">", b, 1):
        raise ShapeError(f"sizes {a} and {b} do not broadcast")
    if isinstance(a, int):   # symbolic vs concrete: the concrete size wins (guards check)
        return a
    if isinstance(b, int):
        return b
    return None


def broadcast_shapes(*shapes: Shape | None) -> Shape | None:
    known = [s for s in shapes if s is not None]
    if len(known) != len(shapes):
        return None
    n = max((len(s) for s in known), default=0)
    out: list[Dim] = [1] * n
    for s in known:
        for i, d in enumerate(s, start=n - len(s)):
            try:
                out[i] = broadcast_dims(out[i], d)
            except ValueError:
                raise ShapeError(f"shapes {_fmt(shapes)} do not broadcast "
                                 f"(dim {i - n}: {out[i]} vs {d})") from None
    return tuple(out)


def _fmt(shapes: Sequence[Shape | None]) -> str:
    return ", ".join("(" + ", ".join(map(str, s)) + ")" if s is not None else "?" for s in shapes)


def same_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return tensors(ops)[0][1]


def broadcast(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return broadcast_shapes(*(t[1] for t in tensors(ops)))


def scalar_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape:
    return ()


def norm_dim(dim: int, rank: int, op: str = "") -> int:
    lo, hi = (-1, 0) if rank == 0 else (-rank, rank - 1)
    if not isinstance(dim, int) or isinstance(dim, bool) or not lo <= dim <= hi:
        where = f"{op}: " if op else ""   # dispatch prefixes the op's name when not given
        raise IndexError(f"{where}dim expected to be in range of [{lo}, {hi}], but got {dim!r}")
    return dim % rank if rank else 0


def reduce_dims(attrs: dict, rank: int, op: str = "") -> tuple[int, ...]:
    dim = attrs.get("dim")
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(rank))
    dims = [norm_dim(d, rank, op) for d in ((dim,) if isinstance(dim, int) else tuple(dim))]
    if len(set(dims)) != len(dims):
        dup = next(d for d in dims if dims.count(d) > 1)
        raise ShapeError(f"{op + ': ' if op else ''}dim {dup} appears multiple times in the list "
                         f"of dims {tuple(dim)}")
    return tuple(sorted(dims))


def reduce(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = tensors(ops)[0][1]
    if s is None:
        return None
    dims = reduce_dims(attrs, len(s))
    if attrs.get("keepdim"):
        return tuple(1 if i in dims else d for i, d in enumerate(s))
    return tuple(d for i, d in enumerate(s) if i not in dims)


def reduce_pair(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> tuple:
    s = reduce(ops, attrs, values)
    return s, s
