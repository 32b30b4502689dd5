"""runtime.native memory plans: no intermediate is overwritten while it is still live.

Checked by walking plans, not by one example: ``plan_violations`` (``native_graphs``)
recomputes, independently of the planner, which values live on each arena buffer and where
they are read, on every random graph's plan; ``check_plan`` must accept those plans and
reject corrupted ones; ``assign_offsets`` is property-tested on random live ranges."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from native_graphs import SEEDS, compiled, plan_violations
from scriptmod.ir import dtypes as D
from scriptmod.runtime.native import ALIGN, Buffer, PlanError, assign_offsets, check_plan


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))


def arena_of(ex) -> list[Buffer]:
    return [b for b in ex.plan.buffers if b.kind == "arena"]


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@pytest.mark.parametrize("seed", list(SEEDS))
def test_random_graph_plans_are_sound(seed: int) -> None:
    ex = compiled(seed)[0]
    assert ex.plan is not None
    assert plan_violations(ex) == []
    check_plan(arena_of(ex))
    assert ex.plan.arena_bytes <= sum(_aligned(b.nbytes) for b in arena_of(ex))
    assert ex.frame().arena.nbytes == ex.plan.arena_bytes
    assert ex.frame().arena_addr % ALIGN == 0


def test_random_plans_reuse_arena_bytes() -> None:
    """Reuse is exercised: some plans put buffers with disjoint live ranges on shared bytes."""
    reused = 0
    for seed in SEEDS:
        arena = arena_of(compiled(seed)[0])
        reused += any(a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes
                      for i, a in enumerate(arena) for b in arena[i + 1:])
    assert reused >= 3, reused


def _live_pair(seed_range=SEEDS) -> tuple[list[Buffer], int, int]:
    for seed in seed_range:
        arena = [copy.copy(b) for b in arena_of(compiled(seed)[0])]
        for i, a in enumerate(arena):
            for j, b in enumerate(arena):
                if i < j and a.nbytes and b.nbytes and a.start <= b.end and b.start <= a.end:
                    return arena, i, j
    raise AssertionError("no random plan has two buffers live at once")


def test_check_plan_catches_two_live_buffers_overlapping() -> None:
    arena, i, j = _live_pair()
    check_plan(arena)
    arena[j].offset = arena[i].offset + (ALIGN if arena[i].nbytes > ALIGN else 0)
    with pytest.raises(PlanError, match="share bytes"):
        check_plan(arena)


def test_check_plan_catches_unaligned_or_unplaced_buffers() -> None:
    arena, i, _ = _live_pair()
    arena[i].offset += 4
    with pytest.raises(PlanError, match="not aligned"):
        check_plan(arena)
    arena[i].offset = -1
    with pytest.raises(PlanError, match="not placed"):
        check_plan(arena)


def test_walker_catches_a_live_range_cut_short() -> None:
    """What check_plan cannot see: a buffer whose recorded range ends before its last
    reader (the planner's liveness, not its packing, is wrong)."""
    for seed in SEEDS:
        ex = compiled(seed)[0]
        for b in arena_of(ex):
            if b.end > b.start:
                end, b.end = b.end, b.start
                try:
                    bad = plan_violations(ex)
                finally:
                    b.end = end
                assert any("read at" in m for m in bad), bad
                return
    raise AssertionError("no random plan has a buffer read after the node that makes it")


def test_check_plan_ignores_empty_and_disjoint_buffers() -> None:
    f32 = D.float32
    a = Buffer("arena", 0, f32, (0,), offset=0, start=0, end=5)
    b = Buffer("arena", 128, f32, (32,), offset=0, start=0, end=5)
    c = Buffer("arena", 128, f32, (32,), offset=0, start=6, end=9)
    check_plan([a, b, c])
    c.start = 5                                           # one node: both live
    with pytest.raises(PlanError):
        check_plan([a, b, c])


# ---- assign_offsets, property-tested ---------------------------------------------------------

@st.composite
def buffers(draw: st.DrawFn) -> list[Buffer]:
    out = []
    for _ in range(draw(st.integers(0, 24))):
        start = draw(st.integers(0, 30))
        end = start + draw(st.integers(0, 10))
        nbytes = draw(st.sampled_from([0, 1, 4, 60, 64, 65, 128, 1000, 4096]))
        out.append(Buffer("arena", nbytes, D.float32, (nbytes,), start=start, end=end))
    return out


def _peak(bufs: list[Buffer]) -> int:
    steps = {b.start for b in bufs}
    return max((sum(b.nbytes for b in bufs if b.start <= t <= b.end) for t in steps), default=0)


@given(buffers())
def test_assign_offsets_gives_a_sound_compact_plan(bufs: list[Buffer]) -> None:
    size = assign_offsets(bufs)
    check_plan(bufs)
    assert size % ALIGN == 0
    assert all(b.offset % ALIGN == 0 and b.offset + b.nbytes <= size for b in bufs)
    assert size <= sum(_aligned(b.nbytes) for b in bufs)
    assert size >= _peak(bufs)
    # independent pair walk (check_plan's own logic not trusted alone)
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.nbytes and b.nbytes and a.start <= b.end and b.start <= a.end:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset


@given(buffers())
def test_assign_offsets_reuses_bytes_of_buffers_never_live_together(bufs: list[Buffer]) -> None:
    """Buffers live one after another (a chain) need only the largest pair's bytes."""
    for k, b in enumerate(bufs):
        b.start = b.end = k
    size = assign_offsets(bufs)
    check_plan(bufs)
    assert size <= _aligned(max((b.nbytes for b in bufs), default=0))


def test_assign_offsets_packs_a_chain_in_two_slots() -> None:
    """x -> a -> b -> c -> d, each read only by the next: two 4 KiB slots suffice."""
    bufs = [Buffer("arena", 4096, D.float32, (1024,), start=k, end=k + 1) for k in range(5)]
    assert assign_offsets(bufs) == 2 * 4096
    check_plan(bufs)
    assert bufs[0].offset == bufs[2].offset == bufs[4].offset != bufs[1].offset
    np.testing.assert_array_equal(sorted({b.offset for b in bufs}), [0, 4096])


def test_thread_split_group_compiles_with_the_segments() -> None:
    """A specialization is one LLVM compile: the kernel of a group too large for a segment
    (it runs through its FusedKernel, split across threads) is built with the segments, at
    its planned layout, and the FusedKernel finds it in memory on the first call."""
    from scriptmod.ir import parse
    from scriptmod.ir.passes import fuse_elementwise
    from scriptmod.runtime import llvm_jit, threads
    from scriptmod.runtime.executable import Executable
    n = threads.MIN_SPLIT // 2 + 3
    g = fuse_elementwise(parse(f'''graph(%x : Float(2, 3), %w : Float(3, {n}), %b : Float({n})):
      %h : Float(2, {n}) = sm::matmul(%x, %w)
      %r : Float(2, {n}) = sm::relu(%h)
      %y : Float(2, {n}) = sm::add(%r, %b)
      %z : Float(2, 3) = sm::neg(%x)
      return (%y, %z)
    '''))
    old = threads.get_num_threads()
    threads.set_num_threads(2)
    try:
        before = llvm_jit.CACHE.stats()
        ex = Executable(g, name="split_group")
        rng = np.random.default_rng(3)
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, n), (n,)))
        y, z = ex([x, w, b])
        after = llvm_jit.CACHE.stats()
    finally:
        threads.set_num_threads(old)
    assert ex.plan is not None and ex.segments
    assert after["compiles"] - before["compiles"] == 1          # segments + the group's kernel
    assert after["hits"] - before["hits"] >= 1                  # the FusedKernel's lookup
    np.testing.assert_allclose(y, np.maximum(x.astype(np.float64) @ w, 0) + b, rtol=2e-5,
                               atol=2e-5)
    np.testing.assert_array_equal(z, -x)


def test_reshape_of_a_permuted_value_is_a_native_copy() -> None:
    """Attention merges its heads back with ``permute`` then ``reshape``: not a view of the
    permuted layout, so the program copies it (one kernel) instead of ending the segment."""
    from scriptmod.ir import parse
    from scriptmod.runtime.executable import Executable
    g = parse('''graph(%x : Float(2, 3, 4, 5), %w : Float(15, 6)):
      %p : Float(2, 4, 3, 5) = sm::permute[dims=[0, 2, 1, 3]](%x)
      %s : int[] = prim::Constant[value=[8, 15]]()
      %r : Float(8, 15) = sm::reshape(%p, %s)
      %y : Float(8, 6) = sm::matmul(%r, %w)
      return (%y)
    ''')
    ex = Executable(g, name="merge_heads")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w = rng.standard_normal((15, 6)).astype(np.float32)
    y, = ex([x, w])
    assert [[n.op_name for n in s.nodes] for s in ex.segments] == [["reshape", "matmul"]]
    np.testing.assert_allclose(y, x.transpose(0, 2, 1, 3).reshape(8, 15) @ w, rtol=1e-5,
                               atol=1e-5)


def test_large_fresh_buffers_are_reused_only_when_nothing_holds_them() -> None:
    """A segment's fresh buffer of at least ``POOL_MIN_BYTES`` comes from a pool: the same
    memory on the next call once the caller dropped the result, new memory while the caller
    still holds it (a result the caller keeps is never overwritten)."""
    from scriptmod.ir import parse
    from scriptmod.runtime import native
    from scriptmod.runtime.executable import Executable
    n = native.POOL_MIN_BYTES // 4
    g = parse(f'''graph(%x : Float({n})):
      %y : Float({n}) = sm::neg(%x)
      return (%y)
    ''')
    from scriptmod.ir.passes import fuse_elementwise
    ex = Executable(fuse_elementwise(g), name="pooled")
    x = np.arange(n, dtype=np.float32)
    y1, = ex([x])
    held = y1
    y2, = ex([x + 1])
    assert y2.ctypes.data != held.ctypes.data
    np.testing.assert_array_equal(held, -x)                  # not overwritten
    np.testing.assert_array_equal(y2, -(x + 1))
    pooled = {b.ctypes.data for s in ex.segments for p in s._pools.values() for b in p.bufs}
    assert {y1.ctypes.data, y2.ctypes.data} == pooled
    del y1, held, y2
    y3, = ex([x + 2])
    assert y3.ctypes.data in pooled                          # dropped: reused
    np.testing.assert_array_equal(y3, -(x + 2))


def test_the_plan_says_why_for_every_node() -> None:
    """``NativePlan.why``: each node of the block gets a line, native ones the segment and
    what they became there, Python ones the planner's reason."""
    from scriptmod.ir import parse
    from scriptmod.ir.passes import fuse_elementwise
    from scriptmod.runtime.native import plan_blocks
    g = fuse_elementwise(parse('''graph(%x : Float(4, 8), %w : Float(3, 8)):
      %t : Float(8, 3) = sm::transpose[dim0=0, dim1=1](%w)
      %y : Float(4, 3) = sm::matmul(%x, %t)
      %r : Float(4, 3) = sm::relu(%y)
      %s : Float(4) = sm::sum[dim=[1]](%r)
      return (%s)
    '''))
    plan, = plan_blocks(g, None).values()
    assert set(plan.why) == set(g.nodes)
    got = {n.kind.split("::")[1]: w for n, w in plan.why.items()}
    assert got["matmul"] == "segment 0: matmul (gemm 4x3x8, float32)"
    assert got["FusionGroup"] == "segment 0: fusion group as an elementwise kernel (12 elements)"
    assert got["sum"] == "sum has no native lowering yet"
    assert got["transpose"] == ("native: transpose as a view (offset and strides over its "
                                "input, no code)")
