"""Shape, data-movement, indexing and matrix methods of ``Tensor``.

Indexing turns a Python index into the ``index`` op's static ``spec`` plus tensor operands,
so eager, tracing and autograd share one definition; a plain basic index with no autograd
and no tracer takes a direct NumPy fast path (a view, as in PyTorch).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod import _memory_format as _mf
from scriptmod import _public
from scriptmod._dispatch import TRACERS, dispatch
from scriptmod.autograd import grad_mode
from scriptmod.ir.errors import DTypeError, IndexRangeError, ShapeError
from scriptmod.ir.ops.rules import norm_dim
from scriptmod.runtime.arrays import NP_DTYPE
from scriptmod.runtime.kernels.shape import build_index
from scriptmod.tensor import Tensor, _assign, _check_leaf, _check_writable, wrap
from scriptmod._creation import arange, tensor
from scriptmod._traced_int import TracedInt, ceil_div, check, fixed, sym_max

_gstate = grad_mode._state


def _sizes(args: Sequence[Any]) -> list[Any]:
    """``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` all mean the size list [2, 3]."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    return [a if not isinstance(a, Tensor) else int(a) for a in args]


def _plain(n: Any) -> int:
    """A size's value without recording anything (for checks the op repeats at run time)."""
    return int.__int__(n) if isinstance(n, int) else int(n)


def reshape(self: Tensor, *shape: Any) -> Tensor:
    return dispatch("reshape", (self, _sizes(shape)))


def view(self: Tensor, *shape: Any) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], D.DType):
        return _view_dtype(self, shape[0])
    sizes = _sizes(shape)
    try:
        np.reshape(self._data, [_plain(s) for s in sizes], copy=False) if isinstance(self._data, np.ndarray) else None
    except ValueError as e:
        if "copy" in str(e):
            raise RuntimeError(f"view size is not compatible with input tensor's size and stride "
                               f"(shape {list(self.shape)}, strides {list(self.stride())}); use "
                               f".reshape(...) instead.") from None
    return dispatch("reshape", (self, sizes))


def _view_dtype(self: Tensor, dtype: D.DType) -> Tensor:
    if dtype.itemsize != self.dtype.itemsize:
        raise RuntimeError(f"view(dtype): {self.dtype.name} and {dtype.name} have different sizes")
    out = wrap(self._data.view(NP_DTYPE[dtype]))
    out._vc = self._vc
    return out


def permute(self: Tensor, *dims: Any) -> Tensor:
    return dispatch("permute", (self,), {"dims": [int(d) for d in _sizes(dims)]})


def transpose(self: Tensor, dim0: int, dim1: int) -> Tensor:
    return dispatch("transpose", (self,), {"dim0": int(dim0), "dim1": int(dim1)})


def t(self: Tensor) -> Tensor:
    if self.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.dim()}D")
    return self if self.dim() < 2 else transpose(self, 0, 1)


def unsqueeze(self: Tensor, dim: int) -> Tensor:
    return dispatch("unsqueeze", (self,), {"dim": int(dim)})


def squeeze(self: Tensor, dim: Any = None) -> Tensor:
    return dispatch("squeeze", (self,), {"dim": None if dim is None else (
        [int(d) for d in dim] if isinstance(dim, (list, tuple)) else [int(dim)])})


def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    n = self.dim()
    s, e = norm_dim(start_dim, n, "flatten"), norm_dim(end_dim, n, "flatten")
    if n == 0:
        return reshape(self, 1)
    if s > e:
        raise ShapeError(f"flatten() has invalid args: start_dim ({start_dim}) cannot come after "
                         f"end_dim ({end_dim})")
    if s == e:
        return self
    shape = list(self.shape)
    return reshape(self, shape[:s] + [-1] + shape[e + 1:])


def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    shape = list(self.shape)
    d = dim % len(shape)
    sizes = list(sizes)
    if sizes.count(-1) == 1:      # infer it from this dim's (possibly symbolic) size
        known = 1
        for s in sizes:
            known = known * s if s != -1 else known
        sizes[sizes.index(-1)] = shape[d] // known
    return reshape(self, shape[:d] + sizes + shape[d + 1:])


def expand(self: Tensor, *sizes: Any) -> Tensor:
    return dispatch("expand", (self, _sizes(sizes)))


def repeat(self: Tensor, *sizes: Any) -> Tensor:
    reps = _sizes(sizes)
    if len(reps) < self.dim():
        raise RuntimeError(f"repeat: number of repeat dims ({len(reps)}) can not be smaller than "
                           f"number of tensor dims ({self.dim()})")
    shape = [1] * (len(reps) - self.dim()) + list(self.shape)
    inter: list[int] = []
    for r, s in zip(reps, shape):
        inter += [1, s]
    big: list[int] = []
    for r, s in zip(reps, shape):
        big += [r, s]
    return reshape(expand(reshape(self, inter), big), [r * s for r, s in zip(reps, shape)])


def tile(self: Tensor, *dims: Any) -> Tensor:
    reps = _sizes(dims)
    return repeat(self, [1] * (self.dim() - len(reps)) + reps)


def contiguous(self: Tensor, memory_format: Any = _mf.contiguous_format) -> Tensor:
    """``self`` if its elements lie densely in ``memory_format``'s order, else such a copy
    (``scriptmod.channels_last``: NHWC storage of an NCHW tensor)."""
    if memory_format is _mf.contiguous_format:
        return self if self.is_contiguous() else dispatch("contiguous", (self,))
    fmt = _mf.check(memory_format, "contiguous()")
    if fmt is _mf.preserve_format:
        fmt = _mf.suggest(self)
    if self.is_contiguous(memory_format=fmt):
        return self
    return _mf.relayout(self, fmt, contiguous, "contiguous()")


def clone(self: Tensor, *, memory_format: Any = _mf.preserve_format) -> Tensor:
    """A copy; by default laid out as ``self`` when that is channels-last (torch's
    ``preserve_format``), else C-contiguous."""
    if memory_format is _mf.preserve_format and self._data.flags.c_contiguous:
        return dispatch("clone", (self,))
    fmt = _mf.check(memory_format, "clone()")
    if fmt is _mf.preserve_format:
        fmt = _mf.suggest(self)
    if fmt is _mf.contiguous_format:
        return dispatch("clone", (self,))
    return _mf.relayout(self, fmt, lambda t: dispatch("clone", (t,)), "clone()")


def narrow(self: Tensor, dim: int, start: int, length: int) -> Tensor:
    """``start``/``length`` may be sizes computed from ``x.shape`` while tracing: inputs of
    the op, so the trace follows other input sizes."""
    start, length = (int(v) if isinstance(v, Tensor) else v for v in (start, length))
    for name, v in (("start", start), ("length", length)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TypeError(f"narrow(): argument '{name}' must be an int, got {type(v).__name__}")
    return dispatch("narrow", (self, start, length), {"dim": int(dim)})


def split(self: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    n = self.shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ShapeError(f"split: split_size must be positive, got {step}")
        sizes = _split_sizes(n, step)
    else:
        sizes = list(split_size_or_sections)
        if not check("int_eq", sum(sizes), n, "split sizes that sum to the dim"):
            raise ShapeError(f"split: split_sizes {sizes} must sum to the size of dim {dim} ({n})")
    out, start = [], 0
    for s in sizes:
        out.append(narrow(self, dim, start, s))
        start += s
    return tuple(out)


def _split_sizes(n: Any, step: Any) -> list[Any]:
    """Piece lengths of ``split(step)`` along a dim of size ``n`` (either may be traced:
    the count of pieces is fixed by the trace and guarded, the lengths stay symbolic)."""
    count = fixed(ceil_div(n, step), "the number of pieces split() returns")
    if count == 0:
        return [n]
    return [step] * (count - 1) + [n - step * (count - 1)]


def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    if chunks <= 0:
        raise ShapeError(f"chunk: expects chunks to be greater than 0, got {chunks}")
    n = self.shape[dim]
    return split(self, sym_max(ceil_div(n, chunks), 1), dim)


def unbind(self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    n = fixed(self.shape[dim], "the number of tensors unbind() returns")
    return tuple(select(self, dim, i) for i in range(n))


def select(self: Tensor, dim: int, index: int) -> Tensor:
    d = dim % self.dim()
    return self[(slice(None),) * d + (index if isinstance(index, int) else int(index),)]


def movedim(self: Tensor, source: Any, destination: Any) -> Tensor:
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    n = self.dim()
    if len(src) != len(dst):
        raise ShapeError(f"movedim: Invalid source or destination dims: source ({src} dims) should "
                         f"contain the same number of dims as destination ({dst} dims)")
    src = [norm_dim(s, n, "movedim") for s in src]
    dst = [norm_dim(d, n, "movedim") for d in dst]
    for name, dims in (("source", src), ("destination", dst)):
        if len(set(dims)) != len(dims):
            raise ShapeError(f"movedim: repeated dim in `{name}` ({dims})")
    rest = [i for i in range(n) if i not in src]
    order: list[Any] = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    it = iter(rest)
    return permute(self, [o if o is not None else next(it) for o in order])


def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    return dispatch("gather", (self, index), {"dim": int(dim)})


def index_select(self: Tensor, dim: int, index: Tensor) -> Tensor:
    if index.dim() > 1:
        raise IndexError(f"index_select(): index must be a vector, got {index.dim()}-D")
    if index.dtype not in (D.int32, D.int64):
        raise DTypeError(f"index_select(): Expected dtype int32 or int64 for index, got "
                         f"{index.dtype.name}")
    d = norm_dim(dim, self.dim(), "index_select")
    if self.dim() == 0:   # a 0-d tensor is one of one element, the result 0-d too
        return index_select(self.reshape(1), d, index.reshape(-1)).reshape(())
    n = self.shape[d]
    if not TRACERS and index.numel() and isinstance(n, int):   # a value check, eager only
        lo, hi = int(index.min().item()), int(index.max().item())
        if lo < 0 or hi >= n:   # torch refuses negative indices here
            raise IndexRangeError(f"index out of range in self (index_select(): index "
                             f"{lo if lo < 0 else hi} for dimension {d} with size {n})")
    spec = (("slice", None, None, None),) * d + (("tensor", 0),)
    return dispatch("index", (self, index.reshape(-1)), {"spec": spec})


def flip(self: Tensor, dims: Any) -> Tensor:
    out = self
    for d in ([dims] if isinstance(dims, int) else dims):
        n = self.shape[d]
        out = index_select(out, d, arange(n - 1, -1, -1, device=self.device))
    return out


def _tri_mask(self: Tensor, diagonal: int, lower: bool) -> Tensor:
    r, c = self.shape[-2], self.shape[-1]
    rows = arange(r, device=self.device).unsqueeze(1)
    cols = arange(c, device=self.device).unsqueeze(0)
    return (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)


def _need_matrix(self: Tensor, op: str) -> None:
    if self.dim() < 2:
        raise ShapeError(f"{op}: input tensor must have at least 2 dimensions, got shape "
                         f"{tuple(self.shape)}")


def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    _need_matrix(self, "tril")
    return self.masked_fill(~_tri_mask(self, diagonal, True), 0)


def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    _need_matrix(self, "triu")
    return self.masked_fill(~_tri_mask(self, diagonal, False), 0)


def matmul(self: Tensor, other: Tensor) -> Tensor:
    return dispatch("matmul", (self, other))


def mm(self: Tensor, mat2: Tensor) -> Tensor:
    if self.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {self.dim()}-D and {mat2.dim()}-D")
    return matmul(self, mat2)


def bmm(self: Tensor, mat2: Tensor) -> Tensor:
    if self.dim() != 3 or mat2.dim() != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {self.dim()}-D and {mat2.dim()}-D")
    if self.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ ({self.shape[0]} vs {mat2.shape[0]})")
    return matmul(self, mat2)


def outer(self: Tensor, vec2: Tensor) -> Tensor:
    for name, v in (("self", self), ("vec2", vec2)):
        if v.dim() != 1:
            raise ShapeError(f"outer: Expected 1-D argument {name}, but got {v.dim()}-D")
    return unsqueeze(self, 1) * unsqueeze(vec2, 0)


def dot(self: Tensor, other: Tensor) -> Tensor:
    if self.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"dot: 1D tensors expected, but got {self.dim()}D and {other.dim()}D tensors")
    return matmul(self, other)


def addmm(self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    if isinstance(self, Tensor) and self.dtype is not mat2.dtype:   # torch never mixes them
        raise DTypeError(f"addmm: self and mat2 must have the same dtype, but got "
                         f"{self.dtype.short} and {mat2.dtype.short}")
    from scriptmod._ops_products import _scaled_sum   # lazy: _ops_products imports this module
    return _scaled_sum(self, mm(mat1, mat2), beta, alpha)


for _f in (reshape, view, permute, transpose, t, unsqueeze, squeeze, flatten, unflatten, expand,
           repeat, tile, contiguous, clone, narrow, split, chunk, unbind, select, movedim, gather,
           index_select, flip, tril, triu, matmul, mm, bmm, outer, dot, addmm):
    setattr(Tensor, _f.__name__, _f)
Tensor.view_as = lambda self, other: view(self, list(other.shape))
Tensor.addmm_ = _public.inplace_of(addmm, "addmm")
Tensor.reshape_as = lambda self, other: reshape(self, list(other.shape))
Tensor.expand_as = lambda self, other: expand(self, list(other.shape))
Tensor.swapaxes = Tensor.swapdims = transpose
Tensor.T = property(lambda self: permute(self, list(range(self.dim() - 1, -1, -1))))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


# ---- indexing -----------------------------------------------------------------------
def _index_parts(self: Tensor, idx: Any) -> tuple[tuple, list[Any]]:
    """Python index -> (spec, operands) for the ``index``/``index_put`` ops. Operands are
    index tensors and, while tracing, sizes computed from ``x.shape`` (``x[:n // 2]``): the
    spec refers to them as ``("input", k)`` so the trace follows other input sizes."""
    items = idx if isinstance(idx, tuple) else (idx,)
    spec: list[tuple] = []
    tensors: list[Any] = []

    def part(v: Any) -> Any:
        if type(v) is TracedInt:
            tensors.append(v)
            return ("input", len(tensors) - 1)
        return _slice_part(v)

    for it in items:
        if it is None:
            spec.append(("none",))
        elif it is Ellipsis:
            spec.append(("ellipsis",))
        elif isinstance(it, bool):
            raise IndexError("indexing with a Python bool is not supported; use a bool tensor")
        elif isinstance(it, (int, np.integer)):
            spec.append(("int", part(it)))
        elif isinstance(it, slice):
            if it.step is not None and _plain(it.step) <= 0:
                raise ValueError("step must be greater than zero")
            spec.append(("slice",) + tuple(part(v) for v in (it.start, it.stop, it.step)))
        elif isinstance(it, Tensor) and it.dim() == 0 and it.dtype.category == D.INT and not TRACERS:
            spec.append(("int", int(it)))
        elif isinstance(it, (Tensor, list, np.ndarray)):
            t = it if isinstance(it, Tensor) else tensor(it)
            if t.dtype.category > D.INT:
                raise IndexError(f"tensors used as indices must be long, int, byte or bool "
                                 f"tensors, got {t.dtype.name}")
            spec.append(("tensor", len(tensors)))
            tensors.append(t)
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"bool tensors are valid indices, got {type(it).__name__}")
    return tuple(spec), tensors


def _slice_part(v: Any) -> Any:
    return None if v is None else int(v)


def _getitem(self: Tensor, idx: Any) -> Tensor:
    spec, tensors = _index_parts(self, idx)
    if not tensors and not TRACERS and not (self._requires_grad and _gstate.enabled):
        try:
            arr = self._data[tuple(_np_index(spec))]
        except IndexError as e:
            raise IndexError(f"index: {e} (tensor of shape {tuple(self.shape)})") from None
        out = wrap(arr)
        out._vc, out._base = self._vc, (self._base if self._base is not None else self)
        return out
    out = dispatch("index", (self, *tensors), {"spec": spec})
    if not any(isinstance(t, Tensor) for t in tensors):   # basic indexing: a view, as on the fast path
        out._vc, out._base = self._vc, (self._base if self._base is not None else self)
        if out.grad_fn is not None:
            out._hv = out._vc[0]
    return out


def _np_index(spec: tuple) -> list[Any]:
    out: list[Any] = []
    for e in spec:
        out.append({"int": lambda: e[1], "slice": lambda: slice(*e[1:]), "none": lambda: None,
                    "ellipsis": lambda: Ellipsis}[e[0]]())
    return out


def _setitem(self: Tensor, idx: Any, value: Any) -> None:
    _check_writable(self)
    spec, tensors = _index_parts(self, idx)
    v = value if isinstance(value, Tensor) else tensor(value, dtype=self.dtype, device=self.device)
    if v.device != self.device:
        raise RuntimeError(f"setitem: value is on {v.device} but the tensor is on {self.device}")
    grad = _gstate.enabled and (self._requires_grad or v._requires_grad)
    if grad or TRACERS:
        _check_leaf(self)
        if TRACERS and isinstance(value, Tensor) and \
                not any(isinstance(t, Tensor) for t in tensors):    # x[i] op= v stores x[i]
            TRACERS[-1].on_store_back(self, value, build_index(
                spec, [int.__int__(t) for t in tensors], self._data.shape))
        _assign(self, dispatch("index_put", (self, v.to(self.dtype), *tensors), {"spec": spec},
                               inplace=True))
        return
    try:
        self._data[build_index(spec, [t._data for t in tensors], self._data.shape)] = \
            v._data.astype(self._data.dtype, copy=False)
    except (IndexError, ValueError) as e:
        kind = IndexError if isinstance(e, IndexError) else ShapeError   # torch: RuntimeError
        raise kind(f"setitem: {e} (tensor of shape {tuple(self.shape)}, value of shape "
                   f"{tuple(v.shape)})") from None
    self._vc[0] += 1


Tensor.__getitem__ = _getitem
Tensor.__setitem__ = _setitem


def index(self: Tensor, *tensors: Tensor, spec: tuple) -> Tensor:
    return dispatch("index", (self, *tensors), {"spec": spec})


def index_put(self: Tensor, values: Tensor, *tensors: Tensor, spec: tuple,
              accumulate: bool = False) -> Tensor:
    return dispatch("index_put", (self, values, *tensors), {"spec": spec, "accumulate": accumulate})


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Concatenate ``tensors`` along ``dim``.

    >>> scriptmod.cat([scriptmod.ones(2), scriptmod.zeros(1)])
    tensor([1., 1., 0.])
    """
    if isinstance(tensors, Tensor) or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("cat(): expected a sequence of Tensors")
    if not tensors:
        raise ValueError("cat(): expected a non-empty list of Tensors")
    return dispatch("cat", tuple(tensors), {"dim": int(dim)})


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    if isinstance(tensors, Tensor) or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("stack(): expected a sequence of Tensors")
    if not tensors:
        raise ShapeError("stack(): expected a non-empty list of Tensors")
    return dispatch("stack", tuple(tensors), {"dim": int(dim)})


concat = concatenate = cat
__all__ = ["cat", "stack", "concat", "concatenate", "index", "index_put"]
