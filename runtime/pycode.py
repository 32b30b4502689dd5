"""Generated Python, compiled once per source text: in memory, and across processes through
the kernel cache folder (``python/`` beside ``kernels/``).

Every specialization generates Python (``Executable``'s program, the frontend's fast path)
and ``compile()`` of that text is about a millisecond each: on a warm start, where every
kernel object comes from disk, it was the largest single step left in Python. ``code``
keeps the code object in memory under its text and on disk as ``marshal`` bytes, in an
entry of the kernel cache (``runtime.kernel_cache``: checksummed, written atomically,
discarded when unreadable) keyed by the source, the file name and the interpreter's
bytecode tag, so another Python never reads it. The entries are as trusted as the object
code next to them: both come from this process's own code generator, never from an
archive.

    >>> c = code("def f(x):\\n    return x + 1\\n", "<doctest>")
    >>> ns = {}; exec(c, ns); ns["f"](1)
    2
    >>> code("def f(x):\\n    return x + 1\\n", "<doctest>") is c          # memory hit
    True

``source_of`` gives back the text a generated function (or code object) was compiled from,
so every generated function can be printed (``Executable.explain``):

    >>> print(source_of(ns["f"]), end="")
    def f(x):
        return x + 1
"""
from __future__ import annotations

import hashlib
import marshal
import sys
import threading
from types import CodeType
from typing import Any

from .kernel_cache import KernelCache

CACHE = KernelCache(folder="python")   # beside kernels/, with counters of its own
MEMORY_ENTRIES = 512     # code objects kept in memory (their generated sources with them)
SOURCE_ENTRIES = 8192    # code objects (nested functions too) whose source ``source_of`` knows
_memory: dict[tuple[str, str], CodeType] = {}
_sources: dict[CodeType, str] = {}      # every code object ``code`` made -> its source text
_lock = threading.Lock()
_TAG = f"{sys.implementation.cache_tag} {sys.version}"


def code(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")``, cached (see the module docstring)."""
    hit = _memory.get((source, filename))
    if hit is not None:
        _remember(hit, source)
        return hit
    key = _key(source, filename)
    data = CACHE.load_object(key)
    c = None
    if data is not None:
        try:
            c = marshal.loads(data)
        except (ValueError, EOFError, TypeError):
            CACHE.discard(key, "not a code object")
        if not isinstance(c, CodeType) or c.co_filename != filename:
            c = None
    if c is None:
        c = compile(source, filename, "exec")
        CACHE.count("compiles")
        CACHE.store_object(key, marshal.dumps(c))
    with _lock:
        if len(_memory) >= MEMORY_ENTRIES:          # oldest first: a long-lived process that
            _memory.pop(next(iter(_memory)))        # specializes without end stays bounded
        c = _memory.setdefault((source, filename), c)
    _remember(c, source)
    return c


def source_of(obj: Any) -> str | None:
    """The generated source a function or code object came from (through ``code``), or
    None for code ``code`` did not compile (or compiled long ago: ``SOURCE_ENTRIES``)."""
    c = getattr(obj, "__code__", obj)
    return _sources.get(c) if isinstance(c, CodeType) else None


def _remember(c: CodeType, source: str) -> None:
    """Record ``source`` for ``c`` and the code of every function defined in it."""
    if c in _sources:
        return
    todo = [c]
    with _lock:
        while todo:
            k = todo.pop()
            if len(_sources) >= SOURCE_ENTRIES:
                _sources.pop(next(iter(_sources)))
            _sources[k] = source
            todo.extend(x for x in k.co_consts if isinstance(x, CodeType))


def _key(source: str, filename: str) -> str:
    h = hashlib.sha256(b"python code\0")
    for part in (_TAG, filename, source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
