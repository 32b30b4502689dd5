"""Shape and data-movement ops. Shapes given as ``int[]`` inputs may hold symbolic dims."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from ..errors import ShapeError
from ..schema import ANY_RANK, FACTORY, IMPURE, NONDIFF, VIEW, op
from ..types import Dim, Shape, dim_factors, scale_dim


def _numel(s: Sequence[Dim]) -> Dim:
    n: Dim = 1
    for d in s:
        if not isinstance(d, int) or not isinstance(n, int):
            return None
        n *= d
    return n


def infer_reshape(src: Shape | None, shape: Sequence[Dim] | None) -> Shape | None:
    """Resolve one -1 in ``shape`` against ``src``; symbolic when it cannot be computed."""
    if shape is None:
        return None
    shape = list(shape)
    if shape.count(-1) > 1:
        raise ShapeError("reshape: only one dimension can be inferred (-1)")
    if -1 in shape:
        i = shape.index(-1)
        rest = shape[:i] + shape[i + 1:]
        total, known = (_numel(src) if src is not None else None), _numel(rest)
        if isinstance(total, int) and isinstance(known, int):
            if known == 0 or total % known:
                raise ShapeError(f"reshape: shape {tuple(shape)} is invalid for input of size {total}")
            shape[i] = total // known
        elif src is not None:   # symbolic factors cancel, sizes divide: (16, B, 64) to
            shape[i] = _quotient(src, rest)   # (16, B, 4, -1) gives 16; (B, 4, 8) to (B, -1), 32
        else:
            shape[i] = None
    elif src is not None:
        a, b = _numel(src), _numel(shape)
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ShapeError(f"reshape: shape {tuple(shape)} is invalid for input of size {a}")
    return tuple(shape)


def _quotient(src: Sequence[Dim], rest: Sequence[Dim]) -> Dim:
    """numel(src) / numel(rest) as one dim: a size, or a size times the one symbol left
    over (``16*B``); None when it cannot be written as one dim (a dim of unknown size, a
    symbol of ``rest`` that ``src`` lacks, two symbols left, sizes that do not divide)."""
    if any(d is None for d in (*src, *rest)):
        return None
    top, symbols = _factors(src)
    bottom, theirs = _factors(rest)
    for name in theirs:
        if name not in symbols:
            return None
        symbols.remove(name)
    if bottom == 0 or top % bottom:
        return None
    q = top // bottom
    if not symbols:
        return q
    return scale_dim(symbols[0], q) if len(symbols) == 1 else None


def _factors(dims: Sequence[Dim]) -> tuple[int, list[str]]:
    """The product of ``dims`` as (its size factor, its symbols): ``(16*B, 64)`` is
    ``(1024, ["B"])``."""
    size, names = 1, []
    for d in dims:
        if isinstance(d, str):
            c, name = dim_factors(d)
            size *= c
            names.append(name)
        elif isinstance(d, int):
            size *= d
    return size, names


def _reshape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return infer_reshape(ops[0][1], values[1])


def _permute(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    dims = [R.norm_dim(d, len(s), "permute") for d in attrs["dims"]]
    if sorted(dims) != list(range(len(s))):
        raise ShapeError(f"permute: dims {tuple(attrs['dims'])} are not a permutation of {len(s)} dims")
    return tuple(s[d] for d in dims)


def _transpose(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    s = list(s)
    a, b = R.norm_dim(attrs["dim0"], len(s), "transpose"), R.norm_dim(attrs["dim1"], len(s), "transpose")
    s[a], s[b] = s[b], s[a]
    return tuple(s)


def _unsqueeze(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    d = R.norm_dim(attrs["dim"], len(s) + 1, "unsqueeze")
    return tuple(s[:d]) + (1,) + tuple(s[d:])


def _squeeze(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    dims = attrs.get("dim")
    if dims is None:
        return tuple(d for d in s if d != 1)
    dims = {R.norm_dim(d, len(s), "squeeze") for d in ((dims,) if isinstance(dims, int) else dims)}
    return tuple(d for i, d in enumerate(s) if not (i in dims and d == 1))


def _expand(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s, size = ops[0][1], values[1]
    if s is None or size is None:
        return None
    if len(size) < len(s):
        raise ShapeError(f"expand: the number of sizes provided ({len(size)}) must be greater "
                         f"or equal to the number of dimensions in the tensor ({len(s)})")
    lead = len(size) - len(s)
    out = list(size[:lead])
    for have, want in zip(s, size[lead:]):
        if want == -1:
            out.append(have)
        elif have == 1 or have == want or not isinstance(have, int) or not isinstance(want, int):
            out.append(want)
        else:
            raise ShapeError(f"expand: size {have} cannot be expanded to {want}")
    return tuple(out)


def _cat(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    shapes = [o[1] for o in ops]
    if any(s is None for s in shapes):
        return None
    shapes = [s for s in shapes if s != (0,)] or shapes[:1]   # torch skips legacy empty (0,)
    rank = len(shapes[0])
    d = R.norm_dim(attrs["dim"], rank, "cat")
    for s in shapes:
        if len(s) != rank or any(a != b and isinstance(a, int) and isinstance(b, int)
                                 for i, (a, b) in enumerate(zip(s, shapes[0])) if i != d):
            raise ShapeError(f"cat: sizes of tensors must match except in dimension {d}; "
                             f"got {[tuple(x) for x in shapes]}")
    sizes = [s[d] for s in shapes]
    total = sum(sizes) if all(isinstance(x, int) for x in sizes) else None
    return tuple(shapes[0][:d]) + (total,) + tuple(shapes[0][d + 1:])


def _stack(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    for o in ops:
        if o[1] is not None and len(o[1]) == len(s) and any(
                a != b and isinstance(a, int) and isinstance(b, int) for a, b in zip(o[1], s)):
            raise ShapeError(f"stack: expects each tensor to be equal size, got {[o[1] for o in ops]}")
    d = R.norm_dim(attrs["dim"], len(s) + 1, "stack")
    return tuple(s[:d]) + (len(ops),) + tuple(s[d:])


def _narrow(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    d = R.norm_dim(attrs["dim"], len(s), "narrow")
    length = values[2] if isinstance(values[2], int) else None   # a size computed at run time
    return tuple(s[:d]) + (length,) + tuple(s[d + 1:])


def spec_value(x: Any, operands: Sequence[Any]) -> Any:
    """An ``index`` spec scalar: an int, None, or ``("input", k)``: operand k (after ``self``)
    holds it, a size computed at run time (``x[:x.size(0) // 2]`` while tracing)."""
    return operands[x[1]] if isinstance(x, tuple) else x


_UNKNOWN = object()


def _check_operand_refs(spec: Any, ops: Sequence[Any]) -> None:
    """Each ``("input", k)`` in a basic-index spec names an int operand that exists."""
    for e in spec:
        if isinstance(e, tuple) and e and e[0] in ("int", "slice"):
            for v in e[1:]:
                if isinstance(v, tuple) and not (
                        len(v) == 2 and v[0] == "input" and type(v[1]) is int
                        and 0 <= v[1] < len(ops) - 1 and ops[v[1] + 1] is int):
                    raise TypeError(f"index: spec bound {v!r} does not name an int operand")


def _index_shape(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    """Basic indexing (ints, slices, None, ...) of a known rank; a dim whose bounds are
    computed at run time is unknown. Advanced (tensor) indexing: unknown shape."""
    s, spec = ops[0][1], attrs["spec"]
    _check_operand_refs(spec, ops)
    if s is None or any(e[0] not in ("int", "slice", "none", "ellipsis") for e in spec):
        return None

    def known(v: Any) -> Any:
        if not isinstance(v, tuple):
            return v
        v = spec_value(v, values[1:])
        return v if isinstance(v, int) and not isinstance(v, bool) else _UNKNOWN

    used = sum(e[0] in ("int", "slice") for e in spec)
    out: list[Dim] = []
    dims = iter(s)
    for e in spec:
        if e[0] == "ellipsis":
            out += [next(dims) for _ in range(len(s) - used)]
        elif e[0] == "none":
            out.append(1)
        elif e[0] == "slice":
            out.append(_slice_len(next(dims), *(known(v) for v in e[1:])))
        else:
            next(dims)
    return tuple(out) + tuple(dims)


def _slice_len(n: Dim, *bounds: Any) -> Dim:
    if _UNKNOWN in bounds:
        return None
    if bounds[0] is None and bounds[1] is None and bounds[2] in (None, 1):
        return n
    return len(range(*slice(*bounds).indices(n))) if isinstance(n, int) else None


def _gather(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return ops[1][1]


def _factory(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return None if values[0] is None else tuple(values[0])


def _arange(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    import math
    start, end, step = values
    if not all(isinstance(v, (int, float)) for v in values) or not step:
        return (None,)                  # a bound computed at run time (``arange(x.size(0))``)
    return (max(math.ceil((end - start) / step), 0),)


op("reshape(Tensor self, int[] shape) -> Tensor", R.same, _reshape, VIEW)
op("expand(Tensor self, int[] size) -> Tensor", R.same, _expand, VIEW)
op("permute(Tensor self, *, int[] dims) -> Tensor", R.same, _permute, VIEW)
op("transpose(Tensor self, *, int dim0, int dim1) -> Tensor", R.same, _transpose, VIEW)
op("unsqueeze(Tensor self, *, int dim) -> Tensor", R.same, _unsqueeze, VIEW)
op("squeeze(Tensor self, *, int[]? dim=None) -> Tensor", R.same, _squeeze, VIEW)
op("narrow(Tensor self, int start, int length, *, int dim) -> Tensor", R.same, _narrow, VIEW)
op("contiguous(Tensor self) -> Tensor", R.same, R.same_shape, ANY_RANK)
op("clone(Tensor self) -> Tensor", R.same, R.same_shape, ANY_RANK)
# x.detach() while tracing: the same values, and no gradient through it (eager detach
# stays a plain alias; a trace used to bake the detached tensor in as a constant)
op("detach(Tensor self) -> Tensor", R.same, R.same_shape, NONDIFF, VIEW, ANY_RANK)
op("cat(Tensor... tensors, *, int dim=0) -> Tensor", R.promote, _cat)
op("stack(Tensor... tensors, *, int dim=0) -> Tensor", R.promote, _stack)
op("gather(Tensor self, Tensor index, *, int dim) -> Tensor", R.same, _gather)
# indices: index tensors and run-time ints, referred to by the spec (see ``spec_value``)
op("index(Tensor self, Any... indices, *, Any spec) -> Tensor", R.same, _index_shape)
# the spec means what the user's index means at any rank of ``self`` (numpy's rules: leading
# dims, ``...``, a mask of its rank), so a write-back through it follows the rank like eager
op("index_put(Tensor self, Tensor values, Any... indices, *, Any spec, bool accumulate=False) -> Tensor",
   R.same, R.same_shape, ANY_RANK)
op("to_device(Tensor self, *, Device device) -> Tensor", R.same, R.same_shape, ANY_RANK)
def _size(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape:
    """An int; its ``dim`` must exist where the rank is known."""
    if ops[0][1] is not None:
        R.norm_dim(attrs["dim"], len(ops[0][1]), "size")
    return ()


op("size(Tensor self, *, int dim) -> int", R.no_dtype, _size, NONDIFF, ANY_RANK)

# factories: shapes as int[] inputs so that they can follow symbolic input sizes
_F = "ScalarType? dtype=None, Device device='cpu'"
op(f"full(int[] size, Scalar fill_value, *, {_F}) -> Tensor", R.from_attr("default"), _factory, FACTORY, NONDIFF)
op(f"rand(int[] size, *, {_F}) -> Tensor", R.from_attr(), _factory, FACTORY, NONDIFF, IMPURE)
op(f"randn(int[] size, *, {_F}) -> Tensor", R.from_attr(), _factory, FACTORY, NONDIFF, IMPURE)
op(f"randint(int[] size, *, int low, int high, {_F}) -> Tensor",
   lambda ops, attrs: attrs.get("dtype") or R.to_int64(ops, attrs), _factory, FACTORY, NONDIFF, IMPURE)
op(f"randperm(int n, *, {_F}) -> Tensor",
   lambda ops, attrs: attrs.get("dtype") or R.to_int64(ops, attrs), lambda o, a, v: (v[0],),
   FACTORY, NONDIFF, IMPURE)
op(f"arange(Scalar start, Scalar end, Scalar step=1, *, {_F}) -> Tensor",
   R.from_attr(), _arange, FACTORY, NONDIFF)
op(f"linspace(*, float start, float end, int steps, {_F}) -> Tensor",
   R.from_attr(), lambda o, a, v: (a["steps"],), FACTORY, NONDIFF)
op(f"eye(*, int n, int m, {_F}) -> Tensor", R.from_attr(), lambda o, a, v: (a["n"], a["m"]), FACTORY, NONDIFF)
