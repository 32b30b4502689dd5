"""Golden ``FrontendError`` messages: for every unsupported construct and type error, the exact
first line, then ``File "<this file>", line N``, the offending line and a caret (``~``) under
exactly the offending expression, in TorchScript's layout.

On a mismatch the assertion shows the whole actual message, ready to paste."""
from __future__ import annotations

import contextlib
import inspect
import math
from typing import Any, Callable, List

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.jit import FrontendError

G = 3
GLOBAL_LIST = [1, 2]
GLOBAL_TENSOR = sm.ones(2)


# ---- unsupported constructs -------------------------------------------------------------

def uses_with(x):
    with contextlib.suppress(ValueError):
        x = x + 1
    return x


def uses_try(x):
    try:
        x = x + 1
    except ValueError:
        pass
    return x


def uses_lambda(x):
    f = lambda y: y + 1  # noqa: E731
    return x


def uses_generator_expression(x):
    g = (v * 2 for v in range(3))
    return x


def uses_yield(x):
    yield x


def uses_global(x):
    global G
    G = 4
    return x


def uses_nonlocal(x):
    def inner():
        nonlocal x
    return x


def uses_nested_def(x):
    def inner(y):
        return y
    return x


def closure_over(value: Any) -> Callable:
    def reads_closure(x):
        return x + value
    return reads_closure


def uses_del(x):
    y = x
    del y
    return x


def uses_set_literal(x):
    s = {1, 2}
    return x


def uses_star_params(x, *rest):
    return x


def uses_star_call(x):
    args = (x,)
    return sm.relu(*args)


def uses_dict_comprehension(x):
    d = {k: k for k in range(3)}
    return x


def uses_walrus(x):
    if (y := 3) > 2:
        pass
    return x


def uses_loop_else(x):
    for i in range(2):
        x = x + i
    else:
        x = x + 1
    return x


def reads_global_list(x):
    return x + GLOBAL_LIST[0]


def reads_global_tensor(x):
    return x + GLOBAL_TENSOR


# ---- type errors and names --------------------------------------------------------------

def branches_differ(x, n: int):
    if n > 0:
        y = x
    else:
        y = 1
    return y


def changes_type_in_loop(x, n: int):
    y = 0
    for i in range(n):
        y = x
    return y


def int_helper(a: int) -> int:
    return a + 1


def wrong_argument_type(x):
    return int_helper(x)


def missing_argument(x):
    return two_args(x)


def two_args(a, b):
    return a + b


def undefined_name(x):
    return x + not_defined_anywhere  # noqa: F821


def return_type_mismatch(x) -> int:
    return x


def returns_differ(x, n: int):
    if n > 0:
        return x
    return n


def falls_off_the_end(x, n: int):
    if n > 0:
        return x


def append_wrong_type(n: int):
    xs: List[int] = []
    xs.append(1.5)
    return xs


def list_items_differ(x):
    return [x, 1]


def recursive(n: int) -> int:
    if n <= 0:
        return 0
    return recursive(n - 1)


def unknown_tensor_method(x):
    return x.frobnicate(2)


@sm.jit.ignore
def python_only(x):
    return x


def calls_ignored(x):
    return python_only(x)


def plus_equals_on_a_list_element(x):
    items = [x.clone()]
    row = items[0]
    row += 1.0
    return items[0]


def store_into_a_list_element(x):
    items = [x.clone()]
    row = items[0]
    row[0] = -5.0
    return items[0]


def reads_requires_grad(x):
    if x.requires_grad:
        return x
    return x + 1


def returns_item_as_int(x) -> int:
    return x.sum().item()


def math_of_a_list(xs: List[float]) -> float:
    return math.sqrt(xs)


class ZipModulesAndList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(2, 2)])

    def forward(self, x, scales: List[float]):
        for layer, s in zip(self.layers, scales):
            x = layer(x) * s
        return x


class ListAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.items = [1, 2.5]                  # (a list of one item type is a constant)

    def forward(self, x):
        return x + self.items[0]


class MissingMethod(nn.Module):
    def forward(self, x):
        return self.missing(x)


NOT_SUPPORTED = "are not supported in scripted code"
_SHARED_INPLACE = ("'{name} {op} ...' updates in place a tensor that may share memory with "
                   "another (an element of a list, a parameter, a library call's result), "
                   "which scripted code does not support yet; write {rebind}")
_SHARED_STORE = ("a store into a tensor that may share memory with another (a parameter, an "
                 "element of a list, a library call's result) is not supported in scripted "
                 "code yet; index the base tensor itself (x[0, 1] = v)")
GOLDEN: list[tuple[str, Callable[[], Any], str, str]] = [
    # (id, what to script, first line, the source text the caret is under)
    ("with", lambda: uses_with, f"'with' statements {NOT_SUPPORTED}",
     "with contextlib.suppress(ValueError):"),
    ("try", lambda: uses_try, f"'try' blocks {NOT_SUPPORTED}", "try:"),
    ("lambda", lambda: uses_lambda, f"lambdas {NOT_SUPPORTED}", "lambda y: y + 1"),
    ("generator", lambda: uses_generator_expression, f"generators {NOT_SUPPORTED}",
     "(v * 2 for v in range(3))"),
    ("yield", lambda: uses_yield, f"generators ('yield') {NOT_SUPPORTED}", "yield x"),
    ("global", lambda: uses_global, f"'global' declarations {NOT_SUPPORTED}", "global G"),
    # ``nonlocal`` is only legal in a nested def, which is refused first
    ("nonlocal", lambda: uses_nonlocal, f"nested functions {NOT_SUPPORTED}", "def inner():"),
    ("nested-def", lambda: uses_nested_def, f"nested functions {NOT_SUPPORTED}",
     "def inner(y):"),
    ("closure-tensor", lambda: closure_over(sm.ones(2)),
     "a function may not read a global or closed-over tensor (pass it as an argument or make "
     "it a module buffer)", "value"),
    ("closure-list", lambda: closure_over([1, 2]),
     "a closed-over or global list is not supported (it could change between calls); use a "
     "tuple constant", "value"),
    ("global-list", lambda: reads_global_list,
     "a closed-over or global list is not supported (it could change between calls); use a "
     "tuple constant", "GLOBAL_LIST"),
    ("global-tensor", lambda: reads_global_tensor,
     "a function may not read a global or closed-over tensor (pass it as an argument or make "
     "it a module buffer)", "GLOBAL_TENSOR"),
    # Python raises TypeError for a tensor plus a tuple; this was once compiled to sm::add
    ("tensor-plus-tuple", lambda: closure_over((1, 2)),
     "unsupported operand types for a tensor operator: Tensor and (int, int)", "x + value"),
    ("del", lambda: uses_del, f"'del' statements {NOT_SUPPORTED}", "del y"),
    ("set-literal", lambda: uses_set_literal, f"set literals {NOT_SUPPORTED}", "{1, 2}"),
    ("star-params", lambda: uses_star_params,
     "*args, **kwargs, keyword-only and positional-only parameters are not supported in "
     "scripted functions", "rest"),
    ("star-call", lambda: uses_star_call, "*args and **kwargs in calls are not supported",
     "sm.relu(*args)"),
    ("dict-comprehension", lambda: uses_dict_comprehension,
     f"dict comprehensions {NOT_SUPPORTED}", "{k: k for k in range(3)}"),
    ("walrus", lambda: uses_walrus, f"assignment expressions (':=') {NOT_SUPPORTED}",
     "y := 3"),
    ("loop-else", lambda: uses_loop_else, "'else' on a loop is not supported",
     "for i in range(2):"),
    ("branches-differ", lambda: branches_differ,
     "'y' is Tensor in one branch and int in the other", "if n > 0:"),
    ("changes-type-in-loop", lambda: changes_type_in_loop,
     "variable 'y' changes type in the loop: int before, Tensor after one iteration",
     "for i in range(n):"),
    ("wrong-argument-type", lambda: wrong_argument_type,
     "int_helper(): argument 'a' must be int, got Tensor", "int_helper(x)"),
    ("missing-argument", lambda: missing_argument,
     "two_args(): missing a required argument: 'b'", "two_args(x)"),
    ("undefined-name", lambda: undefined_name, "undefined value not_defined_anywhere",
     "not_defined_anywhere"),
    ("return-annotation", lambda: return_type_mismatch,
     "function 'return_type_mismatch' is annotated to return int but returns Tensor",
     "return x"),
    ("returns-differ", lambda: returns_differ,
     "function 'returns_differ' returns Tensor on one path and int on another", "return n"),
    ("falls-off-the-end", lambda: falls_off_the_end,
     "function 'falls_off_the_end' does not return a value on every path (it returns Tensor "
     "on some); add a return at the end", "def falls_off_the_end(x, n: int):"),
    ("append-wrong-type", lambda: append_wrong_type, "cannot append a float to a int[]",
     "xs.append(1.5)"),
    ("list-items-differ", lambda: list_items_differ,
     "list items have different types: Tensor and int", "[x, 1]"),
    ("recursion", lambda: recursive,
     "recursive call of recursive (recursive -> recursive) is not supported in scripted code",
     "recursive(n - 1)"),
    ("unknown-tensor-method", lambda: unknown_tensor_method,
     "Tensor has no method 'frobnicate'", "x.frobnicate(2)"),
    # in-place writes through a view are refused (Python would write into the base; these
    # once compiled to a write into a copy: x unchanged, no error)
    ("plus-equals-on-a-list-element", lambda: plus_equals_on_a_list_element,
     _SHARED_INPLACE.format(name="row", op="+=", rebind="row = row + ..."), "row += 1.0"),
    ("store-into-a-list-element", lambda: store_into_a_list_element, _SHARED_STORE, "row[0]"),
    ("requires-grad", lambda: reads_requires_grad,
     "Tensor.requires_grad is not supported in scripted code (autograd state is not visible "
     "to scripted code)", "x.requires_grad"),
    ("item-returned-as-int", lambda: returns_item_as_int,
     "function 'returns_item_as_int' is annotated to return int but returns Scalar "
     "(Tensor.item() gives a Scalar, as in TorchScript: convert it with int() or float())",
     "return x.sum().item()"),
    ("math-of-a-list", lambda: math_of_a_list,
     "math.sqrt(): expected a real number, got float[]", "math.sqrt(xs)"),
    ("zip-modules-and-a-list", lambda: ZipModulesAndList(),
     "zip() over modules and a float[]: only modules and tuples can be unrolled together",
     "scales"),
    ("module-list-attribute", lambda: ListAttribute(),
     "module attribute 'items' is a list; scripted code reads parameters, buffers, submodules "
     "and int/float/bool/str constants", "self.items"),
    ("module-missing-method", lambda: MissingMethod(),
     "module 'MissingMethod' has no attribute 'missing'", "self.missing"),
]


def _source_of(obj: Any) -> tuple[str, list[str], int]:
    target = type(obj) if isinstance(obj, nn.Module) else obj
    lines, first = inspect.getsourcelines(target)
    return inspect.getsourcefile(target), lines, first


def _expected_line(lines: list[str], first: int, caret_text: str) -> tuple[int, str]:
    """The one line of the definition that holds ``caret_text`` (after the ``def`` line
    unless the caret is on the ``def`` line itself)."""
    hits = [(first + i, ln.rstrip("\n")) for i, ln in enumerate(lines) if caret_text in ln]
    if len(hits) > 1:
        hits = [h for h in hits if not h[1].lstrip().startswith("def ") or
                caret_text.startswith("def ")]
    assert hits, f"{caret_text!r} is not in the source"
    return hits[-1]


@pytest.mark.parametrize("make, first_line, caret_text",
                         [pytest.param(*g[1:], id=g[0]) for g in GOLDEN])
def test_golden_message(make: Callable[[], Any], first_line: str, caret_text: str) -> None:
    obj = make()
    with pytest.raises(FrontendError) as info:
        sm.jit.script(obj)
    text = str(info.value)
    lines = text.split("\n")
    shown = f"actual message:\n{text}"
    assert lines[0] == first_line + ":", shown
    filename, src, first = _source_of(obj)
    line_no, line = _expected_line(src, first, caret_text)
    assert lines[1] == f'  File "{filename}", line {line_no}', shown
    assert lines[2] == "    " + line.strip(), shown
    assert len(lines) == 4 and lines[3].endswith(" <--- HERE"), shown
    carets = lines[3][4:-len(" <--- HERE")]
    start = len(carets) - len(carets.lstrip(" "))
    span = carets.strip(" ")
    assert set(span) == {"~"}, shown
    stripped = line.strip()
    assert stripped[start:start + len(span)] == caret_text, \
        f"the caret is under {stripped[start:start + len(span)]!r}, not {caret_text!r}\n{shown}"


def test_frontend_error_is_a_runtime_error_with_its_parts() -> None:
    assert issubclass(FrontendError, RuntimeError)
    assert sm.jit.FrontendError is FrontendError
    with pytest.raises(RuntimeError) as info:
        sm.jit.script(undefined_name)
    err = info.value
    assert isinstance(err, FrontendError)
    assert err.message == "undefined value not_defined_anywhere"
    src = err.source
    assert src is not None and src.filename == __file__
    assert src.text[src.start:src.end] == "not_defined_anywhere"


def test_the_error_names_the_line_in_a_module_method_and_the_module_still_works() -> None:
    """After a failed script the eager module is untouched."""
    model = ListAttribute()
    with pytest.raises(FrontendError):
        sm.jit.script(model)
    out = model(sm.ones(2))
    assert out.tolist() == [2.0, 2.0]


def test_closure_over_a_constant_is_allowed() -> None:
    fn = closure_over(3)
    assert sm.jit.script(fn)(sm.ones(2)).tolist() == [4.0, 4.0]
    fn = closure_over(2.5)
    assert sm.jit.script(fn)(sm.ones(2)).tolist() == [3.5, 3.5]


# ---- @jit.ignore: a call into Python at run time -----------------------------------------

def test_ignored_function_runs_as_python_with_grad_refused_and_no_archive(tmp_path) -> None:
    """``@jit.ignore``: scripted code calls the Python function at run time (the issue:
    "runs as a Python call"); with a tensor that requires grad it raises (autograd cannot
    see through it); a graph that calls Python cannot be saved."""
    scripted = sm.jit.script(calls_ignored)
    x = sm.randn(3)
    np.testing.assert_array_equal(scripted(x).numpy(), x.numpy())
    assert "python_only(x)" in scripted.code
    with pytest.raises(RuntimeError, match="requires grad"):
        scripted(x.clone().requires_grad_(True))
    with pytest.raises(sm.jit.ArchiveError, match="@ignore'd Python function"):
        scripted._module.save(str(tmp_path / "f.smod"))
