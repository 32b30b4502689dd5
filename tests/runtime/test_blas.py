"""runtime.blas: NumPy's CBLAS found on this machine, its integer width confirmed by a real
call against a float64 reference, and a clean None (with a reason) where nothing is found."""
from __future__ import annotations

import ctypes

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
