"""runtime.llvm_jit / kernel_cache / threads: compile, thread split, disk cache across
processes, corrupt entries rebuilt, unresolved symbols refused. Kernels run through the
runtime's one launcher (``runtime.fusion.Launch`` with the LLVM backend)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from scriptmod.codegen.kernel import Imm, InputSpec, KernelSpec, OpStep  # noqa: E402
from scriptmod.codegen.llvm_ir import render_llvm  # noqa: E402
from scriptmod.ir import dtypes as D  # noqa: E402
from scriptmod.runtime import llvm_jit, threads  # noqa: E402
from scriptmod.runtime.targets import LLVM  # noqa: E402
from scriptmod.runtime.fusion import Launch  # noqa: E402
from scriptmod.runtime.kernel_cache import KernelCache, undefined_symbols  # noqa: E402

F32 = D.float32


def _spec(c: float = 1.5) -> KernelSpec:
    return KernelSpec([InputSpec(F32)], [OpStep("mul", (0, Imm(c, F32)), {}, F32),
                                         OpStep("exp", (1,), {}, F32)], [2], [F32])


def _run(kernel: llvm_jit.CompiledKernel, spec: KernelSpec, x: np.ndarray, n: int) -> np.ndarray:
    """``kernel`` over ``n`` elements of one input (a fresh launch: a fresh output)."""
    (y,) = Launch(LLVM, kernel, spec, (), (n,)).launch([x])
    return y


def test_split_is_aligned_and_covers():
    for n in (1, 63, 64, 65, 65537, 1 << 20, 4096 * 4096 + 7):
        for parts in (1, 2, 3, 8):
            chunks = threads.split(n, parts)
            assert chunks[0][0] == 0 and chunks[-1][1] == n and len(chunks) <= parts
            assert all(hi == lo2 for (_, hi), (lo2, _) in zip(chunks, chunks[1:]))
            assert all(lo % threads.ALIGN == 0 for lo, _ in chunks)


@pytest.mark.parametrize("n", [1, 64, threads.MIN_SPLIT - 1, threads.MIN_SPLIT,
                               threads.MIN_SPLIT + 1, 3 * threads.MIN_SPLIT + 3])
def test_threaded_run_matches_single_thread(n, tmp_path):
    k = llvm_jit.compile_spec(_spec(), KernelCache(tmp_path))
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    outs = []
    for t in (1, 2, 3):
        threads.set_num_threads(t)
        outs.append(_run(k, _spec(), x, n))
    threads.set_num_threads(2)
    for y in outs:
        np.testing.assert_array_equal(y, outs[0])
    np.testing.assert_allclose(outs[0], np.exp(1.5 * x.astype(np.float64)), rtol=4e-6)


def test_thread_count_api():
    old = threads.get_num_threads()
    threads.set_num_threads(1)
    assert threads.get_num_threads() == 1
    with pytest.raises(ValueError):
        threads.set_num_threads(0)
    threads.set_num_threads(old)


def test_memory_and_disk_hits(tmp_path):
    cache = KernelCache(tmp_path)
    k1 = llvm_jit.compile_spec(_spec(2.0), cache)
    k2 = llvm_jit.compile_spec(_spec(2.0), cache)
    assert k1 is k2
    s = cache.stats()
    assert (s["compiles"], s["hits"], s["misses"]) == (1, 1, 1)
    fresh = KernelCache(tmp_path)                       # same disk, empty memory
    k3 = llvm_jit.compile_spec(_spec(2.0), fresh)
    assert fresh.stats()["compiles"] == 0 and fresh.stats()["disk_hits"] == 1
    x = np.linspace(-3, 3, 100, dtype=np.float32)
    np.testing.assert_array_equal(_run(k1, _spec(2.0), x, 100), _run(k3, _spec(2.0), x, 100))
    assert "define void" in k3.llvm_ir and k3.name in k3.asm


def test_second_process_compiles_nothing(tmp_path):
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {ROOT!r}); sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_llvm_jit import _spec
        from scriptmod.runtime import llvm_jit
        llvm_jit.compile_spec(_spec(3.0))
        s = llvm_jit.CACHE.stats()
        print(s["compiles"], s["disk_hits"])
    """)
    env = dict(os.environ, SCRIPTMOD_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs == [["1", "0"], ["0", "1"]]


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "garbage_object"])
def test_corrupt_entry_is_rebuilt(tmp_path, damage):
    cache = KernelCache(tmp_path)
    llvm_jit.compile_spec(_spec(4.0), cache)
    (path,) = list((tmp_path / "kernels").glob("*.smko"))
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-100] ^= 0xFF
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "magic":
        raw[:4] = b"XXXX"
    else:                         # valid header and checksum around bytes that are not ELF
        from scriptmod.runtime.kernel_cache import _encode
        raw = bytearray(_encode(path.stem, b"not an object file" * 10))
    path.write_bytes(bytes(raw))
    fresh = KernelCache(tmp_path)
    k = llvm_jit.compile_spec(_spec(4.0), fresh)
    s = fresh.stats()
    assert s["corrupt"] == 1 and s["compiles"] == 1
    np.testing.assert_allclose(_run(k, _spec(4.0), np.ones(8, np.float32), 8), np.exp(4.0),
                               rtol=4e-6)
    again = KernelCache(tmp_path)                      # the rewritten entry is good
    llvm_jit.compile_spec(_spec(4.0), again)
    assert again.stats()["compiles"] == 0


def test_unresolved_symbols_are_refused(tmp_path):
    text = textwrap.dedent("""
        declare void @sm_not_a_real_symbol()
        define void @k(i64 %a, i64 %b, ptr %p, ptr %m) {
          call void @sm_not_a_real_symbol()
          ret void
        }
    """)
    obj = llvm_jit._object_code(text)
    assert "sm_not_a_real_symbol" in undefined_symbols(obj)
    cache = KernelCache(tmp_path)
    with pytest.raises(llvm_jit.UnresolvedSymbolError, match="sm_not_a_real_symbol"):
        llvm_jit.compile_units([llvm_jit.ir_unit(text, "k")], cache)
    assert not list(tmp_path.glob("kernels/*.smko"))      # nothing bad reached the disk


def test_kernel_objects_need_no_symbols():
    text = render_llvm(_spec()).text
    assert undefined_symbols(llvm_jit._object_code(text)) == []
    with pytest.raises(ValueError):
        undefined_symbols(b"\x7fELF garbage")


@pytest.mark.parametrize("dtype", [D.bfloat16, D.float16, F32])
def test_loop_idiom_memset_resolves(dtype, tmp_path):
    """A bool kernel over a scalar input stores one byte per element: O3 turns the loop into
    a ``memset`` call, which must resolve (it raised UnresolvedSymbolError(['memset']))."""
    spec = KernelSpec([InputSpec(dtype, "scalar")],
                      [OpStep("le", (0, Imm(0.1, dtype)), {}, D.bool_)], [1], [D.bool_])
    k = llvm_jit.compile_spec(spec, KernelCache(tmp_path))
    x = np.zeros((), np.float32 if dtype is F32 else np.uint16)   # 0.0 in every dtype
    for n in (1, 7, 4097):
        assert _run(k, spec, x, n).all()


def test_compile_together_is_one_module_one_object_one_engine(tmp_path):
    """Units no cache holds compile as one module: one compile, one file, one engine; a fresh
    memory loads that one object (no compile), and each unit is then a memory hit for
    ``compile_units``/``compile_spec`` alone."""
    specs = [_spec(c) for c in (5.0, 6.0, 7.0)]
    cache = KernelCache(tmp_path)
    ks = llvm_jit.compile_units([llvm_jit.spec_unit(s) for s in specs], cache)
    assert cache.stats()["compiles"] == 1 and len(list(tmp_path.glob("kernels/*"))) == 1
    assert len({id(k._engine) for k in ks}) == 1
    x = np.linspace(-1, 1, 33, dtype=np.float32)
    for k, s, c in zip(ks, specs, (5.0, 6.0, 7.0)):
        np.testing.assert_allclose(_run(k, s, x, 33), np.exp(c * x.astype(np.float64)),
                                   rtol=4e-6)
    fresh = KernelCache(tmp_path)
    again = llvm_jit.compile_units([llvm_jit.spec_unit(s) for s in specs], fresh)
    assert (fresh.stats()["compiles"], fresh.stats()["disk_hits"]) == (0, 1)
    assert llvm_jit.compile_spec(specs[1], fresh) is again[1]          # memory hit
    assert "define void" in again[2].llvm_ir                          # rendered on demand
    # some units held already: only the others compile (together), nothing is rebuilt
    more = llvm_jit.compile_units([llvm_jit.spec_unit(s) for s in specs + [_spec(8.0)]],
                                  fresh)
    assert more[:3] == again and fresh.stats()["compiles"] == 1


def test_cache_key_covers_the_pipeline_and_the_generator(monkeypatch):
    """A different optimization pipeline or code generator never reuses an object."""
    unit = llvm_jit.spec_unit(_spec(9.0))
    key = llvm_jit._unit_key(unit[0])
    monkeypatch.setattr(llvm_jit, "PIPELINE", llvm_jit.PIPELINE + " changed")
    assert llvm_jit._unit_key(unit[0]) != key
    monkeypatch.undo()
    llvm_jit._codegen_salt.cache_clear()
    monkeypatch.setattr(llvm_jit, "_codegen_salt", lambda: "another generator")
    assert llvm_jit._unit_key(unit[0]) != key


def test_each_compile_frees_its_pass_manager(tmp_path, monkeypatch):
    """llvmlite 0.50's ``ModulePassManager.close()`` frees nothing (``ObjectRef._dispose``, a
    no-op, comes first in its MRO): each compile deletes its pass manager itself, exactly
    once (30-64 KiB of passes leaked per compile before); a disk hit runs no pipeline."""
    from llvmlite.binding import newpassmanagers
    freed = []
    dispose = newpassmanagers.NewPassManager._dispose
    monkeypatch.setattr(newpassmanagers.NewPassManager, "_dispose",
                        lambda self: (freed.append(self), dispose(self)))
    cache = KernelCache(tmp_path)
    specs = [_spec(c) for c in (2.0, 3.0, 4.0)]
    kernels = [llvm_jit.compile_spec(s, cache) for s in specs]
    assert len(freed) == cache.stats()["compiles"] == 3 and all(m.closed for m in freed)
    llvm_jit.compile_spec(specs[0], KernelCache(tmp_path))              # from disk
    assert len(freed) == 3
    x = np.linspace(-1, 1, 17, dtype=np.float32)
    for k, s, c in zip(kernels, specs, (2.0, 3.0, 4.0)):
        np.testing.assert_allclose(_run(k, s, x, 17), np.exp(c * x.astype(np.float64)),
                                   rtol=4e-6)
