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
"""
from __future__ import annotations

import hashlib
import marshal
import sys
import threading
from types import CodeType

from .kernel_cache import KernelCache

CACHE = KernelCache(folder="python")   # beside kernels/, with counters of its own
MEMORY_ENTRIES = 512     # code objects kept in memory (their generated sources with them)
_memory: dict[tuple[str, str], CodeType] = {}
_lock = threading.Lock()
_TAG = f"{sys.implementation.cache_tag} {sys.version}"


def code(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")``, cached (see the module docstring)."""
    hit = _memory.get((source, filename))
    if hit is not None:
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
        return _memory.setdefault((source, filename), c)


def _key(source: str, filename: str) -> str:
    h = hashlib.sha256(b"python code\0")
    for part in (_TAG, filename, source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
