"""The fast path of ``SGD``, ``Adam`` and ``AdamW``: one native kernel per parameter per step.

An optimizer writes its update once, as ``_math(flags, tensors, scalars)`` over values that
speak Tensor's arithmetic (``+ - * /``, unary ``-``, ``.sqrt()``, ``.maximum()``,
``.detach()``). The Python path runs it on Tensors. Here it runs once on symbolic values
(``_Trace``) that record each
operation as an ``OpStep`` of a ``KernelSpec``, which the LLVM backend renders and compiles
as it does a fusion group (``codegen.llvm_ir``, ``runtime.llvm_jit``: memory and disk
caches). Same ops in the same order, each rounded to the parameter's dtype, is what makes the
two paths agree bit for bit: the kernels are plain IEEE ``fadd``/``fmul``/``fdiv``/``sqrt``
(LLVM fuses a multiply and an add only when flagged ``contract`` or written
``llvm.fmuladd``; these kernels are neither, ``test_no_fma_in_the_kernels`` checks the
assembly).

One kernel per (update, flags, dtype): the flags (maximize, weight decay on or off,
amsgrad, ...) shape the kernel; every number (lr, betas, bias corrections, ...) is a scalar
input read at launch, so a scheduler changing lr compiles nothing. A kernel reads param, grad
and each state tensor once and writes the param and the state in place (``render_llvm``'s
``in_place``); ``COUNTERS`` counts kernels built and launched.

    >>> p = nn.Parameter(scriptmod.ones(4, dtype=scriptmod.float64))
    >>> opt = scriptmod.optim.SGD([p], lr=0.5, momentum=0.9)
    >>> p.grad = scriptmod.ones(4, dtype=scriptmod.float64)
    >>> before = COUNTERS["launches"]; opt.step(); COUNTERS["launches"] - before
    1
    >>> p.detach().numpy(), opt.state[p]["momentum_buffer"].numpy()
    (array([0.5, 0.5, 0.5, 0.5]), array([1., 1., 1., 1.]))
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from scriptmod.codegen.kernel import InputSpec, KernelSpec, OpStep
from scriptmod.codegen.llvm_ir import render_llvm
from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType
from scriptmod.runtime.arrays import NP_DTYPE
from scriptmod.runtime.targets.llvm import LLVM
from scriptmod.runtime.llvm_jit import CompiledKernel, compile_units
from scriptmod.tensor import Tensor

DTYPES = (D.float32, D.float64)     # half types round after every eager op: not one kernel
COUNTERS = {"compiles": 0, "launches": 0}
FUSED_ERROR = ("`fused=True` requires all the params to be floating point Tensors of "
               "supported devices: ['cpu'] (float32 or float64)")
MAX_RUNNERS = 256                   # launchers kept per kernel (one per parameter size)


class Plan(NamedTuple):
    """One parameter's update for one step: the kernel's shape (``flags``), the state tensors
    it reads by name (those it writes back in place), and the step's numbers."""

    flags: tuple
    tensors: dict[str, Tensor]
    scalars: dict[str, float]


Math = Callable[[Any, Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]


# ---- which path ----------------------------------------------------------------------------

def check_options(group: dict[str, Any]) -> None:
    """PyTorch's refusals of a group's ``fused``/``foreach``/``differentiable`` options
    (``differentiable=True`` runs the Python path, recorded by autograd)."""
    if group.get("fused") and group.get("foreach"):
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if group.get("fused") and group.get("differentiable"):
        raise RuntimeError("`fused` does not support `differentiable`")
    if not group.get("fused"):
        return
    reason = _unsupported(group["params"])
    if reason is not None:
        raise RuntimeError(f"{FUSED_ERROR}, but {reason}")


def use_fast_path(group: dict[str, Any], params: Sequence[Tensor]) -> bool:
    """Whether ``params`` (those of ``group`` with a grad) take the kernels: always with
    ``fused=True`` (or a ``RuntimeError`` naming why they cannot), with ``foreach=True`` or
    neither option set when every one is a CPU float32/float64 tensor and the group is not
    ``differentiable``; an explicit False of either runs the Python path."""
    fused, foreach = group.get("fused"), group.get("foreach")
    if fused:
        check_options(group)             # every param of the group, with a grad or not
        return True
    if not (foreach or fused is None and foreach is None):
        return False
    return not group.get("differentiable") and _unsupported(params) is None


def _unsupported(params: Sequence[Tensor]) -> str | None:
    for i, p in enumerate(params):
        if type(p._data) is not np.ndarray:
            return f"params[{i}] is on {p.device}"
        if p.dtype not in DTYPES:
            return f"params[{i}] has dtype {p.dtype.name}"
    return None


def _dense(tensors: Sequence[Tensor]) -> list[np.ndarray] | None:
    """The arrays of ``[param, grad, *state]`` when each is an aligned, C-contiguous NumPy
    array of the param's shape and dtype (all but the grad writable); None sends the
    parameter down the Python path (a strided view, a grad of another dtype). A strided
    grad (eager's Linear weight gradient is a transposed view) is read through a C-ordered
    copy: one pass, where the Python path takes ten."""
    arrays = [t._data for t in tensors]
    first = arrays[0]
    g = arrays[1]
    if type(g) is np.ndarray and g.dtype == first.dtype and g.shape == first.shape \
            and not g.flags.c_contiguous:
        arrays[1] = np.ascontiguousarray(g)
    for k, a in enumerate(arrays):
        if type(a) is not np.ndarray or a.dtype != first.dtype or a.shape != first.shape:
            return None
        flags = a.flags
        if not (flags.c_contiguous and flags.aligned and (k == 1 or flags.writeable)):
            return None
    return arrays


# ---- one step --------------------------------------------------------------------------------

def step(math: Math, p: Tensor, plan: Plan, writes: Mapping[str, int]
         ) -> dict[str, Tensor] | None:
    """Update ``p`` and its state by ``math`` in one kernel launch, adding ``writes[name]``
    (default 1) to the version of each tensor it updates; returns the new state entries
    (those not updated in place), or None (nothing done) when its arrays cannot take the
    kernel (see ``_dense``)."""
    assert p.grad is not None, "Optimizer.step passes the params that have a grad"
    tensors = [p, p.grad, *plan.tensors.values()]
    arrays = _dense(tensors)
    if arrays is None or not all(isinstance(v, (int, float)) for v in plan.scalars.values()):
        return None                     # a Tensor lr, say: the Python path reads it
    names = ("param", "grad", *plan.tensors)
    kernel = kernel_for(math, plan.flags, p.dtype, names, tuple(plan.scalars))
    scalars = np.array(list(plan.scalars.values()), NP_DTYPE[p.dtype])
    fresh = kernel(arrays, scalars)
    for name, k in zip(kernel.outputs, kernel.in_place):
        if k is not None:
            tensors[k]._vc[0] += writes.get(name, 1)
    return {name: Tensor._make(a) for name, a in fresh.items()}


class Kernel:
    """A compiled update: ``kernel(arrays, scalars)`` runs it over ``arrays`` (inputs named
    ``names``, all of one shape) and returns the outputs it does not write in place."""

    def __init__(self, compiled: CompiledKernel, spec: KernelSpec, outputs: Sequence[str],
                 in_place: Sequence[int | None]) -> None:
        self.compiled, self.spec = compiled, spec
        self.outputs, self.in_place = tuple(outputs), tuple(in_place)
        self._runs: dict[int, Callable[[Sequence[Any], Sequence[Any]], None]] = {}

    def __call__(self, arrays: Sequence[np.ndarray], scalars: np.ndarray) -> dict[str, Any]:
        n = arrays[0].size
        outs = [arrays[k] if k is not None else np.empty_like(arrays[0]) for k in self.in_place]
        if n:
            run = self._runs.get(n)
            if run is None:
                if len(self._runs) >= MAX_RUNNERS:
                    self._runs.clear()
                run = self._runs[n] = LLVM.caller(self.compiled, self.spec, (), n, None)
            run([*arrays, *(scalars[i:i + 1] for i in range(scalars.size))], outs)
            COUNTERS["launches"] += 1
        return {name: a for name, a, k in zip(self.outputs, outs, self.in_place) if k is None}


_KERNELS: dict[tuple, Kernel] = {}


def kernel_for(math: Math, flags: tuple, dtype: DType, tensors: tuple[str, ...],
               scalars: tuple[str, ...]) -> Kernel:
    """The kernel of ``math`` for ``flags`` and ``dtype``, traced and compiled once per
    process (the object code also comes from the disk cache)."""
    key = (math, flags, dtype, tensors, scalars)
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = _build(math, flags, dtype, tensors, scalars)
    return kernel


def _build(math: Math, flags: tuple, dtype: DType, tensors: tuple[str, ...],
           scalars: tuple[str, ...]) -> Kernel:
    trace = _Trace(dtype, tensors, scalars)
    out = math(flags, {n: trace.values[n] for n in tensors},
               {n: trace.values[n] for n in scalars})
    names = tuple(out)
    spec = KernelSpec(trace.inputs, trace.ops, [_index(out[n]) for n in names],
                      [dtype] * len(names), rank=1)
    in_place = [tensors.index(n) if n in tensors else None for n in names]
    key_text = f"optimizer update, outputs {list(zip(names, in_place))}\0{spec.text()}"
    name = "sm_opt_" + hashlib.sha256(key_text.encode()).hexdigest()[:16]
    compiled, = compile_units([(key_text, lambda: render_llvm(spec, name, in_place).text, name)])
    COUNTERS["compiles"] += 1
    return Kernel(compiled, spec, names, in_place)


# ---- tracing the update ------------------------------------------------------------------------

class _Sym:
    """A value of the update being traced: each operation appends one step to the trace."""

    __slots__ = ("trace", "index")

    def __init__(self, trace: _Trace, index: int) -> None:
        self.trace, self.index = trace, index

    def __add__(self, other: _Sym) -> _Sym:
        return self.trace.op("add", self, other)

    def __sub__(self, other: _Sym) -> _Sym:
        return self.trace.op("sub", self, other)

    def __mul__(self, other: _Sym) -> _Sym:
        return self.trace.op("mul", self, other)

    def __truediv__(self, other: _Sym) -> _Sym:
        return self.trace.op("div", self, other)

    def __neg__(self) -> _Sym:
        return self.trace.op("neg", self)

    def sqrt(self) -> _Sym:
        return self.trace.op("sqrt", self)

    def maximum(self, other: _Sym) -> _Sym:
        return self.trace.op("maximum", self, other)

    def detach(self) -> _Sym:
        """Autograd's cut: nothing to a kernel."""
        return self


class _Trace:
    """The steps of an update over contiguous ``tensors`` and ``scalars`` (kernel inputs in
    that order), all of one dtype."""

    def __init__(self, dtype: DType, tensors: Sequence[str], scalars: Sequence[str]) -> None:
        self.dtype = dtype
        self.inputs = [InputSpec(dtype, "contiguous") for _ in tensors] + \
                      [InputSpec(dtype, "scalar") for _ in scalars]
        self.ops: list[OpStep] = []
        self.values = {n: _Sym(self, i) for i, n in enumerate([*tensors, *scalars])}

    def op(self, name: str, *args: _Sym) -> _Sym:
        self.ops.append(OpStep(name, tuple(_index(a) for a in args), {}, self.dtype))
        return _Sym(self, len(self.inputs) + len(self.ops) - 1)


def _index(v: Any) -> int:
    if not isinstance(v, _Sym):
        raise TypeError(f"optimizer update: expected a traced tensor or scalar, got "
                        f"{type(v).__name__} {v!r} (numbers go in the plan's scalars, so that "
                        f"changing them compiles nothing)")
    return v.index
