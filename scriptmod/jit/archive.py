"""Saving and loading compiled modules: ``jit.save``, ``jit.load``, ``ScriptModule.save``.

An archive is a zip of a JSON manifest, the IR text and ``.code`` of every method, and the
tensors in one safetensors file; never pickle (format: ``scriptmod/jit/ARCHIVE.md``).
Loading runs no code from the file: everything is validated first (``_archive_format``), and the
module tree is rebuilt from ScriptModules, so the original classes are not needed.

    >>> traced = scriptmod.jit.trace(nn.Linear(4, 2), scriptmod.ones(2, 4))
    >>> scriptmod.jit.save(traced, "model.smod", _extra_files={"notes.txt": "v1"})
    >>> extra = {"notes.txt": ""}
    >>> again = scriptmod.jit.load("model.smod", _extra_files=extra)
    >>> extra
    {'notes.txt': b'v1'}
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import zipfile
from typing import Any, Mapping, Sequence

import numpy as np

from scriptmod.ir.code import python_code
from scriptmod.ir.graph import Graph, Prim, Value
from scriptmod.ir.parser import TensorPlaceholder, parse
from scriptmod.ir.printer import is_payload, tensor_constants
from scriptmod.ir.types import BoolType, ListType, ModuleType, OptionalType, TensorType, TupleType, Type
from scriptmod.ir.verify import verify
from scriptmod.jit import _archive_checks as C
from scriptmod.jit import _archive_format as A
from scriptmod.jit import _structure as S
from scriptmod.jit._archive_format import ArchiveError
from scriptmod.jit._retype import current_graphs
from scriptmod.jit._script_module import (RecursiveScriptModule, ScriptFunction, ScriptModule,
                                          building)
from scriptmod.nn.parameter import Parameter
from scriptmod import _safetensors
from scriptmod.serialization import _map_device
from scriptmod.tensor import Tensor, wrap

__all__ = ["save", "load", "ArchiveError"]

_EPOCH = (1980, 1, 1, 0, 0, 0)


# ---- saving --------------------------------------------------------------------------------
def save(m: ScriptModule | ScriptFunction, f: Any,
         _extra_files: Mapping[str, str | bytes] | None = None) -> None:
    """Write ``m`` (a traced ScriptModule or ScriptFunction) to ``f`` (path or binary file).

        >>> traced = scriptmod.jit.trace(nn.Linear(4, 2), scriptmod.ones(2, 4))
        >>> scriptmod.jit.save(traced, "block.smod")
        >>> scriptmod.jit.save(traced, "again.smod")
        >>> open("block.smod", "rb").read() == open("again.smod", "rb").read()
        True

    Saving the same module twice gives byte-identical files.
    """
    data = archive_bytes(m, _extra_files)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            fh.write(data)
    else:
        f.write(data)


def archive_bytes(m: ScriptModule | ScriptFunction,
                  extra_files: Mapping[str, str | bytes] | None = None) -> bytes:
    """The archive of ``m`` as bytes (what ``save`` writes)."""
    if isinstance(m, ScriptFunction):
        m = m._module
    if not isinstance(m, ScriptModule):
        raise ArchiveError(f"jit.save: expected a ScriptModule (from jit.trace), got "
                           f"{type(m).__name__}")
    w = _Writer()
    w.collect(m, "")
    w.graphs = current_graphs(w.modules, w.paths)
    modules = [w.module_entry(i) for i in range(len(w.modules))]
    extras = _extra_entries(extra_files or {})
    import scriptmod
    manifest = {"format": A.FORMAT, "format_version": A.FORMAT_VERSION,
                "producer": f"scriptmod {scriptmod.__version__}", "root": 0, "modules": modules,
                "tensors": w.table, "ops": sorted(w.ops), "extra_files": sorted(extras)}
    entries = [(A.MANIFEST, _manifest_bytes(manifest), True)] + w.entries
    data = b"".join(_safetensors.encode(w.arrays))
    entries.append((A.DATA, data, False))
    entries += [(A.extra_entry(k), extras[k], True) for k in sorted(extras)]
    return _zip(entries)


def _extra_entries(extra: Mapping[str, str | bytes]) -> dict[str, bytes]:
    out = {}
    for name, content in extra.items():
        if not isinstance(name, str):
            raise ArchiveError(f"_extra_files: names must be strings, got {type(name).__name__}")
        A.check_entry_name(name, "_extra_files name")
        if not isinstance(content, (str, bytes, bytearray)):
            raise ArchiveError(f"_extra_files[{name!r}]: expected str or bytes, got "
                               f"{type(content).__name__}")
        out[name] = content.encode() if isinstance(content, str) else bytes(content)
    return out


def _manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def _zip(entries: list[tuple[str, bytes, bool]], seal: bool = True) -> bytes:
    """Fixed timestamps, permissions and order: the same entries give the same bytes. With
    ``seal``, a version-2 manifest (the first entry) gets the size and sha256 of every other
    entry, and ``manifest.sha256`` its own digest (``_sealed``)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data, deflate in (_sealed(entries) if seal else entries):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            info.create_system = 3
            info.external_attr = 0o100644 << 16
            zf.writestr(info, data, compresslevel=6)
    return buf.getvalue()


def _sealed(entries: list[tuple[str, bytes, bool]]) -> list[tuple[str, bytes, bool]]:
    """The entries with the manifest's ``entries`` field (re)computed from the others and
    its digest entry after it. A first entry that is no version-2 manifest (a version-1 or
    hand-broken one, as tests write) is written as it is, without a digest entry."""
    if not entries or entries[0][0] != A.MANIFEST:
        return entries
    rest = [e for e in entries[1:] if e[0] != A.DIGEST]
    try:
        manifest = json.loads(entries[0][1])
        version = manifest["format_version"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return entries[:1] + rest
    if not (type(version) is int and version >= 2):
        return entries[:1] + rest
    manifest["entries"] = A.digest_entries([(name, data) for name, data, _ in rest])
    text = _manifest_bytes(manifest)
    digest = hashlib.sha256(text).hexdigest().encode() + b"\n"
    return [(A.MANIFEST, text, True), (A.DIGEST, digest, True)] + rest


def _safe_class_name(name: str) -> str:
    """Module class names the IR parser reads back (``f.<locals>.Net`` -> ``f._locals_.Net``)."""
    parts = [re.sub(r"\W", "_", p) or "_" for p in name.split(".")]
    return ".".join("_" + p if p[0].isdigit() else p for p in parts)


def _safe_type(t: Type) -> Type:
    if isinstance(t, ModuleType):
        return dataclasses.replace(t, class_name=_safe_class_name(t.class_name))
    if isinstance(t, TupleType):
        return TupleType(tuple(_safe_type(e) for e in t.elements))
    if isinstance(t, ListType):
        return ListType(_safe_type(t.element))
    if isinstance(t, OptionalType):
        return OptionalType(_safe_type(t.element))
    return t


def _savable_graph(g: Graph) -> Graph:
    """A copy with parseable class names and source locations stripped to ``file:line``
    (no directories of the saving machine)."""
    g = g.copy()
    values: list[Value] = list(g.inputs)
    for n in g.walk():
        values += list(n.outputs) + [p for b in n.blocks for p in b.params]
        if n.source is not None:
            n.source = n.source.replace("\\", "/").rsplit("/", 1)[-1]
    for v in values:
        v.type = _safe_type(v.type)
    return g


class _Writer:
    """Numbers the module tree (shared submodules once) and its tensors (shared ones once)."""

    def __init__(self) -> None:
        self.modules: list[ScriptModule] = []
        self.paths: list[str] = []
        self.index: dict[int, int] = {}
        self.keys: dict[int, str] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.table: list[dict[str, Any]] = []
        self.keep: list[Any] = []
        self.ops: set[str] = set()
        self.entries: list[tuple[str, bytes, bool]] = []
        self.graphs: dict[tuple[int, str], Graph] = {}      # as they run now (current_graphs)

    def collect(self, m: Any, path: str) -> int:
        if id(m) in self.index:
            return self.index[id(m)]
        if not isinstance(m, ScriptModule):
            raise ArchiveError(f"jit.save: submodule {path!r} is a {type(m).__name__}, not a "
                               "ScriptModule; trace the whole model")
        self.index[id(m)] = len(self.modules)
        self.modules.append(m)
        self.paths.append(path)
        for name, child in m._modules.items():
            if child is not None:
                self.collect(child, f"{path}.{name}" if path else name)
        return self.index[id(m)]

    def tensor_key(self, t: Any, path: str, constant: bool = False) -> str:
        if id(t) in self.keys:
            return self.keys[id(t)]
        tensor = wrap(t) if not isinstance(t, Tensor) else t
        key = path
        while key in self.arrays:
            key += "_"
        self.keys[id(t)] = key
        self.keep.append(t)
        self.arrays[key] = np.asarray(tensor.detach().numpy(force=True))
        self.table.append({"key": key, "dtype": tensor.dtype.name,
                           "shape": list(tensor.shape), "device": tensor._device_str(),
                           "parameter": isinstance(t, Parameter) and not constant,
                           "requires_grad": bool(tensor.requires_grad) and not constant})
        return key

    def module_entry(self, i: int) -> dict[str, Any]:
        m, path = self.modules[i], self.paths[i]
        pre = f"{path}." if path else ""
        ref = lambda name, t: None if t is None else self.tensor_key(t, pre + name)  # noqa: E731
        return {
            "path": path, "original_name": m.original_name,
            "qualified_name": _safe_class_name(m._qualified_name),
            "training": bool(m.__dict__.get("training", False)),     # a frozen module: none
            "parameters": [{"name": k, "tensor": ref(k, p)} for k, p in m._parameters.items()],
            "buffers": [{"name": k, "tensor": ref(k, b),
                         "persistent": k not in m._non_persistent_buffers_set}
                        for k, b in m._buffers.items()],
            "submodules": [{"name": k, "module": None if c is None else self.index[id(c)]}
                           for k, c in m._modules.items()],
            "methods": [self.method_entry(i, k, self.graphs[(i, k)]) for k in m._methods],
            **self.layer_entry(m, path)}

    def layer_entry(self, m: Any, path: str) -> dict[str, Any]:
        """A scripted model's built-in layer: its class and plain configuration, from which
        the loader rebuilds the eager layer that its calls are compiled from."""
        ref = m.__dict__.get("_layer")
        if ref is None:
            return {}
        if not ref.savable:
            raise ArchiveError(f"jit.save: layer {path!r} ({ref.class_path}) has attributes "
                               f"that are not plain values; it cannot be rebuilt from an archive")
        return {"layer": {"class": ref.class_path, "config": ref.config}}

    def method_entry(self, i: int, name: str, graph: Graph) -> dict[str, Any]:
        calls = [n.attrs.get("name", "") for n in graph.walk()
                 if n.kind == Prim.CALL_FUNCTION and n.attrs.get("python")]
        if calls:
            raise ArchiveError(f"jit.save: {self.paths[i] or '<root>'}.{name} calls the "
                               f"@ignore'd Python function {calls[0][7:]}; an archive holds no "
                               f"Python code (script that function, or leave the call out)")
        g = _savable_graph(graph)
        text = str(g)
        try:
            readable = str(parse(text)) == text
        except Exception as e:      # a printer/parser disagreement: the archive would not load
            raise ArchiveError(f"jit.save: the IR of {self.paths[i] or '<root>'}.{name} does not "
                               f"read back: {e}") from None
        if not readable:
            raise ArchiveError(f"jit.save: the IR of {self.paths[i] or '<root>'}.{name} prints "
                               "differently after parsing")
        consts = [self.tensor_key(n.attrs["value"], f"const.m{i}.{name}.c{k}", constant=True)
                  for k, n in enumerate(tensor_constants(g))]
        self.ops |= {n.kind for n in g.walk()}
        self.entries.append((A.graph_entry(i, name), text.encode(), True))
        self.entries.append((A.code_entry(i, name), python_code(g, name).encode(), True))
        m = self.modules[i]
        entry = {"name": name, "arg_names": list(m._arg_names.get(name, [])),
                 "inputs": [repr(v.type) for v in g.inputs],
                 "outputs": [repr(v.type) for v in g.outputs], "constants": consts}
        spec = m._out_specs.get(name)
        if spec is not None:                  # a dict or namedtuple output
            entry["output_structure"] = S.to_json(spec)
        in_spec = m._in_specs.get(name)
        if in_spec is not None:               # dict or nested container arguments
            entry["input_structure"] = S.input_spec_to_json(in_spec)
        if m._defaults.get(name):             # a scripted method's parameter defaults
            entry["defaults"] = A.defaults_to_json(m._defaults[name])
        return entry


# ---- loading -------------------------------------------------------------------------------
def load(f: Any, map_location: Any = None,
         _extra_files: dict[str, Any] | None = None) -> ScriptModule:
    """Load an archive written by :func:`save` (path or binary file) as a ScriptModule tree.

        >>> scriptmod.jit.save(scriptmod.jit.trace(nn.Linear(4, 2), scriptmod.ones(2, 4)),
        ...                    "block.smod")
        >>> m = scriptmod.jit.load("block.smod", map_location="cpu")
        >>> m(scriptmod.ones(3, 4)).shape
        scriptmod.Size([3, 2])

    ``map_location`` is a device, a dict ``{"cuda:0": "cpu"}`` or ``fn(tensor, saved_device)``.
    ``_extra_files`` is filled in place (as bytes) for the names it holds that the archive has.
    Nothing in the file is executed; an invalid or hostile file raises ``ArchiveError``.
    """
    return read(f, map_location, _extra_files)[0]


def read(f: Any, map_location: Any = None,
         _extra_files: dict[str, Any] | None = None) -> tuple[ScriptModule, dict[str, Any]]:
    """``load``, also returning the validated manifest (for ``scriptmod inspect``)."""
    with A.open_zip(f) as zf:
        box = A.Container(zf)
        manifest = A.read_manifest(box)
        A.check_manifest(manifest)
        _check_entries(box, manifest)
        box.expect(manifest.get("entries", []))
        arrays = A.decode_tensors(box.read(A.DATA, A.data_cap(manifest["tensors"])),
                                  manifest["tensors"])
        tensors = _tensors(manifest["tensors"], arrays, map_location)
        graphs = {(i, meth["name"]): _load_graph(box, manifest, i, meth, tensors)
                  for i, meth in A.iter_methods(manifest)}
        _check_references(manifest, graphs)
        for (i, name), g in graphs.items():
            _check_code(box, i, name, g)
        for name in manifest["extra_files"]:              # read all: each has its digest
            content = box.read(A.extra_entry(name))
            if _extra_files is not None and name in _extra_files:
                _extra_files[name] = bytes(content)
    module = _rebuild(manifest, graphs, tensors)
    C.check_types(module, manifest)
    return module, manifest


def _check_entries(box: A.Container, manifest: dict[str, Any]) -> None:
    """Exactly the entries the manifest implies; version 2 lists each (but the manifest and
    its digest) with its size and sha256."""
    contents = {A.DATA} | {A.extra_entry(n) for n in manifest["extra_files"]}
    for i, meth in A.iter_methods(manifest):
        contents |= {A.graph_entry(i, meth["name"]), A.code_entry(i, meth["name"])}
    expected = contents | {A.MANIFEST} | ({A.DIGEST} if "entries" in manifest else set())
    names = set(box.names())
    if expected - names:
        raise ArchiveError(f"archive is missing entries {sorted(expected - names)[:5]}")
    if names - expected:
        raise ArchiveError(f"archive has entries the manifest does not explain: "
                           f"{sorted(names - expected)[:5]}")
    listed = {e["name"] for e in manifest.get("entries", [])}
    if "entries" in manifest and listed != contents:
        raise ArchiveError(f"manifest.entries: lists {sorted(listed ^ contents)[:5]} wrongly "
                           f"(it lists every entry but {A.MANIFEST} and {A.DIGEST})")


def _tensors(table: list[dict[str, Any]], arrays: dict[str, np.ndarray],
             map_location: Any) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for entry in table:
        try:
            t = _map_device(Tensor._make(arrays[entry["key"]]), entry["device"], map_location)
            if entry["parameter"]:
                t = Parameter(t, requires_grad=entry["requires_grad"])
            elif entry["requires_grad"]:
                t.requires_grad_(True)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ArchiveError(f"tensor {entry['key']!r}: {e}") from None
        out[entry["key"]] = t
    return out


def _load_graph(box: A.Container, manifest: dict[str, Any], i: int, meth: dict[str, Any],
                tensors: dict[str, Tensor]) -> Graph:
    """Parse, allow-list, verify; then the signature must match the manifest."""
    where = A.graph_entry(i, meth["name"])
    payloads = [tensors[k]._data for k in meth["constants"]]
    try:
        g = parse(box.text(where), constants=payloads)
    except ArchiveError:
        raise
    except Exception as e:        # parser errors, and RecursionError from hostile nesting
        raise ArchiveError(f"{where}: the IR does not parse: {type(e).__name__}: {e}") from None
    _check_kinds(g, set(manifest["ops"]), where)
    _check_constants(g, payloads, where)
    try:
        verify(g)
    except Exception as e:
        raise ArchiveError(f"{where}: the IR fails verification: {e}") from None
    sig = ([repr(v.type) for v in g.inputs], [repr(v.type) for v in g.outputs])
    if sig != (meth["inputs"], meth["outputs"]):
        raise ArchiveError(f"{where}: the graph's signature {sig} does not match the manifest's "
                           f"{(meth['inputs'], meth['outputs'])}")
    return g


def _output_spec(meth: dict[str, Any], g: Graph, i: int) -> Any:
    """The method's dict/namedtuple output structure, checked against its output type."""
    if meth.get("output_structure") is None:
        return None
    where = f"manifest.modules[{i}].methods[{meth['name']!r}].output_structure"
    if len(g.outputs) != 1:
        raise ArchiveError(f"{where}: the method returns {len(g.outputs)} values, not one")
    try:
        return S.from_json(meth["output_structure"], g.outputs[0].type, where)
    except ValueError as e:
        raise ArchiveError(str(e)) from None


def _input_spec(meth: dict[str, Any], g: Graph, i: int) -> Any:
    """The method's dict/nested argument structure, checked against its graph inputs."""
    if meth.get("input_structure") is None:
        return None
    where = f"manifest.modules[{i}].methods[{meth['name']!r}].input_structure"
    skip = 1 if g.inputs and isinstance(g.inputs[0].type, ModuleType) else 0
    try:
        return S.input_spec_from_json(meth["input_structure"], len(g.inputs) - skip, where)
    except ValueError as e:
        raise ArchiveError(str(e)) from None


def _check_code(box: A.Container, i: int, name: str, g: Graph) -> None:
    if box.text(A.code_entry(i, name)) != python_code(g, name):
        raise ArchiveError(f"{A.code_entry(i, name)} does not match the method's graph "
                           "(the readable code must show what runs)")


def _check_kinds(g: Graph, declared: set[str], where: str) -> None:
    for n in g.walk():
        A.check_kind(n.kind, where)
        if n.kind not in declared:
            raise ArchiveError(f"{where}: node kind {n.kind!r} is not listed in manifest.ops")


def _check_constants(g: Graph, payloads: list[Any], where: str) -> None:
    """Payloads only as ``prim::Constant`` values, one per manifest entry, fitting the type."""
    found = []
    for n in g.walk():
        for k, v in n.attrs.items():
            if isinstance(v, TensorPlaceholder):
                raise ArchiveError(f"{where}: the IR has more tensor constants than the "
                                   f"manifest's {len(payloads)}")
            if not isinstance(v, Graph) and is_payload(v):
                if n.kind != Prim.CONSTANT or k != "value":
                    raise ArchiveError(f"{where}: a tensor payload appears as attribute {k!r} "
                                       f"of {n.kind}; only prim::Constant holds tensors")
                found.append(n)
    if len(found) != len(payloads):
        raise ArchiveError(f"{where}: the IR has {len(found)} tensor constant(s), the manifest "
                           f"lists {len(payloads)}")
    for n in found:
        t, p = n.output.type if len(n.outputs) == 1 else None, n.attrs["value"]
        if not isinstance(t, TensorType) or not _fits(t, p):
            raise ArchiveError(f"{where}: tensor constant {tuple(p.shape)} {p.dtype} does not fit "
                               f"its declared type {t!r}")


def _fits(t: TensorType, p: Any) -> bool:
    if t.dtype is not None and t.dtype.name != str(p.dtype):
        return False
    if t.shape is None:
        return True
    return len(t.shape) == p.ndim and all(not isinstance(d, int) or d == s
                                          for d, s in zip(t.shape, p.shape))


def _check_references(manifest: dict[str, Any], graphs: dict[tuple[int, str], Graph]) -> None:
    """Every GetAttr/SetAttr/CallMethod names a member or method the manifest declares, and
    method calls form no cycle (the executor inlines calls recursively)."""
    calls: dict[tuple[int, str], set[tuple[int, str]]] = {}
    for (i, name), g in graphs.items():
        calls[(i, name)] = _MethodRefs(manifest["modules"], graphs, i, name).run(g)
    done: set[tuple[int, str]] = set()
    for start in calls:
        _no_cycle(start, calls, done, [])


def _no_cycle(node: tuple[int, str], calls: dict[tuple[int, str], set[tuple[int, str]]],
              done: set[tuple[int, str]], stack: list[tuple[int, str]]) -> None:
    work = [(node, iter(sorted(calls[node])))]
    on_stack = {node}
    while work:
        cur, it = work[-1]
        nxt = next(it, None)
        if nxt is None:
            done.add(cur)
            on_stack.discard(cur)
            work.pop()
        elif nxt in on_stack:
            raise ArchiveError(f"{A.graph_entry(*nxt)}: method calls form a cycle "
                               "(a method calls itself, directly or through others)")
        elif nxt not in done:
            on_stack.add(nxt)
            work.append((nxt, iter(sorted(calls[nxt]))))


class _MethodRefs:
    """Tracks which module each module-typed value is, starting from ``self``."""

    def __init__(self, mods: list[dict[str, Any]], graphs: dict[tuple[int, str], Graph],
                 i: int, name: str) -> None:
        self.mods, self.graphs, self.i = mods, graphs, i
        self.where = A.graph_entry(i, name)
        self.owner: dict[Value, int] = {}

    def fail(self, message: str) -> ArchiveError:
        return ArchiveError(f"{self.where}: {message}")

    def run(self, g: Graph) -> set[tuple[int, str]]:
        for k, v in enumerate(g.inputs):
            if _has_module(v.type):
                qualified = self.mods[self.i]["qualified_name"]
                if k != 0 or not isinstance(v.type, ModuleType) or v.type.class_name != qualified:
                    raise self.fail(f"input {k} has module type {v.type!r}; only input 0 may be "
                                    f"self (__module__.{qualified})")
                self.owner[v] = self.i
        calls: set[tuple[int, str]] = set()
        for n in g.walk():
            if n.kind == Prim.GET_ATTR:
                self.get_attr(n.inputs[0], n.attrs["name"], n.output)
            elif n.kind == Prim.SET_ATTR:
                self.set_attr(n.inputs[0], n.attrs["name"])
            elif n.kind == Prim.CALL_METHOD:
                calls.add(self.call(n.inputs, n.attrs["name"], len(n.outputs)))
            elif n.kind == Prim.CALL_FUNCTION:
                self.call_function(n)
            else:
                self.no_modules(n)
        return calls

    def module_of(self, v: Value, what: str) -> dict[str, Any]:
        if v not in self.owner:
            raise self.fail(f"{what} applies to a value that is not self or a submodule")
        return self.mods[self.owner[v]]

    def no_modules(self, n: Any) -> None:
        outs = list(n.outputs) + [p for b in n.blocks for p in b.params]
        if any(_has_module(v.type) for v in outs):
            raise self.fail(f"{n.kind} produces a module-typed value; only prim::GetAttr may")

    def get_attr(self, obj: Value, name: str, out: Value) -> None:
        mod = self.module_of(obj, f"prim::GetAttr[name={name!r}]")
        tensors = [p["name"] for k in ("parameters", "buffers") for p in mod[k]]
        children = {c["name"]: c["module"] for c in mod["submodules"]}
        if name in tensors:
            ok = isinstance(out.type, TensorType)
        elif name == "training":
            ok = out.type == BoolType
        elif children.get(name) is not None:
            child = children[name]
            ok = (isinstance(out.type, ModuleType)
                  and out.type.class_name == self.mods[child]["qualified_name"])
            self.owner[out] = child
        else:
            raise self.fail(f"prim::GetAttr reads {name!r}, which {mod['qualified_name']} does "
                            "not have (parameters, buffers, submodules and 'training' only)")
        if not ok:
            raise self.fail(f"prim::GetAttr[name={name!r}] is typed {out.type!r}, which does "
                            "not fit that attribute")

    def set_attr(self, obj: Value, name: str) -> None:
        mod = self.module_of(obj, f"prim::SetAttr[name={name!r}]")
        if not any(p["name"] == name and p["tensor"] is not None
                   for k in ("parameters", "buffers") for p in mod[k]):
            raise self.fail(f"prim::SetAttr writes {name!r}, which is not a tensor attribute of "
                            f"{mod['qualified_name']}")

    def call_function(self, n: Any) -> None:
        """A scripted library call: a public scriptmod function, or a method of a layer
        entry (rebuilt from its class); arguments as (kind, payload) pairs in range."""
        from scriptmod.jit.frontend.errors import FrontendError
        from scriptmod.jit.frontend.library import resolve
        self.no_modules(n)
        entries = list(n.attrs.get("args", [])) + [e[1] for e in n.attrs.get("kwargs", [])
                                                   if isinstance(e, list) and len(e) == 2]
        for e in entries:
            if not (isinstance(e, list) and len(e) == 2 and e[0] in ("v", "c")) or (
                    e[0] == "v" and not (isinstance(e[1], int) and 0 <= e[1] < len(n.inputs))):
                raise self.fail(f"prim::CallFunction has a malformed argument {e!r}")
        method = n.attrs.get("method")
        if method is not None:
            mod = self.module_of(n.inputs[0], f"prim::CallFunction[method={method!r}]")
            if mod.get("layer") is None or method != "forward":
                raise self.fail(f"prim::CallFunction calls {method!r} of "
                                f"{mod['qualified_name']}, which is not a built-in layer")
            return
        try:
            resolve(n.attrs.get("name", ""))
        except FrontendError as e:
            raise self.fail(f"prim::CallFunction: {e}") from None

    def call(self, inputs: Sequence[Value], name: str, n_out: int) -> tuple[int, str]:
        mod = self.module_of(inputs[0], f"prim::CallMethod[name={name!r}]")
        j = self.owner[inputs[0]]
        callee = self.graphs.get((j, name))
        if callee is None:
            raise self.fail(f"prim::CallMethod calls {name!r}, which {mod['qualified_name']} "
                            "does not have")
        if len(callee.inputs) != len(inputs) or len(callee.outputs) != n_out:
            raise self.fail(f"prim::CallMethod[name={name!r}] passes {len(inputs)} input(s) and "
                            f"takes {n_out} output(s); the method has {len(callee.inputs)} and "
                            f"{len(callee.outputs)}")
        return (j, name)


def _layer_ref(entry: Any) -> Any:
    """A manifest's layer entry: a public ``scriptmod.nn`` class and plain values only."""
    from scriptmod.jit.frontend.errors import FrontendError
    from scriptmod.jit.frontend.library import LayerRef, layer_class
    if not (isinstance(entry, dict) and isinstance(entry.get("class"), str)
            and isinstance(entry.get("config"), dict)):
        raise ArchiveError("manifest: a layer entry needs 'class' (str) and 'config' (dict)")
    try:
        layer_class(entry["class"])
    except FrontendError as e:
        raise ArchiveError(f"manifest: {e}") from None
    for k, v in entry["config"].items():
        items = v["tuple"] if isinstance(v, dict) and set(v) == {"tuple"} else v
        items = items if isinstance(items, list) else [items]
        if not isinstance(k, str) or k.startswith("__") or not all(
                i is None or type(i) in (int, float, bool, str) for i in items):
            raise ArchiveError(f"manifest: layer config {k!r} is not a plain value")
    return LayerRef(entry["class"], dict(entry["config"]))


def _has_module(t: Type) -> bool:
    if isinstance(t, ModuleType):
        return True
    if isinstance(t, (TupleType,)):
        return any(_has_module(e) for e in t.elements)
    if isinstance(t, (ListType, OptionalType)):
        return _has_module(t.element)
    return False


def _rebuild(manifest: dict[str, Any], graphs: dict[tuple[int, str], Graph],
             tensors: dict[str, Tensor]) -> ScriptModule:
    """A ScriptModule per manifest entry (shared ones once), wired as the manifest says."""
    mods = manifest["modules"]
    objs = [RecursiveScriptModule(
        e["original_name"], e["qualified_name"],
        {m["name"]: graphs[(i, m["name"])] for m in e["methods"]},
        {m["name"]: list(m["arg_names"]) for m in e["methods"]},
        {m["name"]: _output_spec(m, graphs[(i, m["name"])], i) for m in e["methods"]},
        {m["name"]: _input_spec(m, graphs[(i, m["name"])], i) for m in e["methods"]})
        for i, e in enumerate(mods)]
    get: Any = lambda key: None if key is None else tensors[key]  # noqa: E731
    try:
        with building():             # the members a ScriptModule is built with
            for m, e in zip(objs, mods):
                for p in e["parameters"]:
                    m.register_parameter(p["name"], get(p["tensor"]))
                for b in e["buffers"]:
                    m.register_buffer(b["name"], get(b["tensor"]), persistent=b["persistent"])
                for c in e["submodules"]:
                    m.add_module(c["name"], None if c["module"] is None else objs[c["module"]])
                m.training = e["training"]
                for meth in e["methods"]:
                    if "defaults" in meth:
                        m._defaults[meth["name"]] = A.defaults_from_json(
                            meth["defaults"], meth["arg_names"], "manifest: defaults")
                if e.get("layer") is not None:
                    m.__dict__["_layer"] = _layer_ref(e["layer"])
                    C.check_layer_members(m.__dict__["_layer"], e)
    except ArchiveError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise ArchiveError(f"manifest: cannot rebuild the module tree: {e}") from None
    return objs[manifest["root"]]
