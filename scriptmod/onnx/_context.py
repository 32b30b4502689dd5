"""The state of one export: ONNX nodes being written, initializers, fresh names, and the
values of the IR graph as the emitters see them.

An IR value becomes either a *static* Python value (an int, float, bool, None, list, a
module reference: known at export time, folded away) or a ``Sym``: a named ONNX tensor.
Scalars computed at run time (``x.size(0)`` of the batch dim) are 0-d ``Sym`` tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import ArgumentValueError

ONNX_DTYPES: dict[D.DType, int] = {
    D.float32: TensorProto.FLOAT, D.float64: TensorProto.DOUBLE, D.float16: TensorProto.FLOAT16,
    D.bfloat16: TensorProto.BFLOAT16, D.int8: TensorProto.INT8, D.int16: TensorProto.INT16,
    D.int32: TensorProto.INT32, D.int64: TensorProto.INT64, D.uint8: TensorProto.UINT8,
    D.bool_: TensorProto.BOOL, D.complex64: TensorProto.COMPLEX64,
    D.complex128: TensorProto.COMPLEX128,
}


# ONNX ops newer than the lowest opset we write (17)
OP_OPSET = {"BitwiseAnd": 18, "BitwiseOr": 18, "BitwiseXor": 18, "BitwiseNot": 18,
            "Gelu": 20, "Swish": 24}


class ExportError(ArgumentValueError):
    """The graph holds something ONNX export does not cover (an op, a value, a mode)."""


@dataclass(frozen=True)
class Sym:
    """A tensor of the ONNX graph: its name, element type and rank (None: not known)."""

    name: str
    dtype: D.DType
    rank: int | None = None


@dataclass(frozen=True)
class ModuleRef:
    """A submodule reached by ``prim::GetAttr``: the object and its state_dict prefix."""

    obj: Any
    path: str


def scalar_dtype(value: Any) -> D.DType:
    """The dtype a Python scalar takes as a tensor of its own (ints and floats 64-bit)."""
    if isinstance(value, bool):
        return D.bool_
    return D.int64 if isinstance(value, int) else D.float64


class Context:
    """Collects the ONNX graph; ``op`` appends a node to the innermost open block."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.initializers: list[TensorProto] = []
        self._blocks: list[list[onnx.NodeProto]] = [[]]
        self._consts: dict[tuple, str] = {}
        self._count = 0
        self.source: str | None = None          # the IR node being emitted, for errors

    # ---- names and nodes ------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return self._blocks[-1]

    def open_block(self) -> None:
        self._blocks.append([])

    def close_block(self) -> list[onnx.NodeProto]:
        return self._blocks.pop()

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1,
           **attrs: Any) -> Any:
        """Append one node; returns its output name (a list of them when ``outputs > 1``)."""
        need = OP_OPSET.get(op_type, 0)
        if self.opset < need:
            raise self.error(f"ONNX {op_type} needs opset_version >= {need}, got {self.opset}")
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        return names[0] if outputs == 1 else names

    def sym(self, op_type: str, inputs: Sequence[str], dtype: D.DType, rank: int | None,
            **attrs: Any) -> Sym:
        return Sym(self.op(op_type, inputs, **attrs), dtype, rank)

    # ---- constants and materialization ----------------------------------------------------
    def const(self, array: np.ndarray, name: str | None = None) -> str:
        """An initializer holding ``array`` (small constants are shared by value)."""
        key = (array.dtype.str, array.shape, array.tobytes()) if name is None else None
        if key is not None and key in self._consts:
            return self._consts[key]
        name = name or self.fresh("const")
        self.initializers.append(numpy_helper.from_array(array, name))
        if key is not None:
            self._consts[key] = name
        return name

    def tensor(self, value: Any, dtype: D.DType | None = None) -> str:
        """The ONNX name of ``value`` as a tensor of ``dtype`` (cast or made constant)."""
        if isinstance(value, Sym):
            if dtype is None or dtype is value.dtype:
                return value.name
            return self.op("Cast", [value.name], to=ONNX_DTYPES[dtype])
        if isinstance(value, (bool, int, float)):
            target = dtype or scalar_dtype(value)
            return self.const(np.array(value, dtype=numpy_dtype(target)))
        if isinstance(value, (list, tuple)):
            return self.ints(value) if dtype in (None, D.int64) else self.op(
                "Cast", [self.ints(value)], to=ONNX_DTYPES[dtype])
        raise self.error(f"expected a tensor or a number, got {type(value).__name__} {value!r}")

    def ints(self, values: Any) -> str:
        """A 1-D int64 tensor from a list of ints and run-time 0-d ints (or a 1-D ``Sym``)."""
        if isinstance(values, Sym):
            return self.tensor(values, D.int64)
        if all(isinstance(v, int) for v in values):
            return self.const(np.array(list(values), dtype=np.int64))
        parts = [self.const(np.array([v], dtype=np.int64)) if isinstance(v, int) else
                 self.op("Unsqueeze", [self.tensor(v, D.int64), self.ints([0])])
                 for v in values]
        return self.op("Concat", parts, axis=0)

    def error(self, message: str) -> ExportError:
        where = f" ({self.source})" if self.source else ""
        return ExportError(f"onnx.export{where}: {message}")


def numpy_dtype(dtype: D.DType) -> Any:
    if dtype is D.bfloat16:
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype("bool" if dtype is D.bool_ else dtype.name)
