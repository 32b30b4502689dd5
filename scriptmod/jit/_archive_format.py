"""The archive format (names, limits, manifest schema) and its safe reader: every byte is
checked before it is used. ``archive`` holds the user API (``save``, ``load``) on top of it.

The order is container (entry names, declared sizes, compression) -> manifest (its digest,
JSON, format version, schema, references, ops) -> entries (declared sizes against the
manifest's, then read through a bounded reader that checks each entry's sha256) -> method IR
(parse, verify, allowed kinds, attribute and method references) -> tensor data (safetensors
header against the manifest, then copy). Nothing here imports a class, evaluates text or
unpickles; every failure is ``ArchiveError``. The format is described in
``scriptmod/jit/ARCHIVE.md``.
"""
from __future__ import annotations

import functools
import hashlib
import io
import math
import os
import re
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod import _formats, _safetensors
from scriptmod._safetensors import SafetensorsError

FORMAT = "scriptmod.archive"
FORMAT_VERSION = 2                # 2: entry sizes and sha256 digests (version 1 still loads)
MANIFEST = "manifest.json"
DIGEST = "manifest.sha256"        # the manifest's own sha256 (hex), from version 2 on
DATA = "data.safetensors"
# safetensors dtype names, allow-listed; the key is scriptmod's (and NumPy's) dtype name
ST_DTYPES = _safetensors.DTYPES
ITEMSIZE = {name: _safetensors.np_dtype(name).itemsize for name in ST_DTYPES}
_ENTRY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")
_DEVICE_RE = re.compile(r"cpu|cuda(?::\d{1,3})?")


class ArchiveError(RuntimeError, ValueError):
    """A file that is not a valid, safe ScriptModule archive; the message says what is wrong."""


@dataclass
class Limits:
    """Caps applied before anything is read or allocated (tests lower them)."""

    max_entries: int = 100_000
    max_text_bytes: int = 32 * 2**20           # manifest, IR, code, one extra file
    max_text_total: int = 256 * 2**20          # every entry but the tensor data, together
    max_ir_bytes: int = 2 * 2**20              # the IR text of all methods (~25,000 nodes)
    max_data_bytes: int = 64 * 2**30           # data.safetensors
    max_total_bytes: int = 64 * 2**30          # all entries, uncompressed
    max_elements: int = 2**36                  # one tensor
    max_name: int = 255
    max_trip_count: int = 2**24                # a loop with a constant trip count


LIMITS = Limits()


# ---- entry names ---------------------------------------------------------------------------
def graph_entry(module: int, method: str) -> str:
    return f"graphs/m{module}/{method}.ir"


def code_entry(module: int, method: str) -> str:
    return f"code/m{module}/{method}.py"


def extra_entry(name: str) -> str:
    return f"extra/{name}"


def check_entry_name(name: str, what: str = "entry") -> None:
    """Relative, ``/``-separated, no ``..``, no drive letters, no odd characters."""
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        raise ArchiveError(f"{what} {name!r} is an absolute path; archives hold relative "
                           "names only")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise ArchiveError(f"{what} {name!r} contains '..' (path traversal)")
    if len(name) > LIMITS.max_name or not _ENTRY_RE.fullmatch(name):
        raise ArchiveError(f"{what} {name!r} is not a valid name (at most {LIMITS.max_name} "
                           "characters from [A-Za-z0-9_.-]; '/'-separated parts not starting "
                           "with '.')")


# ---- the zip container ---------------------------------------------------------------------
class Container:
    """A zip whose entries were checked (names, duplicates, encryption, compression, declared
    sizes against the caps) before any is read. ``read`` streams an entry through a running
    limit, never past its declared size nor the caller's cap, and checks its CRC and, once the
    manifest gave them (``expect``), its size and sha256."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        infos = zf.infolist()
        check_not_torch([i.filename for i in infos])
        if len(infos) > LIMITS.max_entries:
            raise ArchiveError(f"archive has {len(infos)} entries, more than the limit "
                               f"{LIMITS.max_entries}")
        self.infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            self._admit(info)
        _check_totals(infos)
        self.digests: dict[str, str] = {}

    def _admit(self, info: zipfile.ZipInfo) -> None:
        name = info.filename
        check_entry_name(name)
        if name in self.infos:
            raise ArchiveError(f"entry {name!r} occurs twice in the archive")
        if info.flag_bits & 0x1:
            raise ArchiveError(f"entry {name!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ArchiveError(f"entry {name!r} uses compression method {info.compress_type}; "
                               "only stored (0) and deflate (8) are read")
        cap = LIMITS.max_data_bytes if name == DATA else LIMITS.max_text_bytes
        if info.file_size > cap:
            raise ArchiveError(f"entry {name!r} declares {info.file_size} bytes uncompressed, more "
                               f"than the limit {cap} (zip bomb?)")
        self.infos[name] = info

    def names(self) -> list[str]:
        return list(self.infos)

    def expect(self, entries: list[dict[str, Any]]) -> None:
        """The manifest's size and sha256 of each entry: every zip header must declare the
        manifest's size (checked now, before anything is decompressed), and every entry read
        later must hash to its digest."""
        for e in entries:
            info = self.infos.get(e["name"])
            if info is not None and info.file_size != e["size"]:
                raise ArchiveError(f"entry {e['name']!r}: its zip header declares "
                                   f"{info.file_size} bytes, the manifest {e['size']}")
            self.digests[e["name"]] = e["sha256"]

    def read(self, name: str, cap: int | None = None) -> bytearray:
        """The entry's bytes, at most ``cap`` of them (the caller's bound from the manifest),
        read in chunks so that a lying header or a decompression bomb stops at the limit."""
        info = self.infos.get(name)
        if info is None:
            raise ArchiveError(f"archive is missing the entry {name!r}")
        size = info.file_size
        if cap is not None and size > cap:
            raise ArchiveError(f"entry {name!r} declares {size} bytes uncompressed, more than the "
                               f"{cap} the manifest allows for it (zip bomb?)")
        out, h = bytearray(size), hashlib.sha256()
        view, got = memoryview(out), 0
        try:
            with self.zf.open(info) as fh:
                while got < size:
                    chunk = fh.read(min(_CHUNK, size - got))
                    if not chunk:
                        break
                    view[got:got + len(chunk)] = chunk
                    h.update(chunk)
                    got += len(chunk)
                more = len(fh.read(1)) if got == size else 0   # EOF (and its CRC check) next
        except Exception as e:   # zipfile/zlib raise many types on corrupt data: all mean "corrupt"
            raise ArchiveError(f"entry {name!r} is corrupt: {type(e).__name__}: {e}") from None
        finally:
            view.release()
        if got != size or more:
            raise ArchiveError(f"entry {name!r} holds {'more than ' if more else ''}{got} bytes, "
                               f"its header declares {size}")
        digest = self.digests.get(name)
        if digest is not None and h.hexdigest() != digest:
            raise ArchiveError(f"entry {name!r} fails its sha256 check: the file was corrupted "
                               "or modified after it was saved")
        return out

    def text(self, name: str, cap: int | None = None) -> str:
        return _utf8(self.read(name, cap), name)


def _utf8(raw: bytearray, name: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ArchiveError(f"entry {name!r} is not UTF-8 text: {e}") from None


_CHUNK = 2**20


def _check_totals(infos: list[zipfile.ZipInfo]) -> None:
    """Declared sizes, summed: all entries, all but the tensor data, the IR text."""
    for what, size, limit in (
            ("", sum(i.file_size for i in infos), "max_total_bytes"),
            (f" outside {DATA}", sum(i.file_size for i in infos if i.filename != DATA),
             "max_text_total"),
            (" of IR text", sum(i.file_size for i in infos if i.filename.endswith(".ir")),
             "max_ir_bytes")):
        if size > getattr(LIMITS, limit):
            raise ArchiveError(f"archive entries declare {size} bytes{what} uncompressed, more "
                               f"than the limit {getattr(LIMITS, limit)} (a zip bomb? "
                               f"LIMITS.{limit} in scriptmod.jit._archive_format)")


def digest_entries(entries: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """The manifest's ``entries`` field: name, size and sha256 of each entry, in order."""
    return [{"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in entries]


def read_manifest(box: Container) -> Any:
    """The manifest, its digest checked (version 2) before a byte of it is parsed."""
    raw = box.read(MANIFEST)
    if DIGEST in box.infos:
        recorded = box.read(DIGEST, 65).decode("ascii", "replace").strip()
        if hashlib.sha256(raw).hexdigest() != recorded:
            raise ArchiveError(f"{MANIFEST} fails its sha256 check ({DIGEST}): the file was "
                               "corrupted or modified after it was saved")
    manifest = parse_json(_utf8(raw, MANIFEST), MANIFEST)
    check_version(manifest)
    if manifest["format_version"] >= 2 and DIGEST not in box.infos:
        raise ArchiveError(f"archive format version {manifest['format_version']} needs the entry "
                           f"{DIGEST!r} (the manifest's digest), which is missing")
    return manifest


def open_zip(f: str | os.PathLike | BinaryIO | bytes) -> zipfile.ZipFile:
    """A ``ZipFile`` over a path, bytes or a binary file (read, bounded, if not seekable)."""
    src: Any = f
    try:
        if isinstance(f, (bytes, bytearray, memoryview)):
            src = io.BytesIO(bytes(f))
        elif isinstance(f, (str, os.PathLike)):
            src = os.fspath(f)
        elif not (hasattr(f, "seekable") and f.seekable()):
            cap = LIMITS.max_total_bytes + 2**20
            data = f.read(cap + 1)
            if len(data) > cap:
                raise ArchiveError(f"archive stream is larger than the limit {cap} bytes")
            src = io.BytesIO(data)
        return zipfile.ZipFile(src)
    except ArchiveError:
        raise
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ArchiveError(f"not a ScriptModule archive: {_found(src)}"
                           f"{type(e).__name__}: {e}") from None


def _found(src: Any) -> str:
    """'it is <the format sniffed>; ' for a file of a format we know, else that it is no zip."""
    try:
        if not isinstance(src, str):
            src.seek(0)
        kind = _formats.sniff(src)
    except Exception:   # an unreadable file: the caller's message says so
        kind = _formats.UNKNOWN
    if kind in (_formats.UNKNOWN, _formats.ZIP, _formats.EMPTY):
        return "not a readable zip file: "
    return f"it is {_formats.describe(kind)}. "


def check_not_torch(names: list[str]) -> None:
    """A TorchScript archive or torch checkpoint is named as such, with the call to use."""
    kind = _formats.zip_kind(names)
    if kind in (_formats.TORCHSCRIPT, _formats.TORCH_ZIP):
        raise ArchiveError(f"not a ScriptModule archive: it is {_formats.describe(kind)}")


# ---- JSON ----------------------------------------------------------------------------------
def parse_json(text: str, what: str) -> Any:
    """Strict JSON: no duplicate keys, no NaN/Infinity, bounded nesting."""
    try:
        return _safetensors.strict_json(text, what)
    except SafetensorsError as e:
        raise ArchiveError(str(e).replace("the safetensors header", what)) from None


# ---- manifest schema -----------------------------------------------------------------------
_PARAM = {"name": str, "tensor": (str, None)}
_BUFFER = {"name": str, "tensor": (str, None), "persistent": bool}
_CHILD = {"name": str, "module": (int, None)}
ANY = object()        # a field whose contents a later step validates
_METHOD = {"name": str, "arg_names": [str], "inputs": [str], "outputs": [str],
           "constants": [str], "output_structure?": ANY,   # "?": may be absent
           "input_structure?": ANY, "defaults?": ANY}
_MODULE = {"path": str, "original_name": str, "qualified_name": str, "training": bool,
           "parameters": [_PARAM], "buffers": [_BUFFER], "submodules": [_CHILD],
           "methods": [_METHOD], "layer?": {"class": str, "config": ANY}}
_TENSOR = {"key": str, "dtype": str, "shape": [int], "device": str, "parameter": bool,
           "requires_grad": bool}
_ENTRY = {"name": str, "size": int, "sha256": str}
MANIFEST_SCHEMA = {"format": str, "format_version": int, "producer": str, "root": int,
                   "modules": [_MODULE], "tensors": [_TENSOR], "ops": [str],
                   "extra_files": [str], "entries?": [_ENTRY]}    # entries: version 2 on
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", None: "null"}


def check_schema(value: Any, spec: Any, where: str) -> None:
    """``value`` has exactly the shape ``spec`` describes (dict: exact keys, a key ending in
    ``?`` optional; [x]: list of x; tuple: any of; a type: that type, bool never counting as
    int; ``ANY``: checked elsewhere)."""
    if spec is ANY:
        return
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise ArchiveError(f"{where}: expected an object, got {_kind(value)}")
        fields = {k.rstrip("?"): sub for k, sub in spec.items()}
        required = {k for k in spec if not k.endswith("?")}
        if not required <= set(value) <= set(fields):
            missing, extra = sorted(required - set(value)), sorted(set(value) - set(fields))
            raise ArchiveError(f"{where}: expected the fields {sorted(spec)}"
                               + (f"; missing {missing}" if missing else "")
                               + (f"; unexpected {extra}" if extra else ""))
        for k, sub in fields.items():
            if k in value:
                check_schema(value[k], sub, f"{where}.{k}")
    elif isinstance(spec, list):
        if not isinstance(value, list):
            raise ArchiveError(f"{where}: expected a list, got {_kind(value)}")
        for i, item in enumerate(value):
            check_schema(item, spec[0], f"{where}[{i}]")
    elif isinstance(spec, tuple):
        if not any(_is(value, s) for s in spec):
            raise ArchiveError(f"{where}: expected " + " or ".join(_TYPE_NAMES[s] for s in spec)
                               + f", got {_kind(value)}")
    elif not _is(value, spec):
        raise ArchiveError(f"{where}: expected {_TYPE_NAMES[spec]}, got {_kind(value)}")


def _is(value: Any, t: Any) -> bool:
    if t is None:
        return value is None
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, t)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), "?")


def check_version(manifest: Any) -> None:
    """Format and version first, so a newer archive says so instead of failing the schema."""
    if not isinstance(manifest, dict):
        raise ArchiveError(f"manifest: expected a JSON object, got {_kind(manifest)}")
    if manifest.get("format") != FORMAT:
        raise ArchiveError(f"manifest: format is {manifest.get('format')!r}, expected {FORMAT!r}")
    v = manifest.get("format_version")
    if not isinstance(v, int) or isinstance(v, bool):
        raise ArchiveError(f"manifest: format_version must be an integer, got {v!r}")
    if v > FORMAT_VERSION:
        raise ArchiveError(f"archive format version {v} is newer than this build of scriptmod "
                           f"supports (version {FORMAT_VERSION}); upgrade scriptmod to load it")
    if v < 1:
        raise ArchiveError(f"archive format version {v} is not valid (this build reads version "
                           f"{FORMAT_VERSION})")


# ---- tensor data ---------------------------------------------------------------------------
def tensor_nbytes(entry: dict[str, Any], where: str) -> int:
    """Byte count from the manifest's dtype and shape, checked against the caps."""
    dtype, shape = entry["dtype"], entry["shape"]
    if dtype not in ST_DTYPES:
        raise ArchiveError(f"{where}: dtype {dtype!r} is not allowed (allowed: "
                           f"{', '.join(ST_DTYPES)})")
    if any(s < 0 for s in shape) or len(shape) > 64:
        raise ArchiveError(f"{where}: shape {shape} is not valid")
    count = math.prod(shape)
    if count > LIMITS.max_elements:
        raise ArchiveError(f"{where}: shape {shape} has {count} elements, more than the limit "
                           f"{LIMITS.max_elements}")
    return count * ITEMSIZE[dtype]


def decode_tensors(buf: bytes, table: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Arrays of ``data.safetensors``; its header must agree exactly with the manifest."""
    header, data = _st_header(buf, table)
    declared = {t["key"]: t for t in table}
    if set(header) != set(declared):
        missing, extra = sorted(set(declared) - set(header)), sorted(set(header) - set(declared))
        raise ArchiveError(f"{DATA}: tensors do not match the manifest (missing {missing[:5]}, "
                           f"unexpected {extra[:5]})")
    spans = {key: _st_span(key, header[key], declared[key], len(data)) for key in declared}
    _check_tiling(list(spans.values()), len(data))
    return {key: _safetensors.view(data, declared[key]["dtype"], tuple(declared[key]["shape"]),
                                   *spans[key]) for key in declared}


def _check_tiling(spans: list[tuple[int, int]], size: int) -> None:
    """The byte ranges cover the data section exactly, each byte once (as the safetensors
    format requires): a header length or offset that shifts the data is an error."""
    end = 0
    for begin, stop in sorted(spans):
        if begin != end:
            raise ArchiveError(f"{DATA}: the tensors' byte ranges "
                               f"{'overlap' if begin < end else 'leave a gap'} at byte {end}")
        end = stop
    if end != size:
        raise ArchiveError(f"{DATA}: the data section has {size} bytes, its tensors {end}")


def _st_header(buf: bytes, table: list[dict[str, Any]]) -> tuple[dict[str, Any], memoryview]:
    try:
        header, _, data = _safetensors.parse_header(buf, header_cap(table))
    except SafetensorsError as e:
        raise ArchiveError(f"{DATA}: {e}") from None
    return header, data


def _st_span(key: str, info: Any, entry: dict[str, Any], size: int) -> tuple[int, int]:
    """The tensor's byte range, checked against the manifest's dtype and shape."""
    where = f"{DATA}: tensor {key!r}"
    check_schema(info, {"dtype": str, "shape": [int], "data_offsets": [int]}, where)
    if info["dtype"] != ST_DTYPES[entry["dtype"]] or info["shape"] != entry["shape"]:
        raise ArchiveError(f"{where} is {info['dtype']}{info['shape']} but the manifest declares "
                           f"{entry['dtype']}{entry['shape']}")
    nbytes = tensor_nbytes(entry, where)
    offsets = info["data_offsets"]
    if len(offsets) != 2 or not 0 <= offsets[0] <= offsets[1] <= size:
        raise ArchiveError(f"{where}: data_offsets {offsets} are outside the data section "
                           f"({size} bytes)")
    if offsets[1] - offsets[0] != nbytes:
        raise ArchiveError(f"{where}: holds {offsets[1] - offsets[0]} bytes, but shape "
                           f"{entry['shape']} x {ITEMSIZE[entry['dtype']]} bytes needs {nbytes}")
    return offsets[0], offsets[1]


def iter_methods(manifest: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, mod in enumerate(manifest["modules"]):
        for meth in mod["methods"]:
            yield i, meth


# ---- manifest semantics --------------------------------------------------------------------
ALLOWED_PRIMS = frozenset({
    "prim::Constant", "prim::GetAttr", "prim::SetAttr", "prim::CallMethod",
    "prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct", "prim::TupleUnpack",
    "prim::TupleIndex", "prim::If", "prim::Loop", "prim::RaiseException", "prim::Print",
    "prim::CallFunction", "prim::Uninitialized"})
# any name add_module takes ("0", "my-layer", "class"), less quotes, backslashes, control chars
_MEMBER_RE = re.compile(r'[^."\\\x00-\x1f\x7f]{1,255}')
_IDENT_RE = re.compile(r"[A-Za-z_]\w{0,254}")
_QUALNAME_RE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_DISPLAY_RE = re.compile(r"[\w<>.\-]{1,255}")                   # original_name: '<lambda>' too


def check_manifest(m: Any) -> None:
    """Version, schema, then every name, index and reference in the manifest."""
    check_version(m)
    check_schema(m, MANIFEST_SCHEMA, "manifest")
    table = _tensor_table(m["tensors"])
    mods = m["modules"]
    if not 0 <= m["root"] < len(mods):
        raise ArchiveError(f"manifest.root: module index {m['root']} is out of range "
                           f"({len(mods)} module(s))")
    used: set[str] = set()
    for i, mod in enumerate(mods):
        used |= _check_module(f"manifest.modules[{i}]", mod, len(mods), table)
    if used != set(table):
        raise ArchiveError(f"manifest.tensors: {sorted(set(table) - used)[:5]} are not used by "
                           "any module or method")
    _check_tree(m)
    for op in m["ops"]:
        check_kind(op, "manifest.ops")
    if len(set(m["extra_files"])) != len(m["extra_files"]):
        raise ArchiveError("manifest.extra_files: a name occurs twice")
    for name in m["extra_files"]:
        check_entry_name(name, "extra file")
    _check_digests(m)


def _check_digests(m: dict[str, Any]) -> None:
    """Version 2 lists every entry but the manifest's own with its size and sha256; version 1
    has no digests."""
    if ("entries" in m) != (m["format_version"] >= 2):
        state = "required" if "entries" not in m else "not allowed"
        raise ArchiveError(f"manifest.entries: {state} in format version {m['format_version']}")
    for i, e in enumerate(m.get("entries", [])):
        if e["size"] < 0 or not _SHA256_RE.fullmatch(e["sha256"]):
            raise ArchiveError(f"manifest.entries[{i}]: size {e['size']} or sha256 "
                               f"{e['sha256'][:80]!r} is not valid (64 lowercase hex digits)")
    names = [e["name"] for e in m.get("entries", [])]
    if len(set(names)) != len(names):
        raise ArchiveError("manifest.entries: an entry is listed twice")


def header_cap(table: list[dict[str, Any]]) -> int:
    """The most bytes a safetensors header of these tensors takes (names of at most
    ``max_name`` characters, escaped; shapes of at most 64 dims), so a larger one is a lie."""
    return min(_safetensors.MAX_HEADER, 8192 + 4096 * len(table))


def data_cap(table: list[dict[str, Any]]) -> int:
    """The size of ``data.safetensors`` for the manifest's tensors: their bytes plus the
    header (the cap its zip entry is read under)."""
    return 8 + header_cap(table) + sum(tensor_nbytes(t, "manifest.tensors") for t in table)


def check_kind(kind: str, where: str) -> None:
    """A node kind this build knows: an ``sm::`` op of the registry or an allowed ``prim::``."""
    from scriptmod.ir.schema import REGISTRY
    if kind.startswith("sm::") and kind[4:] in REGISTRY:
        return
    if kind.startswith("prim::"):
        if kind in ALLOWED_PRIMS:
            return
        raise ArchiveError(f"{where}: node kind {kind!r} is not allowed in an archive (allowed "
                           f"prim kinds: {', '.join(sorted(ALLOWED_PRIMS))})")
    raise ArchiveError(f"{where}: unknown op {kind!r} (not in this build's op registry)")


def _tensor_table(tensors: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(tensors):
        where = f"manifest.tensors[{i}]"
        if t["key"] in table or not 0 < len(t["key"]) <= LIMITS.max_name:
            raise ArchiveError(f"{where}: key {t['key'][:80]!r} is empty, too long or repeated")
        if not _DEVICE_RE.fullmatch(t["device"]):
            raise ArchiveError(f"{where}: device {t['device'][:80]!r} is not 'cpu' or 'cuda:N'")
        tensor_nbytes(t, where)
        table[t["key"]] = t
    return table


def _check_module(where: str, mod: dict[str, Any], n: int,
                  table: dict[str, dict[str, Any]]) -> set[str]:
    _match(_DISPLAY_RE, mod["original_name"], f"{where}.original_name")
    _match(_QUALNAME_RE, mod["qualified_name"], f"{where}.qualified_name")
    if len(mod["qualified_name"]) > 1000 or len(mod["path"]) > 10_000:
        raise ArchiveError(f"{where}: qualified_name or path is too long")
    names = [p["name"] for k in ("parameters", "buffers", "submodules") for p in mod[k]]
    _unique_members(where, names)
    used = set()
    for kind in ("parameters", "buffers"):
        for j, p in enumerate(mod[kind]):
            if p["tensor"] is not None:
                _tensor_ref(f"{where}.{kind}[{j}].tensor", p["tensor"], table,
                            kind == "parameters")
                used.add(p["tensor"])
    for j, c in enumerate(mod["submodules"]):
        if c["module"] is not None and not 0 <= c["module"] < n:
            raise ArchiveError(f"{where}.submodules[{j}].module: index {c['module']} is out of "
                               f"range ({n} module(s))")
    return used | _check_methods(where, mod["methods"], table, set(names))


def _check_methods(where: str, methods: list[dict[str, Any]],
                   table: dict[str, dict[str, Any]], members: set[str]) -> set[str]:
    used: set[str] = set()
    seen: set[str] = set()
    for j, meth in enumerate(methods):
        w = f"{where}.methods[{j}]"
        _match(_IDENT_RE, meth["name"], f"{w}.name")
        if meth["name"] in seen:
            raise ArchiveError(f"{w}.name: method {meth['name']!r} is defined twice")
        if meth["name"] in members:
            raise ArchiveError(f"{w}.name: method {meth['name']!r} has the name of a parameter, "
                               "buffer or submodule of the module")
        seen.add(meth["name"])
        for a in meth["arg_names"]:
            _match(_IDENT_RE, a, f"{w}.arg_names")
        if "defaults" in meth:
            defaults_from_json(meth["defaults"], meth["arg_names"], f"{w}.defaults")
        for key in meth["constants"]:
            _tensor_ref(f"{w}.constants", key, table, False)
            used.add(key)
    return used


# ---- a scripted method's parameter defaults ---------------------------------------------
# {"name": value}: a value is None, a bool, int, float or str, {"tuple": [...]} of them, or
# {"dtype": name} of a scriptmod dtype (the defaults the frontend accepts; a device default
# is held as its str); nothing else is read.

def _plain(v: Any) -> bool:
    return v is None or type(v) in (bool, int, float, str)


def defaults_to_json(defaults: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in defaults.items():
        if _plain(v):
            out[k] = v
        elif type(v) is tuple and all(_plain(i) for i in v):
            out[k] = {"tuple": list(v)}
        elif isinstance(v, D.DType):
            out[k] = {"dtype": v.name}
        else:
            raise ArchiveError(f"jit.save: the default of argument {k!r} ({v!r}) is not a "
                               f"plain value an archive can hold")
    return out


def defaults_from_json(data: Any, arg_names: list[str], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ArchiveError(f"{where}: expected an object of argument defaults, got "
                           f"{type(data).__name__}")
    out: dict[str, Any] = {}
    for k, v in data.items():
        if k not in arg_names:
            raise ArchiveError(f"{where}: {k!r} is not an argument of the method")
        if _plain(v):
            out[k] = v
        elif isinstance(v, dict) and list(v) == ["tuple"] and isinstance(v["tuple"], list) \
                and all(_plain(i) for i in v["tuple"]):
            out[k] = tuple(v["tuple"])
        elif isinstance(v, dict) and list(v) == ["dtype"] and isinstance(v["dtype"], str) \
                and v["dtype"] in D.BY_NAME:
            out[k] = D.BY_NAME[v["dtype"]]
        else:
            raise ArchiveError(f"{where}: the default of {k!r} is not a plain value")
    return out


@functools.lru_cache(maxsize=1)
def _reserved_names() -> frozenset[str]:
    from scriptmod.jit._script_module import ScriptModule
    return frozenset(dir(ScriptModule)) | frozenset(vars(ScriptModule("x", "x")))


def _unique_members(where: str, names: list[str]) -> None:
    reserved = _reserved_names()
    for name in names:
        _match(_MEMBER_RE, name, f"{where}: member name")
        if name in reserved or name.startswith("__"):
            raise ArchiveError(f"{where}: member name {name!r} would shadow a ScriptModule "
                               "attribute")
    if len(set(names)) != len(names):
        raise ArchiveError(f"{where}: parameter/buffer/submodule names are not unique")


def _tensor_ref(where: str, key: str, table: dict[str, dict[str, Any]], param: bool) -> None:
    if key not in table:
        raise ArchiveError(f"{where}: tensor {key[:80]!r} is not in manifest.tensors")
    if table[key]["parameter"] != param:
        raise ArchiveError(f"{where}: tensor {key[:80]!r} is "
                           f"{'not ' if param else ''}a Parameter in manifest.tensors")


def _match(pattern: re.Pattern[str], value: str, where: str) -> None:
    if not pattern.fullmatch(value):
        raise ArchiveError(f"{where}: {value[:80]!r} is not a valid name")


def _check_tree(m: dict[str, Any]) -> None:
    """Submodules form a DAG reachable from the root (shared submodules allowed, cycles not)."""
    mods, state = m["modules"], {}   # 1: on the stack, 2: done
    stack: list[tuple[int, Iterator[Any]]] = [(m["root"], iter(mods[m["root"]]["submodules"]))]
    state[m["root"]] = 1
    while stack:
        i, children = stack[-1]
        child = next(children, None)
        if child is None:
            state[i] = 2
            stack.pop()
            continue
        j = child["module"]
        if j is None or state.get(j) == 2:
            continue
        if state.get(j) == 1:
            raise ArchiveError(f"manifest.modules[{i}]: submodule {child['name']!r} is one of "
                               "its own ancestors (the module tree has a cycle)")
        state[j] = 1
        stack.append((j, iter(mods[j]["submodules"])))
    unreachable = sorted(set(range(len(mods))) - set(state))
    if unreachable:
        raise ArchiveError(f"manifest.modules: module(s) {unreachable[:5]} are not reachable "
                           "from the root")
