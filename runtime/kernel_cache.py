"""In-memory and on-disk cache of compiled kernel object code.

Entries are keyed by sha256 of (LLVM IR text, or the text a renderer's output is keyed by
salted with the renderer's sources; target triple, CPU name and features, llvmlite version
and the optimization pipeline: see ``runtime.llvm_jit``) and live in ``$SCRIPTMOD_CACHE_DIR`` (default
``$XDG_CACHE_HOME/scriptmod``, else ``~/.cache/scriptmod``) as ``kernels/<key>.smko``:
a header line, a JSON line (key, size, sha256 of the payload) and the object bytes.
Writes are atomic (temporary file + rename). A corrupt or unloadable entry is reported as
a miss, removed and rebuilt, never loaded.

    >>> cache = KernelCache()
    >>> cache.load_object("0" * 64) is None
    True
    >>> cache.stats()["disk_misses"]
    1
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
from pathlib import Path
from typing import Any

from scriptmod.ir import log as irlog

MAGIC = b"SCRIPTMOD-OBJ 1\n"


def cache_dir() -> Path:
    """The on-disk cache folder (``SCRIPTMOD_CACHE_DIR`` or the XDG cache home)."""
    env = os.environ.get("SCRIPTMOD_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "scriptmod"


def cache_key(text: str, triple: str, cpu: str, features: str, version: str) -> str:
    """sha256 over everything that changes the object code."""
    h = hashlib.sha256()
    for part in (text, triple, cpu, features, version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class KernelCache:
    """Compiled kernels in memory, object code on disk; ``stats()`` counts what happened."""

    def __init__(self, directory: Path | str | None = None, folder: str = "kernels") -> None:
        self._dir = Path(directory) if directory is not None else None
        self._folder = folder                     # entries live in <directory>/<folder>/
        self._mem: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._stats = dict.fromkeys(("hits", "misses", "compiles", "disk_hits",
                                     "disk_misses", "corrupt"), 0)

    @property
    def directory(self) -> Path:
        return self._dir if self._dir is not None else cache_dir()

    def path(self, key: str) -> Path:
        return self.directory / self._folder / f"{key}.smko"

    def stats(self) -> dict[str, int]:
        """Counters: hits/misses (memory), disk_hits/disk_misses, compiles, corrupt."""
        return dict(self._stats)

    def count(self, name: str) -> None:
        with self._lock:
            self._stats[name] += 1

    def lookup(self, key: str) -> Any | None:
        """The in-memory kernel for ``key`` (counted as a hit or a miss)."""
        with self._lock:
            hit = self._mem.get(key)
            self._stats["hits" if hit is not None else "misses"] += 1
            return hit

    def remember(self, key: str, kernel: Any) -> None:
        with self._lock:
            self._mem[key] = kernel

    def clear_memory(self) -> None:
        """Forget in-memory kernels (the disk cache stays)."""
        with self._lock:
            self._mem.clear()

    def load_object(self, key: str) -> bytes | None:
        """Verified object bytes for ``key``, or None (a bad entry is deleted)."""
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            self.count("disk_misses")
            return None
        data = _decode(raw, key)
        if data is None:
            self.discard(key, "bad header or checksum")
            return None
        self.count("disk_hits")
        return data

    def discard(self, key: str, why: str) -> None:
        """Delete a bad entry so that it is rebuilt."""
        irlog.log("cache", f"cache entry {key[:16]} is unusable ({why}): rebuilding")
        self.count("corrupt")
        try:
            self.path(key).unlink()
        except OSError:
            pass

    def store_object(self, key: str, data: bytes) -> None:
        """Write an entry atomically; a read-only or full disk only logs."""
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".smko")
            with os.fdopen(fd, "wb") as f:
                f.write(_encode(key, data))
            os.replace(tmp, path)
        except OSError as exc:
            irlog.log("cache", f"cannot write cache entry {path}: {exc}")


def _encode(key: str, data: bytes) -> bytes:
    head = {"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n" + data


def _decode(raw: bytes, key: str) -> bytes | None:
    if not raw.startswith(MAGIC):
        return None
    rest = raw[len(MAGIC):]
    line, sep, data = rest.partition(b"\n")
    try:
        head = json.loads(line)
    except ValueError:
        return None
    if not sep or head.get("key") != key or head.get("size") != len(data):
        return None
    if head.get("sha256") != hashlib.sha256(data).hexdigest():
        return None
    return data


# ---- object-file inspection: which symbols must the loader resolve? ---------------------
def undefined_symbols(obj: bytes) -> list[str]:
    """Names of the undefined global symbols of an ELF64 little-endian object.

    Raises ``ValueError`` for anything that is not a well-formed ELF64 object.
    """
    if len(obj) < 64 or obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ValueError("not an ELF64 little-endian object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    if shoff + shnum * shentsize > len(obj) or shentsize < 64:
        raise ValueError("truncated section table")
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
                for i in range(shnum)]
    names: list[str] = []
    for sh in sections:
        if sh[1] != 2:             # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        names += _undefined_in(obj, sh, strtab)
    return names


def _undefined_in(obj: bytes, symtab: tuple, strtab: tuple) -> list[str]:
    off, size, entsize = symtab[4], symtab[5], symtab[9] or 24
    str_off, str_size = strtab[4], strtab[5]
    if off + size > len(obj) or str_off + str_size > len(obj):
        raise ValueError("truncated symbol table")
    out = []
    for pos in range(off + entsize, off + size, entsize):        # entry 0 is the null symbol
        name_off, info, _other, shndx = struct.unpack_from("<IBBH", obj, pos)
        if shndx == 0 and name_off and (info >> 4) != 0:          # undefined, not local
            end = obj.index(b"\0", str_off + name_off)
            out.append(obj[str_off + name_off:end].decode())
    return out
