"""scriptmod.profiler: compiled forward and backward nodes, eager ops and user ranges as
events with their source lines; torch's table; a Chrome trace that loads; and nothing at all
(no event, no profiled program, the fast path kept) while no profiler runs."""
from __future__ import annotations

import inspect
import json
import os
import re

import numpy as np
import pytest

import scriptmod as sm
import scriptmod.nn as nn
import scriptmod.nn.functional as F
from scriptmod import _dispatch
from scriptmod.profiler import (EventList, ProfilerActivity, profile, record_function,
                                supported_activities)
from scriptmod.runtime import profiling

HERE = os.path.basename(__file__)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(h), dim=-1)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 6 * 6, 5)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = F.relu(self.conv(x))
        h = h.reshape(h.shape[0], -1)
        return F.softmax(self.fc(h), dim=-1)


def line_of(fn, text: str) -> str:
    """``file:line`` of the first line of ``fn``'s source containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    k = next(i for i, ln in enumerate(lines) if text in ln)
    return f"{HERE}:{first + k}"


def by_category(events, cat: str) -> list:
    return [e for e in events if e.category == cat]


def executable_of(traced):
    (spec,) = traced._executors["forward"].specs.values()
    return spec.executable


@pytest.fixture
def mlp():
    sm.manual_seed(0)
    x = sm.randn(16, 32)
    model = MLP().eval()
    return model, sm.jit.trace(model, x), x


def test_traced_mlp_records_gemms_fusion_group_and_reduction_at_their_lines(mlp) -> None:
    model, traced, x = mlp
    with sm.no_grad():
        expected = traced(x).numpy()
        with profile(record_shapes=True) as prof:
            y = traced(x)
    np.testing.assert_array_equal(y.numpy(), expected)          # the same kernels, same numbers
    np.testing.assert_allclose(y.numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    events = prof.events()
    fc1, fc2 = line_of(MLP.forward, "self.fc1"), line_of(MLP.forward, "self.fc2")
    gemms = by_category(events, profiling.GEMM)
    assert [(e.name, e.source, e.input_shapes) for e in gemms] == [
        ("sm::matmul", fc1, [[16, 32], [32, 64]]), ("sm::matmul", fc2, [[16, 64], [64, 10]])]
    (group,) = by_category(events, profiling.FUSION)
    assert (group.name, group.source) == ("FusionGroup(add, relu)", fc1)
    assert group.kernel.startswith("sm_ew_")
    (red,) = by_category(events, profiling.REDUCTION)
    assert "log_softmax" in red.name and red.source == fc2 and red.kernel.startswith("sm_row_")
    (call,) = [e for e in events if e.category == profiling.CALL]
    assert call.name == "MLP.forward"
    assert set(call.cpu_children) >= set(gemms + [group, red])      # nested in the call
    assert all(e.cpu_time_total >= 0 and e.self_cpu_time_total >= 0 for e in events)


def test_conv_net_records_its_nodes_with_source_lines() -> None:
    sm.manual_seed(1)
    x = sm.randn(2, 3, 6, 6)
    model = ConvNet().eval()
    traced = sm.jit.trace(model, x)
    with sm.no_grad(), profile() as prof:
        y = traced(x)
    np.testing.assert_allclose(y.numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    conv, fc = line_of(ConvNet.forward, "self.conv"), line_of(ConvNet.forward, "self.fc")
    found = {(e.category, e.name, e.source) for e in prof.events()}
    # our convolution with the ReLU group as its epilogue: one event, at the conv's line
    assert (profiling.GEMM, "sm::conv2d + FusionGroup(relu)", conv) in found, found
    assert (profiling.GEMM, "sm::matmul", fc) in found
    assert any(cat == profiling.REDUCTION and "softmax" in name and src == fc
               for cat, name, src in found)


def test_backward_under_the_profiler_records_the_compiled_backward(mlp) -> None:
    _, traced, x = mlp
    traced.train()

    def grads() -> list:
        traced.zero_grad()
        traced(x).sum().backward()
        return [p.grad.numpy().copy() for p in traced.parameters()]
    want = grads()
    with profile() as prof:
        got = grads()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    events = prof.events()
    (bwd,) = [e for e in events if e.name == "MLP.forward.backward"]
    assert bwd.category == profiling.CALL
    inner = {(e.category, e.source) for e in bwd.cpu_children}
    assert (profiling.GEMM, line_of(MLP.forward, "self.fc2")) in inner
    assert (profiling.GEMM, line_of(MLP.forward, "self.fc1")) in inner
    forward = [e for e in events if e.name == "MLP.forward"]
    assert len(forward) == 1 and forward[0].start_us < bwd.start_us


def test_table_has_torchs_columns_and_sorted_rows(mlp) -> None:
    _, traced, x = mlp
    with sm.no_grad(), profile(record_shapes=True) as prof:
        for _ in range(3):
            traced(x)
    averages = prof.key_averages()
    assert isinstance(averages, EventList)
    gemm_rows = [a for a in averages if a.key == "sm::matmul"]
    assert len(gemm_rows) == 2 and all(a.count == 3 for a in gemm_rows)   # one per line
    table = averages.table(sort_by="self_cpu_time_total", row_limit=4)
    lines = table.splitlines()
    header = re.split(r"\s{2,}", lines[1].strip())
    torch_columns = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total",
                     "CPU time avg", "# of Calls"]
    assert header == torch_columns + ["Source Location"]
    assert set(lines[0]) == {"-", " "} and lines[0] == lines[2]
    rows = lines[3:lines.index(lines[0], 3)]
    assert len(rows) == 4
    want = sorted(averages, key=lambda a: a.self_cpu_time_total, reverse=True)[:4]
    assert [re.split(r"\s{2,}", r.strip())[0] for r in rows] == [a.key for a in want]
    assert lines[-1].startswith("Self CPU time total: ")
    grouped = prof.key_averages(group_by_input_shape=True)
    header = re.split(r"\s{2,}", grouped.table().splitlines()[1].strip())
    assert header == torch_columns + ["Input Shapes", "Source Location"]
    assert {str(a.input_shapes) for a in grouped if a.key == "sm::matmul"} == \
        {"[[16, 32], [32, 64]]", "[[16, 64], [64, 10]]"}
    with pytest.raises(ValueError, match="sort_by"):
        averages.table(sort_by="flops")


def test_table_equals_torchs_table_of_the_same_events() -> None:
    """torch's own table code, fed our events' names and times, prints the same text."""
    pytest.importorskip("torch")
    from torch.autograd.profiler_util import EventList as TorchEvents, FunctionEvent
    with profile() as prof:
        with record_function("step"):
            y = sm.ones(3, 4) + 1
            (y * y).sum()
    ours = prof.events()
    theirs = TorchEvents([FunctionEvent(id=i, name=e.name, thread=0, start_us=e.start_us,
                                        end_us=e.end_us, stack=[])
                          for i, e in enumerate(ours)])
    theirs._build_tree()
    for sort_by in ("cpu_time_total", "self_cpu_time_total", "count"):
        assert ours.key_averages().table(sort_by=sort_by, row_limit=3) == \
            theirs.key_averages().table(sort_by=sort_by, row_limit=3)


def test_chrome_trace_loads_with_well_formed_nested_events(mlp, tmp_path) -> None:
    _, traced, x = mlp
    with sm.no_grad(), profile(record_shapes=True) as prof:
        with record_function("inference"):
            traced(x)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert len(complete) == len(prof.events()) and meta
    for e in complete:
        assert set(e) >= {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"}
        assert isinstance(e["name"], str) and isinstance(e["args"], dict)
        assert all(isinstance(e[k], int) for k in ("pid", "tid"))
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["ts"] >= 0 and e["dur"] >= 0
    (outer,) = [e for e in complete if e["name"] == "inference"]
    assert outer["cat"] == profiling.USER
    for e in complete:
        assert outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1e-6
    gemm = next(e for e in complete if e["cat"] == profiling.GEMM)
    assert gemm["args"]["Source Location"] == line_of(MLP.forward, "self.fc1")
    assert gemm["args"]["Input Dims"] == [[16, 32], [32, 64]] and gemm["args"]["kernel"]


def test_eager_ops_are_recorded_with_shapes_and_user_lines() -> None:
    model = MLP()
    x = sm.randn(4, 32)
    with profile(record_shapes=True, with_stack=True) as prof:
        out = model(x)
        out.sum().backward()
    events = prof.events()
    ops = by_category(events, profiling.OP)
    assert ops and all(e.name.startswith("sm::") for e in ops)
    fc1 = [e for e in ops if e.source == line_of(MLP.forward, "self.fc1")]
    assert fc1 and any(e.input_shapes[:1] == [[4, 32]] for e in fc1)
    assert any(e.source is not None and e.source.startswith(HERE) and e.name == "sm::sum"
               for e in ops)


def test_nothing_is_recorded_outside_the_context(mlp) -> None:
    _, traced, x = mlp
    with sm.no_grad():
        traced(x)
        with profile() as prof:
            traced(x)
        traced(x)
        sm.ones(2) + 1
    assert profiling.ACTIVE == []
    assert [e.name for e in prof.events() if e.category == profiling.CALL] == ["MLP.forward"]
    assert not by_category(prof.events(), profiling.OP)


def test_inactive_profiler_takes_no_profiled_path(mlp, monkeypatch) -> None:
    _, traced, x = mlp
    executor, ex = traced._executors["forward"], executable_of(traced)

    def never(*args, **kwargs):
        raise AssertionError("a profiling hook ran while no profiler was active")
    monkeypatch.setattr(_dispatch, "_op_event", never)
    monkeypatch.setattr(profiling, "emit", never)
    with sm.no_grad():
        for _ in range(3):
            traced(x)
        sm.ones(3) * 2                                    # eager ops too
    assert ex._profiled is None                          # never built
    assert executor.fast is not None                     # the plain fast path is installed
    monkeypatch.undo()
    with sm.no_grad():
        with profile():
            traced(x)
            assert executor.fast is None                 # calls take the full path
        traced(x)
    assert ex._profiled is not None and executor.fast is not None    # reinstalled


def test_record_function_ranges_nest_and_are_free_when_inactive() -> None:
    @record_function("decorated")
    def work() -> sm.Tensor:
        return sm.ones(2) * 3

    work()                                           # no profiler: no event, no error
    with profile() as prof:
        with record_function("outer", args="batch 0"):
            work()
    names = [e.name for e in prof.events()]
    assert names[:2] == ["outer", "decorated"]
    outer, decorated = prof.events()[:2]
    assert decorated.cpu_parent is outer and outer.args == {"args": "batch 0"}
    assert outer.self_cpu_time_total <= outer.cpu_time_total
    with pytest.raises(TypeError, match="name"):
        record_function(3)


def test_start_stop_and_bad_arguments(mlp) -> None:
    _, traced, x = mlp
    prof = profile(activities=[ProfilerActivity.CPU])
    prof.start()
    with pytest.raises(RuntimeError, match="already running"):
        profile().start()
    with pytest.raises(RuntimeError, match="no results yet"):
        prof.events()
    with sm.no_grad():
        traced(x)
    prof.stop()
    assert any(e.name == "MLP.forward" for e in prof.events())
    with pytest.raises(RuntimeError, match="not running"):
        prof.stop()
    with pytest.raises(TypeError, match="activities"):
        profile(activities=["cpu"])
    with pytest.raises(ValueError, match="ProfilerActivity.CPU"):
        profile(activities=[])
    if ProfilerActivity.CUDA not in supported_activities():
        with pytest.raises(ValueError, match="CUDA"):
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    with pytest.raises(NotImplementedError, match="schedule"):
        profile(schedule=lambda step: None)
    with pytest.raises(NotImplementedError, match="profile_memory"):
        profile(profile_memory=True)
    with pytest.raises(TypeError, match="record_shapes"):
        profile(record_shapes="yes")
    with pytest.raises(ValueError, match="record_shapes"):
        prof.key_averages(group_by_input_shape=True)
    with pytest.raises(TypeError, match="path"):
        prof.export_chrome_trace(3)


def test_on_trace_ready_gets_the_stopped_profiler(tmp_path) -> None:
    seen = []
    with profile(on_trace_ready=lambda p: seen.append(len(p.events()))):
        sm.ones(2) + 1
    assert seen and seen[0] >= 1


class Scale(nn.Module):
    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return F.relu(x * 2.0 + 1.0)


def test_a_group_split_across_threads_is_a_fusion_group_event() -> None:
    threads = sm.get_num_threads()
    sm.set_num_threads(2)
    try:
        x = sm.randn(512, 1024)                      # MIN_SPLIT elements: the thread pool
        traced = sm.jit.trace(Scale(), x)
        with sm.no_grad(), profile() as prof:
            y = traced(x)
    finally:
        sm.set_num_threads(threads)
    np.testing.assert_allclose(y.numpy(), np.maximum(x.numpy() * 2 + 1, 0), rtol=1e-6)
    (group,) = by_category(prof.events(), profiling.FUSION)
    assert group.args["runs"] == "thread pool" and group.name == "FusionGroup(mul, add, relu)"
    assert group.source == line_of(Scale.forward, "relu")


def test_cuda_activity_waits_for_the_device_before_each_event(monkeypatch) -> None:
    import scriptmod.profiler as P
    waits: list[int] = []
    monkeypatch.setattr(P, "cuda_available", lambda: True)
    monkeypatch.setattr(P, "_cuda_sync", lambda: waits.append(1))
    assert ProfilerActivity.CUDA in supported_activities()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sm.ones(2) + 1
    assert len(waits) == len(prof.events()) >= 2
