"""Native segments: the straight-line parts of a specialization as machine code.

- ``plan`` (the planner): ``plan_blocks`` decides, node by node, what runs natively and why
  not (``NativePlan``, ``NativePlan.why``), cuts segments and places the arena;
- ``segment``: ``Segment`` (one compiled function and the per-call Python around it),
  ``Frame`` (one thread's arena and pointer table), ``compile_steps`` (the profiler's
  step-by-step programs);
- ``views``: ``Layout`` (a value over a buffer), view layouts and the GEMM shape and stride
  helpers.

Only the CPU target runs native programs (``Target.native_program``); see ``plan``'s
docstring for what becomes native and how memory is planned. A symbolic specialization's
segments compile once and read their sizes per call (``codegen.sizes``: sizes as
polynomials in the symbolic dims; ``memory_plan.SymbolicArena``: the arena placed per set
of symbol values; ``Frame.set_env``: a thread binds them).
"""
from __future__ import annotations

from ..memory_plan import ALIGN, Buffer, PlanError, assign_offsets, check_plan
from .plan import TOPIC, NativePlan, plan_blocks
from .segment import ARRAY_DATA_OFFSET, ENTRY_TYPE, POOL_MIN_BYTES, Frame, Segment, \
    compile_steps, data_ptr
from .views import Layout, c_strides, gemm_shape, view_layout

__all__ = ["ALIGN", "ARRAY_DATA_OFFSET", "Buffer", "ENTRY_TYPE", "Frame", "Layout", "NativePlan",
           "POOL_MIN_BYTES", "PlanError", "Segment", "TOPIC", "assign_offsets", "c_strides",
           "check_plan", "compile_steps", "data_ptr", "gemm_shape", "plan_blocks", "view_layout"]
