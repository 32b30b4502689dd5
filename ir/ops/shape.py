"""Shape and data-movement ops. Shapes given as ``int[]`` inputs may hold symbolic dims."""
from __future__ import annotations

from typing import Any, Sequence

from . import rules as R
from ..errors import ShapeError
from ..schema import ANY_RANK, FACTORY, IMPURE, NONDIFF, VIEW, op
from .. import dtypes as D
from .. import symdims as SD
from ..types import Dim, Shape


def _numel(s: Sequence[Dim]) -> Dim:
    """The product of the dims (symbolic where they are; None where one is unknown)."""
    n: Dim = 1
    for d in s:
        n = SD.mul(n, d)
    return n


def infer_reshape(src: Shape | None, shape: Sequence[Dim] | None) -> Shape | None:
    """Resolve one -1 in ``shape`` against ``src``: the quotient of the element counts,
    symbolic where they are (``(B, T, 128)`` to ``(-1, 128)`` gives ``B*T``; ``(B*T, 128)``
    to ``(B, 4, -1)`` gives ``32*T``), None where it does not divide exactly."""
    if shape is None:
        return None
    shape = list(shape)
    if shape.count(-1) > 1:
        raise ShapeError("reshape: only one dimension can be inferred (-1)")
    total = _numel(src) if src is not None else None
    if -1 in shape:
        i = shape.index(-1)
        known = _numel(shape[:i] + shape[i + 1:])
        if isinstance(total, int) and isinstance(known, int):
            if known == 0 or total % known:
                raise ShapeError(f"reshape: shape {tuple(shape)} is invalid for input of size {total}")
        shape[i] = _quotient(total, known)
    else:
        b = _numel(shape)
        if isinstance(total, int) and isinstance(b, int) and total != b:
            raise ShapeError(f"reshape: shape {tuple(shape)} is invalid for input of size {total}")
    return tuple(shape)


def _quotient(total: Dim, known: Dim) -> Dim:
    """``total / known`` where it divides exactly (a polynomial), else None."""
    if total is None or known is None or known == 0:
        return None
    return SD.floordiv(total, known) if SD.mod(total, known) == 0 else None


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
    dims = set(range(len(s))) if dims is None else {
        R.norm_dim(d, len(s), "squeeze") for d in ((dims,) if isinstance(dims, int) else dims)}
    ones = [SD.compare("==", d, 1) if i in dims else False for i, d in enumerate(s)]
    if None in ones and any(d is not None for i, d in enumerate(s) if ones[i] is None):
        return None                     # ``T-1`` is 1 at T=2: the rank depends on the size
    return tuple(d for d, one in zip(s, ones) if not one)


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
    if any(len(s) != rank for s in shapes):
        raise ShapeError(f"cat: sizes of tensors must match except in dimension {d}; "
                         f"got {[tuple(x) for x in shapes]}")
    out = _agreed(shapes, skip=d, what=f"cat: sizes of tensors must match except in "
                                        f"dimension {d}; got {[tuple(x) for x in shapes]}")
    total: Dim = 0
    for s in shapes:
        total = SD.add(total, s[d])
    out[d] = total
    return tuple(out)


def _agreed(shapes: Sequence[Shape], skip: int | None, what: str) -> list[Dim]:
    """The dims equal shapes agree on (a known dim over an unknown one); ShapeError where
    two differ provably (``8`` and ``9``, ``T`` and ``T+1``)."""
    out = list(shapes[0])
    for s in shapes[1:]:
        for i, (a, b) in enumerate(zip(out, s)):
            if i == skip:
                continue
            if SD.compare("!=", a, b):
                raise ShapeError(what)
            if a is None or isinstance(b, int) and not isinstance(a, int):
                out[i] = b
    return out


def _stack(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    what = f"stack: expects each tensor to be equal size, got {[o[1] for o in ops]}"
    shapes = [o[1] for o in ops if o[1] is not None and len(o[1]) == len(s)]
    d = R.norm_dim(attrs["dim"], len(s) + 1, "stack")
    out = _agreed(shapes, skip=None, what=what)
    return tuple(out[:d]) + (len(ops),) + tuple(out[d:])


def _narrow(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    s = ops[0][1]
    if s is None:
        return None
    d = R.norm_dim(attrs["dim"], len(s), "narrow")
    length = values[2] if _is_size(values[2]) else None   # a size computed at run time
    return tuple(s[:d]) + (length,) + tuple(s[d + 1:])


def _is_size(v: Any) -> bool:
    """An int (not a bool) or a symbolic size."""
    return isinstance(v, str) or isinstance(v, int) and not isinstance(v, bool)


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
    """Indexing of a known rank with NumPy's rules: basic entries (ints, slices, None,
    ``...``) keep or cut dims; index tensors (and the ints among them) broadcast to one
    block of dims, in their place when adjacent, else first. A dim whose bounds are
    computed at run time, or a mask's count of true elements, is unknown."""
    s, spec = ops[0][1], attrs["spec"]
    _check_operand_refs(spec, ops)
    if s is None or any(e[0] not in _SPEC_KINDS for e in spec):
        return None
    advanced = [i for i, e in enumerate(spec) if e[0] == "tensor"]
    if any(not R.is_tensor(ops[spec[i][1] + 1]) or ops[spec[i][1] + 1][1] is None
           for i in advanced):
        return None
    if advanced:
        advanced = [i for i, e in enumerate(spec) if e[0] in ("tensor", "int")]

    def known(v: Any) -> Any:
        if not isinstance(v, tuple):
            return v
        v = spec_value(v, values[1:])
        return v if _is_size(v) else _UNKNOWN

    used = sum(_consumed(e, ops) for e in spec)
    if used > len(s):
        return None                     # the kernel raises its own IndexError
    out: list[Dim] = []
    block: list[Shape] = []
    at = None
    dims = iter(s)
    for i, e in enumerate(spec):
        if e[0] == "ellipsis":
            out += [next(dims) for _ in range(len(s) - used)]
        elif e[0] == "none":
            out.append(1)
        elif e[0] == "slice":
            out.append(_slice_len(next(dims), *(known(v) for v in e[1:])))
        else:
            for _ in range(_consumed(e, ops)):
                next(dims)
            if i in advanced:
                at = len(out) if at is None else at
                block.append(_index_block(e, ops))
    rest = tuple(out) + tuple(dims)
    if not advanced:
        return rest
    joined = R.broadcast_shapes(*block)
    if joined is None:
        return None
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    at = at if adjacent and at is not None else 0
    return rest[:at] + tuple(joined) + rest[at:]


_SPEC_KINDS = ("int", "slice", "none", "ellipsis", "tensor")


def _is_mask(e: tuple, ops: Sequence[Any]) -> bool:
    return e[0] == "tensor" and ops[e[1] + 1][0] in (D.bool_, D.uint8)


def _consumed(e: tuple, ops: Sequence[Any]) -> int:
    """How many dims of ``self`` a spec entry indexes (a mask: its rank)."""
    if _is_mask(e, ops):
        return len(ops[e[1] + 1][1])
    return 1 if e[0] in ("int", "slice", "tensor") else 0


def _index_block(e: tuple, ops: Sequence[Any]) -> Shape:
    """What an advanced entry adds to the broadcast block: an index tensor its shape, a
    mask one dim of unknown size (its true count), an int nothing."""
    if e[0] == "int":
        return ()
    return (None,) if _is_mask(e, ops) else ops[e[1] + 1][1]


def _slice_len(n: Dim, *bounds: Any) -> Dim:
    """The length of ``x[start:stop:step]`` along a dim of size ``n`` (Python's clamping),
    symbolic where the sizes are; None where a bound's sign is not known."""
    if _UNKNOWN in bounds:
        return None
    start, stop, step = bounds
    if start is None and stop is None and step in (None, 1):
        return n
    if isinstance(n, int) and all(b is None or isinstance(b, int) for b in bounds):
        return len(range(*slice(*bounds).indices(n)))
    if not (step is None or isinstance(step, int) and step > 0):
        return None
    lo, hi = _clamp_bound(start, n, 0), _clamp_bound(stop, n, n)
    return SD.maximum(SD.ceildiv(SD.sub(hi, lo), step or 1), 0)


def _clamp_bound(b: Dim, n: Dim, default: Dim) -> Dim:
    """A slice bound in ``[0, n]``: from the end when negative, clamped (None: unknown)."""
    if b is None:
        return default
    negative = SD.compare("<", b, 0)
    if negative is None:
        return None
    return SD.maximum(SD.add(b, n), 0) if negative else SD.minimum(b, n)


def _gather(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return ops[1][1]


def _factory(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    return None if values[0] is None else tuple(values[0])


def _arange(ops: Sequence[Any], attrs: dict, values: Sequence[Any]) -> Shape | None:
    import math
    start, end, step = values
    if all(isinstance(v, (int, float)) for v in values) and step:
        return (max(math.ceil((end - start) / step), 0),)
    if not (_is_size(start) and _is_size(end) and isinstance(step, int) and step):
        return (None,)                  # a bound computed at run time (``arange(x.size(0))``)
    span = SD.sub(end, start) if step > 0 else SD.sub(start, end)   # symbolic: T - s
    return (SD.maximum(SD.ceildiv(span, abs(step)), 0),)


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
