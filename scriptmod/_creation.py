"""Tensor factories: ``tensor``, ``zeros``, ``arange``, ``randn``, ``*_like``, DLPack interop.

Shape-making factories go through ``dispatch`` so that a tracer records them (their sizes
may follow an input's symbolic batch size); ``tensor(data)`` makes a constant.

    >>> zeros(2, 3).shape
    scriptmod.Size([2, 3])
"""
from __future__ import annotations

import contextlib
import operator
from typing import Any, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType
from scriptmod.ir.errors import ArgumentValueError
from scriptmod.runtime import arrays
from scriptmod.runtime import random as rng
from scriptmod import _device
from scriptmod import _memory_format as _mf
from scriptmod import autograd
from scriptmod._dispatch import dispatch
from scriptmod._public import public
from scriptmod.autograd.engine import run_backward
from scriptmod.tensor import Tensor, _dtype_arg, wrap


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_dtype(arr: np.ndarray, from_python: bool) -> DType:
    if not from_python:
        return arrays.from_np_dtype(arr.dtype)
    kind = arr.dtype.kind
    if kind == "b":
        return D.bool_
    if kind in "iu":
        return D.int64
    if kind == "f":
        return D.get_default_dtype()
    if kind == "c":
        return D.complex128 if D.get_default_dtype() is D.float64 else D.complex64
    raise TypeError(f"tensor(): could not infer a dtype from data of kind {arr.dtype!r}; "
                    "expected numbers, bools, nested lists of them, or arrays")


def _to_host_array(data: Any) -> tuple[Any, bool]:
    """(array, came_from_python_numbers)"""
    if isinstance(data, Tensor):
        return data._data, False
    if arrays.is_cupy(data) or isinstance(data, np.ndarray):
        return data, False
    if isinstance(data, np.generic):
        return np.asarray(data), False
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat(data)):
        data = _untensor(data)
    try:
        arr = np.asarray(data)
    except ValueError as e:
        raise ValueError(f"tensor(): data must be a (nested) list of equal-length sequences; {e}") from None
    if arr.dtype == object:
        raise TypeError(f"tensor(): could not convert data of type {type(data).__name__} to a tensor")
    return arr, True


def _flat(x: Any) -> Any:
    for v in x:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _untensor(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return [_untensor(v) for v in x]
    return x.item() if isinstance(x, Tensor) else x


def tensor(data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (numbers, nested lists, arrays, tensors).

    >>> tensor([1, 2]).dtype, tensor([1.0]).dtype
    (scriptmod.int64, scriptmod.float32)
    """
    arr, from_py = _to_host_array(data)
    dt = _dtype_arg(dtype) if dtype is not None else _infer_dtype(arr, from_py)
    xp = arrays.array_module(arr)
    out = xp.array(arr, dtype=arrays.NP_DTYPE[dt], copy=True, order="C")
    dev = _device.canonical(device) if device is not None else arrays.device_of(out)
    return _finish(wrap(arrays.to_device(out, dev)), requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Like ``tensor`` but shares memory with ``data`` when dtype and device already match."""
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype) if (dtype or device) else data
    if isinstance(data, np.ndarray) or arrays.is_cupy(data):
        dt = _dtype_arg(dtype) if dtype is not None else arrays.from_np_dtype(data.dtype)
        arr = data if data.dtype == arrays.NP_DTYPE[dt] else data.astype(arrays.NP_DTYPE[dt])
        dev = _device.canonical(device) if device is not None else arrays.device_of(arr)
        return wrap(arrays.to_device(arr, dev))
    return tensor(data, dtype=dtype, device=device)


def from_numpy(arr: np.ndarray) -> Tensor:
    """A tensor sharing memory with NumPy array ``arr``."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(arr).__name__}")
    arrays.from_np_dtype(arr.dtype)
    return wrap(arr)


def from_dlpack(ext: Any) -> Tensor:
    """Import any DLPack-capable array (NumPy, CuPy, PyTorch...) without a copy."""
    if isinstance(ext, Tensor):
        return ext
    dev_type = ext.__dlpack_device__()[0] if hasattr(ext, "__dlpack_device__") else 1
    if dev_type == 1:
        return wrap(np.from_dlpack(ext))
    arrays.require_cuda("cuda")
    return wrap(arrays.cupy.from_dlpack(ext))  # type: ignore[union-attr]


def _size_args(size: Sequence[Any]) -> list[Any]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    for s in size:
        if not isinstance(s, (int, np.integer)) and not (isinstance(s, Tensor) and s.numel() == 1):
            raise TypeError(f"size must be a sequence of ints, got element {s!r} of type "
                            f"{type(s).__name__}")
    return [s if not isinstance(s, (Tensor, np.integer)) else int(s) for s in size]


def _attrs(dtype: Any, device: Any, default: DType | None = None) -> dict[str, Any]:
    dt = _dtype_arg(dtype) if dtype is not None else (default or D.get_default_dtype())
    return {"dtype": dt, "device": _device.canonical(device)}


def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if not isinstance(fill_value, (int, float, complex, np.number, np.bool_)):
        raise TypeError(f"full(): argument 'fill_value' must be a number, got "
                        f"{type(fill_value).__name__}")
    default = {bool: D.bool_, int: D.int64, complex: D.complex64}.get(type(fill_value))
    size = _size_args(size if isinstance(size, (tuple, list)) else (size,))
    out = dispatch("full", (size, fill_value), _attrs(dtype, device, default))
    return _finish(out, requires_grad)


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(dispatch("full", (_size_args(size), 0), _attrs(dtype, device)), requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(dispatch("full", (_size_args(size), 1), _attrs(dtype, device)), requires_grad)


def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
          memory_format: Any = _mf.contiguous_format) -> Tensor:
    """Contents are unspecified (here: zeros, so results never depend on stale memory);
    ``memory_format``: the storage order (``scriptmod.channels_last``: NHWC)."""
    fmt = _mf.check(memory_format, "empty()")
    if fmt is _mf.preserve_format:
        raise ArgumentValueError("empty(): memory_format=preserve_format needs an input to "
                                 "preserve; use empty_like")
    out = _mf.created(lambda s: zeros(*s, dtype=dtype, device=device), _size_args(size), fmt,
                      "empty()")
    return _finish(out, requires_grad)


def rand(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(dispatch("rand", (_size_args(size),), _attrs(dtype, device)), requires_grad)


def randn(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(dispatch("randn", (_size_args(size),), _attrs(dtype, device)), requires_grad)


def randint(low: int, high: Any = None, size: Any = None, *, dtype: Any = None,
            device: Any = None) -> Tensor:
    """``randint(high, size)`` or ``randint(low, high, size)``: ints in [low, high)."""
    if size is None:
        low, high, size = 0, low, high
    if size is None:
        raise TypeError("randint() missing required argument 'size'")
    attrs = _attrs(dtype, device, D.int64)
    attrs.update(low=int(low), high=int(high))
    return dispatch("randint", (_size_args(size if isinstance(size, (list, tuple)) else (size,)),), attrs)


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    """``arange(end)`` or ``arange(start, end, step)``; int64 when every bound is an int."""
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    for name, v in zip(("start", "end", "step"), vals):
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
            raise TypeError(f"arange(): argument '{name}' must be a number, got "
                            f"{type(v).__name__}")
    if not all(np.isfinite(v) for v in vals):
        raise ArgumentValueError(f"arange: unsupported range: {vals[0]} -> {vals[1]} "
                                 f"(step {vals[2]}); bounds and step must be finite")
    is_int = all(isinstance(v, (int, np.integer)) for v in vals)
    attrs = _attrs(dtype, device, D.int64 if is_int else None)
    # bounds are inputs: a size read from x.shape while tracing stays symbolic
    bounds = tuple(v if isinstance(v, int) else int(v) if isinstance(v, np.integer) else float(v)
                   for v in vals)
    return _finish(dispatch("arange", bounds, attrs), requires_grad)


def linspace(start: float, end: float, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    attrs = _attrs(dtype, device)
    attrs.update(start=float(start), end=float(end), steps=int(steps))
    return _finish(dispatch("linspace", (), attrs), requires_grad)


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    attrs = _attrs(dtype, device)
    attrs.update(n=int(n), m=int(n if m is None else m))
    return _finish(dispatch("eye", (), attrs), requires_grad)


def _like(fn: Any) -> Any:
    def like(input: Tensor, *args: Any, dtype: Any = None, device: Any = None,
             requires_grad: bool = False, memory_format: Any = _mf.preserve_format) -> Tensor:
        fmt = _mf.check(memory_format, like.__name__ + "()")
        if fmt is _mf.preserve_format:
            fmt = _mf.suggest(input)
        kw = dict(dtype=dtype or input.dtype, device=device or input.device)
        out = _mf.created(lambda s: fn(s, *args, **kw), list(input.shape), fmt, like.__name__)
        return _finish(out, requires_grad)
    like.__name__ = fn.__name__ + "_like"
    return like


zeros_like, ones_like, empty_like = _like(zeros), _like(ones), _like(empty)
rand_like, randn_like, full_like = _like(rand), _like(randn), _like(full)


def randint_like(input: Tensor, low: int, high: Any = None, *, dtype: Any = None,
                 device: Any = None) -> Tensor:
    if high is None:
        low, high = 0, low
    return randint(low, high, list(input.shape), dtype=dtype or input.dtype,
                   device=device or input.device)


class Generator:
    """A random number generator of its own, for the ``generator=`` of ``randperm`` (and of
    ``scriptmod.utils.data``): the same seed gives the same draws, whatever else is drawn.

        >>> a = randperm(6, generator=Generator().manual_seed(1))
        >>> bool((a == randperm(6, generator=Generator().manual_seed(1))).all())
        True
    """

    _FRESH_SEED = 67280421310721    # PyTorch's seed of a new generator

    def __init__(self, device: Any = "cpu") -> None:
        self.device = _device.canonical(device)
        self.manual_seed(self._FRESH_SEED)

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed) % (2 ** 63)
        self._draws = rng.seeded(self.device, self._seed)
        return self

    def initial_seed(self) -> int:
        return self._seed

    def seed(self) -> int:
        """Reseed from fresh entropy; returns the new seed."""
        s = int(np.random.SeedSequence().entropy % (2 ** 63))
        self.manual_seed(s)
        return s

    def _drawing(self, device: str) -> Any:
        if device != self.device:
            raise ValueError(f"expected a generator on device {device!r}, got one on "
                             f"{self.device!r}")
        return rng.drawing_from(self.device, self._draws)


class _DefaultGenerator(Generator):
    """The default generator, as ``manual_seed`` returns it: seeding it seeds every device."""

    def __init__(self) -> None:
        self.device = "cpu"

    def manual_seed(self, seed: int) -> Generator:
        rng.manual_seed(int(seed))
        return self

    def initial_seed(self) -> int:
        return rng.initial_seed()

    def _drawing(self, device: str) -> Any:
        return contextlib.nullcontext()


default_generator = _DefaultGenerator()


def randperm(n: Any, *, generator: Generator | None = None, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64 unless ``dtype`` says otherwise).

    Traced, it draws anew on every call, from the default generator (a ``generator=`` given
    while tracing is not part of the graph).

        >>> sorted(randperm(4).tolist())
        [0, 1, 2, 3]
    """
    if not isinstance(n, int):
        try:
            n = operator.index(n)
        except TypeError:
            raise TypeError(f"randperm(): argument 'n' must be int, got {type(n).__name__}") from None
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"randperm(): argument 'generator' must be a scriptmod.Generator, got "
                        f"{type(generator).__name__}")
    attrs = _attrs(dtype, device, D.int64)
    with (generator or default_generator)._drawing(attrs["device"]):
        return _finish(dispatch("randperm", (n,), attrs), requires_grad)


def manual_seed(seed: int) -> Generator:
    """Seed every device's generator: the same seed gives the same numbers."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2 ** 63))
    rng.manual_seed(s)
    return s


def initial_seed() -> int:
    return rng.initial_seed()


# ---- Tensor methods that make tensors ------------------------------------------------------
# Attached here, from above: ``scriptmod.tensor`` defines the class and its storage and
# imports no factory.
def _construct(self: Tensor, data: Any = None, *, dtype: DType | None = None, device: Any = None,
               requires_grad: bool = False) -> None:
    if data is None:
        data = np.empty((0,), dtype=arrays.NP_DTYPE[D.get_default_dtype()])
    t = tensor(data, dtype=dtype, device=device) if not isinstance(data, Tensor) else data
    Tensor._init(self, t._data)
    self.requires_grad = requires_grad


def _backward(self: Tensor, gradient: "Tensor | None" = None, retain_graph: bool | None = None,
              create_graph: bool = False, inputs: Sequence["Tensor"] | None = None) -> None:
    """Accumulate d(self)/d(leaf) into every leaf's ``.grad``."""
    if gradient is None:
        if self.numel() != 1:
            raise RuntimeError(f"grad can be implicitly created only for scalar outputs; "
                               f"this tensor has shape {tuple(self.shape)}")
        gradient = ones_like(self)
    elif not isinstance(gradient, Tensor):
        gradient = tensor(gradient, dtype=self.dtype, device=self.device)
    if tuple(gradient.shape) != tuple(self.shape):
        raise RuntimeError(f"backward: gradient has shape {tuple(gradient.shape)} but the "
                           f"tensor has shape {tuple(self.shape)}")
    if inputs is None:
        retain = create_graph if retain_graph is None else retain_graph
        run_backward([self], [gradient], retain, create_graph)
        return
    autograd.backward([self], [gradient], retain_graph, create_graph, inputs)


def _new_tensor(self: Tensor, data: Any, dtype: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:
    return tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                  requires_grad=requires_grad)


def _new_zeros(self: Tensor, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros(*size, dtype=dtype or self.dtype, device=device or self.device)


def _new_ones(self: Tensor, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return ones(*size, dtype=dtype or self.dtype, device=device or self.device)


def _new_full(self: Tensor, size: Any, fill_value: Any, dtype: Any = None,
              device: Any = None) -> Tensor:
    return full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device)


def _new_empty(self: Tensor, *size: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return empty(*size, dtype=dtype or self.dtype, device=device or self.device)


for _name, _method in {"__init__": _construct, "backward": _backward, "new_tensor": _new_tensor,
                       "new_zeros": _new_zeros, "new_ones": _new_ones, "new_full": _new_full,
                       "new_empty": _new_empty}.items():
    _method.__name__, _method.__qualname__ = _name, f"Tensor.{_name}"
    setattr(Tensor, _name, _method)


# ---- factories of the views family (issue 39): published with ``@public`` -----------------
def _ints(v: Any) -> list[int]:
    return [int(v)] if isinstance(v, (int, np.integer)) else [int(i) for i in v]


def _tri_indices(row: int, col: int, offset: int, lower: bool, dtype: Any,
                 device: Any) -> Tensor:
    for name, n in (("row", row), ("col", col)):
        if n < 0:
            raise ArgumentValueError(f"{name} must be non-negative, got {n}")
    rows, cols = np.tril_indices(row, offset, col) if lower else np.triu_indices(row, offset, col)
    return tensor(np.stack([rows, cols]).reshape(2, -1), dtype=dtype or D.int64,
                    device=device)


@public(method=False, out=False)
def tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None,
                 device: Any = None, layout: Any = None) -> Tensor:
    """The (row, column) indices of the lower triangle of a ``row`` x ``col`` matrix (on and
    below the ``offset`` diagonal), row by row, as a (2, N) tensor."""
    return _tri_indices(row, col, offset, True, dtype, device)


@public(method=False, out=False)
def triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None,
                 device: Any = None, layout: Any = None) -> Tensor:
    """The (row, column) indices of the upper triangle (on and above ``offset``)."""
    return _tri_indices(row, col, offset, False, dtype, device)



@public(method=False)
def logspace(start: Any, end: Any, steps: int, base: float = 10.0, *, dtype: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:
    """``base ** linspace(start, end, steps)``."""
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    dt = _dtype_arg(dtype) if dtype is not None else D.get_default_dtype()
    wide = D.complex128 if isinstance(start, complex) or isinstance(end, complex) \
        else D.float64
    exps = linspace(start, end, steps, dtype=wide, device=device)
    return (float(base) ** exps).to(dt).requires_grad_(requires_grad)


@public(method=False, out=False)
def scalar_tensor(s: Any, *, dtype: Any = None, device: Any = None,
                  requires_grad: bool = False) -> Tensor:
    """A 0-d tensor of ``s`` (the default float dtype unless ``dtype``)."""
    return tensor(s, dtype=dtype or D.get_default_dtype(), device=device,
                    requires_grad=requires_grad)


@public(method=False, out=False)
def empty_strided(size: Sequence[int], stride: Sequence[int], *, dtype: Any = None,
                  device: Any = None, requires_grad: bool = False) -> Tensor:
    """An uninitialized (here: zero) tensor with the given ``size`` and ``stride``."""
    size, stride = _ints(size), _ints(stride)
    need = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    storage = zeros(need, dtype=dtype, device=device)
    view = dispatch("as_strided", (storage,), {"size": size, "stride": stride,
                                               "offset": 0})
    return view.requires_grad_(requires_grad)


@public(function=False)
def new_empty_strided(self: Tensor, size: Sequence[int], stride: Sequence[int], *,
                      dtype: Any = None, device: Any = None,
                      requires_grad: bool = False) -> Tensor:
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device,
                         requires_grad=requires_grad)


@public(method=False, out=False)
def empty_permuted(size: Sequence[int], physical_layout: Sequence[int], *, dtype: Any = None,
                   device: Any = None, requires_grad: bool = False) -> Tensor:
    """An uninitialized (here: zero) tensor of ``size`` whose dims lie in memory in the order
    ``physical_layout`` (outermost first)."""
    size, layout = _ints(size), _ints(physical_layout)
    if sorted(layout) != list(range(len(size))):
        raise RuntimeError(f"Number of dimensions in size does not match the length of the "
                           f"physical_layout; or physical_layout {layout} is not a permutation")
    storage = zeros(*[size[d] for d in layout], dtype=dtype, device=device)
    inverse = [layout.index(d) for d in range(len(size))]
    return storage.permute(*inverse).requires_grad_(requires_grad)
