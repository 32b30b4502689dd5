"""Every elementwise op of the op table (``op_cases``), every dtype the code generator takes,
through the CUDA C path on the CPU: one-node ``prim::FusionGroup`` -> ``lower_group`` /
``plan_layout`` (exactly as ``FusedKernel`` does) -> ``render_c(spec, CPU_SHIM)`` -> g++ -> the
grid-stride loop over a small grid, compared with the float64 reference as ``test_ops`` does.
A representative subset of the same kernels, in the CUDA dialect, goes through
``nvcc -ptx`` where nvcc exists.

The kernels of the whole table are built up front, many per translation unit and the units
in parallel (``harness.build_shims``), and cached on disk by source hash."""
from __future__ import annotations

import shutil
import subprocess
from typing import Any, NamedTuple, Sequence

import numpy as np
import pytest

import op_cases as OC
from scriptmod.codegen.c_source import CPU_SHIM, CUDA, CSource, render_c
from scriptmod.codegen.formulas import FORMULAS
from scriptmod.codegen.kernel import KINDS, KernelSpec
from scriptmod.codegen.lower import DTYPES, lower_group, plan_layout
from scriptmod.ir import dtypes as D
from scriptmod.ir import schema as S
from op_graphs import group_graph
from scriptmod.runtime.arrays import NP_DTYPE
from tests.codegen.harness import build_shims, have_gxx, launch_shim

pytestmark = pytest.mark.skipif(not have_gxx(), reason="g++ not found")

ELEMENTWISE = sorted(op for op in OC.CASES if op in FORMULAS)
PARAMS = [(op, dt) for op in ELEMENTWISE for dt in OC.CASES[op].dtypes
          if D.BY_NAME[dt] in DTYPES]
GRID, BLOCK = 2, 4          # 8 threads: samples of up to 12 elements take 1 or 2 trips


class Prepared(NamedTuple):
    """One sample lowered as the runtime lowers it: kernel spec, launch meta, arrays."""

    spec: KernelSpec
    arrays: list[np.ndarray]
    meta: tuple[int, ...]
    out_shape: tuple[int, ...]


def prepare(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Prepared:
    g, arrays = group_graph([(op, inputs, attrs)])
    (node,) = g.nodes
    out_shape = tuple(np.broadcast_shapes(*[a.shape for a in arrays]))
    spec, meta = plan_layout(lower_group(node.attrs["subgraph"]), [a.shape for a in arrays],
                             [[s // a.itemsize for s in a.strides] for a in arrays], out_shape)
    return Prepared(spec, arrays, meta, out_shape)


def _samples(params: Sequence[tuple[str, str]]) -> list[tuple[str, str, OC.Sample]]:
    return [(op, dt, s) for op, dt in params for s in OC.CASES[op].samples(OC.Gen(dt))]


@pytest.fixture(scope="module", autouse=True)
def _built_shims() -> None:
    """Build the CPU-shim kernel of every sample of the table at once (cached on disk)."""
    build_shims([render_c(prepare(op, s.inputs, dict(s.attrs)).spec, CPU_SHIM)
                 for op, _, s in _samples(PARAMS)])


def shim_execute(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Any:
    """``execute`` for ``op_cases``: the CUDA C of the one-op group, run on the CPU shim."""
    p = prepare(op, inputs, attrs)
    outs = [np.empty(p.out_shape, NP_DTYPE[d]) for d in p.spec.out_dtypes]
    launch_shim(render_c(p.spec, CPU_SHIM), p.arrays, outs, p.meta, GRID, BLOCK)
    return outs[0] if len(outs) == 1 else tuple(outs)


@pytest.mark.parametrize("op,dtype", PARAMS)
def test_cuda_shim_matches_reference(op: str, dtype: str) -> None:
    OC.run_case(OC.CASES[op], dtype, shim_execute)


def test_every_elementwise_op_and_input_layout_is_covered() -> None:
    ew = {n for n, s in S.REGISTRY.items() if s.has(S.ELEMENTWISE)}
    assert sorted(ew - set(ELEMENTWISE)) == []
    kinds = {i.kind for op, _, s in _samples(PARAMS)
             for i in prepare(op, s.inputs, dict(s.attrs)).spec.inputs}
    assert kinds == set(KINDS)


# ---- nvcc: the CUDA dialect of a representative subset -------------------------------------------

ALL_DTYPES_OPS = ("add", "mul", "div", "floor_divide", "remainder", "pow", "maximum", "where",
                  "cast", "clamp", "eq", "bitwise_xor", "abs", "sign", "round")


def nvcc_params() -> list[tuple[str, str]]:
    """Every op in float32 (or its first dtype), every dtype for ``ALL_DTYPES_OPS``, and the
    transcendental ops in the half types."""
    out = set()
    for op in ELEMENTWISE:
        dts = [dt for o, dt in PARAMS if o == op]
        out.add((op, "float32" if "float32" in dts else dts[0]))
        if op in ALL_DTYPES_OPS:
            out.update((op, dt) for dt in dts)
        out.update((op, dt) for dt in ("float16", "bfloat16") if dt in dts and op in
                   ("exp", "tanh", "erf", "sigmoid", "log1p"))
    return sorted(out)


def cuda_unit(sources: Sequence[CSource]) -> str:
    """One .cu for many kernels: the CUDA prelude once, then each kernel."""
    prelude = CUDA.prelude
    assert all(s.text.startswith(prelude) for s in sources)
    return "\n".join([prelude] + [s.text[len(prelude):] for s in sources])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_cuda_dialect_compiles_with_nvcc(tmp_path: Any) -> None:
    srcs = {}
    for op, dt, s in _samples(nvcc_params()):
        src = render_c(prepare(op, s.inputs, dict(s.attrs)).spec, CUDA)
        srcs[src.name] = src
    cu = tmp_path / "table.cu"
    cu.write_text(cuda_unit(list(srcs.values())))
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_80", str(cu), "-o", str(tmp_path / "t.ptx")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[:4000]
    ptx = (tmp_path / "t.ptx").read_text()
    missing = [n for n in srcs if f".entry {n}(" not in ptx]
    assert not missing, f"kernels missing from the PTX: {missing[:5]}"
