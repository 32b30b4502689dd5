"""``scriptmod.save`` / ``scriptmod.load``: tensors and nested containers of them, without
pickle. Loading never runs code from the file.

    >>> model = nn.Linear(4, 2); opt = scriptmod.optim.SGD(model.parameters(), lr=0.1)
    >>> scriptmod.save(model.state_dict(), "model.pt")
    >>> model.load_state_dict(scriptmod.load("model.pt"))
    <All keys matched successfully>
    >>> scriptmod.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}, "ckpt.pt")
    >>> scriptmod.load("ckpt.pt")["epoch"]
    3

File format: a standard safetensors file (any safetensors reader opens it).

- Header: 8-byte little-endian length, then JSON ``{name: {"dtype", "shape",
  "data_offsets"}, "__metadata__": {...}}``; data follow, 8-byte aligned, in header order.
- Tensor names are the dotted paths of the tensors in the saved object (``"fc.weight"`` for a
  state dict; ``"optim.state.0.exp_avg"`` when nested), made unique if needed. A tensor object
  that occurs several times is stored once and comes back as one object.
- ``__metadata__["format"] = "scriptmod"``, ``["scriptmod_format_version"] = "1"`` and
  ``["structure"]``: JSON of the object tree, where each node is one of
  ``{"T": name}`` (tensor; ``"P": 1`` for a ``Parameter``, ``"rg": 1`` when it requires grad,
  ``"dev": "cuda:0"`` when not on the CPU), ``{"D": [[key, value], ...]}`` (dict; ``"OD"`` for
  an ``OrderedDict``; keys are nodes too, so int keys survive), ``{"L": [...]}`` (list),
  ``{"U": [...]}`` (tuple), ``{"S": [...]}`` (``Size``), ``{"C": [re, im]}`` (complex),
  ``{"dtype": "float32"}``, ``{"device": "cuda:0"}``, or a JSON scalar (int, float, str,
  bool, null; NaN and infinities as JSON's extended literals).
- A file without ``structure`` (written by another program) loads as a flat dict of tensors.

bfloat16 is stored as safetensors' ``BF16``.
"""
from __future__ import annotations

import io
import json
import math
import os
import struct
from collections import OrderedDict
from typing import Any, BinaryIO

import numpy as np

from scriptmod.runtime.arrays import NP_DTYPE, cuda_available
from scriptmod import _device
from scriptmod.tensor import Size, Tensor

__all__ = ["save", "load", "save_safetensors", "load_safetensors"]

FORMAT_VERSION = "1"
_MAX_HEADER = 100 * 1024 * 1024
_ST_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
              "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
              "bool": "BOOL", "complex64": "C64", "complex128": "C128"}
_FROM_ST = {v: k for k, v in _ST_DTYPES.items()}


class SerializationError(RuntimeError):
    """A file that is not a valid scriptmod / safetensors file."""


# ---- the raw safetensors layer ---------------------------------------------------------------
def _np_dtype(name: str) -> np.dtype:
    from scriptmod.ir import dtypes as D
    return NP_DTYPE[D.BY_NAME[name]]


def _encode_safetensors(arrays: dict[str, np.ndarray], metadata: dict[str, str]) -> list[bytes]:
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    chunks, offset = [], 0
    for name, arr in arrays.items():
        dt = _ST_DTYPES.get(str(arr.dtype))
        if dt is None:
            raise TypeError(f"save: tensor {name!r} has dtype {arr.dtype}, which safetensors "
                            "cannot store")
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return [struct.pack("<Q", len(text)), text, *chunks]


def _decode_safetensors(buf: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    if len(buf) < 8:
        raise SerializationError("load: file too short to be a safetensors file")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > _MAX_HEADER or 8 + n > len(buf):
        raise SerializationError(f"load: invalid safetensors header length {n}")
    try:
        header = json.loads(buf[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SerializationError(f"load: the safetensors header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SerializationError("load: the safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data = memoryview(buf)[8 + n:]
    arrays = {name: _decode_entry(name, info, data) for name, info in header.items()}
    return arrays, metadata


def _decode_entry(name: str, info: Any, data: memoryview) -> np.ndarray:
    try:
        dtype = _np_dtype(_FROM_ST[info["dtype"]])
        shape = tuple(int(s) for s in info["shape"])
        begin, end = (int(o) for o in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as e:
        raise SerializationError(f"load: bad header entry for tensor {name!r}: {e!r}") from None
    count = math.prod(shape)
    if any(s < 0 for s in shape) or not 0 <= begin <= end <= len(data) \
            or end - begin != count * dtype.itemsize:
        raise SerializationError(f"load: tensor {name!r} has offsets {[begin, end]} that do not "
                                 f"match its shape {list(shape)} and the file size")
    return np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).copy()


def _write(chunks: list[bytes], f: Any) -> None:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            for c in chunks:
                fh.write(c)
    else:
        for c in chunks:
            f.write(c)


def _read(f: Any) -> bytes:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return fh.read()
    if isinstance(f, (bytes, bytearray)):
        return bytes(f)
    return f.read()


def _host(t: Tensor) -> np.ndarray:
    return np.asarray(t.detach().numpy(force=True))


def save_safetensors(tensors: dict[str, Tensor], f: str | os.PathLike | BinaryIO,
                     metadata: dict[str, str] | None = None) -> None:
    """Write a flat ``{name: Tensor}`` dict as a safetensors file."""
    arrays = {}
    for k, v in tensors.items():
        if not isinstance(v, Tensor):
            raise TypeError(f"save_safetensors: value of {k!r} is {type(v).__name__}, not a Tensor")
        arrays[k] = _host(v)
    _write(_encode_safetensors(arrays, metadata or {}), f)


def load_safetensors(f: str | os.PathLike | BinaryIO, device: Any = None) -> "OrderedDict[str, Tensor]":
    """Read a safetensors file (from any producer) as an ordered ``{name: Tensor}`` dict."""
    arrays, _ = _decode_safetensors(_read(f))
    dev = _device.canonical(device)
    return OrderedDict((k, _to_tensor(a, dev)) for k, a in arrays.items())


def _to_tensor(arr: np.ndarray, device: str) -> Tensor:
    t = Tensor._make(arr)
    return t if device == "cpu" else t.to(device)


# ---- object structure ------------------------------------------------------------------------
class _Encoder:
    """Walks an object tree: tensors go to ``arrays``, the rest becomes a JSON tree."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.names: dict[int, str] = {}
        self.keep: list[Tensor] = []      # keeps ids stable while encoding

    def tensor(self, t: Tensor, path: str) -> dict:
        from scriptmod.nn.parameter import Parameter
        name = self.names.get(id(t))
        if name is None:
            name = path or "tensor"
            while name in self.arrays or name == "__metadata__":
                name += "_"
            self.names[id(t)] = name
            self.arrays[name] = _host(t)
            self.keep.append(t)
        node: dict[str, Any] = {"T": name}
        if isinstance(t, Parameter):
            node["P"] = 1
        if t.requires_grad:
            node["rg"] = 1
        if not t.is_cpu:
            node["dev"] = str(t.device)
        return node

    def encode(self, obj: Any, path: str) -> Any:
        from scriptmod.ir.dtypes import DType
        if isinstance(obj, Tensor):
            return self.tensor(obj, path)
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, dict):
            tag = "OD" if isinstance(obj, OrderedDict) else "D"
            return {tag: [[self.encode(k, ""), self.encode(v, _join(path, k))]
                          for k, v in obj.items()]}
        if isinstance(obj, Size):
            return {"S": [int(s) for s in obj]}
        if isinstance(obj, (list, tuple)):
            items = [self.encode(v, _join(path, i)) for i, v in enumerate(obj)]
            return {"L" if isinstance(obj, list) else "U": items}
        if isinstance(obj, complex):
            return {"C": [obj.real, obj.imag]}
        if isinstance(obj, DType):
            return {"dtype": obj.name}
        if isinstance(obj, _device.device):
            return {"device": str(obj)}
        if isinstance(obj, np.generic):
            return self.encode(obj.item(), path)
        raise TypeError(f"scriptmod.save: cannot store {type(obj).__name__} at "
                        f"{path or '<root>'}; supported: tensors, dicts, lists, tuples, numbers, "
                        "strings, None, dtypes and devices (no pickle)")


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


class _Decoder:
    def __init__(self, arrays: dict[str, np.ndarray], map_location: Any) -> None:
        self.arrays, self.map_location = arrays, map_location
        self.made: dict[str, Tensor] = {}

    def decode(self, node: Any) -> Any:
        if not isinstance(node, dict):
            if isinstance(node, list):
                raise SerializationError("load: malformed structure (bare JSON list)")
            return node
        if len(node) != 1 and "T" not in node:
            raise SerializationError(f"load: malformed structure node with keys {sorted(node)}")
        if "T" in node:
            return self.tensor(node)
        (tag, val), = node.items()
        return self._container(tag, val)

    def _container(self, tag: str, val: Any) -> Any:
        from scriptmod.ir import dtypes as D
        if tag in ("D", "OD"):
            out = OrderedDict() if tag == "OD" else {}
            for pair in val:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise SerializationError("load: malformed dict entry in structure")
                out[self.decode(pair[0])] = self.decode(pair[1])
            return out
        if tag in ("L", "U"):
            items = [self.decode(v) for v in val]
            return items if tag == "L" else tuple(items)
        if tag == "S":
            return Size(int(s) for s in val)
        if tag == "C":
            return complex(float(val[0]), float(val[1]))
        if tag == "dtype" and val in D.BY_NAME:
            return D.BY_NAME[val]
        if tag == "device":
            return _device.device(val)
        raise SerializationError(f"load: unknown structure tag {tag!r}")

    def tensor(self, node: dict) -> Tensor:
        from scriptmod.nn.parameter import Parameter
        name = node["T"]
        if name in self.made:
            return self.made[name]
        if name not in self.arrays:
            raise SerializationError(f"load: structure refers to a missing tensor {name!r}")
        t = Tensor._make(self.arrays[name])
        t = _map_device(t, node.get("dev", "cpu"), self.map_location)
        if node.get("P"):
            t = Parameter(t, requires_grad=bool(node.get("rg")))
        elif node.get("rg"):
            t.requires_grad_(True)
        self.made[name] = t
        return t


def _map_device(t: Tensor, saved: str, map_location: Any) -> Tensor:
    if callable(map_location) and not isinstance(map_location, (str, _device.device)):
        out = map_location(t, saved)
        return t if out is None else out
    target = saved
    if isinstance(map_location, dict):
        target = map_location.get(saved, saved)
    elif map_location is not None:
        target = str(map_location)
    target = _device.canonical(target)
    if target.startswith("cuda") and not cuda_available():
        raise RuntimeError("Attempting to deserialize object on a CUDA device but "
                           "scriptmod.cuda.is_available() is False. If you are running on a "
                           "CPU-only machine, please use scriptmod.load with "
                           "map_location='cpu' to map your storages to the CPU.")
    return t if target == "cpu" else t.to(target)


# ---- public API ------------------------------------------------------------------------------
def save(obj: Any, f: str | os.PathLike | BinaryIO, **kwargs: Any) -> None:
    """Save a tensor, or a dict/list/tuple tree of tensors, numbers and strings (a
    ``state_dict``, an optimizer state, a checkpoint dict) to ``f`` (path or binary file).
    ``pickle_module``/``pickle_protocol`` are accepted and ignored: nothing is pickled."""
    unknown = set(kwargs) - {"pickle_module", "pickle_protocol", "_use_new_zipfile_serialization",
                             "_disable_byteorder_record"}
    if unknown:
        raise TypeError(f"save() got unexpected keyword arguments {sorted(unknown)}")
    enc = _Encoder()
    structure = enc.encode(obj, "")
    meta = {"format": "scriptmod", "scriptmod_format_version": FORMAT_VERSION,
            "structure": json.dumps(structure, separators=(",", ":"))}
    _write(_encode_safetensors(enc.arrays, meta), f)


def load(f: str | os.PathLike | BinaryIO, map_location: Any = None, *,
         weights_only: bool = True, mmap: Any = None, **kwargs: Any) -> Any:
    """Load what :func:`save` wrote. ``map_location``: a device ('cpu', 'cuda:0'), a dict
    ``{'cuda:0': 'cpu'}`` or ``fn(tensor, saved_location) -> tensor``. Loading is always
    ``weights_only``-safe: the file holds no code."""
    arrays, meta = _decode_safetensors(_read(f))
    structure = meta.get("structure")
    if structure is None:
        return OrderedDict((k, _map_device(Tensor._make(a), "cpu", map_location))
                           for k, a in arrays.items())
    if meta.get("scriptmod_format_version") != FORMAT_VERSION:
        raise SerializationError(f"load: unsupported scriptmod format version "
                                 f"{meta.get('scriptmod_format_version')!r} (this build reads "
                                 f"{FORMAT_VERSION!r})")
    try:
        tree = json.loads(structure)
    except json.JSONDecodeError as e:
        raise SerializationError(f"load: the structure metadata is not valid JSON: {e}") from None
    return _Decoder(arrays, map_location).decode(tree)


def _as_bytes(obj: Any) -> bytes:
    """``save`` into memory (tests, archives)."""
    buf = io.BytesIO()
    save(obj, buf)
    return buf.getvalue()

