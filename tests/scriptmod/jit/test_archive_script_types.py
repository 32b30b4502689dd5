"""Archives of graphs that use the Python-value ops: ``Dict(...)`` types travel as IR text
(the graph entry and the manifest's signature), so a method holding list and dict ops loads
and runs; hostile Dict types and module values smuggled through a dict are refused."""
from __future__ import annotations

import io
import json
from typing import Optional, Tuple

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit
from scriptmod.ir import parse, python_code
from tests.scriptmod.jit.test_archive_hostile import Small, X, entries, rezip

ENTRY, CODE = "graphs/m0/forward.ir", "code/m0/forward.py"
DICT_TAIL = '''  %k : str = prim::Constant[value="out"]()
  %d : Dict(str, Float(B, 3)) = sm::dict_construct(%k, %7)
  %l : Float(B, 3)[] = sm::dict_values(%d)
  %i : int = prim::Constant[value=-1]()
  %o : Float(B, 3) = sm::list_get(%l, %i)
  return (%o)
'''


@pytest.fixture(scope="module")
def good() -> bytes:
    sm.manual_seed(0)
    buf = io.BytesIO()
    jit.trace(Small().eval(), X).save(buf)
    return buf.getvalue()


def with_graph(data: bytes, tail: str, ops: list[str], x_type: str | None = None) -> bytes:
    """The archive with forward's ``return`` replaced by ``tail`` and its input typed
    ``x_type`` (code and manifest kept in step, as a writer would keep them)."""
    items = entries(data)
    text = items[ENTRY].decode()
    head = text[:text.index("  return (%7)")]
    if x_type is not None:
        head = head.replace("%x : Float(B, 4)", f"%x : {x_type}")
    text = head + tail
    items[ENTRY] = text.encode()
    try:
        items[CODE] = python_code(parse(text), "forward").encode()
    except Exception:      # noqa: BLE001  (hostile text: the loader must refuse it)
        pass
    man = json.loads(items["manifest.json"])
    man["ops"] = sorted(set(man["ops"]) | set(ops))
    if x_type is not None:
        man["modules"][0]["methods"][0]["inputs"][1] = x_type
    items["manifest.json"] = json.dumps(man).encode()
    return rezip(items)


def test_a_method_with_dict_and_list_ops_loads_and_runs(good: bytes) -> None:
    data = with_graph(good, DICT_TAIL, ["sm::dict_construct", "sm::dict_values", "sm::list_get"])
    with sm.no_grad():
        want = jit.load(io.BytesIO(good))(X).numpy()
        loaded = jit.load(io.BytesIO(data))
        got = loaded(X).numpy()
    np.testing.assert_array_equal(got, want)
    assert "Dict(str, Float(B, 3))" in str(loaded.graph)


def test_a_hostile_dict_type_is_refused(good: bytes) -> None:
    data = with_graph(good, "  return (%7)\n", [], "Dict(float, Float(B, 4))")
    with pytest.raises(jit.ArchiveError, match="does not parse.*a Dict key type must be str or int"):
        jit.load(io.BytesIO(data))


def test_a_module_smuggled_through_a_dict_is_refused(good: bytes) -> None:
    tail = '''  %k : str = prim::Constant[value="m"]()
  %d : Dict(str, __module__.nn.Linear) = sm::dict_construct(%k, %0)
  %m : __module__.nn.Linear = sm::dict_get(%d, %k)
  %o : Float(B, 3) = prim::CallMethod[name="forward"](%m, %x)
  return (%o)
'''
    data = with_graph(good, tail, ["sm::dict_construct", "sm::dict_get"])
    with pytest.raises(jit.ArchiveError, match="sm::dict_get produces a module-typed value"):
        jit.load(io.BytesIO(data))


# ---- a scripted method's argument defaults ------------------------------------------------

class _WithDefaults(sm.nn.Module):
    def forward(self, x, scale: float = 2.0, shape: Tuple[int, int] = (1, -1),
                note: str = "n", mask: Optional[sm.Tensor] = None):
        if mask is not None:
            x = x * mask
        return x.reshape(shape[0], shape[1]) * scale


def test_defaults_travel_in_the_archive() -> None:
    """A loaded scripted module is called without its defaulted arguments, as the original
    is (they are in the manifest: plain values only)."""
    buf = io.BytesIO()
    jit.script(_WithDefaults()).save(buf)
    man = json.loads(entries(buf.getvalue())["manifest.json"])
    (meth,) = man["modules"][man["root"]]["methods"]
    assert meth["defaults"] == {"scale": 2.0, "shape": {"tuple": [1, -1]}, "note": "n",
                                "mask": None}
    loaded = jit.load(io.BytesIO(buf.getvalue()))
    x = sm.randn(2, 3)
    np.testing.assert_allclose(loaded(x).numpy(), x.reshape(1, -1).numpy() * 2.0)
    np.testing.assert_allclose(loaded(x, scale=3.0).numpy(), x.reshape(1, -1).numpy() * 3.0)


@pytest.mark.parametrize("defaults, words", [
    ({"nope": 1.0}, ["'nope' is not an argument"]),
    ({"scale": {"eval": "__import__('os')"}}, ["not a plain value"]),
    ({"scale": [1, 2]}, ["not a plain value"]),
    ("scale=2", ["expected an object"]),
])
def test_hostile_defaults_are_refused(defaults, words) -> None:
    buf = io.BytesIO()
    jit.script(_WithDefaults()).save(buf)
    items = entries(buf.getvalue())
    man = json.loads(items["manifest.json"])
    man["modules"][man["root"]]["methods"][0]["defaults"] = defaults
    items["manifest.json"] = json.dumps(man).encode()
    with pytest.raises(jit.ArchiveError) as info:
        jit.load(io.BytesIO(rezip(items)))
    for w in words:
        assert w in str(info.value)
