"""Reading ``torch.save`` checkpoints without torch, and without running code from the file.

A checkpoint is a zip: ``<name>/data.pkl`` (the object tree, pickled), ``<name>/data/<key>``
(one raw storage per key), ``<name>/byteorder``, ``<name>/version``. The pickle is read by a
restricted unpickler, like ``torch.load(weights_only=True)``: a global is looked up in an
allow-list that maps it to scriptmod's own stand-in (tensor rebuilds, storage types, dtypes,
``Size``, ``device``, ``OrderedDict``, ``set``, ``complex``); any other global is refused by
name and nothing is imported. Only the opcodes of plain data, tuples, lists, dicts, globals from
the allow-list, calls of those, and storage references are read.

Tensors are rebuilt with NumPy from (storage, offset, size, stride), all in elements:
contiguous tensors are views of their storage (tensors sharing a storage share memory, as in
torch), others are copied. Every size is checked before anything is allocated.
"""
from __future__ import annotations

import _compat_pickle
import io
import math
import pickle
import pickletools
import re
import sys
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from scriptmod import _device
from scriptmod._formats import SerializationError, UnpicklingRefused
from scriptmod._safetensors import np_dtype
from scriptmod.ir import dtypes as D
from scriptmod.runtime.trees import rebuilt
from scriptmod.tensor import Size, Tensor

MAX_PICKLE = 256 * 2**20          # data.pkl
MAX_STORAGE = 64 * 2**30          # one storage, and all of them together
MAX_EXPANDED = 2**24              # elements a view may have beyond its storage (stride 0)

# torch's dtype names (torch.float32 pickles as GLOBAL 'torch float32') -> scriptmod's
DTYPES = {n: n for n in ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16",
                         "int8", "uint8", "bool", "complex64", "complex128")}
DTYPES.update(double="float64", float="float32", half="float16", long="int64", int="int32",
              short="int16", cfloat="complex64", cdouble="complex128")
# legacy typed storage classes (what torch writes for these dtypes) -> element dtype
STORAGES = {"DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
            "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
            "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
            "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
            "ComplexDoubleStorage": "complex128"}


@dataclass(frozen=True)
class _StorageType:
    dtype: str | None            # None: torch.storage.UntypedStorage (bytes)


@dataclass(frozen=True)
class _Storage:
    key: str
    raw: np.ndarray              # uint8, the file's bytes
    dtype: str | None
    location: str
    swap: bool                   # the file's byte order is not this machine's


@dataclass
class _Rebuilt:
    """A tensor as the pickle describes it; becomes a ``Tensor`` after unpickling."""
    array: np.ndarray
    location: str
    requires_grad: bool = False
    parameter: bool = False


# ---- the allow-list ------------------------------------------------------------------------
def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> _Rebuilt:
    storage = _typed_storage(storage)
    return _Rebuilt(_strided(storage, storage.dtype, offset, size, stride), storage.location)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any,
                       backward_hooks: Any, metadata: Any = None) -> _Rebuilt:
    t = _rebuild_tensor(storage, offset, size, stride)
    t.requires_grad = bool(requires_grad)
    return t


def _rebuild_tensor_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any,
                       backward_hooks: Any, dtype: Any, metadata: Any = None) -> _Rebuilt:
    if not isinstance(dtype, D.DType):
        raise SerializationError(f"load: a tensor's dtype is {dtype!r}, not a torch dtype")
    storage = _typed_storage(storage)
    return _Rebuilt(_strided(storage, dtype.name, offset, size, stride), storage.location,
                    bool(requires_grad))


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any,
                       state: Any = None) -> _Rebuilt:
    if not isinstance(data, _Rebuilt):
        raise SerializationError("load: a Parameter's data is not a tensor")
    return _Rebuilt(data.array, data.location, bool(requires_grad), parameter=True)


def _size(dims: Any = ()) -> Size:
    return Size(_int_tuple(dims, "torch.Size"))


def _make_device(kind: Any, index: Any = None) -> _device.device:
    if not isinstance(kind, str) or not (index is None or type(index) is int):
        raise SerializationError(f"load: torch.device({kind!r}, {index!r}) is not a device")
    return _device.device(kind, index)


def _encode(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode``: how protocol-2 pickles store ``bytes``."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise SerializationError("load: _codecs.encode is allowed only as (str, 'latin1')")
    return text.encode("latin1")


ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch.storage", "UntypedStorage"): _StorageType(None),
    ("torch", "UntypedStorage"): _StorageType(None),
    ("torch", "Size"): _size,
    ("torch", "device"): _make_device,
    ("collections", "OrderedDict"): OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("_codecs", "encode"): _encode,
    **{("torch", name): _StorageType(dt) for name, dt in STORAGES.items()},
    **{("torch", name): D.BY_NAME[dt] for name, dt in DTYPES.items()},
}
_TORCH_ONLY_DTYPES = re.compile(r"u?int\d+|float8\w*|complex32|q[u]?int\w*|bits\w*|float4\w*")


def _refuse(module: str, name: str) -> UnpicklingRefused:
    what = f"{module}.{name}"
    if module == "torch" and _TORCH_ONLY_DTYPES.fullmatch(name):
        why = (f"the checkpoint holds a tensor of dtype {what}, which scriptmod does not have "
               f"(it has {', '.join(sorted(set(DTYPES.values())))})")
    elif module.startswith(("torch.nn", "__main__")) or name[:1].isupper():
        why = (f"it refused the global {what!r}: the checkpoint holds a pickled object, not "
               "only tensors (e.g. torch.save(model)); in PyTorch save model.state_dict() "
               "instead and load that")
    else:
        why = f"it refused the global {what!r}, which is not on the allow-list of tensor data"
    return UnpicklingRefused(
        f"load: a PyTorch checkpoint is read like torch.load(weights_only=True), and {why}. "
        "Nothing was imported or run (weights_only=False does not change this).")


# ---- the unpickler -------------------------------------------------------------------------
# what a checkpoint's pickle may use: data, containers, memo, globals, calls, storages
_OPCODES = {op.code.encode("latin1")[0]: op.name for op in pickletools.opcodes if op.name in {
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "NONE", "NEWTRUE", "NEWFALSE",
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "EMPTY_TUPLE", "TUPLE", "TUPLE1",
    "TUPLE2", "TUPLE3", "EMPTY_LIST", "LIST", "APPEND", "APPENDS", "EMPTY_DICT", "DICT",
    "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS", "FROZENSET", "GET", "BINGET", "LONG_BINGET",
    "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GLOBAL", "STACK_GLOBAL", "REDUCE", "NEWOBJ",
    "BUILD", "PERSID", "BINPERSID"}}


_ALL_OPCODES = {op.code.encode("latin1")[0]: op.name for op in pickletools.opcodes}


class _Dispatch(dict):
    """Any opcode not allowed is an error that names it."""


    def __missing__(self, code: int) -> Callable[[Any], None]:
        def refuse(_: Any) -> None:
            name = _ALL_OPCODES.get(code, f"byte {code:#04x}")
            raise SerializationError(f"load: data.pkl uses the pickle opcode {name}, which "
                                     "weights-only loading does not read")
        return refuse


class _Unpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """The pure-Python unpickler with only data opcodes, globals from ``ALLOWED``, calls of
    those only, ``BUILD`` only as torch uses it (``OrderedDict`` attributes), and storages."""

    dispatch = _Dispatch({k: v for k, v in pickle._Unpickler.dispatch.items()  # type: ignore
                          if k in _OPCODES})

    def __init__(self, data: bytes, storage: Callable[[Any], _Storage]) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self._storage = storage
        self._callables = {id(v) for v in ALLOWED.values() if callable(v)}

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3:        # Python 2 names, renamed as pickle does (nothing imported)
            module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        found = ALLOWED.get((module, name))
        if found is None:
            raise _refuse(module, name)
        return found

    def persistent_load(self, pid: Any) -> _Storage:
        return self._storage(pid)

    def load_reduce(self) -> None:
        args = self.stack.pop()
        func = self.stack[-1]
        if id(func) not in self._callables or not isinstance(args, tuple):
            raise SerializationError(f"load: data.pkl calls {type(func).__name__}, which is "
                                     "not an allowed function")
        self.stack[-1] = func(*args)

    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        if cls not in (OrderedDict, set, frozenset, complex) or not isinstance(args, tuple):
            raise SerializationError(f"load: data.pkl creates a {getattr(cls, '__name__', cls)}, "
                                     "which is not an allowed type")
        self.append(cls.__new__(cls, *args))

    def load_build(self) -> None:
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) is not OrderedDict or not isinstance(state, dict) \
                or not set(state) <= {"_metadata"}:
            raise SerializationError(f"load: data.pkl sets the state of a "
                                     f"{type(inst).__name__}; only a state dict's _metadata "
                                     "can be set")
        vars(inst).update(state)

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.BUILD[0]] = load_build


# ---- storages and views --------------------------------------------------------------------
def _int_tuple(v: Any, what: str, limit: int = 64) -> tuple[int, ...]:
    if not isinstance(v, (tuple, list)) or len(v) > limit \
            or not all(type(i) is int and i >= 0 for i in v):
        raise SerializationError(f"load: {what} is {str(v)[:100]}, expected a tuple of at most "
                                 f"{limit} non-negative ints")
    return tuple(v)


def _typed_storage(storage: Any) -> _Storage:
    if not isinstance(storage, _Storage):
        raise SerializationError(f"load: a tensor is rebuilt from a {type(storage).__name__}, "
                                 "not a storage")
    return storage


def _strided(storage: _Storage, dtype: str | None, offset: Any, size: Any,
             stride: Any) -> np.ndarray:
    """The view (storage, offset, size, stride) in elements, bounds-checked; a copy if it is
    not a plain contiguous slice of the storage."""
    if dtype is None:
        raise SerializationError(f"load: storage {storage.key!r} is untyped and its tensor "
                                 "names no dtype")
    size, stride = _int_tuple(size, "a tensor's size"), _int_tuple(stride, "a tensor's stride")
    (offset,) = _int_tuple((offset,), "a tensor's storage offset", 1)
    flat = _typed(storage, dtype)
    count = math.prod(size)
    if len(stride) != len(size):
        raise SerializationError(f"load: tensor size {list(size)} and stride {list(stride)} "
                                 "differ in length")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if count else offset - 1
    if last >= flat.size or count > max(flat.size, MAX_EXPANDED):
        raise SerializationError(f"load: a tensor of size {list(size)}, stride {list(stride)} "
                                 f"and offset {offset} does not fit its storage "
                                 f"{storage.key!r} of {flat.size} elements")
    if count == 0:
        return np.empty(size, flat.dtype)
    item = flat.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(flat[offset:], size, [s * item for s in stride],
                                           writeable=False)
    if view.flags.c_contiguous:
        return flat[offset:offset + count].reshape(size)
    return np.array(view)


def _typed(storage: _Storage, dtype: str) -> np.ndarray:
    if storage.dtype is not None and storage.dtype != dtype:
        raise SerializationError(f"load: storage {storage.key!r} holds {storage.dtype}, a "
                                 f"tensor reads it as {dtype}")
    dt = np_dtype(dtype)
    if storage.raw.size % dt.itemsize:
        raise SerializationError(f"load: storage {storage.key!r} has {storage.raw.size} bytes, "
                                 f"not a whole number of {dtype} elements")
    return (_byteswapped(storage.raw, dtype) if storage.swap else storage.raw).view(dt)


class _Checkpoint:
    """One torch zip checkpoint: its record prefix, byte order, and storages read on demand."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        self.infos = {i.filename: i for i in zf.infolist()}
        pkl = [n for n in self.infos if n.count("/") == 1 and n.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise SerializationError(f"load: a PyTorch checkpoint has one <name>/data.pkl entry; "
                                     f"this zip has {len(pkl)}")
        self.prefix = pkl[0][:-len("data.pkl")]
        order = self.read(self.prefix + "byteorder", 16).decode("ascii", "replace") \
            if self.prefix + "byteorder" in self.infos else "little"
        if order not in ("little", "big"):
            raise SerializationError(f"load: byteorder is {order!r}, expected 'little' or 'big'")
        self.swap = order != sys.byteorder
        self.storages: dict[str, _Storage] = {}
        self.total = 0              # bytes of all storages read

    def read(self, name: str, limit: int) -> bytes:
        info = self.infos.get(name)
        if info is None:
            raise SerializationError(f"load: the checkpoint has no entry {name!r}")
        if info.file_size > limit:
            raise SerializationError(f"load: entry {name!r} declares {info.file_size} bytes, "
                                     f"more than the limit {limit}")
        try:
            with self.zf.open(info) as fh:
                data = fh.read(info.file_size + 1)
        except Exception as e:  # zipfile/zlib raise many types on corrupt data
            raise SerializationError(f"load: entry {name!r} is corrupt: "
                                     f"{type(e).__name__}: {e}") from None
        if len(data) != info.file_size:
            raise SerializationError(f"load: entry {name!r} holds {len(data)} bytes, its header "
                                     f"declares {info.file_size}")
        return data

    def storage(self, pid: Any) -> _Storage:
        """``persistent_load``: ('storage', storage type, key, location, numel)."""
        ok = (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
              and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)
              and re.fullmatch(r"\w{1,64}", pid[2]) and isinstance(pid[3], str)
              and type(pid[4]) is int and pid[4] >= 0)
        if not ok:
            raise SerializationError(f"load: data.pkl refers to the storage {str(pid)[:100]}, "
                                     "expected ('storage', type, key, location, numel)")
        _, kind, key, location, numel = pid
        if key not in self.storages:
            self.storages[key] = self._read_storage(kind.dtype, key, location, numel)
        seen = self.storages[key]
        if seen.dtype != kind.dtype:
            raise SerializationError(f"load: storage {key!r} is referenced as {kind.dtype} and "
                                     f"as {seen.dtype}")
        return seen

    def _read_storage(self, dtype: str | None, key: str, location: str, numel: int) -> _Storage:
        name = f"{self.prefix}data/{key}"
        nbytes = numel * (np_dtype(dtype).itemsize if dtype else 1)
        declared = self.infos[name].file_size if name in self.infos else None
        if declared != nbytes:
            raise SerializationError(f"load: storage {key!r} declares {numel} elements "
                                     f"({nbytes} bytes); the checkpoint's entry {name!r} "
                                     + ("is missing" if declared is None else
                                        f"holds {declared} bytes"))
        self.total += nbytes
        if self.total > MAX_STORAGE:
            raise SerializationError(f"load: the checkpoint's storages hold more than the limit "
                                     f"{MAX_STORAGE} bytes")
        raw = np.frombuffer(bytearray(self.read(name, MAX_STORAGE)), np.uint8)
        return _Storage(key, raw, dtype, location, self.swap)


def _byteswapped(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Storage bytes in the other byte order (complex: each half on its own); a copy."""
    unit = np_dtype(dtype).itemsize // (2 if dtype.startswith("complex") else 1)
    if unit == 1:
        return raw
    return raw.view(f"u{unit}").byteswap().view(np.uint8)


# ---- public entry points -------------------------------------------------------------------
def load(zf: zipfile.ZipFile, place: Callable[[Tensor, str], Tensor]) -> Any:
    """The object a torch zip checkpoint holds, tensors as scriptmod ``Tensor``s placed by
    ``place(tensor, saved_location)``; containers come back as plain dicts, lists, tuples."""
    ckpt = _Checkpoint(zf)
    data = ckpt.read(ckpt.prefix + "data.pkl", MAX_PICKLE)
    try:
        obj = _Unpickler(data, ckpt.storage).load()
    except SerializationError:
        raise
    except RecursionError:
        raise SerializationError("load: data.pkl nests too deeply") from None
    except Exception as e:     # truncated or malformed pickles raise many types
        raise SerializationError(f"load: data.pkl is not a valid checkpoint pickle: "
                                 f"{type(e).__name__}: {e}") from None
    return _Finisher(place).finish(obj)


class _Finisher:
    """``_Rebuilt`` -> ``Tensor`` through the tree; shared objects stay shared."""

    def __init__(self, place: Callable[[Tensor, str], Tensor]) -> None:
        self.place = place
        self.done: dict[int, Any] = {}

    def finish(self, obj: Any) -> Any:
        if id(obj) in self.done:
            return self.done[id(obj)]
        try:
            out = self._finish(obj)
        except RecursionError:
            raise SerializationError("load: the checkpoint's object tree nests too "
                                     "deeply") from None
        self.done[id(obj)] = out
        return out

    def _finish(self, obj: Any) -> Any:
        if isinstance(obj, _Rebuilt):
            return self.tensor(obj)
        if isinstance(obj, _Storage):
            raise SerializationError(f"load: the checkpoint holds a bare storage "
                                     f"({obj.key!r}), not a tensor")
        if isinstance(obj, dict):
            out = type(obj)((self.finish(k), self.finish(v)) for k, v in obj.items())
            if isinstance(obj, OrderedDict):      # a state dict's _metadata (versions)
                vars(out).update(vars(obj))
            return out
        if isinstance(obj, (list, tuple)) and not isinstance(obj, Size):
            return rebuilt(obj, (self.finish(v) for v in obj))
        if isinstance(obj, (set, frozenset)):
            return type(obj)(self.finish(v) for v in obj)
        return obj

    def tensor(self, r: _Rebuilt) -> Tensor:
        from scriptmod.nn.parameter import Parameter
        t = self.place(Tensor._make(r.array), r.location)
        if r.parameter:
            return Parameter(t, requires_grad=r.requires_grad)
        return t.requires_grad_(True) if r.requires_grad else t
