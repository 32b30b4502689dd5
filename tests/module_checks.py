"""Suite-wide property checks on every module a test compiles (a pytest plugin).

While a test runs, every ScriptModule that ``scriptmod.jit.trace`` / ``trace_module`` /
``script`` / ``freeze`` / ``optimize_for_inference`` returns is recorded with example inputs:
trace's example inputs, or for a scripted (or frozen, unless its source was recorded) module
the arguments of its first call that returned. When the test has passed, after its fixtures
are torn down, the first ``MAX_PER_TEST`` of them are checked on those inputs against what the
module itself returns now:

- ``save/load``: ``jit.save`` then ``jit.load`` gives a module with the same outputs;
- ``exec .code``: ``exec(module.code, jit.code_namespace(module))`` defines a function that,
  called with the module as ``self``, gives the same outputs.

A failed check fails the test (an error at its teardown) naming the check, the module, where
the test made it and why. ``SCRIPTMOD_SUITE_CHECKS=0`` turns the plugin off.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

from scriptmod._dispatch import TRACERS

ENV = "SCRIPTMOD_SUITE_CHECKS"
MARKER = "no_suite_checks"
# the checks cost about one save, one load and two more calls per module: the first few
# modules of a test cover its shapes (measured on tests/scriptmod/jit: see the commit)
MAX_PER_TEST = 3
_HERE = os.path.dirname(os.path.abspath(__file__))


class SuiteCheckError(AssertionError):
    """A suite-wide check failed on a module the test compiled."""


@dataclass
class Recorded:
    module: Any
    kind: str                          # "traced", "scripted", "frozen", ...
    where: str                         # the test's file:line that made it
    args: tuple | None = None          # cloned example arguments; None until known
    kwargs: dict = field(default_factory=dict)
    versions: list[tuple[int, int]] = field(default_factory=list)   # its tensors, when made


class Recorder:
    """The modules the running test made, in order; ``waiting`` maps id(module) -> its
    record while its example arguments are still unknown (caught at its first call)."""

    def __init__(self) -> None:
        self.active = False
        self.records: list[Recorded] = []
        self.waiting: dict[int, Recorded] = {}

    def start(self) -> None:
        self.active, self.records, self.waiting = True, [], {}

    def stop(self) -> list[Recorded]:
        records, self.active, self.records, self.waiting = self.records, False, [], {}
        return records

    def add(self, module: Any, kind: str, args: tuple | None, kwargs: dict | None = None) -> None:
        if not self.active or len(self.records) >= MAX_PER_TEST or not _checkable(module):
            return
        rec = Recorded(module, kind, _caller(), versions=_versions(module))
        if args is not None:
            rec.args, rec.kwargs = _clone(tuple(args)), _clone(dict(kwargs or {}))
        else:
            self.waiting[id(module)] = rec
        self.records.append(rec)

    def inputs_of(self, module: Any) -> tuple[tuple, dict] | None:
        for rec in self.records:
            if rec.module is module and rec.args is not None:
                return rec.args, rec.kwargs
        return None

    def called(self, module: Any, args: tuple, kwargs: dict) -> None:
        rec = self.waiting.pop(id(module), None)
        if rec is not None and rec.module is module:
            rec.args, rec.kwargs = _clone(args), _clone(kwargs)


RECORDER = Recorder()


def _versions(module: Any) -> list[tuple[int, int]]:
    """Which tensors a module holds, and their version counters (an in-place edit bumps
    one; ``.double()`` or an assignment replaces one)."""
    from scriptmod.nn import Module
    if not isinstance(module, Module):
        return []
    return [(id(t), t._vc[0]) for t in (*module.parameters(), *module.buffers())]


def _edited_in_place(rec: Recorded) -> bool:
    """A tensor the module held when it was made has another version now (one it holds in
    its place, after ``.double()`` or an assignment, is not an edit)."""
    was = dict(rec.versions)
    return any(i in was and was[i] != v for i, v in _versions(rec.module))


def _checkable(module: Any) -> bool:
    from scriptmod.jit import ScriptFunction, ScriptModule
    return isinstance(module, (ScriptModule, ScriptFunction))


def _caller() -> str:
    """The innermost frame in a test file (not this plugin): where the test made the module."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(_HERE + os.sep) and path != os.path.abspath(__file__):
            return f"{os.path.relpath(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _clone(value: Any) -> Any:
    from scriptmod import Tensor
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_clone(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


# ---- recording: the public builders, and a ScriptModule's first call -----------------------

def _traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def trace(func: Any, example_inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        out = fn(func, example_inputs, *args, **kwargs)
        kw = kwargs.get("example_kwarg_inputs")
        if kw is not None and example_inputs is None:
            RECORDER.add(out, "traced", (), kw)
        else:
            ex = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
            RECORDER.add(out, "traced", ex)
        return out
    return trace


def _traced_module(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def trace_module(mod: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(mod, inputs, *args, **kwargs)
        ex = inputs.get("forward") if isinstance(inputs, dict) else None
        if ex is not None and not kwargs.get("example_inputs_is_kwarg"):
            RECORDER.add(out, "traced", ex if isinstance(ex, tuple) else (ex,))
        return out
    return trace_module


def _scripted(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def script(obj: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(obj, *args, **kwargs)
        if out is not obj:                  # script() of a ScriptModule returns it
            RECORDER.add(out, "scripted", None)
        return out
    return script


def _frozen(fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def freeze(mod: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(mod, *args, **kwargs)
        known = RECORDER.inputs_of(mod)
        RECORDER.add(out, kind, None if known is None else known[0],
                     None if known is None else known[1])
        return out
    return freeze


def _first_call(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not RECORDER.waiting or id(self) not in RECORDER.waiting or TRACERS:
            return call(self, *args, **kwargs)    # (a copy made while tracing is traced)
        inputs = _clone(args), _clone(kwargs)    # before the call: it may write into them
        out = call(self, *args, **kwargs)
        RECORDER.called(self, *inputs)
        return out
    return __call__


def install() -> None:
    import scriptmod.jit as jit
    from scriptmod.jit import ScriptFunction, ScriptModule
    from scriptmod.nn import _compiler
    jit.trace = _traced(jit.trace)
    jit.trace_module = _traced_module(jit.trace_module)
    jit.script = _scripted(jit.script)
    jit.freeze = _frozen(jit.freeze, "frozen")
    jit.optimize_for_inference = _frozen(jit.optimize_for_inference, "optimized")
    ScriptModule.__call__ = _first_call(ScriptModule.__call__)
    ScriptFunction.__call__ = _first_call(ScriptFunction.__call__)
    # nn reaches jit through its compiler slot (Module.compile): the same trace, recorded
    slot = _compiler.compiler("the suite checks")
    _compiler.register_compiler(dataclasses.replace(slot, trace=jit.trace))


# ---- the checks ----------------------------------------------------------------------------

def _skip_reason(rec: Recorded) -> str | None:
    """Why a check cannot apply to this module (None: it can)."""
    from scriptmod.ir.graph import Prim
    if rec.args is None:
        return "never called with arguments the test let it keep"
    if _edited_in_place(rec):
        # values a frozen module folded from them (per call signature, for scripted layers)
        # and an archive of it legitimately differ. A tensor the test replaced (.double(),
        # an assignment) is checked: the archive holds the graphs typed for it
        return "the test edited the module's tensors in place after making it"
    if any(getattr(t, "device", None) is not None and str(t.device) != "cpu"
           for t in _tensors((rec.args, rec.kwargs))):
        return "CUDA: the checks compare CPU runs"
    for node in _graph(rec.module).walk():
        if node.kind in _RANDOM or (node.kind == "sm::dropout"
                                    and _flag(rec.module, node.inputs[1]) is not False):
            return "random ops: each call draws new numbers"
        if node.kind == Prim.CALL_FUNCTION and node.attrs.get("python"):
            return "calls an @ignore'd Python function: such graphs cannot be saved"
    return None


def _flag(module: Any, v: Any) -> Any:
    """A bool input's value: a constant, or the module attribute it reads (``training``)."""
    from scriptmod.ir.graph import known_value
    from scriptmod.ir.passes.freeze import attribute_path
    path = attribute_path(v)
    if path is None:
        return known_value(v)
    for name in path.split("."):
        module = getattr(module, name, None)
    return module


def _check_skip_reason(rec: Recorded, check: str) -> str | None:
    """Why one check cannot apply to this module (None: it can)."""
    from scriptmod.nn import Module
    mods = list(rec.module.modules()) if isinstance(rec.module, Module) else []
    if any(m._forward_hooks or m._forward_pre_hooks for m in mods):
        # hooks run in Python around a compiled call (torch refuses them): an archive does
        # not keep them, and .code calls a submodule's forward, which skips them
        return "hooks registered on it"
    if check == "exec .code" and any(m.__dict__.get("_in_specs") or m.__dict__.get("_out_specs")
                                     for m in mods + [getattr(rec.module, "_module", None)]
                                     if m is not None):
        # dict/nested-container arguments or a dict/namedtuple result: .code is the
        # graph's function on their leaves (README, differences)
        return "dict/nested arguments or results"
    return None


_RANDOM = {"sm::dropout_mask", "sm::rand", "sm::randn", "sm::randint", "sm::randperm"}


def _graph(module: Any) -> Any:
    from scriptmod.jit import ScriptFunction
    return module.graph if isinstance(module, ScriptFunction) else module.inlined_graph


def _tensors(value: Any) -> list[Any]:
    from scriptmod import Tensor
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


class _State:
    """A module's tensors and plain attributes, to put back between the runs compared (a
    forward may write its buffers or attributes: each run starts from the same state)."""

    def __init__(self, module: Any) -> None:
        from scriptmod.nn import Module
        mods = list(module.modules()) if isinstance(module, Module) else []
        self.tensors = [(t, t._data.copy()) for m in mods for t in
                        (*m._parameters.values(), *m._buffers.values()) if t is not None]
        self.attrs = [(m, k, v) for m in mods for k, v in m.__dict__.items()
                      if isinstance(v, (bool, int, float)) and not k.startswith("_")]

    def restore(self) -> None:
        for t, data in self.tensors:
            if t._data.shape == data.shape:
                t._data[...] = data
        for m, k, v in self.attrs:
            m.__dict__[k] = v


def _run(fn: Callable[..., Any], rec: Recorded) -> Any:
    return fn(*_clone(rec.args), **_clone(rec.kwargs))


def _saved_and_loaded(rec: Recorded) -> Any:
    import scriptmod.jit as jit
    buf = io.BytesIO()
    jit.save(rec.module, buf)
    buf.seek(0)
    return jit.load(buf)


def _code_function(rec: Recorded) -> Callable[..., Any]:
    import scriptmod.jit as jit
    from scriptmod.ir.code import function_name
    from scriptmod.ir.types import ModuleType
    from scriptmod.jit import ScriptFunction
    m = rec.module
    ns = jit.code_namespace(m)
    exec(compile(m.code, f"<{m.original_name}.code>", "exec"), ns)
    fn = ns[function_name(m.name if isinstance(m, ScriptFunction) else m._code_name())]
    inputs = m.graph.inputs
    if inputs and isinstance(inputs[0].type, ModuleType):
        return functools.partial(fn, m)
    return fn


_CHECKS: dict[str, Callable[[Recorded], Callable[..., Any]]] = {
    "save/load": _saved_and_loaded,
    "exec .code": _code_function,
}


COUNTS: dict[str, int] = {}     # "checked" and each skip reason -> modules


def check_module(rec: Recorded) -> list[str]:
    """The failed checks' messages for one recorded module (empty when all hold)."""
    reason = _skip_reason(rec)
    if reason is None:
        state = _State(rec.module)
        try:
            want = _run(rec.module, rec)
        except Exception:
            reason = "fails on its example inputs now (the test changed it or expects that)"
    COUNTS[reason or "checked"] = COUNTS.get(reason or "checked", 0) + 1
    if reason is not None:
        return []
    failures = []
    for name, make in _CHECKS.items():
        why = _check_skip_reason(rec, name)
        if why is not None:
            COUNTS[f"{name}: {why}"] = COUNTS.get(f"{name}: {why}", 0) + 1
            continue
        state.restore()
        try:
            got = _run(make(rec), rec)
            _compare(got, want, "output", _floor(rec))
        except Exception as e:   # noqa: BLE001 - every failure is reported, with its class
            failures.append(f"suite check {name!r} failed for the {rec.kind} module "
                            f"{getattr(rec.module, 'original_name', '?')} made at {rec.where}: "
                            f"{type(e).__name__}: {e}")
    state.restore()
    return failures


def _floor(rec: Recorded) -> float:
    """The tolerance of the least precise floating dtype among the arguments and the
    module's tensors: a float32 computation promoted to a float64 result (a replaced
    float64 buffer) rounds as float32 until the promotion, wherever a kernel places it."""
    from scriptmod.nn import Module
    mine = [t for m in rec.module.modules() for t in (*m._parameters.values(),
                                                      *m._buffers.values()) if t is not None
            ] if isinstance(rec.module, Module) else []
    return max((_TOLERANCE.get(t.dtype.name, 0.0) for t in _tensors((rec.args, rec.kwargs))
                + mine), default=0.0)


def _compare(got: Any, want: Any, where: str, floor: float = 0.0) -> None:
    from scriptmod import Tensor
    if isinstance(want, Tensor):
        if not isinstance(got, Tensor):
            raise SuiteCheckError(f"{where}: expected a Tensor, got {type(got).__name__}")
        if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
            raise SuiteCheckError(f"{where}: expected {want.dtype} {tuple(want.shape)}, got "
                                  f"{got.dtype} {tuple(got.shape)}")
        a, b = got.detach().numpy(), want.detach().numpy()
        if want.is_floating_point():        # bfloat16/float16 arrays compare as float64
            a, b = a.astype(np.float64), b.astype(np.float64)
        tol = max(_TOLERANCE.get(want.dtype.name, 0.0), floor)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True, err_msg=where)
    elif isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            raise SuiteCheckError(f"{where}: expected a {type(want).__name__} of {len(want)}, "
                                  f"got {got!r:.80}")
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(g, w, f"{where}[{i}]", floor)
    elif isinstance(want, dict):
        if not isinstance(got, dict) or list(got) != list(want):
            raise SuiteCheckError(f"{where}: expected keys {list(want)}, got {got!r:.80}")
        for k in want:
            _compare(got[k], want[k], f"{where}[{k!r}]", floor)
    elif isinstance(want, float):
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=where)
    elif got != want:
        raise SuiteCheckError(f"{where}: expected {want!r:.80}, got {got!r:.80}")


# compiled kernels (fused, own GEMM) and eager NumPy round differently
_TOLERANCE = {"float16": 1e-2, "bfloat16": 3e-2, "float32": 1e-4, "float64": 1e-9,
              "complex64": 1e-4, "complex128": 1e-9}


# ---- the pytest side -----------------------------------------------------------------------

_PASSED = pytest.StashKey[bool]()


class SuiteChecks:
    """Registered by tests/conftest.py unless ``SCRIPTMOD_SUITE_CHECKS=0``."""

    def pytest_configure(self, config: pytest.Config) -> None:
        install()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        RECORDER.start()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        if report.when == "call":
            item.stash[_PASSED] = report.passed and not hasattr(report, "wasxfail")
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: Any) -> Any:
        result = yield                     # the test's fixtures are torn down first
        records = RECORDER.stop()
        marked = item.get_closest_marker(MARKER)
        if marked is not None:
            COUNTS[f"marked: {marked.args[0]}"] = COUNTS.get(f"marked: {marked.args[0]}", 0) \
                + len(records)
        elif item.stash.get(_PASSED, False) and records:
            _run_checks(records)
        return result

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if COUNTS:
            skipped = ", ".join(f"{n} {why}" for why, n in COUNTS.items() if why != "checked")
            terminalreporter.write_line(f"suite checks ({ENV}): {COUNTS.get('checked', 0)} "
                                        f"modules saved/loaded and run from .code; not "
                                        f"checked: {skipped or 'none'}")


def _run_checks(records: list[Recorded]) -> None:
    import scriptmod as sm
    failures: list[str] = []
    with warnings.catch_warnings(), sm.no_grad():
        warnings.simplefilter("ignore")
        for rec in records:
            failures += check_module(rec)
    if failures:
        raise SuiteCheckError("\n".join(failures) + f"\n(these checks run on every module a "
                              f"test compiles; {ENV}=0 turns them off)")


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"
