"""runtime.blas: NumPy's CBLAS found on this machine, its integer width confirmed by a real
call against a float64 reference, and a clean None (with a reason) where nothing is found."""
from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from scriptmod.runtime import blas as B

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def _gemm(blas: B.Blas, dtype, a: np.ndarray, b: np.ndarray, trans_b: bool) -> np.ndarray:
    """C = a @ op(b) through the raw function pointer, with the declared int width."""
    iN = ctypes.c_int64 if blas.int_bits == 64 else ctypes.c_int32
    T = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, iN, iN, iN,
                          T, ctypes.c_void_p, iN, ctypes.c_void_p, iN, T, ctypes.c_void_p, iN)(
        blas.sgemm if dtype == np.float32 else blas.dgemm)
    m, k = a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    c = np.full((m, n), np.nan, dtype)
    fn(ROW_MAJOR, NO_TRANS, TRANS if trans_b else NO_TRANS, m, n, k, 1.0, a.ctypes.data, k,
       b.ctypes.data, b.shape[1], 0.0, c.ctypes.data, n)
    return c


def test_finds_numpys_blas_here():
    blas = B.cblas()
    assert blas is not None, B.why_not()
    assert B.why_not() == ""
    assert blas.int_bits in (32, 64)
    assert blas.sgemm and blas.dgemm and blas.sgemm != blas.dgemm
    assert ":" in blas.source and "gemm" in blas.source
    assert B.cblas() is blas                        # cached


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_b", [False, True])
def test_int_width_matches_a_real_call(dtype, trans_b):
    blas = B.cblas()
    if blas is None:
        pytest.skip(B.why_not())
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 7)).astype(dtype)
    b = rng.standard_normal((3, 7) if trans_b else (7, 3)).astype(dtype)
    c = _gemm(blas, dtype, a, b, trans_b)
    ref = a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


def test_fns_table_holds_both_addresses():
    blas = B.cblas()
    if blas is None:
        pytest.skip(B.why_not())
    fns = blas.fns()
    assert [fns[0], fns[1]] == [blas.sgemm, blas.dgemm]


def test_no_blas_gives_none_and_a_reason(monkeypatch):
    monkeypatch.setattr(B, "CANDIDATES", (("no_such_sgemm", "no_such_dgemm", 32),))
    B._probe.cache_clear()
    try:
        assert B.cblas() is None
        assert "no_such_sgemm" in B.why_not()
    finally:
        monkeypatch.undo()
        B._probe.cache_clear()
    assert B.cblas() is not None


def test_probe_failure_never_raises(monkeypatch):
    def boom():
        raise RuntimeError("broken install")
    monkeypatch.setattr(B, "_numpy_library", boom)
    B._probe.cache_clear()
    try:
        assert B.cblas() is None
        assert "broken install" in B.why_not()
    finally:
        monkeypatch.undo()
        B._probe.cache_clear()


def test_thread_count_goes_through_threadpoolctl_on_numpys_blas():
    blas = B.cblas()
    ctl = B._controllers()
    if blas is None or not ctl:
        pytest.skip("no BLAS threadpoolctl controls")
    import os
    assert [os.path.realpath(c.filepath) for c in ctl] == [blas.source.rsplit(":", 1)[0]]
    before = B.get_threads()
    try:
        assert B.set_threads(1) and B.get_threads() == 1
        a = np.ones((256, 256), np.float32)
        assert float((a @ a)[0, 0]) == 256.0          # still computes with one thread
        assert B.set_threads(2) and B.get_threads() == 2
    finally:
        B.set_threads(before)


def test_without_a_controllable_blas_thread_calls_do_nothing(monkeypatch):
    monkeypatch.setattr(B, "_controllers", lambda: ())
    assert B.get_threads() is None and B.set_threads(2) is False


# ---- OpenBLAS's idle spin (issue 14) ---------------------------------------------------
def _spin_settable() -> bool:
    return any(getattr(c, "internal_api", "") == "openblas"
               and hasattr(getattr(c, "dynlib", None), "blas_thread_shutdown_")
               for c in B._controllers())


def test_set_spin_keeps_the_threads_and_the_environment():
    if not _spin_settable():
        pytest.skip("NumPy's BLAS is not an OpenBLAS exporting openblas_read_env")
    before = B.get_threads()
    try:
        assert B.set_spin(4) and B.get_spin() == 4
        assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ       # restored: children keep theirs
        a = np.ones((512, 512), np.float32)
        assert float((a @ a)[0, 0]) == 512.0 and B.get_threads() == before
    finally:
        B.set_spin(B.DEFAULT_SPIN)
    with pytest.raises(ValueError, match="exponent in 4..30, got 31"):
        B.set_spin(31)


def test_short_spin_leaves_the_cores_idle_after_a_gemm():
    """With 2**18 cycles (~0.1 ms) OpenBLAS's workers sleep right after a GEMM, so a sleep
    of 60 ms right after one costs this process almost no CPU time (with OpenBLAS's own
    2**28, ~0.1 s, its workers burned the cores the pool's next kernel needs)."""
    if not _spin_settable() or (B.get_threads() or 1) < 2 or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs an OpenBLAS with 2 threads on 2 cores")
    import time
    B.set_spin(B.DEFAULT_SPIN)
    a = np.ones((768, 768), np.float32)
    spent = []
    for _ in range(3):
        a @ a
        t = time.process_time()
        time.sleep(0.06)
        spent.append(time.process_time() - t)
    assert min(spent) < 0.02, spent


@pytest.mark.parametrize("env,expected", [({}, "18"), ({"SCRIPTMOD_BLAS_SPIN": "keep"}, "None"),
                                          ({"SCRIPTMOD_BLAS_SPIN": "12"}, "12"),
                                          ({"SCRIPTMOD_BLAS_SPIN": "banana"}, "None"),
                                          ({"OPENBLAS_THREAD_TIMEOUT": "6"}, "None")])
def test_the_default_spin_at_import(env, expected):
    """``scriptmod.runtime.threads`` applies ``DEFAULT_SPIN`` at import; ``keep``, a bad value
    or a process's own ``OPENBLAS_THREAD_TIMEOUT`` leave OpenBLAS's setting in force."""
    if not _spin_settable():
        pytest.skip("NumPy's BLAS is not an OpenBLAS exporting openblas_read_env")
    import subprocess
    import sys
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SCRIPTMOD_BLAS_SPIN", "OPENBLAS_THREAD_TIMEOUT")}
    out = subprocess.run([sys.executable, "-c", "import scriptmod.runtime.threads as t; "
                          "print(t.BLAS_SPIN)"], env={**clean, **env}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


def test_kernel_names_openblas_core_and_the_hint_follows_the_host() -> None:
    """``kernel()`` is the core type threadpoolctl reports for NumPy's OpenBLAS; the bench
    header's hint appears only for an AVX2-or-older kernel on an AVX-512 host."""
    from threadpoolctl import threadpool_info
    cores = [i.get("architecture") for i in threadpool_info()
             if i.get("internal_api") == "openblas"]
    if not cores:
        assert B.kernel() is None and B.kernel_hint() == ""
        return
    assert B.kernel() in cores
    for core in ("Haswell", "Zen", "SandyBridge"):
        assert f"runs its {core} kernel on this AVX-512 host" in B.kernel_hint(
            "+avx2,+avx512f", core)
        assert B.kernel_hint("+avx2,+fma,-avx512f", core) == ""
    for core in ("SkylakeX", "COOPERLAKE", "SapphireRapids"):
        assert B.kernel_hint("+avx512f", core) == ""
