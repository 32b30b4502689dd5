"""runtime.kernel_cache on a hostile disk: every kind of bad entry (truncated, flipped, empty,
another entry's object, a directory, a FIFO, a socket, symbolic links to elsewhere, to
nothing, to /dev/zero) is detected, never loaded, never blocks, and is rebuilt as a good
entry; the size cap (``SCRIPTMOD_CACHE_MAX_MB``) evicts least recently used entries first,
also with several processes writing and reading at once."""
from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep
from scriptmod.ir import dtypes as D
from scriptmod.runtime import kernel_cache as kc
from scriptmod.runtime import llvm_jit
from scriptmod.runtime.targets import LLVM
from scriptmod.runtime.fusion import Launch
from scriptmod.runtime.kernel_cache import KernelCache

F32 = D.float32
POSIX = pytest.mark.skipif(os.name != "posix", reason="FIFOs, sockets and links are POSIX")


def _spec(c: float) -> KernelSpec:
    return KernelSpec([InputSpec(F32)], [OpStep("mul", (0, Imm(c, F32)), {}, F32),
                                         OpStep("exp", (1,), {}, F32)], [2], [F32])


def _exp_of(kernel: Any, c: float) -> np.ndarray:
    """The kernel run on ones: exp(c) everywhere when it is the kernel of ``_spec(c)``."""
    (y,) = Launch(LLVM, kernel, _spec(c), (), (16,)).launch([np.ones(16, np.float32)])
    return y


# ---- each way an entry can be bad ---------------------------------------------------------------
def _flip(path: Path, other: Path, outside: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path.write_bytes(bytes(raw))


def _truncate(path: Path, other: Path, outside: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _empty(path: Path, other: Path, outside: Path) -> None:
    path.write_bytes(b"")


def _other_entry(path: Path, other: Path, outside: Path) -> None:
    path.write_bytes(other.read_bytes())      # a whole, checksummed entry: of another key


def _directory(path: Path, other: Path, outside: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_bytes(b"x")


def _fifo(path: Path, other: Path, outside: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _socket(path: Path, other: Path, outside: Path) -> None:
    path.unlink()
    s = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(path.parent)                      # a relative name: socket paths are short
    try:
        s.bind(path.name)
    finally:
        os.chdir(here)
        s.close()


def _link_elsewhere(path: Path, other: Path, outside: Path) -> None:
    outside.write_bytes(path.read_bytes())     # even a valid entry is not read through a link
    path.unlink()
    path.symlink_to(outside)


def _dangling_link(path: Path, other: Path, outside: Path) -> None:
    path.unlink()
    path.symlink_to(outside.parent / "does-not-exist")


def _link_to_dev_zero(path: Path, other: Path, outside: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _link_to_fifo(path: Path, other: Path, outside: Path) -> None:
    os.mkfifo(outside)
    path.unlink()
    path.symlink_to(outside)


DAMAGE: dict[str, Callable[[Path, Path, Path], None]] = {
    "flipped": _flip, "truncated": _truncate, "zero length": _empty,
    "another entry's object": _other_entry}
POSIX_DAMAGE: dict[str, Callable[[Path, Path, Path], None]] = {
    "directory": _directory, "FIFO": _fifo, "socket": _socket,
    "symlink elsewhere": _link_elsewhere, "dangling symlink": _dangling_link,
    "symlink to /dev/zero": _link_to_dev_zero, "symlink to a FIFO": _link_to_fifo}


def _with_deadline(fn: Callable[[], Any], seconds: float = 30) -> Any:
    """``fn()`` on a daemon thread: a read that blocks (a FIFO) fails the test, not hangs it."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "reading the cache entry blocked"
    return out[0]


def _check_rebuilt(tmp_path: Path, damage: Callable[[Path, Path, Path], None]) -> None:
    c, c_other = 1.25, 0.75
    llvm_jit.compile_spec(_spec(c), KernelCache(tmp_path / "cache"))
    first = set((tmp_path / "cache" / "kernels").iterdir())
    llvm_jit.compile_spec(_spec(c_other), KernelCache(tmp_path / "cache"))
    (other,) = set((tmp_path / "cache" / "kernels").iterdir()) - first
    (path,) = first
    outside = tmp_path / "outside.smko"
    damage(path, other, outside)
    before_outside = outside.read_bytes() if outside.is_file() else None

    cache = KernelCache(tmp_path / "cache")
    kernel = _with_deadline(lambda: llvm_jit.compile_spec(_spec(c), cache))
    s = cache.stats()
    assert (s["corrupt"], s["compiles"], s["disk_hits"]) == (1, 1, 0), s
    np.testing.assert_allclose(_exp_of(kernel, c), np.exp(np.float32(c)), rtol=4e-6)
    assert path.is_file() and not path.is_symlink()            # a good entry took its place
    if before_outside is not None:                              # a link's target is untouched
        assert outside.read_bytes() == before_outside
    again = KernelCache(tmp_path / "cache")
    llvm_jit.compile_spec(_spec(c), again)
    assert (again.stats()["compiles"], again.stats()["disk_hits"]) == (0, 1)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_bad_entry_is_detected_and_rebuilt(tmp_path: Path, kind: str) -> None:
    _check_rebuilt(tmp_path, DAMAGE[kind])


@POSIX
@pytest.mark.parametrize("kind", list(POSIX_DAMAGE))
def test_non_file_entry_is_detected_and_rebuilt(tmp_path: Path, kind: str) -> None:
    _check_rebuilt(tmp_path, POSIX_DAMAGE[kind])


@POSIX
def test_a_directory_in_place_is_replaced_by_a_write(tmp_path: Path) -> None:
    """The bug: a directory where an entry goes was skipped, never rebuilt."""
    cache = KernelCache(tmp_path)
    path = cache.path("ab" * 32)
    path.mkdir(parents=True)
    cache.store_object("ab" * 32, b"object bytes")
    assert path.is_file() and cache.load_object("ab" * 32) == b"object bytes"


def test_a_header_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    path = cache.path("cd" * 32)
    path.parent.mkdir(parents=True)
    path.write_bytes(kc.MAGIC + b"[1, 2]\n" + b"data")
    assert cache.load_object("cd" * 32) is None
    assert cache.stats()["corrupt"] == 1 and not path.exists()


# ---- the size cap -----------------------------------------------------------------------------
def _payload(key: str, size: int) -> bytes:
    return (hashlib.sha256(key.encode()).digest() * (size // 32 + 1))[:size]


def _keys(n: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]


def test_max_mb_default_and_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCRIPTMOD_CACHE_MAX_MB", raising=False)
    assert kc.max_bytes() == kc.DEFAULT_MAX_MB << 20
    monkeypatch.setenv("SCRIPTMOD_CACHE_MAX_MB", "2.5")
    assert kc.max_bytes() == int(2.5 * (1 << 20))
    for bad in ("lots", "-1", "nan", "inf", "1e400"):     # (inf: an OverflowError before)
        monkeypatch.setenv("SCRIPTMOD_CACHE_MAX_MB", bad)
        with pytest.raises(ValueError, match=r"SCRIPTMOD_CACHE_MAX_MB: expected a finite size "
                                             r"in MiB >= 0, got '" + bad):
            kc.max_bytes()


def test_cap_evicts_least_recently_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_MAX_MB", str(100_000 / (1 << 20)))   # 100 kB
    keys = _keys(12)
    writer = KernelCache(tmp_path)
    for i, key in enumerate(keys[:8]):                 # 80 kB, under the cap
        writer.store_object(key, _payload(key, 10_000))
        os.utime(writer.path(key), (1_000_000 + i, 1_000_000 + i))   # written in this order
    assert writer.stats()["evicted"] == 0
    reader = KernelCache(tmp_path)
    assert reader.load_object(keys[0]) == _payload(keys[0], 10_000)    # used: now the newest
    for key in keys[8:]:
        writer.store_object(key, _payload(key, 10_000))
    on_disk = {p.stem for p in (tmp_path / "kernels").glob("*.smko")}
    total = sum(p.stat().st_size for p in (tmp_path / "kernels").glob("*.smko"))
    assert total <= 100_000 and writer.stats()["evicted"] > 0
    assert keys[0] in on_disk and keys[1] not in on_disk        # LRU, not oldest written
    assert set(keys[8:]) <= on_disk                              # the newest stay
    for key in on_disk:
        assert reader.load_object(key) == _payload(key, 10_000)


def test_cap_covers_every_folder_and_stale_temporary_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_MAX_MB", str(50_000 / (1 << 20)))
    python, kernels = KernelCache(tmp_path, folder="python"), KernelCache(tmp_path)
    stale = tmp_path / "kernels" / ".tmp-killed-writer.smko"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half an entry")
    os.utime(stale, (time.time() - 2 * kc.STALE_TMP_S,) * 2)
    keys = _keys(8)
    for i, key in enumerate(keys):
        (python if i % 2 else kernels).store_object(key, _payload(key, 10_000))
    sizes = [p.stat().st_size for p in tmp_path.glob("*/*.smko")]
    assert sum(sizes) <= 50_000 and not stale.exists()


def test_cap_zero_keeps_nothing_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_MAX_MB", "0")
    cache = KernelCache(tmp_path)
    kernel = llvm_jit.compile_spec(_spec(0.5), cache)
    np.testing.assert_allclose(_exp_of(kernel, 0.5), np.exp(np.float32(0.5)), rtol=4e-6)
    assert list(tmp_path.glob("*/*.smko")) == []


_WORKER = textwrap.dedent("""
    import hashlib, random, sys
    from scriptmod.runtime.kernel_cache import KernelCache
    def payload(key, size):
        return (hashlib.sha256(key.encode()).digest() * (size // 32 + 1))[:size]
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(40)]
    rng = random.Random(int(sys.argv[1]))
    cache, bad = KernelCache(sys.argv[2]), 0
    for _ in range(300):
        key = rng.choice(keys)
        size = 2000 + int(key[:4], 16) % 6000          # each key's payload is fixed
        got = cache.load_object(key)
        if got is None:
            cache.store_object(key, payload(key, size))
        elif got != payload(key, size):
            bad += 1
    print(bad, cache.stats()["corrupt"], cache.stats()["evicted"])
""")


def test_processes_share_a_capped_cache(tmp_path: Path) -> None:
    """Four processes read, write and evict at once under a cap a quarter of what they write:
    every read is whole and right or a miss, nothing is ever taken for corrupt."""
    env = dict(os.environ, SCRIPTMOD_CACHE_MAX_MB=str(50_000 / (1 << 20)))
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(i), str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append([int(v) for v in out.split()])
    assert all(bad == 0 and corrupt == 0 for bad, corrupt, _ in results), results
    assert sum(evicted for _, _, evicted in results) > 0
    # each process scans after writing an eighth of the cap: that much (plus the entry that
    # crossed it) may be unscanned per process
    bound = 50_000 + 4 * (50_000 // 8 + 8_000)
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*.smko")) <= bound
