"""``scriptmod.profiler``: where the time of a model goes, in ``torch.profiler``'s shape.

Under ``profile()`` every node of a compiled forward and backward is an event: each fusion
group's native kernel, each GEMM (a BLAS call or an inline loop), each row reduction
(softmax, layer_norm, sums), other native kernels, and the nodes that run in Python, each
with its source line, input shapes and kernel name. Eager ops are events too, and so are the
ranges a user opens with ``record_function``.

    >>> import scriptmod as sm
    >>> from scriptmod import nn
    >>> x = sm.ones(4, 8)
    >>> model = sm.jit.trace(nn.Sequential(nn.Linear(8, 16), nn.ReLU()).eval(), x)
    >>> with sm.no_grad(), profile(record_shapes=True) as prof:
    ...     with record_function("inference"):
    ...         y = model(x)
    >>> [e.name for e in prof.events()]       # the first call builds the profiled program
    ['inference', 'Sequential.forward: build the profiled program', 'Sequential.forward',
     'sm::matmul', 'FusionGroup(add, relu)']
    >>> e = prof.events()[3]; e.category, e.input_shapes, e.kernel
    ('gemm', [[4, 8], [8, 16]], 'inline gemm')
    >>> print(prof.key_averages().table(sort_by="cpu_time_total"))  # doctest: +SKIP

How the compiled kernels are timed: a specialization normally runs as one generated Python
function whose native parts are single machine-code calls (``runtime.executable``). Under a
profiler it runs its *profiled program* instead: the same steps, every native step compiled
as a function of its own (the same kernel code, the same arena) and called between two
clock reads. Outside a profiler nothing changes: the profiled program is built on the first
call under a profiler, and starting one makes the installed fast paths step aside (they are
not installed again until it stops). Each event's time includes a clock read and, for a
native step, one ctypes call (about a microsecond).

Compiling a new specialization under a profiler is a ``compile`` event too, named with
its cause as the ``recompiles`` log gives it (``Linear.forward: specialize (argument
'input': size 6 at dim 0, was 5)``; its ``args`` hold the reason and whether the
specialization is concrete or symbolic).

Limits: no schedules, memory or FLOP counts; ``ProfilerActivity.CUDA`` (accepted where a
CUDA device is) synchronizes the device after each event, so an event's time covers its
kernels, on the host's timeline; the eager autograd engine's backward nodes are not events.
"""
from __future__ import annotations

import contextlib
import enum
import json
import os
import threading
import time
from typing import Any, Callable, Iterable, Sequence

from scriptmod.nn import _module_hooks
from scriptmod.runtime import profiling
from scriptmod.runtime.arrays import cuda_available

__all__ = ["ProfilerActivity", "profile", "record_function", "supported_activities",
           "FunctionEvent", "FunctionEventAvg", "EventList"]


class ProfilerActivity(enum.Enum):
    """What to record: ``CPU`` (host time of every event), ``CUDA`` (device work: each event
    waits for the device before it ends)."""

    CPU = "CPU"
    CUDA = "CUDA"


def supported_activities() -> set[ProfilerActivity]:
    """The activities this machine can record (``CUDA`` only where CuPy sees a device)."""
    return {ProfilerActivity.CPU} | ({ProfilerActivity.CUDA} if cuda_available() else set())


# ---- events ----------------------------------------------------------------------------------

class FunctionEvent:
    """One recorded event: times in microseconds, ``source`` the user's ``file:line``,
    ``input_shapes`` (with ``record_shapes``), ``args`` (kernel name, GEMM sizes, ...)."""

    count = 1

    def __init__(self, row: tuple, t0: int) -> None:
        name, cat, start, end, thread, source, shapes, args = row
        self.name, self.category, self.thread, self.source = name, cat, thread, source
        self._start, self._end = start - t0, end - t0          # ns from the profiler's start
        self.input_shapes = shapes if shapes is not None else []
        self.args = args or {}
        self.cpu_parent: FunctionEvent | None = None
        self.cpu_children: list[FunctionEvent] = []

    key = property(lambda self: self.name)
    kernel = property(lambda self: self.args.get("kernel"))
    start_us = property(lambda self: self._start / 1e3)
    end_us = property(lambda self: self._end / 1e3)

    @property
    def cpu_time_total(self) -> float:
        return (self._end - self._start) / 1e3

    cpu_time = cpu_time_total

    @property
    def self_cpu_time_total(self) -> float:
        """Its time less its children's (events nested in it on its thread)."""
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    def __repr__(self) -> str:
        where = f" at {self.source}" if self.source else ""
        return f"<FunctionEvent {self.name}{where}: {self.category}, " \
               f"{self.cpu_time_total:.3f}us>"


class FunctionEventAvg:
    """The events of one key (name and source; input shapes when grouped by them)."""

    def __init__(self, first: FunctionEvent, by_shape: bool) -> None:
        self.key, self.category, self.source = first.name, first.category, first.source
        self.input_shapes = first.input_shapes if by_shape else []
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0

    def add(self, e: "FunctionEvent | FunctionEventAvg") -> None:
        self.count += e.count
        self.cpu_time_total += e.cpu_time_total
        self.self_cpu_time_total += e.self_cpu_time_total

    name = property(lambda self: self.key)

    @property
    def cpu_time(self) -> float:
        """Average time per call."""
        return self.cpu_time_total / self.count

    def __repr__(self) -> str:
        return f"<FunctionEventAvg {self.key}: {self.count} call(s), " \
               f"{self.cpu_time_total:.3f}us>"


_SORT_KEYS = ("cpu_time", "cpu_time_total", "self_cpu_time_total", "count")


class EventList(list):
    """Events (``profile.events()``) or their averages (``key_averages()``)."""

    def key_averages(self, group_by_input_shape: bool = False,
                     group_by_source: bool = True) -> "EventList":
        """One row per event name (and source line, unless ``group_by_source=False``: a
        fusion group's kernel at two lines of a model are two kernels; and input shapes
        with ``group_by_input_shape``), in order of first occurrence."""
        rows: dict[tuple, FunctionEventAvg] = {}
        for e in self:
            key = (e.name, e.source if group_by_source else None,
                   str(e.input_shapes) if group_by_input_shape else None)
            avg = rows.get(key)
            if avg is None:
                avg = rows[key] = FunctionEventAvg(e, group_by_input_shape)
                if not group_by_source:
                    avg.source = None
            avg.add(e)
        return EventList(rows.values())

    def total_average(self) -> FunctionEventAvg | None:
        """All the events as one row (None for an empty list)."""
        if not self:
            return None
        total = FunctionEventAvg(self[0], False)
        total.key, total.source = "Total", None
        for e in self:
            total.add(e)
        return total

    def table(self, sort_by: str | None = None, row_limit: int = 100,
              max_name_column_width: int = 55, header: str | None = None,
              top_level_events_only: bool = False) -> str:
        """torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg,
        # of Calls, then Input Shapes (rows grouped by them) and Source Location (rows with
        a source line). ``sort_by``: one of ``cpu_time``, ``cpu_time_total``,
        ``self_cpu_time_total``, ``count`` (largest first); None keeps the order."""
        return _table(self, sort_by, row_limit, max_name_column_width, header,
                      top_level_events_only)

    def export_chrome_trace(self, path: str | os.PathLike, base_ns: int = 0) -> None:
        """Write the events as a Chrome trace (chrome://tracing, Perfetto)."""
        _write_trace(self, path, base_ns)


# ---- the profiler ----------------------------------------------------------------------------

class profile:
    """Record what runs between ``start()`` and ``stop()`` (or in a ``with`` block).

    ``activities``: ``ProfilerActivity`` values (default: ``supported_activities()``);
    ``record_shapes``: keep each event's input shapes; ``with_stack``: give eager ops the
    user's source line too (compiled nodes always carry theirs); ``on_trace_ready``: called
    with the profiler when it stops. ``schedule``, ``profile_memory``, ``with_flops`` and
    ``with_modules`` are not supported: anything but their defaults raises.
    """

    def __init__(self, activities: Iterable[ProfilerActivity] | None = None,
                 schedule: Callable[[int], Any] | None = None,
                 on_trace_ready: Callable[["profile"], Any] | None = None,
                 record_shapes: bool = False, profile_memory: bool = False,
                 with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False) -> None:
        self.activities = _activities(activities)
        for name, value in (("schedule", schedule is not None), ("profile_memory", profile_memory),
                            ("with_flops", with_flops), ("with_modules", with_modules)):
            if value:
                raise NotImplementedError(f"profile({name}=...): not supported by "
                                          f"scriptmod.profiler; leave it at its default")
        for name, flag in (("record_shapes", record_shapes), ("with_stack", with_stack)):
            if type(flag) is not bool:
                raise TypeError(f"profile({name}=...): expected a bool, got "
                                f"{type(flag).__name__}")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"profile(on_trace_ready=...): expected a callable, got "
                            f"{type(on_trace_ready).__name__}")
        self.record_shapes, self.with_stack = record_shapes, with_stack
        self.on_trace_ready = on_trace_ready
        self._recorder: profiling.Recorder | None = None
        self._events: EventList | None = None
        self._t0 = self._base_ns = 0

    def start(self) -> None:
        if profiling.ACTIVE:
            raise RuntimeError("profile.start(): another profiler is already running; "
                               "stop it first")
        stack = _user_source if self.with_stack else None
        sync = _cuda_sync if ProfilerActivity.CUDA in self.activities else None
        self._recorder = profiling.Recorder(self.record_shapes, stack, sync)
        self._events = None
        # installed fast paths compare this counter on every call: they step aside, and
        # calls take the full path, which runs the profiled program
        _module_hooks.HOOK_VERSION[0] += 1
        self._base_ns, self._t0 = time.time_ns(), profiling.clock()
        profiling.ACTIVE.append(self._recorder)

    def stop(self) -> None:
        rec = self._recorder
        if rec is None or rec not in profiling.ACTIVE:
            raise RuntimeError("profile.stop(): the profiler is not running")
        profiling.ACTIVE.remove(rec)
        self._events = _events(rec.rows, self._t0)
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def step(self) -> None:
        """torch's schedule step; without a schedule there is nothing to advance."""

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def events(self) -> EventList:
        """Every event, in order of start (each knows its parent and children)."""
        if self._events is None:
            raise RuntimeError("profile.events(): no results yet; they are ready once the "
                               "profiler stops (the end of its `with` block)")
        return self._events

    def key_averages(self, group_by_input_shape: bool = False,
                     group_by_source: bool = True) -> EventList:
        """``events().key_averages(...)``; grouping by input shapes needs
        ``record_shapes=True``."""
        if group_by_input_shape and not self.record_shapes:
            raise ValueError("profile.key_averages(group_by_input_shape=True): the profiler "
                             "was made with record_shapes=False, so no shapes were recorded")
        return self.events().key_averages(group_by_input_shape, group_by_source)

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write a Chrome trace-event JSON file (open it in Perfetto or chrome://tracing):
        one complete (``"ph": "X"``) event per event, ``ts``/``dur`` in microseconds from
        the profiler's start, ``args`` with the source line, input shapes and kernel."""
        self.events().export_chrome_trace(path, self._base_ns)


class record_function(contextlib.ContextDecorator):
    """A named range of the user's own (a context manager or a decorator): an event under
    a running profiler, nothing otherwise.

        >>> with profile() as prof, record_function("load batch"):
        ...     pass
        >>> [(e.name, e.category) for e in prof.events()]
        [('load batch', 'user_annotation')]
    """

    def __init__(self, name: str, args: str | None = None) -> None:
        if not isinstance(name, str):
            raise TypeError(f"record_function(name=...): expected a str, got "
                            f"{type(name).__name__}")
        if args is not None and not isinstance(args, str):
            raise TypeError(f"record_function(args=...): expected a str or None, got "
                            f"{type(args).__name__}")
        self.name, self.args = name, args
        self._local = threading.local()      # open ranges per thread (a decorator recurses)

    def __enter__(self) -> "record_function":
        starts = self._local.__dict__.setdefault("starts", [])
        starts.append(profiling.clock() if profiling.ACTIVE else 0)
        return self

    def __exit__(self, *exc: Any) -> None:
        start = self._local.starts.pop()
        if start and profiling.ACTIVE:
            rec = profiling.ACTIVE[-1]
            profiling.emit(self.name, profiling.USER, start, rec.stack() if rec.stack else None,
                           None, {"args": self.args} if self.args is not None else None)


# ---- helpers ---------------------------------------------------------------------------------

def _activities(given: Iterable[ProfilerActivity] | None) -> set[ProfilerActivity]:
    if given is None:
        return supported_activities()
    try:
        acts = set(given)
    except TypeError:
        raise TypeError(f"profile(activities=...): expected an iterable of ProfilerActivity, "
                        f"got {type(given).__name__}") from None
    for a in acts:
        if not isinstance(a, ProfilerActivity):
            raise TypeError(f"profile(activities=...): expected ProfilerActivity values, got "
                            f"{a!r}")
    if ProfilerActivity.CPU not in acts:
        raise ValueError("profile(activities=...): ProfilerActivity.CPU is required (every "
                         f"event is timed on the host), got {sorted(a.name for a in acts)}")
    missing = acts - supported_activities()
    if missing:
        raise ValueError(f"profile(activities=...): {sorted(a.name for a in missing)} cannot "
                         f"be recorded here (no CUDA device); supported_activities() is "
                         f"{sorted(a.name for a in supported_activities())}")
    return acts


def _user_source() -> str | None:
    from scriptmod.jit._tracer import user_source
    return user_source()


def _cuda_sync() -> None:
    from scriptmod.runtime.arrays import cupy
    assert cupy is not None
    cupy.cuda.get_current_stream().synchronize()


def _events(rows: Sequence[tuple], t0: int) -> EventList:
    """The rows as events in order of start, each nested in the innermost event of its
    thread that holds it."""
    events = sorted((FunctionEvent(r, t0) for r in rows), key=lambda e: (e._start, -e._end))
    open_: dict[int, list[FunctionEvent]] = {}
    for e in events:
        stack = open_.setdefault(e.thread, [])
        while stack and e._end > stack[-1]._end:
            stack.pop()
        if stack:
            e.cpu_parent = stack[-1]
            stack[-1].cpu_children.append(e)
        stack.append(e)
    return EventList(events)


def _format_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _share(us: float, total: float) -> str:
    return f"{us * 100.0 / total:.2f}%" if total else "NaN"


def _table(rows: EventList, sort_by: str | None, row_limit: int, max_name: int,
           header: str | None, top_level_only: bool) -> str:
    if sort_by is not None and sort_by not in _SORT_KEYS:
        raise ValueError(f"table(sort_by=...): expected one of {list(_SORT_KEYS)} or None, "
                         f"got {sort_by!r}")
    if type(row_limit) is not int:
        raise TypeError(f"table(row_limit=...): expected an int, got {type(row_limit).__name__}")
    every = list(rows)
    if top_level_only:
        every = [e for e in every if getattr(e, "cpu_parent", None) is None]
    total = sum(e.self_cpu_time_total for e in every)
    shown = sorted(every, key=lambda e: getattr(e, sort_by), reverse=True) if sort_by else every
    if row_limit > 0:
        shown = shown[:row_limit]
    cols = [("Name", max(4, min(max_name, max((len(e.key) for e in every), default=0) + 4)))]
    cols += [(h, 12) for h in ("Self CPU %", "Self CPU", "CPU total %", "CPU total",
                               "CPU time avg", "# of Calls")]
    shapes = any(e.input_shapes for e in every)
    sources = any(e.source for e in every)
    if shapes:
        cols.append(("Input Shapes", min(80, max(len(str(e.input_shapes)) for e in every) + 4)))
    if sources:
        cols.append(("Source Location", min(80, max(len(e.source or "") for e in every) + 4)))
    cols = [(h, max(w, len(h))) for h, w in cols]

    def line(cells: Sequence[str]) -> str:
        return "".join(f"{c:>{w}}  " for c, (_, w) in zip(cells, cols))
    rule = "".join("-" * w + "  " for _, w in cols)
    out = ([header] if header else []) + [rule, line([h for h, _ in cols]), rule]
    for e in shown:
        name = e.key if len(e.key) <= cols[0][1] else e.key[:cols[0][1] - 3] + "..."
        cells = [name, _share(e.self_cpu_time_total, total), _format_time(e.self_cpu_time_total),
                 _share(e.cpu_time_total, total), _format_time(e.cpu_time_total),
                 _format_time(e.cpu_time), str(e.count)]
        if shapes:
            cells.append(str(e.input_shapes))
        if sources:
            cells.append(e.source or "")
        out.append(line(cells))
    out += [rule, f"Self CPU time total: {_format_time(total)}", ""]
    return "\n".join(out)


def _write_trace(events: EventList, path: str | os.PathLike, base_ns: int) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"export_chrome_trace(path=...): expected a str or os.PathLike, got "
                        f"{type(path).__name__}")
    pid = os.getpid()
    trace: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
                          "args": {"name": "python (scriptmod)"}}]
    names = {t.native_id: t.name for t in threading.enumerate()}
    for tid in sorted({e.thread for e in events}):
        trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
                      "args": {"name": f"thread {tid} ({names.get(tid, 'python')})"}})
    for e in events:
        args = dict(e.args)
        if e.source:
            args["Source Location"] = e.source
        if e.input_shapes:
            args["Input Dims"] = e.input_shapes
        trace.append({"ph": "X", "cat": e.category, "name": e.name, "pid": pid,
                      "tid": e.thread, "ts": e.start_us, "dur": e.cpu_time_total,
                      "args": args})
    doc = {"schemaVersion": 1, "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns,
           "traceEvents": trace}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
