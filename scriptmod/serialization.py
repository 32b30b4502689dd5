"""``scriptmod.save`` / ``scriptmod.load``: tensors and nested containers of them, without
pickle. Loading never runs code from the file. ``load`` also reads ``torch.save`` checkpoints
(``scriptmod._torch_checkpoint``, like ``torch.load(weights_only=True)``) and safetensors files
from any producer; any other file is named for what it is (``scriptmod._formats``).

    >>> model = nn.Linear(4, 2); opt = scriptmod.optim.SGD(model.parameters(), lr=0.1)
    >>> scriptmod.save(model.state_dict(), "model.pt")
    >>> model.load_state_dict(scriptmod.load("model.pt"))
    <All keys matched successfully>
    >>> scriptmod.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}, "ckpt.pt")
    >>> scriptmod.load("ckpt.pt")["epoch"]
    3

File format: a standard safetensors file (any safetensors reader opens it).

- Header: 8-byte little-endian length, then JSON ``{name: {"dtype", "shape",
  "data_offsets"}, "__metadata__": {...}}``; data follow, widest dtype first so that each
  tensor is aligned to its item size (``scriptmod._safetensors``, shared with ``jit.save``).
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

import contextlib
import io
import json
import mmap as _mmap
import os
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO, Iterator

import numpy as np

from scriptmod.runtime.arrays import cuda_available
from scriptmod import _device, _formats, _safetensors
from scriptmod._formats import SerializationError
from scriptmod._safetensors import SafetensorsError
from scriptmod.tensor import Size, Tensor

__all__ = ["save", "load", "save_safetensors", "load_safetensors", "SerializationError"]

FORMAT_VERSION = "1"


# ---- the raw safetensors layer (the codec is scriptmod._safetensors) -------------------------
def _decode_safetensors(buf: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    try:
        return _safetensors.decode(buf)
    except SafetensorsError as e:
        raise SerializationError(f"load: {e}") from None


def _write(chunks: list[bytes], f: Any) -> None:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            for c in chunks:
                fh.write(c)
    else:
        for c in chunks:
            f.write(c)


@contextlib.contextmanager
def _opened(f: Any) -> Iterator[tuple[BinaryIO, str]]:
    """A seekable binary file over a path, bytes or any binary file; and a name for errors."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            yield fh, os.fspath(f)
    elif isinstance(f, (bytes, bytearray, memoryview)):
        yield io.BytesIO(f), "<bytes>"
    elif hasattr(f, "seekable") and f.seekable():
        yield f, str(getattr(f, "name", "<file>"))
    else:
        yield io.BytesIO(f.read()), "<stream>"


def _read_safetensors(fh: BinaryIO, name: str, mmap: bool = False) -> Any:
    """The file's bytes, once its header length is checked against the cap and the file size;
    writable, so tensors are views of it. ``mmap`` maps a file copy-on-write instead."""
    start = fh.tell()
    size = fh.seek(0, os.SEEK_END) - start
    fh.seek(start)
    try:
        _safetensors.header_length(fh.read(8), size)
    except SafetensorsError as e:
        fh.seek(start)
        kind = _formats.sniff(fh)
        where = "" if kind == _formats.SAFETENSORS else f"{name} is {_formats.describe(kind)}: "
        raise SerializationError(f"load: {where}{e}") from None
    fh.seek(start)
    if mmap and start == 0 and not isinstance(fh, io.BytesIO):
        return memoryview(_mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_COPY))
    buf = bytearray(size)
    if fh.readinto(buf) != size:
        raise SerializationError(f"load: {name} ended before its {size} bytes were read")
    return buf


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
    _write(_safetensors.encode(arrays, metadata), f)


def load_safetensors(f: str | os.PathLike | BinaryIO, device: Any = None) -> "OrderedDict[str, Tensor]":
    """Read a safetensors file (from any producer) as an ordered ``{name: Tensor}`` dict."""
    with _opened(f) as (fh, name):
        arrays, _ = _decode_safetensors(_read_safetensors(fh, name))
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
    _write(_safetensors.encode(enc.arrays, meta), f)


def load(f: str | os.PathLike | BinaryIO, map_location: Any = None, pickle_module: Any = None,
         *, weights_only: bool | None = None, mmap: bool | None = None,
         **pickle_load_args: Any) -> Any:
    """Load tensors saved by :func:`save`, by ``torch.save`` or as safetensors (from any
    producer: a flat ``{name: Tensor}`` dict). ``map_location``: a device ('cpu', 'cuda:0'),
    a dict ``{'cuda:0': 'cpu'}`` or ``fn(tensor, saved_location) -> tensor``.

        >>> scriptmod.save({"w": scriptmod.ones(2)}, "w.st")
        >>> scriptmod.load("w.st", map_location="cpu", weights_only=True)["w"]
        tensor([1., 1.])

    A ``torch.save`` checkpoint is read like ``torch.load(weights_only=True)``: only tensors,
    containers, numbers, strings, dtypes, devices and sizes; anything else is refused by name
    and never imported or run. ``weights_only=False`` is accepted and changes nothing: scriptmod
    never runs code from a file. ``mmap=True`` maps a safetensors file instead of reading it
    (tensors are copy-on-write views of the file); a torch checkpoint is always read.
    ``pickle_module`` and ``encoding`` are accepted for torch compatibility and unused.
    """
    unknown = set(pickle_load_args) - {"encoding", "errors", "fix_imports"}
    if unknown:
        raise TypeError(f"load() got unexpected keyword arguments {sorted(unknown)}")
    with _opened(f) as (fh, name):
        kind = _formats.sniff(fh)
        if kind == _formats.TORCH_ZIP:
            from scriptmod import _torch_checkpoint
            with zipfile.ZipFile(fh) as zf:
                return _torch_checkpoint.load(zf, lambda t, saved: _map_device(t, saved,
                                                                               map_location))
        if kind not in (_formats.SAFETENSORS, _formats.UNKNOWN, _formats.EMPTY):
            raise SerializationError(f"load: {name} is {_formats.describe(kind)}")
        buf = _read_safetensors(fh, name, bool(mmap) and isinstance(f, (str, os.PathLike)))
    arrays, meta = _decode_safetensors(buf)
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

