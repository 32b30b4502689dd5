"""``scriptmod.Tensor``: an n-d array (NumPy on the CPU, CuPy on CUDA) with PyTorch's API,
dtype promotion and autograd. Every op goes through ``scriptmod._dispatch.dispatch``.

This module defines the class, its storage (construction from an array, views' version
counters, in-place writes) and the methods that need no other op. It imports no op family:
the families above it attach their methods to the class (``_creation``: the constructor,
``new_*`` and ``backward``; ``_shape_ops``: views, indexing and matmul; ``_tensor_ops``: the
registry's elementwise vocabulary, reductions and in-place forms).

    >>> x = scriptmod.tensor([[1.0, 2.0]], requires_grad=True)
    >>> (x * 3).sum().backward(); x.grad
    tensor([[3., 3.]])
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType
from scriptmod.ir.errors import ShapeError
from scriptmod.runtime import arrays
from scriptmod.runtime.trees import rebuilt
from scriptmod import _device
from scriptmod import _memory_format as _mf
from scriptmod._dispatch import TRACERS, dispatch, set_tensor_class
from scriptmod.autograd import grad_mode
from scriptmod.autograd.engine import AccumulateGrad, RemovableHandle, SavedTensor

_gstate = grad_mode._state
_NP_TO_D = {np.dtype(v): k for k, v in arrays.NP_DTYPE.items()}


class Tensor:
    """A tensor. Construct with ``scriptmod.tensor(...)`` or a factory, not directly (the
    constructor and most methods are attached by the op families, see the module docstring)."""

    __slots__ = ("_data", "_requires_grad", "grad", "grad_fn", "_output_nr", "_vc", "_base", "_hv",
                 "_accum", "_hooks", "_retains_grad", "__weakref__", "__dict__")

    # ---- construction ---------------------------------------------------------------
    def _init(self, arr: Any) -> None:
        self._data = arr
        self._requires_grad = False
        self.grad = None
        self.grad_fn = None
        self._output_nr = 0
        self._vc = [0]
        self._base = None
        self._accum = None
        self._hooks = None
        self._retains_grad = False

    @classmethod
    def _make(cls, arr: Any) -> "Tensor":
        t = object.__new__(Tensor)
        t._data = arr
        t._requires_grad = False
        t.grad = None
        t.grad_fn = None
        t._output_nr = 0
        t._vc = [0]
        t._base = None
        t._accum = None
        t._hooks = None
        t._retains_grad = False
        return t

    def _alias(self) -> "Tensor":
        """Same data and version counter, no autograd history. Not an autograd view: in-place
        writes through it are allowed (as with PyTorch's ``detach``) and bump the version."""
        t = Tensor._make(self._data)
        t._vc = self._vc
        return t

    def __deepcopy__(self, memo: dict) -> "Tensor":
        """A new leaf with copied data, keeping ``requires_grad`` (and a copy of ``.grad``)."""
        out = Tensor._make(self._data.copy())
        out._requires_grad = self._requires_grad
        memo[id(self)] = out
        if self.grad is not None:
            out.grad = self.grad.__deepcopy__(memo)
        return out

    # ---- basic properties -----------------------------------------------------------
    @property
    def dtype(self) -> DType:
        return _NP_TO_D[self._data.dtype]

    @property
    def shape(self) -> tuple:
        if TRACERS:   # sizes read while tracing stay symbolic (see scriptmod.jit)
            return TRACERS[-1].shape_of(self)
        return Size(self._data.shape)

    def size(self, dim: int | None = None) -> Any:
        shape = self.shape
        if dim is None:
            return shape
        n = len(shape)
        if not isinstance(dim, int) or not (-max(n, 1) <= dim < max(n, 1)):
            raise IndexError(f"size(): dim expected to be in range of [{-max(n, 1)}, {max(n, 1) - 1}], "
                             f"but got {dim!r}")
        return shape[dim] if n else 1

    def dim(self) -> int:
        return self._data.ndim

    ndim = property(dim)

    def numel(self) -> int:
        if TRACERS:   # the product of symbolic sizes while tracing
            return TRACERS[-1].numel_of(self)
        return int(self._data.size)

    nelement = numel

    def element_size(self) -> int:
        return self._data.dtype.itemsize

    itemsize = property(element_size)

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    def stride(self, dim: int | None = None) -> Any:
        """Strides in elements. NumPy gives an empty array zero strides; PyTorch gives a
        zero-size tensor the strides of its contiguous layout (``zeros(0, 8)``: ``(8, 1)``),
        which is what this returns for one that is C-contiguous."""
        data = self._data
        if data.size == 0 and data.flags.c_contiguous:
            from scriptmod.runtime.native.views import c_strides
            s = c_strides([max(n, 1) for n in data.shape])
        else:
            s = tuple(st // data.dtype.itemsize for st in data.strides)
        return s if dim is None else s[dim]

    def is_contiguous(self, memory_format: Any = _mf.contiguous_format) -> bool:
        """Whether the elements lie densely in C order (or in ``memory_format``'s order:
        NHWC for ``scriptmod.channels_last``)."""
        if memory_format is _mf.contiguous_format:
            return bool(self._data.flags.c_contiguous)
        fmt = _mf.check(memory_format, "is_contiguous()")
        return _mf.is_in(self, fmt)

    def data_ptr(self) -> int:
        return int(self._data.data.ptr) if arrays.is_cupy(self._data) else int(self._data.ctypes.data)

    def _device_str(self) -> str:
        return "cpu" if type(self._data) is np.ndarray else arrays.device_of(self._data)

    @property
    def device(self) -> _device.device:
        return _device.from_str(self._device_str())

    @property
    def is_cuda(self) -> bool:
        return self._device_str() != "cpu"

    @property
    def is_cpu(self) -> bool:
        return self._device_str() == "cpu"

    def is_floating_point(self) -> bool:
        return self.dtype.category == D.FLOAT

    def is_complex(self) -> bool:
        return self.dtype.category == D.COMPLEX

    def _xp(self) -> Any:
        return arrays.array_module(self._data)

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's storage has had (shared with its views and
        ``detach()`` aliases, as in PyTorch); autograd checks saved tensors against it."""
        return self._vc[0]

    @property
    def data(self) -> "Tensor":
        """The same storage with no history and its own version counter (PyTorch's
        ``.data``: writes through it are invisible to autograd's version checks)."""
        if TRACERS:      # recorded as a detach: a trace must not bake the value in
            return dispatch("detach", (self,))
        return Tensor._make(self._data)

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data: expected a Tensor, got {type(value).__name__}")
        self._data = value._data

    # ---- autograd -------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None and not value:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you "
                               "want to use a computed variable in a subgraph that doesn't require "
                               "differentiation use var_no_grad = var.detach().")
        if value and self.dtype.category < D.FLOAT:
            raise RuntimeError(f"only Tensors of floating point and complex dtype can require "
                               f"gradients, got {self.dtype.name}")
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def _set_grad_fn(self, node: Any, output_nr: int) -> None:
        self.grad_fn, self._output_nr, self._requires_grad = node, output_nr, True
        self._hv = self._vc[0]   # the data version this history describes (see _dispatch)

    def _grad_node(self) -> Any:
        if self.grad_fn is not None:
            return self.grad_fn
        if not self._requires_grad:
            return None
        node = self._accum() if self._accum is not None else None
        if node is None:
            node = AccumulateGrad(self)
            self._accum = weakref.ref(node)
        return node

    def _accumulate(self, g: "Tensor") -> None:
        g = self._apply_hooks(g)
        self.grad = g if self.grad is None else self.grad + g

    def _apply_hooks(self, g: "Tensor") -> "Tensor":
        for fn in list(self._hooks or ()):
            r = fn(g)
            if r is not None:
                g = r
        return g

    def register_hook(self, hook: Callable[["Tensor"], "Tensor | None"]) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; it may return a new one."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = []
            self._hooks.append(hook)
            return RemovableHandle(self._hooks, hook)
        k = self._output_nr

        def pre(gs: tuple) -> tuple | None:
            if gs[k] is None:
                return None
            r = hook(gs[k])
            return None if r is None else gs[:k] + (r,) + gs[k + 1:]
        return self.grad_fn.register_prehook(pre)

    def retain_grad(self) -> None:
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains_grad:
            return
        self._retains_grad = True
        ref = weakref.ref(self)

        def keep(g: "Tensor") -> None:
            t = ref()
            if t is not None:
                t.grad = g.detach() if t.grad is None else t.grad + g.detach()
        self.register_hook(keep)

    def detach(self) -> "Tensor":
        if TRACERS:      # recorded, so the trace reads the value and cuts the gradient
            return dispatch("detach", (self,))
        return self._alias()

    def detach_(self) -> "Tensor":
        self.grad_fn, self._requires_grad = None, False
        return self

    # ---- conversion and interop ------------------------------------------------------
    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        if arrays.is_cupy(self._data):
            if not force:
                raise TypeError(f"can't convert {self.device} tensor to numpy. Use Tensor.cpu() "
                                "to copy the tensor to host memory first.")
            return arrays.to_device(self._data, "cpu")
        return self._data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy(force=True)
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple:
        return self._data.__dlpack_device__()

    def _read(self, what: str) -> Any:
        """A value leaves the tensor world; a tracer warns that it gets baked in."""
        if TRACERS:
            TRACERS[-1].on_value_read(self, what)
        return arrays.to_device(self._data, "cpu") if arrays.is_cupy(self._data) else self._data

    def tolist(self) -> Any:
        return self._read("tolist").tolist()

    def item(self) -> Any:
        if self.numel() != 1:
            raise ShapeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._read("item").reshape(()).item()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.numel()} elements is ambiguous")
        return bool(self._read("bool").reshape(()).item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        if self.dtype.category != D.INT or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        if TRACERS:   # a Python int: baked, guarded, warned about when traced
            return TRACERS[-1].on_len(self)
        return self._data.shape[0]

    def __iter__(self) -> Iterator["Tensor"]:
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        n = TRACERS[-1].on_len(self, "iteration over a tensor (the loop is unrolled)") \
            if TRACERS else self._data.shape[0]
        return (self[i] for i in range(n))

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        from scriptmod._tensor_str import tensor_repr
        return tensor_repr(self)

    def __format__(self, spec: str) -> str:
        if self.dim() == 0 and spec:
            return format(self.item(), spec)
        return repr(self)

    def __reduce__(self) -> Any:
        raise TypeError("scriptmod tensors are not pickled; use scriptmod.save (safetensors)")

    # ---- device and dtype -----------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> "Tensor":
        """``to(dtype)``, ``to(device, dtype=None)``, ``to(other_tensor)``; ``copy=`` forces a
        copy; ``memory_format=`` lays the result out so (``preserve_format``: as ``self``)."""
        fmt = _mf.check(kwargs.pop("memory_format", _mf.preserve_format), "to()")
        dev, dt, copy = _parse_to(args, kwargs)
        out = self
        if dev is not None and _device.canonical(dev) != self._device_str():
            out = dispatch("to_device", (out,), {"device": _device.canonical(dev)})
        if dt is not None and dt is not out.dtype:
            out = dispatch("cast", (out,), {"dtype": dt})
        if fmt is not _mf.preserve_format:
            out = out.contiguous(memory_format=fmt)
        if copy and out is self:
            out = self.clone()
        return out

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device: Any = None) -> "Tensor":
        d = "cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device)
        arrays.require_cuda(str(d))
        return self.to(d)

    def type(self, dtype: Any = None) -> Any:
        if dtype is None:
            return f"scriptmod.{self.dtype.short}Tensor"
        return self.to(_dtype_arg(dtype))

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    def float(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.float32, memory_format=memory_format)

    def double(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.float64, memory_format=memory_format)

    def half(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.float16, memory_format=memory_format)

    def bfloat16(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.bfloat16, memory_format=memory_format)

    def int(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.int32, memory_format=memory_format)

    def long(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.int64, memory_format=memory_format)

    def short(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.int16, memory_format=memory_format)

    def char(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.int8, memory_format=memory_format)

    def byte(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.uint8, memory_format=memory_format)

    def bool(self, memory_format: Any = _mf.preserve_format) -> "Tensor":
        return self.to(D.bool_, memory_format=memory_format)


class Size(tuple):
    """``tensor.shape``: a tuple of ints that prints as ``scriptmod.Size([2, 3])``."""

    def __repr__(self) -> str:
        return f"scriptmod.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n


def _dtype_arg(d: Any) -> DType:
    if isinstance(d, DType):
        return d
    if isinstance(d, str):
        name = d.replace("scriptmod.", "").replace("torch.", "")
        for dt in D.ALL:
            if name in (dt.name, f"{dt.short}Tensor"):
                return dt
    if d in (float, int, bool, complex):
        return {float: D.get_default_dtype(), int: D.int64, bool: D.bool_, complex: D.complex64}[d]
    try:
        return arrays.from_np_dtype(d)
    except TypeError:
        raise TypeError(f"expected a scriptmod dtype such as scriptmod.float32, got {d!r}") from None


def _parse_to(args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, DType | None, bool]:
    dev, dt = kwargs.pop("device", None), kwargs.pop("dtype", None)
    copy = bool(kwargs.pop("copy", False))
    kwargs.pop("non_blocking", None)   # a hint: copies here are synchronous, same result
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            dev, dt = a.device, a.dtype
        elif isinstance(a, (str, _device.device)) and not (isinstance(a, str) and _is_dtype_name(a)):
            dev = a
        elif isinstance(a, int) and not isinstance(a, bool):
            dev = f"cuda:{a}"
        elif isinstance(a, bool):
            copy = copy or a   # to(dtype, non_blocking, copy) positional form
        else:
            dt = a
    return dev, (None if dt is None else _dtype_arg(dt)), copy


def _is_dtype_name(s: str) -> bool:
    return s.replace("scriptmod.", "").replace("torch.", "") in D.BY_NAME


# ---- writing into a tensor's storage (every in-place op and setitem ends here) -------------
def _assign(self: Tensor, out: Tensor) -> Tensor:
    """Write ``out`` into ``self``'s storage and take over its autograd history."""
    if tuple(out.shape) != tuple(self.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast "
                           f"shape {list(out.shape)}")
    if out.dtype is not self.dtype and out.dtype.category > self.dtype.category:
        raise RuntimeError(f"result type {out.dtype.short} can't be cast to the desired output "
                           f"type {self.dtype.short}")
    arr = out._data if out.dtype is self.dtype else out._data.astype(self._data.dtype)
    if out.grad_fn is not None:
        _keep_saved_self(out.grad_fn, self)
    _check_writable(self)
    self._data[...] = arr
    self._vc[0] += 1
    if out.grad_fn is not None:
        self._set_grad_fn(out.grad_fn, out._output_nr)
    elif self.grad_fn is not None:   # changed under no_grad: the old history stays in force
        self._hv = self._vc[0]
    if TRACERS:
        TRACERS[-1].on_inplace(self, out)
    return self


def _check_writable(self: Tensor) -> None:
    """PyTorch's refusal to write into an expanded tensor whose elements share memory."""
    data = self._data
    if data.size and any(s == 0 and n > 1 for s, n in zip(data.strides, data.shape)):
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the tensor "
                           "before performing the operation.")
    if not getattr(data, "flags", None) or data.flags.writeable:
        return
    raise RuntimeError("in-place write into this tensor is not possible: it is a read-only "
                       "view; call .clone() first")


def _keep_saved_self(node: Any, self: Tensor) -> None:
    """The op being done in place saved ``self`` for backward: keep a copy of the old value."""
    saved = getattr(node.ctx, "_saved", None) or ()
    for k, s in enumerate(saved):
        if isinstance(s, SavedTensor) and s.tensor is self:
            saved[k] = SavedTensor(self.detach().clone())


def _check_leaf(self: Tensor) -> None:
    if not _gstate.enabled:
        return
    if self._requires_grad and self.grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    base = self._base
    if base is not None and base._requires_grad and base.grad_fn is None:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")


def wrap(arr: Any) -> Tensor:
    """A tensor around an array (no copy) — for runtime internals and backward kernels."""
    return Tensor._make(arr)


def wrap_tree(x: Any) -> Any:
    """``wrap`` every array in a nest of tuples, lists and dicts (a compiled graph's
    outputs); a namedtuple stays one (``runtime.trees.rebuilt``)."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return Tensor._make(x)
    if isinstance(x, (tuple, list)):
        return rebuilt(x, (wrap_tree(i) for i in x))
    if type(x) is dict:
        return {k: wrap_tree(v) for k, v in x.items()}
    return x


def unwrap_tree(x: Any) -> Any:
    """Every Tensor's array in a nest of tuples, lists and dicts (a compiled graph's
    inputs, a library call's result); a namedtuple stays one."""
    if isinstance(x, Tensor):
        return x._data
    if isinstance(x, (tuple, list)):
        return rebuilt(x, (unwrap_tree(i) for i in x))
    if type(x) is dict:
        return {k: unwrap_tree(v) for k, v in x.items()}
    return x


set_tensor_class(Tensor)
