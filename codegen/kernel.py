"""A small, typed description of one fused elementwise kernel (the fusion pass's output).

Values are numbered: inputs first (``0 .. len(inputs)-1``), then one value per ``OpStep``.
An argument is a value index or an ``Imm`` constant::

    >>> from scriptmod.ir import dtypes as D
    >>> spec = KernelSpec(
    ...     inputs=[InputSpec(D.float32, "contiguous"), InputSpec(D.float32, "strided", inner=1)],
    ...     ops=[OpStep("mul", (0, 1), {}, D.float32),
    ...          OpStep("add", (2, Imm(1.0, D.float32)), {}, D.float32)],
    ...     outputs=[3], out_dtypes=[D.float32], rank=2)
    >>> len(spec.key())    # sha256 of the text form: stable across processes
    64

Kernel ABI (shared by the LLVM and C renderers): the output index space is the flat,
C-ordered index of the (contiguous) outputs. ``meta`` is an int64 array holding the output
shape (``rank`` entries) then, for each ``strided`` input in order, its element strides
(``rank`` entries, 0 on broadcast dims). ``KernelSpec.meta`` builds it.

A spec fresh from ``codegen.lower.lower_group`` has inputs of kind ``unknown`` (no layout
yet) and keeps the group's value types (``in_types``, ``in_names``, ``out_types``: guards and
error messages read them; they are not part of ``text`` or ``key``).
``codegen.lower.plan_layout`` gives it a layout; only then can a renderer take it.

A *row kernel* (``cols > 0``, from ``codegen.rows``) reduces its last ``cols`` dims: its
index space is rows (the leading dims), each row a set of passes over the trailing dims
(one dim once laid out). Its steps include ``row_sum``/``row_max``/``row_min``, whose value
is one per row; ``per_row`` says, per output, whether it is stored once per row (a reduced
value) or per element. ``start``/``end`` of its ABI count rows.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

from scriptmod.ir import dtypes as D
from scriptmod.ir.dtypes import DType
from scriptmod.ir.dtypes import (FLOAT_MAX, SCALAR_INTS, checked_float, checked_int,  # noqa: F401
                                 scalar_overflow, wrap_int)   # (scalar conversions live in ir)
from scriptmod.ir.types import TensorType

KINDS = ("contiguous", "strided", "scalar")     # the layouts a renderer reads
UNKNOWN = "unknown"                             # no layout planned yet (``lower_group``)


@dataclass(frozen=True)
class Imm:
    """An immediate scalar constant argument (folded into the generated code)."""

    value: Union[bool, int, float]
    dtype: DType

    def text(self) -> str:
        return f"{self.dtype.name}({self.value!r})"


Arg = Union[int, Imm]


@dataclass(frozen=True)
class InputSpec:
    """One kernel input.

    ``kind``: ``contiguous`` (same shape as the output, C order: indexed by the flat index),
    ``strided`` (any element strides from ``meta``; broadcast dims have stride 0) or
    ``scalar`` (one element, read once); ``unknown`` before layout planning. ``inner``: the
    innermost stride of a strided input when it is known statically (1 or 0); ``None`` reads
    it from ``meta``.
    """

    dtype: DType
    kind: str = "contiguous"
    inner: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS + (UNKNOWN,):
            raise ValueError(f"InputSpec: kind must be one of {KINDS + (UNKNOWN,)}, "
                             f"got {self.kind!r}")
        if self.inner not in (None, 0, 1):
            raise ValueError(f"InputSpec: inner must be None, 0 or 1, got {self.inner!r}")

    def text(self) -> str:
        inner = "" if self.inner is None else f":{self.inner}"
        return f"{self.dtype.name}:{self.kind}{inner}"


@dataclass(frozen=True)
class OpStep:
    """``value = op(*args, **attrs)`` with result dtype ``dtype``."""

    op: str
    args: tuple[Arg, ...]
    attrs: dict = field(default_factory=dict, hash=False, compare=False)
    dtype: DType = D.float32

    def text(self) -> str:
        args = ", ".join(a.text() if isinstance(a, Imm) else f"%{a}" for a in self.args)
        attrs = "".join(f", {k}={_attr_text(v)}" for k, v in sorted(self.attrs.items()))
        return f"{self.dtype.name} {self.op}({args}{attrs})"


def _attr_text(v: object) -> str:
    return v.name if isinstance(v, DType) else repr(v)


@dataclass(frozen=True)
class KernelSpec:
    """A fused elementwise kernel: inputs, ops in topological order, outputs, output rank.

    ``in_types`` / ``in_names`` / ``out_types``: the fusion group's value types and input
    names when the spec was lowered from one (empty otherwise); carried by ``with_layout``.
    """

    inputs: tuple[InputSpec, ...]
    ops: tuple[OpStep, ...]
    outputs: tuple[int, ...]
    out_dtypes: tuple[DType, ...]
    rank: int = 1
    in_types: tuple[TensorType, ...] = ()
    in_names: tuple[str, ...] = ()
    out_types: tuple[TensorType, ...] = ()
    cols: int = 0
    per_row: tuple[bool, ...] = ()

    def __init__(self, inputs: Sequence[InputSpec], ops: Sequence[OpStep],
                 outputs: Sequence[int], out_dtypes: Sequence[DType], rank: int = 1, *,
                 in_types: Sequence[TensorType] = (), in_names: Sequence[str] = (),
                 out_types: Sequence[TensorType] = (), cols: int = 0,
                 per_row: Sequence[bool] = ()) -> None:
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "ops", tuple(ops))
        object.__setattr__(self, "outputs", tuple(outputs))
        object.__setattr__(self, "out_dtypes", tuple(out_dtypes))
        object.__setattr__(self, "rank", int(rank))
        object.__setattr__(self, "in_types", tuple(in_types))
        object.__setattr__(self, "in_names", tuple(in_names))
        object.__setattr__(self, "out_types", tuple(out_types))
        object.__setattr__(self, "cols", int(cols))
        object.__setattr__(self, "per_row", tuple(bool(p) for p in per_row))
        self.validate()

    def with_layout(self, inputs: Sequence[InputSpec], rank: int,
                    cols: int | None = None) -> KernelSpec:
        """The same kernel reading ``inputs`` (same dtypes, new kinds) over ``rank`` dims
        (a row kernel's trailing ``cols`` dims merged into ``cols`` of them, default 1)."""
        if [s.dtype for s in inputs] != [s.dtype for s in self.inputs]:
            raise ValueError(f"with_layout: expected inputs of dtypes "
                             f"{[s.dtype.name for s in self.inputs]}, got "
                             f"{[s.dtype.name for s in inputs]}")
        return KernelSpec(inputs, self.ops, self.outputs, self.out_dtypes, rank,
                          in_types=self.in_types, in_names=self.in_names,
                          out_types=self.out_types,
                          cols=(1 if cols is None else cols) if self.cols else 0,
                          per_row=self.per_row)

    @property
    def is_row(self) -> bool:
        """Whether this is a row kernel (reduces its trailing ``cols`` dims)."""
        return self.cols > 0

    @property
    def laid_out(self) -> bool:
        """Whether every input has a layout (a renderer can take the spec)."""
        return all(s.kind != UNKNOWN for s in self.inputs)

    def require_layout(self) -> None:
        """Raise ``ValueError`` when an input has no layout yet (renderers call this)."""
        for i, s in enumerate(self.inputs):
            if s.kind == UNKNOWN:
                raise ValueError(f"KernelSpec: input {i} has no layout yet (kind "
                                 f"{UNKNOWN!r}); give it one with codegen.lower.plan_layout")

    def validate(self) -> None:
        """Raise ``ValueError`` naming the step whose argument is not an earlier value."""
        n = len(self.inputs)
        for i, step in enumerate(self.ops):
            for a in step.args:
                if not isinstance(a, Imm) and not 0 <= a < n + i:
                    raise ValueError(f"KernelSpec: step {i} ({step.op}) uses %{a}, "
                                     f"expected an index below {n + i}")
        for o in self.outputs:
            if not 0 <= o < n + len(self.ops):
                raise ValueError(f"KernelSpec: output %{o} does not exist")
        if len(self.out_dtypes) != len(self.outputs):
            raise ValueError("KernelSpec: one out_dtype per output expected")
        if self.rank < 0:
            raise ValueError(f"KernelSpec: rank must be >= 0, got {self.rank}")
        if self.cols and not (0 < self.cols <= self.rank
                              and len(self.per_row) == len(self.outputs)):
            raise ValueError(f"KernelSpec: a row kernel needs 0 < cols <= rank and one "
                             f"per_row flag per output, got cols={self.cols}, rank={self.rank}, "
                             f"{len(self.per_row)} flag(s) for {len(self.outputs)} output(s)")
        for what, got, want in (("in_types", self.in_types, self.inputs),
                                ("in_names", self.in_names, self.inputs),
                                ("out_types", self.out_types, self.outputs)):
            if got and len(got) != len(want):
                raise ValueError(f"KernelSpec: {what} needs {len(want)} entries, got {len(got)}")

    def dtype_of(self, value: int) -> DType:
        """The dtype of value ``%value``."""
        n = len(self.inputs)
        return self.inputs[value].dtype if value < n else self.ops[value - n].dtype

    @property
    def strided(self) -> list[int]:
        """Indices of the inputs that read strides from ``meta``."""
        return [i for i, s in enumerate(self.inputs) if s.kind == "strided"]

    def text(self) -> str:
        """A stable, human-readable text form (the basis of ``key``; computed once: the
        spec is frozen, and names, keys and hashes all read it)."""
        text = self.__dict__.get("_text")
        if text is None:
            lines = [f"kernel rank={self.rank}" + (f" cols={self.cols}" if self.cols else "")]
            lines += [f"  %{i} = input {s.text()}" for i, s in enumerate(self.inputs)]
            base = len(self.inputs)
            lines += [f"  %{base + i} = {s.text()}" for i, s in enumerate(self.ops)]
            outs = ", ".join(f"%{o}:{d.name}" + (":row" if self.per_row and self.per_row[j] else "")
                             for j, (o, d) in enumerate(zip(self.outputs, self.out_dtypes)))
            text = "\n".join(lines + [f"  return {outs}"])
            object.__setattr__(self, "_text", text)
        return text

    def key(self) -> str:
        """sha256 hex digest of ``text()``: equal specs give equal keys in any process."""
        return text_key(self)

    def __hash__(self) -> int:
        return hash(self.text())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelSpec) and self.text() == other.text()

    def meta(self, out_shape: Sequence[int],
             in_strides: Sequence[Sequence[int] | None]) -> list[int]:
        """The int64 ``meta`` array: output shape, then each strided input's element strides.

        ``in_strides[i]``: element strides of input ``i`` already broadcast to ``out_shape``
        (0 on broadcast dims); ignored for contiguous and scalar inputs.
        """
        if len(out_shape) != self.rank:
            raise ValueError(f"meta: expected an output shape of rank {self.rank}, "
                             f"got {tuple(out_shape)}")
        out = [int(s) for s in out_shape]
        for i in self.strided:
            st = in_strides[i]
            if st is None or len(st) != self.rank:
                raise ValueError(f"meta: input {i} needs {self.rank} strides, got {st!r}")
            out += [int(s) for s in st]
        return out


def broadcast_strides(shape: Sequence[int], elem_strides: Sequence[int],
                      out_shape: Sequence[int]) -> list[int]:
    """Element strides of an array of ``shape`` viewed as ``out_shape`` (NumPy broadcasting).

    >>> broadcast_strides((4096,), (1,), (16, 4096))
    [0, 1]
    """
    pad = len(out_shape) - len(shape)
    if pad < 0:
        raise ValueError(f"broadcast: shape {tuple(shape)} has more dims than {tuple(out_shape)}")
    out = [0] * pad
    for dim, st, od in zip(shape, elem_strides, out_shape[pad:]):
        if dim not in (1, od):
            raise ValueError(f"broadcast: cannot broadcast {tuple(shape)} to {tuple(out_shape)}")
        out.append(0 if dim == 1 and od != 1 else int(st))
    return out


def text_key(obj: Any) -> str:
    """sha256 hex digest of ``obj.text()``, computed once per (frozen) object: the cache key
    of a ``KernelSpec`` or a ``codegen.native.NativeProgram``."""
    key = obj.__dict__.get("_key")
    if key is None:
        key = hashlib.sha256(obj.text().encode()).hexdigest()
        object.__setattr__(obj, "_key", key)
    return key
