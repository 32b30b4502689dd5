"""The CBLAS gemm entry points of the BLAS NumPy itself uses, as raw function pointers.

Native programs (``codegen.native``) call BLAS through a table of function pointers passed at
run time, never through addresses baked into the IR (object code is cached on disk across
processes). Taking NumPy's own BLAS gives compiled matmuls eager's numbers and its thread pool.
NumPy 2.x wheels bundle scipy-openblas with ILP64 symbol names (``scipy_cblas_sgemm64_``);
``dlsym`` on NumPy's extension module finds them through its dependencies.

    >>> blas = cblas()
    >>> blas is None or blas.int_bits in (32, 64)
    True
    >>> blas is None or len(blas.fns()) == 4      # sgemm, dgemm, sgemm_batch, dgemm_batch
    True

Its thread count is read and set through threadpoolctl (``get_threads``/``set_threads``),
which knows every BLAS's own setter (OpenBLAS, MKL, BLIS, FlexiBLAS); compiled GEMMs and
eager matmuls share that setting, since both call the same library.

    >>> before = get_threads()
    >>> before is None or (set_threads(1), get_threads())[1] == 1
    True
    >>> before is None or set_threads(before)
    True
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from typing import Any

from scriptmod.codegen.record import Record

# (sgemm symbol, dgemm symbol, integer width) probed in this order.
CANDIDATES: tuple[tuple[str, str, int], ...] = (
    ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", 64),   # NumPy >= 2 wheels (ILP64)
    ("cblas_sgemm64_", "cblas_dgemm64_", 64),               # OpenBLAS built with 64_ suffix
    ("scipy_cblas_sgemm", "scipy_cblas_dgemm", 32),         # scipy-openblas32 (LP64)
    ("cblas_sgemm", "cblas_dgemm", 32),                     # plain system CBLAS (LP64)
)


class Blas(Record):
    """CBLAS ``sgemm``/``dgemm`` addresses; ``int_bits`` is the width of their integer
    arguments (64: ILP64, 32: LP64); ``source`` names the library file and symbol.
    ``sgemm_batch``/``dgemm_batch``: the grouped batch API (``cblas_sgemm_batch``, OpenBLAS
    >= 0.3.27 and MKL; one call runs a batch's GEMMs on the library's threads, each thread
    whole GEMMs), 0 where the library lacks it."""

    sgemm: int
    dgemm: int
    int_bits: int
    source: str
    sgemm_batch: int = 0
    dgemm_batch: int = 0

    def fns(self) -> ctypes.Array:
        """The ``fns`` table of a native program (``codegen.native.FNS_*``): ``[sgemm,
        dgemm, sgemm_batch, dgemm_batch]`` as ``void*`` (a missing batch entry is NULL).

        Keep the returned array alive while native code may read it.

        >>> b = Blas(1, 2, 64, "x")
        >>> list(b.fns())
        [1, 2, None, None]
        """
        return (ctypes.c_void_p * 4)(self.sgemm, self.dgemm, self.sgemm_batch or None,
                                     self.dgemm_batch or None)


def _address(lib: ctypes.CDLL, symbol: str) -> int | None:
    try:
        return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
    except AttributeError:
        return None


def _library_of(address: int, default: str) -> str:
    """The file that defines ``address`` (glibc ``dladdr``), else ``default``."""
    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except (OSError, AttributeError):
        return default
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    info = DlInfo()
    if dladdr(address, ctypes.byref(info)) and info.dli_fname:
        return os.path.realpath(info.dli_fname.decode(errors="replace"))
    return default


def _numpy_library() -> tuple[ctypes.CDLL | None, str]:
    """NumPy's core extension opened with ``dlopen`` (its BLAS is among its dependencies)."""
    try:
        import numpy._core._multiarray_umath as umath
    except ImportError:
        try:
            import numpy.core._multiarray_umath as umath      # NumPy 1.x
        except ImportError as exc:
            return None, f"NumPy's core extension cannot be imported ({exc})"
    path = getattr(umath, "__file__", None)
    if not path:
        return None, "NumPy's core extension has no file path"
    try:
        return ctypes.CDLL(path), path
    except OSError as exc:
        return None, f"cannot dlopen {path} ({exc})"


@lru_cache(maxsize=1)
def _probe() -> tuple[Blas | None, str]:
    lib, path = _numpy_library()
    if lib is None:
        return None, path
    for s_name, d_name, bits in CANDIDATES:
        s, d = _address(lib, s_name), _address(lib, d_name)
        if s and d:
            batch = [_address(lib, n.replace("gemm", "gemm_batch", 1)) or 0
                     for n in (s_name, d_name)]
            return Blas(s, d, bits, f"{_library_of(s, path)}:{s_name}", *batch), ""
    names = ", ".join(s for s, _, _ in CANDIDATES)
    return None, f"none of {names} (with its dgemm) is reachable from {path}"


def cblas() -> Blas | None:
    """NumPy's CBLAS gemm entry points, or None where none is found (see ``why_not``).

    Cached: the lookup runs once per process and never raises.
    """
    try:
        return _probe()[0]
    except Exception:               # a broken install must not break compilation
        return None


@lru_cache(maxsize=1)
def _controllers() -> tuple[Any, ...]:
    """threadpoolctl's controllers of NumPy's BLAS: the library ``cblas()`` was found in, or
    every BLAS loaded where that one cannot be told apart (none without threadpoolctl)."""
    import numpy  # noqa: F401  (its BLAS must be loaded to be found)
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return ()
    found = ThreadpoolController().select(user_api="blas").lib_controllers
    blas = cblas()
    path = blas.source.rsplit(":", 1)[0] if blas is not None else ""
    mine = [c for c in found if os.path.realpath(c.filepath) == path]
    return tuple(mine or found)


def get_threads() -> int | None:
    """Threads of NumPy's BLAS (``None``: no BLAS threadpoolctl can control)."""
    ctl = _controllers()
    return int(ctl[0].get_num_threads()) if ctl else None


def set_threads(n: int) -> bool:
    """Limit NumPy's BLAS to ``n`` threads; False where no BLAS can be controlled."""
    ctl = _controllers()
    for c in ctl:
        c.set_num_threads(int(n))
    return bool(ctl)


# ---- OpenBLAS's idle spin ----------------------------------------------------------------
SPIN_ENV = "SCRIPTMOD_BLAS_SPIN"      # an exponent 4..30, or "keep": leave OpenBLAS as it is
OPENBLAS_SPIN_ENV = "OPENBLAS_THREAD_TIMEOUT"
DEFAULT_SPIN = 18     # 2**18 cycles (~0.1 ms): back-to-back GEMMs (W6's loop) keep their
                      # workers awake; a pool kernel after a GEMM gets its cores back (below)
_spin: dict[str, int | None] = {"exponent": None}


def set_spin(exponent: int) -> bool:
    """Make OpenBLAS's idle workers spin ``2**exponent`` CPU cycles (4..30) after each call
    before they sleep; False where NumPy's BLAS is not an OpenBLAS that exports what this
    needs (``openblas_read_env``, ``blas_thread_shutdown_``).

    OpenBLAS's default is 2**28 cycles, ~0.1 s: after every GEMM its workers keep the other
    cores busy, and a thread-split kernel of ours that follows (fused attention, a row
    kernel) shares its cores with them. threadpoolctl sets thread counts but has no call for
    this, so it goes through threadpoolctl's handle on the library: OpenBLAS reads the
    timeout from ``OPENBLAS_THREAD_TIMEOUT`` when it starts its threads, so this sets that
    variable, has OpenBLAS read it (the variable is then restored: child processes do not
    inherit it) and shuts its threads down; the next BLAS call starts them again with the
    new timeout and the same thread count. Call it while no other thread is inside BLAS."""
    if not 4 <= int(exponent) <= 30:
        raise ValueError(f"set_spin: expected an exponent in 4..30, got {exponent}")
    libs = [c.dynlib for c in _controllers() if getattr(c, "internal_api", "") == "openblas"
            and hasattr(c, "dynlib")]
    libs = [lib for lib in libs if hasattr(lib, "openblas_read_env")
            and hasattr(lib, "blas_thread_shutdown_")]
    if not libs:
        return False
    before = os.environ.get(OPENBLAS_SPIN_ENV)
    os.environ[OPENBLAS_SPIN_ENV] = str(int(exponent))
    try:
        for lib in libs:
            lib.openblas_read_env()
    finally:
        if before is None:
            del os.environ[OPENBLAS_SPIN_ENV]
        else:
            os.environ[OPENBLAS_SPIN_ENV] = before
    for lib in libs:
        lib.blas_thread_shutdown_()
    _spin["exponent"] = int(exponent)
    return True


def get_spin() -> int | None:
    """The exponent ``set_spin`` last set (None: OpenBLAS's own setting is in force)."""
    return _spin["exponent"]


def default_spin() -> int | None:
    """Apply the default spin once (``scriptmod.runtime.threads`` does at import):
    ``DEFAULT_SPIN``, or ``SCRIPTMOD_BLAS_SPIN`` (an exponent, or ``keep``). A process that
    set ``OPENBLAS_THREAD_TIMEOUT`` itself keeps its own. Returns the exponent in force
    (None: OpenBLAS's own), and never raises."""
    env = os.environ.get(SPIN_ENV, "").strip().lower()
    if env == "keep" or os.environ.get(OPENBLAS_SPIN_ENV):
        return None
    try:
        exponent = int(env) if env else DEFAULT_SPIN
        return exponent if set_spin(exponent) else None
    except Exception:               # a bad value or an odd BLAS must not break the import
        return None


# ---- which kernel OpenBLAS runs ----------------------------------------------------------
_AVX512_KERNELS = {"skylakex", "cooperlake", "sapphirerapids"}


def kernel() -> str | None:
    """The core type NumPy's OpenBLAS chose for its kernels (``Haswell``, ``SkylakeX``...),
    as threadpoolctl reports it; None for another BLAS."""
    for c in _controllers():
        if getattr(c, "internal_api", "") == "openblas":
            return str(getattr(c, "architecture", None) or "") or None
    return None


def kernel_hint(features: str | None = None, core: str | None = None) -> str:
    """A line for benchmark headers when OpenBLAS runs an AVX2-or-older kernel on a host
    with AVX-512 (OpenBLAS 0.3.31 does on Zen 5, which its CPU table does not know: 128
    against 247 GFLOP/s per core with its SkylakeX kernel forced); empty otherwise.
    ``features`` is LLVM's host feature string (default ``llvm_jit.host()``'s), read as the
    attention kernel reads it (``microkernel.host_isa``). OpenBLAS picks its kernel once,
    when it is loaded, so the remedy is ``OPENBLAS_CORETYPE`` set before Python starts;
    scriptmod does not switch a library's kernel under a running process.

    >>> kernel_hint("+avx2,+avx512f", "Haswell")[:60]
    'BLAS: OpenBLAS runs its Haswell kernel on this AVX-512 host;'
    >>> kernel_hint("+avx2,+avx512f", "SkylakeX"), kernel_hint("+avx2,-avx512f", "Haswell")
    ('', '')
    """
    from scriptmod.codegen.microkernel import AVX512, host_isa
    core = kernel() if core is None else core
    if not core or core.lower() in _AVX512_KERNELS:
        return ""
    if features is None:
        from .llvm_jit import host
        features = host()[2]
    if host_isa(features) is not AVX512:
        return ""
    return (f"BLAS: OpenBLAS runs its {core} kernel on this AVX-512 host; "
            f"OPENBLAS_CORETYPE=SkylakeX set before Python starts runs its AVX-512 kernel "
            f"for eager's GEMMs and the floor's (without it, the compiled path's large float32 "
            f"GEMMs run scriptmod's own AVX-512 kernel: runtime.gemm)")


def why_not() -> str:
    """Why ``cblas()`` is None (empty when a BLAS was found).

    >>> isinstance(why_not(), str)
    True
    """
    try:
        return _probe()[1]
    except Exception as exc:
        return f"BLAS probe failed: {type(exc).__name__}: {exc}"
