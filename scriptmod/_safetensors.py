"""The one safetensors codec: ``scriptmod.save``/``load`` files and the tensor entry of
``jit.save`` archives are both written and read here.

Why not the ``safetensors`` package: its NumPy API has no bfloat16 (``data type 'bfloat16' not
understood``), it cannot check a header against an archive's manifest before touching the data,
and its errors do not name the file part that is wrong. The format is small: an 8-byte
little-endian header length, a JSON header ``{name: {"dtype", "shape", "data_offsets"},
"__metadata__": {str: str}}``, then the data, every byte belonging to exactly one tensor.

Reading is bounded: the header length is checked against ``max_header`` and the buffer before
a byte of JSON is parsed; every entry's offsets against its dtype, shape and the data section.
Arrays are views of the buffer (no copy) unless a view would be misaligned.
"""
from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.runtime.arrays import NP_DTYPE

# scriptmod's (and NumPy's) dtype name -> safetensors' name; nothing else is read or written
DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
          "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
          "bool": "BOOL", "complex64": "C64", "complex128": "C128"}
FROM_ST = {v: k for k, v in DTYPES.items()}
MAX_HEADER = 100 * 2**20
_ENTRY = ("dtype", "shape", "data_offsets")


class SafetensorsError(ValueError):
    """A malformed safetensors buffer; callers add which file or entry it was."""


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a scriptmod dtype name (bfloat16 via ml_dtypes)."""
    return NP_DTYPE[D.BY_NAME[name]]


# ---- writing -------------------------------------------------------------------------------
def encode(arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> list[bytes]:
    """Header and data chunks of a safetensors file. The header lists tensors in ``arrays``
    order; the data are laid out widest dtype first, so every tensor is aligned to its item
    size (the data section starts 8-aligned) and loads as a view, not a copy."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    for name, arr in arrays.items():
        if str(arr.dtype) not in DTYPES:
            raise TypeError(f"save: tensor {name!r} has dtype {arr.dtype}, which safetensors "
                            f"cannot store (supported: {', '.join(DTYPES)})")
        header[name] = {}
    chunks, offset = [], 0
    for name in sorted(arrays, key=lambda k: -arrays[k].dtype.itemsize):   # stable
        arr = arrays[name]
        data = np.ascontiguousarray(arr).tobytes()
        header[name].update(dtype=DTYPES[str(arr.dtype)], shape=list(arr.shape),
                            data_offsets=[offset, offset + len(data)])
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return [struct.pack("<Q", len(text)), text, *chunks]


# ---- reading -------------------------------------------------------------------------------
def header_length(head: bytes, total: int, max_header: int = MAX_HEADER) -> int:
    """The declared header length, checked against the cap and the file size before reading."""
    if len(head) < 8:
        raise SafetensorsError(f"too short to be a safetensors file ({len(head)} bytes)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > max_header or 8 + n > total:
        raise SafetensorsError(f"invalid safetensors header length {n} (the file has {total} "
                               f"bytes; headers are limited to {max_header})")
    return n


def parse_header(buf: bytes | bytearray | memoryview, max_header: int = MAX_HEADER
                 ) -> tuple[dict[str, Any], dict[str, str], memoryview]:
    """(tensor entries, ``__metadata__``, data section) of a safetensors buffer."""
    n = header_length(bytes(buf[:8]), len(buf), max_header)
    try:
        text = bytes(buf[8:8 + n]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SafetensorsError(f"the safetensors header is not UTF-8: {e}") from None
    header = strict_json(text, "the safetensors header")
    if not isinstance(header, dict):
        raise SafetensorsError("the safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError("the safetensors __metadata__ is not an object of strings")
    return header, metadata, memoryview(buf)[8 + n:]


def strict_json(text: str, what: str) -> Any:
    """JSON without duplicate keys or NaN/Infinity literals; deep nesting is an error."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except SafetensorsError as e:
        raise SafetensorsError(f"{what}: {e}") from None
    except (ValueError, RecursionError) as e:
        raise SafetensorsError(f"{what} is not valid JSON: {e}") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise SafetensorsError(f"key {k!r} occurs twice in one object")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise SafetensorsError(f"{name} is not allowed")


def entry(name: str, info: Any) -> tuple[str, tuple[int, ...], int, int]:
    """(scriptmod dtype name, shape, begin, end) of one header entry, checked for form."""
    ok = (isinstance(info, dict) and set(info) == set(_ENTRY) and info["dtype"] in FROM_ST
          and _ints(info["shape"]) and _ints(info["data_offsets"])
          and len(info["data_offsets"]) == 2)
    if not ok:
        raise SafetensorsError(f"bad header entry for tensor {name!r}: expected "
                               f"{{'dtype': one of {sorted(FROM_ST)}, 'shape': [int, ...], "
                               f"'data_offsets': [begin, end]}}, got {str(info)[:200]}")
    begin, end = info["data_offsets"]
    return FROM_ST[info["dtype"]], tuple(info["shape"]), begin, end


def _ints(v: Any) -> bool:
    return isinstance(v, list) and all(type(i) is int for i in v)


def view(data: memoryview, dtype: str, shape: tuple[int, ...], begin: int, end: int) -> np.ndarray:
    """The array at ``data[begin:end]``: a writable view when the buffer is writable and the
    start is aligned, else a copy. Offsets must already be checked (``check_offsets``)."""
    dt = np_dtype(dtype)
    arr = np.frombuffer(data[begin:end], dtype=dt).reshape(shape)
    if not arr.flags.writeable or not arr.flags.aligned:
        arr = arr.copy()
    return arr


def check_offsets(name: str, dtype: str, shape: tuple[int, ...], begin: int, end: int,
                  size: int) -> None:
    if any(s < 0 for s in shape) or not 0 <= begin <= end <= size \
            or end - begin != math.prod(shape) * np_dtype(dtype).itemsize:
        raise SafetensorsError(f"tensor {name!r} has offsets {[begin, end]} that do not match "
                               f"its shape {list(shape)}, dtype {dtype} and the {size}-byte data "
                               "section")


def decode(buf: bytes | bytearray | memoryview, max_header: int = MAX_HEADER
           ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every tensor of a safetensors buffer (in header order) and its metadata."""
    header, metadata, data = parse_header(buf, max_header)
    arrays = {}
    for name, info in header.items():
        dtype, shape, begin, end = entry(name, info)
        check_offsets(name, dtype, shape, begin, end, len(data))
        arrays[name] = view(data, dtype, shape, begin, end)
    return arrays, metadata
