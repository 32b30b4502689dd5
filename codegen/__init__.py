"""Codegen: fused elementwise kernels as LLVM IR text (CPU) or CUDA C source.

Pure text generation: nothing here executes code (see ``runtime.llvm_jit``).

    >>> from scriptmod.codegen.kernel import KernelSpec, InputSpec, OpStep
    >>> from scriptmod.codegen.llvm_ir import render_llvm
    >>> from scriptmod.ir import dtypes as D
    >>> spec = KernelSpec([InputSpec(D.float32, "contiguous")],
    ...                   [OpStep("exp", (0,), {}, D.float32)], [1], [D.float32], rank=1)
    >>> "define void" in render_llvm(spec).text
    True
"""
