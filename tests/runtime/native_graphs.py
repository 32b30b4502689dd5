"""Random straight-line graphs for the native-entry tests, and a memory-plan walker.

``random_graph(seed, dtype)`` builds the same graph structure for every dtype (the seed
decides it): 2D / batched 3D@2D / 3D@3D matmuls with plain or ``sm::transpose``d operands,
views (transpose, unsqueeze, reshape, expand, narrow, permute), elementwise chains (which
``fuse_elementwise`` turns into fusion groups) and ops that have no native lowering
(softmax, sum, mean) and so split native segments. Values stay O(1): weights are scaled
by 1/sqrt(k) and every matmul result goes through tanh or a softmax often enough.

``plan_violations(ex)`` walks an ``Executable``'s memory plan independently of the planner:
it recomputes which values live on each arena buffer (through the native views), where they
are read, and reports every read outside a buffer's live range, every arena value Python or
the caller can see, and every pair of buffers live at once that share a byte.

    >>> g, arrays = random_graph(3, np.float64)                    # doctest: +SKIP
    >>> Interpreter(g).run(*arrays)                                # doctest: +SKIP
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from scriptmod.ir import dtypes as D
from scriptmod.ir.builder import Builder
from scriptmod.ir.graph import Graph, Value
from scriptmod.ir.types import TensorType
from scriptmod.ir.verify import verify
from scriptmod.runtime.native import ALIGN

UNARY = ("tanh", "sigmoid", "relu", "neg")
BINARY = ("add", "mul", "sub", "maximum")


class _Gen:
    """One random graph under construction: a pool of values, a list of input arrays."""

    def __init__(self, seed: int, dtype: Any) -> None:
        self.rng = np.random.default_rng(seed)
        self.data = np.random.default_rng(seed + 10_000)
        self.np_dtype = np.dtype(dtype)
        self.dt = D.BY_NAME[self.np_dtype.name]
        self.g = Graph()
        self.b = Builder(self.g)
        self.arrays: list[np.ndarray] = []
        self.pool: list[Value] = []

    # -- values --------------------------------------------------------------------------
    def input(self, shape: tuple[int, ...], scale: float = 1.0) -> Value:
        v = self.b.input(TensorType(self.dt, shape), f"x{len(self.arrays)}")
        self.arrays.append((self.data.standard_normal(shape) * scale).astype(self.np_dtype))
        return v

    def pick(self, rank: tuple[int, ...] = (1, 2, 3, 4)) -> Value | None:
        """A pool value of one of these ranks, the recent ones more likely."""
        ok = [v for v in self.pool if len(shape(v)) in rank]
        if not ok:
            return None
        k = len(ok) - 1 - min(int(self.rng.exponential(1.5)), len(ok) - 1)
        return ok[k]

    def dim(self) -> int:
        return int(self.rng.choice([1, 2, 3, 4, 5, 7]))

    def add(self, v: Value) -> Value:
        self.pool.append(v)
        return v

    # -- steps ---------------------------------------------------------------------------
    def matmul(self) -> None:
        b, rng = self.b, self.rng
        a = self.pick((2, 3))
        assert a is not None
        sh = shape(a)
        k, n = sh[-1], self.dim()
        kind = rng.integers(4)
        if len(sh) == 2 and kind == 3:                 # a^T @ w: a transposed left operand
            a = b.op("transpose", a, dim0=0, dim1=1)
            k = sh[0]
            kind = rng.integers(2)
        scale = 1 / math.sqrt(max(k, 1))
        if len(sh) == 3 and kind >= 2:                 # 3D @ 3D, maybe transposed
            if kind == 2:
                w = self.input((sh[0], k, n), scale)
            else:
                w = b.op("transpose", self.input((sh[0], n, k), scale), dim0=1, dim1=2)
        elif kind == 1:                                # x @ w^T, as Linear does
            w = b.op("transpose", self.input((n, k), scale), dim0=0, dim1=1)
        else:
            w = self.input((k, n), scale)
        y = b.op("matmul", a, w)
        self.add(b.op("tanh", y) if rng.random() < 0.5 else y)

    def view(self) -> None:
        b, rng = self.b, self.rng
        v = self.pick()
        assert v is not None
        sh = shape(v)
        r = len(sh)
        choice = rng.integers(6)
        if choice == 0 and r >= 2:
            d0, d1 = rng.choice(r, 2, replace=False)
            out = b.op("transpose", v, dim0=int(d0), dim1=int(d1))
        elif choice == 1 and r < 4:
            out = b.op("unsqueeze", v, dim=int(rng.integers(-r - 1, r + 1)))
        elif choice == 2:
            n = math.prod(sh)
            target = [n] if r > 1 or n == 1 else [1, n]
            if r == 1 and n % 2 == 0:
                target = [2, n // 2]
            elif r >= 2 and rng.random() < 0.5:
                target = [sh[0], -1]
            out = b.op("reshape", v, target)
        elif choice == 3 and r < 4:
            u = b.op("unsqueeze", v, dim=0)
            out = b.op("expand", u, [int(rng.integers(2, 4))] + list(sh))
        elif choice == 4 and max(sh) >= 2:
            d = int(np.argmax(sh))
            start = int(rng.integers(0, sh[d] - 1))
            length = int(rng.integers(1, sh[d] - start + 1))
            out = b.op("narrow", v, start, length, dim=d)
        elif r == 3:
            out = b.op("permute", v, dims=[int(i) for i in rng.permutation(3)])
        else:
            return
        self.add(out)

    def elementwise(self) -> None:
        b, rng = self.b, self.rng
        v = self.pick()
        assert v is not None
        for _ in range(int(rng.integers(1, 4))):
            if rng.random() < 0.5:
                v = b.op(str(rng.choice(UNARY)), v)
                continue
            op = str(rng.choice(BINARY))
            sh = shape(v)
            same = [u for u in self.pool if shape(u) == sh and u is not v]
            r = rng.random()
            if same and r < 0.4:
                other: Any = same[int(rng.integers(len(same)))]
            elif r < 0.7 and sh:
                other = self.input(sh[-1:])             # a bias, broadcast
            else:
                other = float(np.round(rng.uniform(-1.5, 1.5), 2))
                op = "add" if op == "maximum" else op       # maximum takes two tensors
            v = b.op(op, v, other)
        self.add(v)

    def python(self) -> None:
        b, rng = self.b, self.rng
        v = self.pick((1, 2, 3, 4))
        assert v is not None
        r = len(shape(v))
        choice = rng.integers(3)
        if choice == 0:
            self.add(b.op("softmax", v, dim=-1))
        elif choice == 1:
            self.add(b.op("sum", v, dim=[int(rng.integers(r))], keepdim=True))
        else:
            self.add(b.op("mean", v, dim=[r - 1]))

    def build(self, steps: int) -> tuple[Graph, list[np.ndarray]]:
        x = self.input(tuple(self.dim() + (i == 0) for i in range(int(self.rng.integers(2, 4)))))
        self.add(x)
        self.matmul()
        for _ in range(steps):
            kind = self.rng.choice(4, p=[0.3, 0.3, 0.25, 0.15])
            if kind == 0 and self.pick((2, 3)) is not None:
                self.matmul()
            elif kind == 1:
                self.view()
            elif kind == 2:
                self.elementwise()
            else:
                self.python()
        outs = [self.pool[-1]]
        for _ in range(int(self.rng.integers(0, 3))):
            v = self.pool[int(self.rng.integers(1, len(self.pool)))]
            if v not in outs:
                outs.append(v)
        self.b.ret(*outs)
        verify(self.g)
        return self.g, self.arrays


def shape(v: Value) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType) and t.shape is not None
    return tuple(t.shape)                                       # type: ignore[arg-type]


def random_graph(seed: int, dtype: Any = np.float32, steps: int = 9) -> tuple[Graph, list]:
    """A random straight-line graph of concrete ``dtype`` types and its input arrays; the
    same seed gives the same structure and (up to rounding) the same data for any dtype."""
    return _Gen(seed, dtype).build(steps)


def new_inputs(arrays: list[np.ndarray], seed: int) -> list[np.ndarray]:
    """Other inputs of the same shapes and dtypes."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.shape).astype(a.dtype) * (np.abs(a).max() + 0.1)
            if a.size else a.copy() for a in arrays]


# ---- the plan walker ------------------------------------------------------------------------

def plan_violations(ex: Any) -> list[str]:
    """Everything wrong with ``ex.plan`` (see the module docstring); [] when it is sound."""
    plan = ex.plan
    if plan is None:
        return []
    nodes = list(ex.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    in_segment = {n for s in plan.segments for n in s.nodes}
    native_views = set(plan.native_nodes) - in_segment
    base: dict[Value, Value] = {}
    for n in nodes:                                   # a native view aliases its input
        if n in native_views:
            base[n.output] = base.get(n.inputs[0], n.inputs[0])
    arena = [b for b in plan.buffers if b.kind == "arena"]
    bad: list[str] = []
    for b in arena:
        src: Value = b.source
        t = src.type
        assert isinstance(t, TensorType)
        if b.nbytes != math.prod(t.shape) * t.dtype.itemsize:       # type: ignore[arg-type]
            bad.append(f"{src!r}: {b.nbytes} bytes for {t!r}")
        if b.offset < 0 or b.offset % ALIGN or b.offset + b.nbytes > plan.arena_bytes:
            bad.append(f"{src!r}: offset {b.offset} (+{b.nbytes}) outside the "
                       f"{plan.arena_bytes}-byte arena or unaligned")
        if b.start != pos[src.node]:
            bad.append(f"{src!r}: live from {b.start}, made at {pos[src.node]}")
        on_it = [v for v in [src, *base] if base.get(v, v) is src]
        for v in on_it:
            if v in ex.graph.outputs:
                bad.append(f"{v!r} is a graph output but lives in the arena")
            for use in v.uses:
                u = use.user
                if u not in pos or u in plan.skipped:
                    continue                      # inside a group, or dead: never runs
                if u not in plan.native_nodes:
                    bad.append(f"{v!r} (arena) is read by Python node {u.kind}")
                elif not b.start <= pos[u] <= b.end:
                    bad.append(f"{v!r} read at {pos[u]}, buffer live over [{b.start}, {b.end}]")
    for i, a in enumerate(arena):
        for c in arena[i + 1:]:
            live = a.start <= c.end and c.start <= a.end
            if live and a.nbytes and c.nbytes and a.offset < c.offset + c.nbytes \
                    and c.offset < a.offset + a.nbytes:
                bad.append(f"{a.source!r} and {c.source!r} are live together and overlap")
    return bad


def native_node_count(ex: Any) -> int:
    """How many of ``ex``'s nodes run inside native segments (views excluded)."""
    return sum(len(s.nodes) for s in ex.segments)




# ---- shared compiled programs (both test files use them; each compile costs ~30-60 ms) -----

SEEDS = range(25)


@functools.lru_cache(maxsize=None)
def compiled(seed: int) -> tuple[Any, list[np.ndarray], list[np.ndarray], Graph]:
    """(Executable of the fused float32 graph, its inputs, the float64 reference outputs
    of the unfused graph, the unfused float32 graph) for random graph ``seed``."""
    from scriptmod.ir.passes import fuse_elementwise
    from scriptmod.runtime.executable import Executable
    from scriptmod.runtime.interpreter import Interpreter
    g, arrays = random_graph(seed, np.float32)
    g64, a64 = random_graph(seed, np.float64)
    ref = Interpreter(g64).run(*a64)
    ex = Executable(fuse_elementwise(g.copy()), name=f"random{seed}")
    return ex, arrays, list(ref) if isinstance(ref, tuple) else [ref], g
