"""scriptmod: PyTorch-style modules, traced into our own IR and compiled.

    >>> import scriptmod as sm
    >>> x = sm.randn(2, 3)
    >>> (x * 2).sum(dim=1).shape
    scriptmod.Size([2])
"""
from __future__ import annotations

import builtins as _builtins
import math as _math

__version__ = "0.1.0"

from scriptmod.ir.dtypes import (DType as dtype, bfloat16, complex64, complex128, float16, float32,  # noqa: F401
                       float64, get_default_dtype, int8, int16, int32, int64, promote_types,
                       set_default_dtype, uint8, uint16, uint32, uint64)
from scriptmod.ir.dtypes import bool_ as bool  # noqa: A001
from scriptmod._device import device  # noqa: F401
from scriptmod.ir.errors import ArgumentValueError, DeviceError, DTypeError, ShapeError  # noqa: F401
from scriptmod.tensor import Size, Tensor  # noqa: F401
from scriptmod import _tensor_ops  # noqa: F401  (methods)
from scriptmod._creation import (Generator, arange, as_tensor, empty, empty_like, eye,  # noqa: F401
                                 from_dlpack, from_numpy, full, full_like, initial_seed,
                                 linspace, manual_seed, ones, ones_like, rand, rand_like, randint,
                                 randint_like, randn, randn_like, seed, tensor, zeros, zeros_like)
from scriptmod._creation import default_generator, randperm  # noqa: F401
from scriptmod._shape_ops import cat, concat, concatenate, stack  # noqa: F401
from scriptmod._memory_format import (channels_last, channels_last_3d,  # noqa: F401
                                      contiguous_format, memory_format, preserve_format)
from scriptmod._tensor_ops import floor_divide, where  # noqa: F401
from scriptmod import autograd  # noqa: F401
from scriptmod.autograd import (enable_grad, inference_mode, is_grad_enabled,  # noqa: F401
                                no_grad, set_grad_enabled)
from scriptmod.autograd.derivatives import DERIVATIVES as _DERIVATIVES
from scriptmod._dispatch import set_derivatives as _set_derivatives

_set_derivatives(_DERIVATIVES)

half, float, double = float16, float32, float64  # noqa: A001
cfloat, cdouble = complex64, complex128
short, int, long = int16, int32, int64  # noqa: A001
bool_ = bool
float_ = float32


def _install_functions() -> None:
    """``scriptmod.<name>``: the generated function forms of ``_tensor_ops`` and every
    family's ``@public`` functions (``scriptmod/_ops_<family>.py``), all with ``out=``."""
    from scriptmod import _public
    from scriptmod import (_ops_aten, _ops_indexing, _ops_linalg, _ops_math,  # noqa: F401
                           _ops_products, _ops_scans, _ops_views, fft, special)
    from scriptmod._tensor_ops import _FN_TABLE
    g = globals()
    for name, fn in _public.FUNCTIONS.items():
        g.setdefault(name, fn)
    for name, fn in _FN_TABLE.items():
        if name not in ("split", "chunk", "unbind", "numel", "detach", "clone") \
                and not name.endswith("_"):
            fn = _public.with_out(fn, name)
        g.setdefault(name, fn)
    # factories and joins take out= too
    for name in ("cat", "concat", "concatenate", "stack", "arange", "zeros", "ones", "full",
                 "empty", "eye", "linspace", "rand", "randn", "randint", "randperm"):
        g[name] = _public.with_out(g[name], name)


_install_functions()


# (``bool``, ``int`` and ``float`` name dtypes in this module, as in torch; annotations below
# mean the Python builtins.)
def is_tensor(obj: object) -> "_builtins.bool":
    return isinstance(obj, Tensor)


def numel(input: Tensor) -> "_builtins.int":
    return input.numel()


def is_complex(input: Tensor) -> "_builtins.bool":
    """Whether ``input``'s dtype is complex (``complex64``, ``complex128``)."""
    return input.is_complex()


def is_floating_point(input: Tensor) -> "_builtins.bool":
    """Whether ``input``'s dtype is a floating point one (``float16``, ``bfloat16``,
    ``float32``, ``float64``)."""
    return input.is_floating_point()


def result_type(a: object, b: object) -> dtype:
    """The dtype ``a op b`` would have (PyTorch's promotion, scalars included)."""
    from scriptmod.ir.ops.rules import promote
    ops = [(x.dtype, tuple(x.shape)) if isinstance(x, Tensor) else type(x) for x in (a, b)]
    return promote(ops, {})


def can_cast(from_: dtype, to: dtype) -> "_builtins.bool":
    """Whether ``from_`` converts to ``to`` without leaving its kind (torch.can_cast)."""
    return from_.category <= to.category


pi, e, inf, nan = _math.pi, _math.e, _math.inf, _math.nan


def _assert(condition: object, message: str) -> None:
    """``torch._assert``: raise ``AssertionError(message)`` when ``condition`` is false; a
    one-element tensor counts by its value. Model code calls it to check its inputs, also
    while being traced: then the check runs on the example input and leaves nothing in the
    graph (as in ``torch.jit.trace``), so a traced model does not check later inputs.

        >>> x = scriptmod.ones(2, 3)
        >>> scriptmod._assert(x.dim() == 2, f"Expected (N, C), got {tuple(x.shape)}")
        >>> scriptmod._assert(x.dim() == 4, f"Expected (N, C, H, W), got {tuple(x.shape)}")
        Traceback (most recent call last):
        AssertionError: Expected (N, C, H, W), got (2, 3)
    """
    if isinstance(condition, Tensor):
        if condition.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {condition.numel()} elements "
                               f"is ambiguous")
        condition = condition.numpy(force=True).item()   # a check: no trace-time read warning
    if not condition:
        raise AssertionError(message)

# ---- subpackages (after the core above: they build on it) ------------------------------
from scriptmod import func, jit, nn, optim  # noqa: E402,F401
from scriptmod.serialization import load, save  # noqa: E402,F401
from scriptmod.jit._fuser import get_num_threads, set_num_threads  # noqa: E402,F401
from scriptmod.ir.log import set_logs  # noqa: E402,F401  (SCRIPTMOD_LOG from Python)

# Submodules a user reaches as attributes (``sm.utils.data``, ``sm.onnx``, ``sm.profiler``...)
# are imported on first use: they are not needed to run a model, and ``import scriptmod``
# stays fast.
_LAZY_SUBMODULES = frozenset({"linalg", "onnx", "profiler", "testing", "utils"})
_LAZY_SUBMODULES |= {"fx", "signal"}   # torch.fx's decorators that model files call (``fx.wrap``)


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib
        module = importlib.import_module(f"scriptmod.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'scriptmod' has no attribute {name!r}")
