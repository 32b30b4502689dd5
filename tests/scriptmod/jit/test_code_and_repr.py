"""What a traced module shows, next to PyTorch: ``code_with_constants`` gives a ConstMap of
Tensors, a loaded module prints as ``RecursiveScriptModule``, a traced function's code is
``def <name>``, and ``.code`` is valid Python (``getattr(self, "0")``, never ``self.0``)."""
from __future__ import annotations

import ast
import inspect
import io

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn


class Tree(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        self.ml = nn.ModuleList([nn.Linear(3, 3), nn.Tanh()])
        self.md = nn.ModuleDict({"a": nn.Tanh(), "1x": nn.ReLU(), "class": nn.Sigmoid()})

    def forward(self, x):
        h = self.ml[1](self.ml[0](self.seq(x)))
        return self.md["class"](self.md["1x"](self.md["a"](h))) + sm.tensor([1.0, 2.0, 3.0])


def _code_parses(code: str) -> None:
    ast.parse(code)
    assert "self.0" not in code and ".1x" not in code and ".class" not in code


def test_code_with_constants_is_a_constmap_of_tensors():
    code, consts = jit.trace(Tree().eval(), sm.randn(2, 3)).code_with_constants
    assert "CONSTANTS.c0" in code
    assert isinstance(consts.c0, sm.Tensor)
    np.testing.assert_array_equal(consts.c0.numpy(), [1.0, 2.0, 3.0])
    assert consts["c0"] is consts.c0 and list(consts.const_mapping) == ["c0"]
    with pytest.raises(AttributeError, match="no constant 'c9'"):
        consts.c9


def test_torch_constmap_reads_the_same_way():
    torch = pytest.importorskip("torch")

    class T(torch.nn.Module):
        def forward(self, x):
            return x + torch.tensor([1.0, 2.0])

    class S(nn.Module):
        def forward(self, x):
            return x + sm.tensor([1.0, 2.0])

    _, theirs = torch.jit.trace(T(), torch.randn(2)).code_with_constants
    _, ours = jit.trace(S(), sm.randn(2)).code_with_constants
    np.testing.assert_array_equal(ours.c0.numpy(), theirs.c0.numpy())


@pytest.mark.parametrize("model", [
    lambda: nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2)),
    Tree,
], ids=["Sequential", "ModuleList-ModuleDict"])
def test_whole_code_is_valid_python(model):
    traced = jit.trace(model().eval(), sm.randn(2, 3))
    _code_parses(traced.code)
    for _, sub in traced.named_modules():
        if "forward" in sub._methods:          # containers themselves are never called
            _code_parses(sub.code)


def test_sequential_code_reads_like_torch():
    code = jit.trace(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), sm.randn(2, 3)).code
    assert 'getattr(self, "0")' in code and 'getattr(self, "1")' in code
    assert code.startswith("def forward(self, input: Tensor) -> Tensor:")


def test_module_dict_keys_that_are_keywords_or_start_with_digits():
    code = jit.trace(Tree().eval(), sm.randn(2, 3)).code
    assert 'getattr(self.md, "1x")' in code or 'getattr(_' in code
    assert '"class")' in code


def test_traced_function_code_uses_its_name():
    def scale_shift(x):
        return x * 2.0 + 1.0

    traced = jit.trace(scale_shift, sm.randn(3))
    assert traced.code.startswith("def scale_shift(x: Tensor) -> Tensor:")
    assert traced.code_with_constants[0] == traced.code
    lam = jit.trace(lambda x: x * 2.0, sm.randn(3))
    assert lam.code.startswith("def _lambda(x: Tensor) -> Tensor:")       # torch's name


def test_torch_function_code_header():
    torch = pytest.importorskip("torch")

    def scale_shift(x):
        return x * 2.0 + 1.0

    theirs = torch.jit.trace(scale_shift, torch.randn(3)).code.strip().splitlines()[0]
    ours = jit.trace(scale_shift, sm.randn(3)).code.splitlines()[0]
    assert ours == theirs == "def scale_shift(x: Tensor) -> Tensor:"


def _tree(lib):
    """The same tree in torch or scriptmod (no keyword keys: torch cannot save those)."""
    class Tree(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seq = lib.nn.Sequential(lib.nn.Linear(3, 3), lib.nn.ReLU())
            self.ml = lib.nn.ModuleList([lib.nn.Linear(3, 3), lib.nn.Tanh()])
            self.md = lib.nn.ModuleDict({"a": lib.nn.Tanh(), "1x": lib.nn.ReLU()})

        def forward(self, x):
            h = self.ml[1](self.ml[0](self.seq(x)))
            return self.md["1x"](self.md["a"](h))
    return Tree()


def test_traced_and_loaded_reprs_match_torch():
    torch = pytest.importorskip("torch")
    t_traced = torch.jit.trace(_tree(torch).eval(), torch.randn(2, 3))
    buf = io.BytesIO()
    torch.jit.save(t_traced, buf)
    buf.seek(0)
    t_loaded = torch.jit.load(buf)
    traced = jit.trace(_tree(sm).eval(), sm.randn(2, 3))
    ours = io.BytesIO()
    traced.save(ours)
    loaded = jit.load(io.BytesIO(ours.getvalue()))
    assert repr(traced) == repr(t_traced)
    assert repr(loaded) == repr(t_loaded)
    assert repr(loaded).startswith("RecursiveScriptModule(\n  original_name=Tree")
    assert type(loaded).__name__ == "RecursiveScriptModule"
    assert isinstance(loaded, jit.ScriptModule) and loaded.original_name == "Tree"
    assert repr(loaded.seq[0]) == "RecursiveScriptModule(original_name=Linear)"


def test_loaded_function_archive_keeps_its_code():
    def scale_shift(x):
        return x * 2.0 + 1.0

    traced = jit.trace(scale_shift, sm.randn(3))
    buf = io.BytesIO()
    jit.save(traced, buf)
    loaded = jit.load(io.BytesIO(buf.getvalue()))
    assert loaded.code == traced.code
    ast.parse(loaded.code)


class SizeArithmetic(nn.Module):
    def forward(self, x):
        n = x.size(0)
        head = x[: n // 2]                                  # a slice with a symbolic bound
        if x.shape[0] > 2:                                  # a guarded Python decision
            head = head * 2
        tail = x[-(n - 1):]
        cols = x.narrow(1, 0, x.shape[1] - 1)
        steps = sm.arange(x.shape[1])
        parts = x.split(x.shape[0] // 2)
        flat = x.view(min(n, 8) * x.shape[1] % 64, -1)
        return head, tail, cols, steps, parts, flat


def test_size_arithmetic_and_guards_read_as_python():
    """Sizes read ``x.size(0)``, int ops print infix (``x.size(0) // 2``, ``-(x.size(0) - 1)``),
    a guard (here also the one ``min(n, 8)`` and ``split`` record) is an ``assert`` naming the trace-time condition and the user's line;
    ``.graph`` keeps the IR ops and the traced module still runs."""
    traced = jit.trace(SizeArithmetic(), sm.randn(4, 3))
    code = traced.code
    ast.parse(code)
    for op in ("size", "int_", "guard"):
        assert f"ops.sm.{op}" not in code
    assert "x.size(0) // 2" in code and "x.size(1) - 1" in code and "-(x.size(0) - 1)" in code
    assert "x.size(0) * x.size(1) % 64" in code and "assert x.size(0) <= 8, " in code
    line = inspect.getsourcelines(SizeArithmetic.forward)[1] + 3
    assert f'assert x.size(0) > 2, "traced with x.shape[0] > 2 at test_code_and_repr.py:{line}"' \
        in code
    graph = str(traced.graph)
    assert "sm::int_floordiv" in graph and "sm::guard[" in graph and "sm::size[dim=0]" in graph
    x = sm.randn(6, 3)
    for ours, eager in zip(traced(x), SizeArithmetic()(x)):
        for o, e in zip(ours if isinstance(ours, tuple) else [ours],
                        eager if isinstance(eager, tuple) else [eager]):
            np.testing.assert_array_equal(o.numpy(), e.numpy())
