"""The Python-value ops' reference kernels (``runtime.kernels.script``) against Python itself:
every binary op on a table of values (negative floordiv/mod, pow with negative exponents,
division by zero, NaN and inf comparisons, bool arithmetic), value, type and error alike,
through ``run_kernel``, eager ``dispatch``, the interpreter and ``Executable``; conversions of
tensors as eager ``int(t)``/``float(t)``/``bool(t)``/``str(t)``; ``str.format``; lists and dicts
in place; and whole programs with loops over lists run twice by both graph executors."""
from __future__ import annotations

import itertools
import math
import operator
from typing import Any, Callable

import ml_dtypes
import numpy as np
import pytest

import scriptmod as sm
from scriptmod._dispatch import dispatch
from scriptmod.ir import parse
from scriptmod.ir.builder import Builder
from scriptmod.ir.errors import ShapeError
from scriptmod.ir.graph import Graph
from scriptmod.ir.ops.script import PY_ARITH, PY_COMPARE
from scriptmod.ir.types import SCALAR_TYPES
from scriptmod.runtime.executable import Executable
from scriptmod.runtime.interpreter import InterpreterError, run_graph
from scriptmod.runtime.kernels import run_kernel
from scriptmod.runtime.kernels import script as K

VALUES = [True, False, 0, 1, 7, -7, 2, -2, 10**20, 0.0, -0.0, 2.5, -7.5, 1e308, math.nan,
          math.inf, -math.inf, "ab", "", None, 3 - 4j]
BINARY: dict[str, Callable[[Any, Any], Any]] = {**PY_ARITH, **PY_COMPARE, "py_min": min,
                                                "py_max": max}


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRIPTMOD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "smcache"))


def python(name: str, args: tuple, fn: Callable[..., Any]) -> tuple[str, Any]:
    """What Python's ``fn`` computes: ("ok", value) or ("raise", exception); min/max in the
    operands' common type and a complex power of reals refused, as the ops document."""
    try:
        out = fn(*args)
    except Exception as e:      # noqa: BLE001  (the exception is the expected result)
        return "raise", e
    if name in ("py_min", "py_max") and all(type(a) in (bool, int, float) for a in args):
        wider = max((type(a) for a in args), key=[bool, int, float].index)
        out = wider(out)
    if name == "py_pow" and type(out) is complex and complex not in map(type, args):
        return "raise", ValueError("is a complex number")
    return "ok", out


def same(got: Any, want: Any) -> bool:
    if type(got) is not type(want):
        return False
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    if isinstance(want, complex):
        return repr(got) == repr(want)
    return got == want


def _cause(e: BaseException) -> BaseException:
    """The Python exception a graph executor wrapped (it names the failing node)."""
    return e.__cause__ if isinstance(e, InterpreterError) and e.__cause__ is not None else e


def check(name: str, args: tuple, run: Callable[..., Any],
          fn: Callable[..., Any] | None = None) -> None:
    """``run(*args)`` gives what Python's ``fn`` (default: the binary op's) gives, or raises
    the same exception with the same message."""
    kind, want = python(name, args, fn or BINARY[name])
    if kind == "raise":
        with pytest.raises(Exception) as info:
            run(*args)
        err = _cause(info.value)
        assert type(err) is type(want), (name, args, err)
        assert str(want) in str(err), (name, args, err)
        return
    got = run(*args)
    assert same(got, want), (name, args, got, want)


def graph_of(name: str, args: tuple) -> Graph:
    """One ``name`` node over graph inputs typed as ``args`` (values arrive at run time)."""
    g = Graph()
    b = Builder(g)
    ins = [b.input(SCALAR_TYPES[type(a)], f"a{i}") for i, a in enumerate(args)]
    b.ret(b.op(name, *ins))
    return g


def _typable(name: str, args: tuple) -> bool:
    try:
        graph_of(name, args)
    except TypeError:
        return False
    return True


EXECUTORS: dict[str, Callable[[str, tuple], Callable[..., Any]]] = {
    "kernel": lambda name, args: lambda *a: run_kernel(name, list(a), {}),
    "eager": lambda name, args: lambda *a: dispatch(name, a),
    "interpreter": lambda name, args: lambda *a: run_graph(graph_of(name, args), *a),
    "executable": lambda name, args: lambda *a: Executable(graph_of(name, args)).run(*a),
}


@pytest.mark.parametrize("executor", sorted(EXECUTORS))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_compute_what_python_computes(name: str, executor: str) -> None:
    graphs = executor in ("interpreter", "executable")
    n = 0
    for args in itertools.product(VALUES, VALUES):
        if graphs and not _typable(name, args):   # Python's TypeError: refused when typing
            continue
        if name == "py_pow" and type(args[1]) is int and abs(args[1]) > 64:
            continue                               # 7 ** 10**20 would not finish
        check(name, args, EXECUTORS[executor](name, args))
        n += 1
    assert n > (80 if name in ("py_and", "py_or", "py_xor") else 100)   # of ints and bools


@pytest.mark.parametrize("name,fn", [("py_neg", operator.neg), ("py_abs", abs),
                                     ("py_not", operator.not_), ("py_bool", bool), ("py_int", int),
                                     ("py_float", float), ("py_str", str),
                                     ("py_is_none", lambda x: x is None)])
def test_unary_ops_compute_what_python_computes(name: str, fn: Any) -> None:
    for x in VALUES + ["12", " -7 ", "1.5", "1e3", "nan", "inf", 1e20]:
        for executor in EXECUTORS:
            if executor in ("kernel", "eager") or _typable(name, (x,)):
                check(name, (x,), EXECUTORS[executor](name, (x,)), fn)


def test_edge_cases_by_hand() -> None:
    """The rows a reader checks first, spelled out."""
    k = lambda name, *a: run_kernel(name, list(a), {})   # noqa: E731
    assert k("py_floordiv", -7, 2) == -4 and k("py_mod", -7, 2) == 1 and k("py_mod", 7, -2) == -1
    assert k("py_floordiv", -7.5, 2) == -4.0 and k("py_mod", -7.5, 2) == 0.5
    assert k("py_pow", 2, -2) == 0.25 and type(k("py_pow", 2, 3)) is int
    assert k("py_add", True, True) == 2 and type(k("py_add", True, True)) is int
    assert k("py_truediv", 1, 2) == 0.5 and k("py_neg", True) == -1
    assert k("py_lt", math.nan, 1.0) is False and k("py_ne", math.nan, math.nan) is True
    assert k("py_min", 1, 2.5) == 1.0 and type(k("py_min", 1, 2.5)) is float
    assert k("py_max", True, False) is True and type(k("py_max", True, 0)) is int
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        k("py_truediv", 1, 0)
    with pytest.raises(ZeroDivisionError, match="modulo by zero"):     # wording: by version
        k("py_mod", 5, False)
    with pytest.raises(ZeroDivisionError):
        k("py_pow", 0, -1)
    with pytest.raises(ValueError, match=r"py_pow: -8 \*\* 0.5 is a complex number"):
        k("py_pow", -8, 0.5)


# ---- tensors --------------------------------------------------------------------------------

DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.float16,
          ml_dtypes.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_tensor_conversions_match_eager(dtype: Any, shape: tuple) -> None:
    for v in (2.75, -1.0, 0.0, 1.0):
        a = np.full(shape, v).astype(dtype)
        t = sm.from_numpy(a.copy())
        for name, fn in (("py_int", int), ("py_float", float), ("py_bool", bool),
                         ("py_not", operator.not_)):
            want = fn(t)
            for got in (run_kernel(name, [a], {}), dispatch(name, (t,))):
                assert type(got) is type(want) and got == want, (name, a, got, want)


def test_tensors_of_several_elements_refuse_conversion_as_torch() -> None:
    a = np.ones((2, 3), np.float32)
    for name in ("py_int", "py_float"):
        with pytest.raises(ShapeError, match="a Tensor with 6 elements cannot be converted to Scalar"):
            run_kernel(name, [a], {})
    for name in ("py_bool", "py_not"):
        with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value "
                                               "is ambiguous"):
            run_kernel(name, [a], {})
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with no values is ambiguous"):
        run_kernel("py_bool", [np.ones(0)], {})


def test_tensor_queries() -> None:
    for shape in [(), (0, 3), (2, 3, 4)]:
        a = np.zeros(shape, np.float32)
        assert run_kernel("dim", [a], {}) == len(shape)
        assert run_kernel("numel", [a], {}) == a.size
        assert run_kernel("shape", [a], {}) == list(shape)
        assert dispatch("shape", (sm.from_numpy(a),)) == list(shape)


@pytest.fixture
def eager_text() -> Any:
    """The tensor text scriptmod should install: ``str`` of an eager Tensor on the array."""
    saved = K._TENSOR_TEXT[0]
    K.set_tensor_text(lambda a: str(sm.Tensor._make(a)))
    yield
    K.set_tensor_text(saved)


TEXT_ARRAYS = [np.array(3.5, np.float32), np.arange(6, dtype=np.int64).reshape(2, 3),
               np.array([1e-5, 1.0, 1e5], np.float32), np.array([True, False]),
               np.zeros((0, 2), np.float16), np.linspace(0, 1, 2000)]


@pytest.mark.parametrize("k", range(len(TEXT_ARRAYS)))
def test_tensors_print_as_eager_tensors(k: int, eager_text: Any) -> None:
    a = TEXT_ARRAYS[k]
    t = sm.from_numpy(a.copy())
    assert run_kernel("py_str", [a], {}) == str(t)
    assert run_kernel("py_str", [[a, 1, (a,)]], {}) == str([t, 1, (t,)])
    assert run_kernel("py_str", [{"w": a}], {}) == str({"w": t})
    fmt = "x={} r={!r} s={!s} pad={:>4}"
    assert run_kernel("py_format", [fmt, a, a, a, a], {}) == fmt.format(t, t, t, t)


def test_a_zero_dim_tensor_takes_a_format_spec_as_eager(eager_text: Any) -> None:
    a = np.array(2.0 / 3.0, np.float32)
    assert run_kernel("py_format", ["{:.3f}|{:8.2e}", a, a], {}) == "{:.3f}|{:8.2e}".format(
        sm.from_numpy(a), sm.from_numpy(a))


def test_the_default_tensor_text_is_plain_numpy() -> None:
    saved = K._TENSOR_TEXT[0]
    K._TENSOR_TEXT[0] = K._plain_text
    try:
        assert run_kernel("py_str", [np.array([1, 2])], {}) == "tensor([1, 2])"
    finally:
        K._TENSOR_TEXT[0] = saved


def test_importing_scriptmod_installs_the_eager_tensor_text() -> None:
    """``scriptmod.jit``'s frontend installs it (the runtime cannot import scriptmod)."""
    a = np.array(3.5, np.float32)
    assert run_kernel("py_str", [a], {}) == str(sm.from_numpy(a)) == "tensor(3.5000)"


# ---- lists and dicts ----------------------------------------------------------------------------

def test_list_ops_are_pythons_in_place() -> None:
    k = lambda name, *a: run_kernel(name, list(a), {})   # noqa: E731
    lst = [1, 2, 3]
    assert k("list_get", lst, -1) == 3 and k("list_len", lst) == 3
    assert k("list_append", lst, 4) is lst and lst == [1, 2, 3, 4]
    assert k("list_set", lst, -4, 0) is lst and lst == [0, 2, 3, 4]
    sliced = k("list_slice", lst, None, None, -1)
    assert sliced == [4, 3, 2, 0] and sliced is not lst
    both = k("list_concat", lst, [9])
    assert both == [0, 2, 3, 4, 9] and lst == [0, 2, 3, 4]
    assert k("list_contains", lst, 3) is True and k("list_contains", lst, 3.0) is True
    assert k("list_contains", [float("nan")], float("nan")) is False   # == fails, not the same
    assert k("list_contains", [math.nan], math.nan) is True            # object: Python's `in`
    for name, args, err, msg in [("list_get", (lst, 4), IndexError, "list index out of range"),
                                 ("list_get", (lst, -5), IndexError, "list index out of range"),
                                 ("list_set", (lst, 9, 0), IndexError,
                                  "list assignment index out of range"),
                                 ("list_slice", (lst, None, None, 0), ValueError,
                                  "slice step cannot be zero")]:
        with pytest.raises(err, match=f"^{msg}$"):
            k(name, *args)


def test_dict_ops_are_pythons_in_place() -> None:
    k = lambda name, *a: run_kernel(name, list(a), {})   # noqa: E731
    d = k("dict_construct", "b", 1, "a", 2)
    assert d == {"b": 1, "a": 2} and list(d) == ["b", "a"]       # insertion order
    assert k("dict_set", d, "c", 3) is d and k("dict_get", d, "c") == 3
    assert k("dict_keys", d) == ["b", "a", "c"] and k("dict_values", d) == [1, 2, 3]
    assert k("dict_items", d) == [("b", 1), ("a", 2), ("c", 3)]
    assert k("dict_contains", d, "a") is True and k("dict_len", d) == 3
    assert k("dict_get", {1: "x"}, True) == "x"                   # d[True] is d[1], as in Python
    with pytest.raises(KeyError) as info:
        k("dict_get", d, "missing")
    assert info.value.args == ("missing",)
    with pytest.raises(KeyError) as info:
        dispatch("dict_get", ({"a": 1}, "zz"))
    assert info.value.args == ("zz",)
    assert k("dict_construct") == {}


def test_lists_of_tensors_through_eager_dispatch_hold_arrays() -> None:
    """Dispatch hands a list's tensors through as they are; arrays come back as Tensors."""
    a = np.ones((2, 2), np.float32)
    got = dispatch("list_get", ([a, a * 2], 1))
    assert isinstance(got, sm.Tensor) and np.array_equal(got.numpy(), a * 2)


def test_list_get_of_eager_tensors_returns_the_tensor() -> None:
    t = sm.ones(2, 2)
    assert dispatch("list_get", ([t], 0)) is t


# ---- whole programs ------------------------------------------------------------------------------

PROGRAM = '''graph(%x : Float(2, 3), %n : int):
  %l : Float(2, 3)[] = prim::ListConstruct(%x)
  %l2 : Float(2, 3)[] = sm::list_append(%l, %x)
  %k : str = prim::Constant[value="a"]()
  %d : Dict(str, int) = sm::dict_construct(%k, %n)
  %len : int = sm::list_len(%l2)
  %m : int = sm::dict_get(%d, %k)
  %s : int = sm::py_add(%len, %m)
  %fmt : str = prim::Constant[value="{} items, {}, n={:>3}"]()
  %f : str = sm::py_format(%fmt, %s, %d, %n)
  %t : bool = prim::Constant[value=1]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %e : int[] = prim::ListConstruct()
  %out : int[] = prim::Loop(%n, %t, %e)
    block0(%i : int, %acc : int[]):
      %sq : int = sm::py_mul(%i, %i)
      %acc2 : int[] = sm::list_append(%acc, %sq)
      %odd : int = sm::py_mod(%i, %two)
      %stop : bool = sm::py_eq(%odd, %one)
      %more : bool = sm::py_not(%stop)
      -> (%more, %acc2)
  %j : int = sm::py_mod(%m, %two)
  %y : Float(2, 3) = sm::list_get(%l2, %j)
  %tot : int = sm::list_len(%out)
  %avg : float = sm::py_truediv(%tot, %s)
  return (%s, %f, %out, %y, %avg)
'''


def program(x: np.ndarray, n: int) -> tuple:
    """``PROGRAM`` in Python."""
    l2 = [x, x]
    d = {"a": n}
    s = len(l2) + d["a"]
    out: list[int] = []
    for i in range(n):
        out.append(i * i)
        if i % 2 == 1:
            break
    return s, "{} items, {}, n={:>3}".format(s, d, n), out, l2[d["a"] % 2], len(out) / s


@pytest.mark.parametrize("run", ["interpreter", "executable"])
def test_a_program_of_script_ops_runs_as_python_twice(run: str) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = parse(PROGRAM)
    fn = (lambda *a: run_graph(g, *a)) if run == "interpreter" else Executable(g).run
    for n in (1, 0, 5, 1):     # fresh lists and dicts on every call
        want = program(x, n)
        got = fn(x, n)
        assert got[:3] == want[:3] and got[4] == want[4]
        assert np.array_equal(got[3], want[3])
