"""In-memory and on-disk cache of compiled kernel object code.

Entries are keyed by sha256 of (LLVM IR text, or the text a renderer's output is keyed by
salted with the renderer's sources; target triple, CPU name and features, llvmlite version
and the optimization pipeline: see ``runtime.llvm_jit``) and live in ``$SCRIPTMOD_CACHE_DIR``
(default ``$XDG_CACHE_HOME/scriptmod``, else ``~/.cache/scriptmod``) as
``kernels/<key>.smko``: a header line, a JSON line (key, size, sha256 of the payload) and
the object bytes.

On disk: writes are atomic (temporary file + rename), so a reader sees a whole entry or
none. An entry is opened without following links and without blocking (``O_NOFOLLOW |
O_NONBLOCK``) and must be a regular file of at most ``MAX_ENTRY_BYTES``; anything else in
its place (a directory, FIFO, socket, device or symbolic link, a truncated, flipped or
empty file, another entry's object) is reported as a miss, removed and rebuilt, never
loaded. The folder is capped at ``SCRIPTMOD_CACHE_MAX_MB`` (default ``DEFAULT_MAX_MB``,
over all of its entries): when a write takes it over the cap, the least recently used
entries go (a hit refreshes an entry's mtime) until it is under ``LOW_WATER`` of the cap.
Processes share the folder safely: an entry deleted by another process while it is read
is still read whole (POSIX unlink) or is a miss.

In memory: the last ``MEMORY_KERNELS`` kernels used stay loaded; older ones stay only
while something else (a fusion group, a native segment) still holds them, so dropping a
traced module releases its LLVM engines.

    >>> cache = KernelCache()
    >>> cache.load_object("0" * 64) is None
    True
    >>> cache.stats()["disk_misses"]
    1
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import struct
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any

from scriptmod.ir import log as irlog
from scriptmod.ir import env

MAGIC = b"SCRIPTMOD-OBJ 1\n"
SUFFIX = ".smko"
DEFAULT_MAX_MB = 1024          # SCRIPTMOD_CACHE_MAX_MB: the disk cap over the whole folder
LOW_WATER = 0.8                # eviction frees down to this fraction of the cap
MAX_ENTRY_BYTES = 256 << 20    # a bigger file in an entry's place is not an entry
MEMORY_KERNELS = 64            # kernels kept loaded in memory after their last use
STALE_TMP_S = 3600             # a temporary file this old was left by a killed writer
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_BINARY", 0))


def cache_dir() -> Path:
    """The on-disk cache folder (``SCRIPTMOD_CACHE_DIR`` or the XDG cache home)."""
    env = os.environ.get("SCRIPTMOD_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "scriptmod"


def max_bytes() -> int:
    """The disk cap in bytes: ``SCRIPTMOD_CACHE_MAX_MB`` (MiB, default ``DEFAULT_MAX_MB``;
    0 keeps nothing on disk).

    >>> max_bytes() > 0
    True
    """
    return env.size_mb("SCRIPTMOD_CACHE_MAX_MB", DEFAULT_MAX_MB)


def cache_key(text: str, triple: str, cpu: str, features: str, version: str) -> str:
    """sha256 over everything that changes the object code."""
    h = hashlib.sha256()
    for part in (text, triple, cpu, features, version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class BadEntry(Exception):
    """Something that is not a cache entry sits where one should be."""


class KernelCache:
    """Compiled kernels in memory, object code on disk; ``stats()`` counts what happened."""

    def __init__(self, directory: Path | str | None = None, folder: str = "kernels",
                 memory: int = MEMORY_KERNELS) -> None:
        self._dir = Path(directory) if directory is not None else None
        self._folder = folder                     # entries live in <directory>/<folder>/
        self._memory = memory
        self._mem: OrderedDict[str, Any] = OrderedDict()        # the recently used, held
        self._live: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._lock = threading.RLock()
        self._stats = dict.fromkeys(("hits", "misses", "compiles", "disk_hits",
                                     "disk_misses", "corrupt", "evicted"), 0)
        self._scan_in: dict[Path, int] = {}       # folder -> bytes to write before a scan

    @property
    def directory(self) -> Path:
        return self._dir if self._dir is not None else cache_dir()

    def path(self, key: str) -> Path:
        return self.directory / self._folder / f"{key}{SUFFIX}"

    def stats(self) -> dict[str, int]:
        """Counters: hits/misses (memory), disk_hits/disk_misses, compiles, corrupt (bad
        entries removed), evicted (entries removed by the size cap)."""
        return dict(self._stats)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._stats[name] += n

    # ---- memory ---------------------------------------------------------------------------
    def lookup(self, key: str) -> Any | None:
        """The in-memory kernel for ``key`` (counted as a hit or a miss)."""
        with self._lock:
            hit = self._mem.get(key)
            if hit is None:
                hit = self._live.get(key)
                if hit is not None:
                    self._hold(key, hit)
            else:
                self._mem.move_to_end(key)
            self._stats["hits" if hit is not None else "misses"] += 1
            return hit

    def remember(self, key: str, kernel: Any) -> None:
        with self._lock:
            try:
                self._live[key] = kernel
            except TypeError:                 # not weakly referenceable: held by the LRU only
                pass
            self._hold(key, kernel)

    def _hold(self, key: str, kernel: Any) -> None:
        self._mem[key] = kernel
        self._mem.move_to_end(key)
        while len(self._mem) > self._memory:
            self._mem.popitem(last=False)

    def in_memory(self) -> int:
        """Kernels this cache can still return without loading (held or still alive)."""
        with self._lock:
            return len(set(self._mem) | set(self._live.keys()))

    def clear_memory(self) -> None:
        """Forget in-memory kernels (the disk cache stays)."""
        with self._lock:
            self._mem.clear()
            self._live.clear()

    # ---- disk -----------------------------------------------------------------------------
    def load_object(self, key: str) -> bytes | None:
        """Verified object bytes for ``key``, or None (a bad entry is removed)."""
        path = self.path(key)
        try:
            raw = _read_entry(path)
        except BadEntry as exc:
            self.discard(key, str(exc))
            return None
        except OSError:                           # absent, unreadable: a plain miss
            self.count("disk_misses")
            return None
        data = _decode(raw, key)
        if data is None:
            self.discard(key, "bad header or checksum" if raw else "empty file")
            return None
        self.count("disk_hits")
        try:
            os.utime(path)                        # recently used: the last to be evicted
        except OSError:
            pass
        return data

    def discard(self, key: str, why: str) -> None:
        """Remove a bad entry (whatever sits in its place) so that it is rebuilt."""
        irlog.log("cache", f"cache entry {key[:16]} is unusable ({why}): rebuilding")
        self.count("corrupt")
        _remove(self.path(key))

    def store_object(self, key: str, data: bytes) -> None:
        """Write an entry atomically, then keep the folder under the cap; a read-only or
        full disk only logs."""
        path = self.path(key)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=SUFFIX)
            with os.fdopen(fd, "wb") as f:
                f.write(_encode(key, data))
            try:
                os.replace(tmp, path)
            except OSError:                       # a directory in the entry's place
                _remove(path)
                os.replace(tmp, path)
            tmp = None
        except OSError as exc:
            irlog.log("cache", f"cannot write cache entry {path}: {exc}")
        finally:
            if tmp is not None:
                _remove(Path(tmp))
        self._after_write(path.parent, len(data))

    def _after_write(self, folder: Path, size: int) -> None:
        """Scan the cache folder when this process has not yet, or has written an eighth of
        the cap since (other processes write too); evict when over the cap."""
        cap = max_bytes()
        with self._lock:
            left = self._scan_in.get(folder, 0) - size
            due = left < 0
            self._scan_in[folder] = cap // 8 if due else left
        if due:
            self.count("evicted", evict(self.directory, cap))


def evict(directory: Path, cap: int) -> int:
    """Remove least recently used entries (oldest mtime first) of every folder of the cache
    ``directory`` until they hold at most ``LOW_WATER * cap`` bytes, when they hold more than
    ``cap``; also temporary files older than ``STALE_TMP_S``. Returns the entries removed.
    Another process removing the same files at the same time is harmless."""
    entries = []
    now = time.time()
    for folder in _folders(directory):
        for e in _scan(folder):
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.name.startswith(".tmp-"):
                if now - st.st_mtime > STALE_TMP_S:
                    _remove(Path(e.path))
            elif e.name.endswith(SUFFIX):
                entries.append((st.st_mtime, st.st_size, e.path))
    total = sum(size for _, size, _ in entries)
    if total <= cap:
        return 0
    removed = 0
    for _, size, path in sorted(entries):
        if total <= cap * LOW_WATER:
            break
        _remove(Path(path))
        total -= size
        removed += 1
    irlog.log("cache", f"cache over {cap >> 20} MiB: evicted {removed} least recently used "
                       f"entries")
    return removed


def _folders(directory: Path) -> list[str]:
    return [e.path for e in _scan(str(directory)) if e.is_dir(follow_symlinks=False)]


def _scan(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _read_entry(path: Path) -> bytes:
    """The bytes of the regular file at ``path``; ``BadEntry`` for anything else in its place
    (never follows a link, never blocks on a FIFO); ``OSError`` when there is nothing."""
    kind = _kind(os.lstat(path).st_mode)
    if kind != "file":
        raise BadEntry(f"a {kind} in its place")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):   # swapped since lstat
            raise BadEntry(f"cannot open: {exc.strerror}") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if _kind(st.st_mode) != "file":
            raise BadEntry(f"a {_kind(st.st_mode)} in its place")
        if st.st_size > MAX_ENTRY_BYTES:
            raise BadEntry(f"{st.st_size} bytes, more than an entry may hold")
        return f.read(MAX_ENTRY_BYTES + 1)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "special file"


def _remove(path: Path) -> None:
    """Delete what is at ``path`` without following a link: a real directory with its
    contents, anything else unlinked; already gone is fine."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


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
    if not sep or not isinstance(head, dict) or head.get("key") != key \
            or head.get("size") != len(data):
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
