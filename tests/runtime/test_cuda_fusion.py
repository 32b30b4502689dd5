"""runtime.targets.cuda: fusion groups on CUDA (CuPy arrays), through the one FusedKernel.

Without a GPU, a fake ``cupy`` (``fake_cupy``: NumPy arrays posing as device arrays, a
``RawKernel`` that runs the CUDA source it gets on the CPU shim) checks what CuPy would be
asked to do: argument marshalling against the declared parameters, grid/block sizes, the
device outputs land on, guards, launches per layout and the kernel cache, and the wiring into
``runtime.executable.Executable``. Tests marked ``cuda`` run traced models on a real GPU."""
from __future__ import annotations

from collections import defaultdict
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import fake_cupy
import op_cases as OC
from scriptmod.codegen.c_source import CUDA, render_c
from scriptmod.codegen.formulas import FORMULAS
from scriptmod.ir import dtypes as D
from scriptmod.ir.errors import DeviceError
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Prim
from scriptmod.ir.passes import fuse_elementwise
from scriptmod.ir.types import TensorType
from op_graphs import compiled, fused_kernel, group_graph
from scriptmod.runtime import arrays as array_modules      # NumPy/CuPy
from scriptmod.runtime.targets import cuda as cuda_backend
from scriptmod.runtime.targets.llvm import LLVMTarget
from scriptmod.runtime.targets.cuda import CudaTarget, launch_dims
from scriptmod.runtime.fusion import FusedKernel
from scriptmod.runtime.interpreter import Interpreter
from tests.codegen.harness import have_gxx

needs_gxx = pytest.mark.skipif(not have_gxx(), reason="g++ not found")
F32 = D.float32



@pytest.fixture
def cp() -> ModuleType:
    return fake_cupy.make_fake_cupy()


def w1_graph(dt: D.DType = F32, device: str = "cuda:0", fuse: bool = True) -> Graph:
    """gelu_tanh-like chain over (x: [N, M], a: [M], c: [N, M]) with two outputs."""
    g = Graph()
    b = Builder(g)
    x = b.input(TensorType(dt, ("N", "M"), device), "x")
    a = b.input(TensorType(dt, ("M",), device), "a")
    c = b.input(TensorType(dt, ("N", "M"), device), "c")
    z = b.op("add", b.op("mul", x, a), 0.5)
    y = b.op("div", z, b.op("add", b.op("exp", b.op("clamp", b.op("mul", z, -1.6), max=80.0)), 1.0))
    b.ret(b.op("add", b.op("where", b.op("gt", c, 0.0), y, c), x), b.op("lt", z, x))
    if fuse:
        fuse_elementwise(g, supported=cuda_backend.CudaTarget.can_lower if device.startswith("cuda")
                         else LLVMTarget.can_lower)
        assert [n.kind for n in g.nodes] == [Prim.FUSION_GROUP]
    return g


def kernel_of(g: Graph, cp: ModuleType) -> FusedKernel:
    return FusedKernel(g.nodes[0].attrs["subgraph"], name="G", target=CudaTarget(cp))


def on_cuda(fk: FusedKernel | None) -> bool:
    return fk is not None and isinstance(fk.backend, CudaTarget)


def reference(g: Graph, *arrays: np.ndarray) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        out = Interpreter(g).run(*[np.ascontiguousarray(a).view(np.ndarray) for a in arrays])
    return list(out) if isinstance(out, tuple) else [out]


def assert_matches(got: list, want: list) -> None:
    assert len(got) == len(want)
    for gv, wv in zip(got, want):
        assert type(gv) is fake_cupy.FakeArray and gv.dtype == wv.dtype
        np.testing.assert_allclose(np.asarray(gv, np.float64), np.asarray(wv, np.float64),
                                   rtol=2e-6, atol=1e-6)


def _inputs(rows: int, cols: int, seed: int = 0, dt: Any = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dt) for s in ((rows, cols), (cols,), (rows, cols))]


# ---- marshalling and launch -------------------------------------------------------------------

@needs_gxx
def test_arguments_marshalled_as_render_c_declares(cp: ModuleType) -> None:
    g = w1_graph()
    fk = kernel_of(g, cp)
    xs = _inputs(5, 7)
    outs = fk([cp.asarray(a) for a in xs])
    assert_matches(outs, reference(g, *xs))
    (launch,) = cp.recorder.launches
    spec = fk.spec
    n_in, n_out = len(spec.inputs), len(spec.out_dtypes)
    assert [type(a) for a in launch.args] == [fake_cupy.FakeArray] * (n_in + n_out) + \
        [np.int64] * (1 + render_c(spec, CUDA).n_meta)
    assert all(o is a for o, a in zip(outs, launch.args[n_in:n_in + n_out]))
    assert int(launch.args[n_in + n_out]) == 35
    assert (launch.grid, launch.block) == ((launch_dims(35)[0],), (cuda_backend.BLOCK,))
    assert fk.cuda_source.startswith(CUDA.prelude) and "__global__" in fk.cuda_source


@needs_gxx
def test_layouts_broadcast_strided_negative_zero_dim(cp: ModuleType) -> None:
    g = w1_graph()
    fk = kernel_of(g, cp)
    rng = np.random.default_rng(1)
    big = rng.standard_normal((6, 18)).astype(np.float32)
    a = rng.standard_normal(36).astype(np.float32)
    views = {"contiguous": (big[:, :9].copy(), a[:9].copy(), big[:, 9:].copy()),
             "step": (big[:, ::2], a[::4], big[:, 1::2]),
             "negative": (big[::-1, ::-2], a[::-4], big[:, ::2]),
             "transpose": (big[:6, :6].T, a[:6], big[:6, 6:12]),
             "zero-stride": (np.broadcast_to(a[:9], (6, 9)), a[:9], big[:, :9]),
             "one-row": (big[:1, :9], a[:9], big[:1, 9:])}
    for name, arrays in views.items():
        got = fk([fake_cupy.on_device(v) for v in arrays])
        assert_matches(got, reference(g, *arrays))
    assert len(fk.kernels) >= 2 and len(fk._launches) == len(views)


@needs_gxx
def test_grid_stride_loop_with_a_capped_grid(cp: ModuleType,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_backend, "MAX_GRID", 3)
    monkeypatch.setattr(cuda_backend, "BLOCK", 8)
    g = w1_graph()
    xs = _inputs(13, 77, seed=2)
    outs = kernel_of(g, cp)([cp.asarray(a) for a in xs])
    assert_matches(outs, reference(g, *xs))                 # 1001 elements by 24 threads
    assert cp.recorder.launches[-1].grid == (3,) and cp.recorder.launches[-1].block == (8,)
    assert launch_dims(1) == (1, 8) and launch_dims(17) == (3, 8)


@needs_gxx
@pytest.mark.parametrize("dtype", ["float16", "float64", "int32", "uint8"])
def test_dtypes(cp: ModuleType, dtype: str) -> None:
    g = Graph()
    b = Builder(g)
    dt = D.BY_NAME[dtype]
    x = b.input(TensorType(dt, (4, 9), "cuda:0"), "x")
    y = b.input(TensorType(dt, (9,), "cuda:0"), "y")
    z = b.op("maximum", b.op("sub", b.op("mul", x, y), 3), b.op("add", x, y))
    b.ret(b.op("mul", z, 2), b.op("lt", z, x))
    fuse_elementwise(g, supported=cuda_backend.CudaTarget.can_lower)
    xs = [np.arange(36).reshape(4, 9).astype(dtype) % 7, np.arange(9).astype(dtype)]
    got = kernel_of(g, cp)([cp.asarray(a) for a in xs])
    for gv, wv in zip(got, reference(g, *xs)):
        assert gv.dtype == wv.dtype
        np.testing.assert_allclose(gv.astype(np.float64), wv.astype(np.float64), rtol=2e-3)


@needs_gxx
def test_outputs_and_launch_on_the_inputs_device(cp: ModuleType) -> None:
    g = w1_graph(device="cuda")
    xs = _inputs(3, 4)
    with cp.cuda.Device(0):
        outs = kernel_of(g, cp)([cp.asarray(a, device=1) for a in xs])
    assert {o.device.id for o in outs} == {1}
    assert cp.recorder.launches[-1].device == 1
    assert_matches(outs, reference(g, *xs))


def test_empty_output_allocates_without_compiling_or_launching(cp: ModuleType) -> None:
    fk = kernel_of(w1_graph(), cp)
    outs = fk([cp.asarray(np.ones(s, np.float32)) for s in ((0, 5), (5,), (0, 5))])
    assert [(o.shape, o.dtype) for o in outs] == [((0, 5), np.float32), ((0, 5), np.bool_)]
    assert not cp.recorder.launches and not cp.recorder.kernels


# ---- the op table through Executable -> FusedKernel on CUDA ---------------------------

TABLE = sorted(op for op in OC.CASES if op in FORMULAS)


def _table_groups(dtype: str, all_samples: bool) -> dict[tuple, list]:
    """Op-table samples of ``dtype`` by output shape: one fusion group (kernel) per shape."""
    groups: dict[tuple, list] = defaultdict(list)
    for op in TABLE:
        case = OC.CASES[op]
        samples = case.samples(OC.Gen(dtype)) if dtype in case.dtypes else []
        for s in samples if all_samples else samples[:1]:
            shape = np.broadcast_shapes(*[np.shape(x) for x in s.inputs])
            if any(isinstance(x, np.ndarray) for x in s.inputs) and 0 not in shape:
                groups[shape].append((case, s))
    return groups


@needs_gxx
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "bool"])
def test_op_table_through_the_compiled_interpreter(
        dtype: str, cp: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """float32: every sample layout of every elementwise op; others: the first sample."""
    monkeypatch.setattr(array_modules, "cupy", cp)
    for shape, cases in _table_groups(dtype, dtype == "float32").items():
        g, arrays = group_graph([(c.op, s.inputs, dict(s.attrs)) for c, s in cases], "cuda:0")
        got = compiled(g).run(*[fake_cupy.on_device(a) for a in arrays])
        got = got if isinstance(got, tuple) else (got,)
        assert on_cuda(fused_kernel(g.nodes[0]))
        for (c, s), out in zip(cases, got):
            (dt,) = OC.expected_dtypes(c.op, s.inputs, s.attrs)
            OC.assert_close(out, OC.reference(c, s)[0], dt, f"{c.op}[{dtype}:{s.label}]")
    assert len(cp.recorder.launches) == len(_table_groups(dtype, dtype == "float32"))


# ---- guards -------------------------------------------------------------------------------------

def test_guards_name_the_argument(cp: ModuleType) -> None:
    fk = kernel_of(w1_graph(), cp)
    x, a, c = (cp.asarray(v) for v in _inputs(2, 3))
    with pytest.raises(TypeError, match=r"argument 'x' \(input 0\).*float32.*got float64"):
        fk([x.astype(np.float64), a, c])
    with pytest.raises(ValueError, match=r"argument 'a' \(input 1\).*shape"):
        fk([x, cp.asarray(np.ones((2, 3), np.float32)), c])
    with pytest.raises(TypeError, match=r"argument 'c' \(input 2\).*CuPy array on cuda:0.*"
                                        r"numpy.ndarray"):
        fk([x, a, np.ones((2, 3), np.float32)])
    with pytest.raises(DeviceError, match=r"argument 'a' \(input 1\).*cuda:0.*cuda:1"):
        fk([x, cp.asarray(np.ones(3, np.float32), device=1), c])
    with pytest.raises(TypeError, match="expected 3 input"):
        fk([x, a])


def test_inputs_on_different_devices_are_refused(cp: ModuleType) -> None:
    fk = kernel_of(w1_graph(device="cuda"), cp)
    x, a, c = _inputs(2, 3)
    with pytest.raises(DeviceError, match=r"inputs on different devices \(cuda:0, cuda:2\)"):
        fk([cp.asarray(x, device=0), cp.asarray(a, device=2), cp.asarray(c, device=0)])


@needs_gxx
def test_a_launch_hit_still_catches_a_device_change(cp: ModuleType) -> None:
    fk = kernel_of(w1_graph(device="cuda"), cp)
    xs = _inputs(2, 3)
    fk([cp.asarray(v, device=0) for v in xs])
    with pytest.raises(DeviceError, match="different devices"):
        fk([cp.asarray(xs[0], device=1)] + [cp.asarray(v, device=0) for v in xs[1:]])


# ---- kernels: one per layout kind, one RawKernel per source in the process -----------------------

@needs_gxx
def test_kernels_compiled_once_per_source(cp: ModuleType) -> None:
    g = w1_graph()
    xs = [cp.asarray(v) for v in _inputs(4, 5)]
    first, second = kernel_of(g, cp), kernel_of(g, cp)
    for _ in range(3):
        first(xs)
        second(xs)
    assert len(cp.recorder.kernels) == 1 and len(cp.recorder.launches) == 6
    assert first.kernels[0] is second.kernels[0]


def test_kernel_factory_is_injectable() -> None:
    seen = []
    cp = fake_cupy.make_fake_cupy()

    def factory(src: Any) -> Any:
        seen.append(src)
        return lambda grid, block, args: None
    fk = FusedKernel(w1_graph().nodes[0].attrs["subgraph"],
                     target=CudaTarget(cp, make_kernel=factory))
    fk([cp.asarray(v) for v in _inputs(2, 2)])
    assert len(seen) == 1 and seen[0].text.startswith(CUDA.prelude) and seen[0].n_meta == 4


def test_inspection_texts_follow_the_backend(cp: ModuleType) -> None:
    fk = kernel_of(w1_graph(), cp)
    assert "__global__" in fk.cuda_source and fk.backend.texts == ("cuda_source",)
    with pytest.raises(AttributeError, match=r"G runs on CUDA: see \.cuda_source"):
        fk.llvm_ir
    cpu = FusedKernel(w1_graph(device="cpu").nodes[0].attrs["subgraph"], name="C")
    assert "define void" in cpu.llvm_ir
    with pytest.raises(AttributeError, match=r"C runs on LLVM: see \.llvm_ir, \.asm"):
        cpu.cuda_source


# ---- wiring: the veto, Executable, no CuPy ----------------------------------------------

def test_backend_vetoes_split_by_device() -> None:
    cpu, cuda = w1_graph(device="cpu", fuse=False), w1_graph(device="cuda:0", fuse=False)
    assert all(LLVMTarget.can_lower(n) and not cuda_backend.CudaTarget.can_lower(n) for n in cpu.nodes if n.is_op)
    assert all(cuda_backend.CudaTarget.can_lower(n) and not LLVMTarget.can_lower(n) for n in cuda.nodes if n.is_op)


@needs_gxx
def test_compiled_interpreter_runs_cuda_groups_as_cuda_kernels(
        cp: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(array_modules, "cupy", cp)
    g, g_cpu = w1_graph(), w1_graph(device="cpu")
    xs = _inputs(3, 5)
    got = compiled(g).run(*[cp.asarray(a) for a in xs])
    assert on_cuda(fused_kernel(g.nodes[0]))
    assert_matches(list(got), reference(g, *xs))
    assert len(cp.recorder.launches) == 1
    cpu_out = compiled(g_cpu).run(*xs)                     # NumPy: the LLVM path
    assert fused_kernel(g_cpu.nodes[0]).backend.name == "LLVM"
    assert type(cpu_out[0]) is np.ndarray and len(cp.recorder.launches) == 1


def test_without_cupy_cuda_groups_run_on_the_reference_kernels(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(array_modules, "cupy", None)
    g = w1_graph()
    with pytest.raises(NotImplementedError, match="CuPy"):
        CudaTarget()
    with pytest.raises(NotImplementedError, match="CuPy"):
        FusedKernel(g.nodes[0].attrs["subgraph"])               # backend from the devices
    assert fused_kernel(g.nodes[0]) is None
    xs = _inputs(2, 3)
    np.testing.assert_allclose(compiled(g).run(*xs)[0], reference(g, *xs)[0])


# ---- a real GPU ---------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not array_modules.cuda_available(),
                          reason="needs a CUDA GPU and CuPy")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("wid", ["W1", "W2"])
def test_traced_workload_on_cuda_equals_eager_on_cpu(wid: str) -> None:
    import scriptmod as sm
    import scriptmod.jit
    from scriptmod.bench.workloads import WORKLOADS
    model, x = WORKLOADS[wid].build(quick=True)
    with sm.no_grad():
        want = model(x).numpy()
        model_gpu, x_gpu = model.to("cuda"), x.to("cuda")
        traced = sm.jit.trace(model_gpu, x_gpu)
        got = [traced(x_gpu).cpu().numpy() for _ in range(2)]
    kernels = sm.jit.kernels_for(traced, x_gpu)
    assert kernels and all(on_cuda(k) for k in kernels)
    for g in got:
        np.testing.assert_allclose(g, want, rtol=2e-5, atol=2e-5)


@pytest.mark.cuda
@cuda
def test_cuda_fused_kernel_on_real_cupy_arrays() -> None:
    import cupy
    g = w1_graph()
    xs = _inputs(33, 1025, seed=4)
    got = kernel_of(g, cupy)([cupy.asarray(a) for a in xs])
    for gv, wv in zip(got, reference(g, *xs)):
        np.testing.assert_allclose(cupy.asnumpy(gv).astype(np.float64), wv.astype(np.float64),
                                   rtol=2e-6, atol=1e-6)
