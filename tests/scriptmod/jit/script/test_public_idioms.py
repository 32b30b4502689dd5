"""Constructs public TorchScript code uses that ``jit.script`` once refused (issue 42): a tuple
literal as a value (``t.dtype in (float32, float64)``, torchvision's ``_upcast``), a name
rebound to another type in straight-line code (torchvision detection's
``concat_box_prediction_layers``, fairseq's sinusoidal embedding), an optional submodule
(``if self.downsample is not None``, torchvision's ``BasicBlock``) and ``out += identity``
on a submodule's result. Each runs scripted with the Python function's numbers; a type that
differs where control flow merges is still an error, but only where the name is read."""
from __future__ import annotations

import math
import warnings
from typing import Any, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.jit.frontend.errors import FrontendError


def _upcast(t: sm.Tensor) -> sm.Tensor:
    if t.is_floating_point():
        return t if t.dtype in (sm.float32, sm.float64) else t.float()
    else:
        return t if t.dtype in (sm.int32, sm.int64) else t.int()


def _membership(n: int) -> int:
    out = 0
    if n in (1, 2, 3):
        out += 1
    if n not in (2, 4):
        out += 10
    return out


def _concat_box_predictions(x: sm.Tensor) -> sm.Tensor:
    box_cls = []
    for i in range(3):
        box_cls.append(x * i)
    box_cls = sm.cat(box_cls, dim=0)
    return box_cls


def _sinusoidal(half_dim: int) -> sm.Tensor:
    emb = math.log(10000) / (half_dim - 1)
    emb = sm.exp(sm.arange(half_dim, dtype=sm.float32) * -emb)
    return emb


def _rebound_in_one_branch(x: sm.Tensor, c: bool) -> sm.Tensor:
    y = 1
    if c:
        y = x
    return x * 2                      # y is never read after the merge


def _read_after_merge(x: sm.Tensor, c: bool):
    y = 1
    if c:
        y = x
    return y


@pytest.mark.parametrize("dtype", [sm.float16, sm.float32, sm.float64, sm.int8, sm.int32,
                                   sm.int64], ids=str)
def test_tuple_membership_of_dtypes(dtype) -> None:
    f = sm.jit.script(_upcast)
    x = sm.ones(3, dtype=dtype)
    assert f(x).dtype == _upcast(x).dtype


def test_tuple_membership_of_ints() -> None:
    f = sm.jit.script(_membership)
    assert [f(n) for n in range(6)] == [_membership(n) for n in range(6)]


@pytest.mark.parametrize("fn,args", [(_concat_box_predictions, (sm.randn(2, 4),)),
                                     (_sinusoidal, (8,)),
                                     (_rebound_in_one_branch, (sm.randn(3), True))],
                         ids=["list-then-tensor", "float-then-tensor", "unread-merge"])
def test_a_name_rebound_to_another_type(fn, args) -> None:
    np.testing.assert_allclose(sm.jit.script(fn)(*args).numpy(), fn(*args).numpy(),
                               rtol=1e-6)


def test_two_types_where_a_merged_name_is_read_is_an_error_at_the_merge() -> None:
    with pytest.raises(FrontendError, match="'y' is Tensor in one branch and int in the "
                                            "other") as err:
        sm.jit.script(_read_after_merge)
    assert "if c:" in str(err.value)


class _Block(nn.Module):
    """torchvision's BasicBlock shape: an optional downsample and ``out += identity``."""

    def __init__(self, down: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(nn.Conv2d(4, 4, 1, bias=False),
                                        nn.BatchNorm2d(4)) if down else None

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


@pytest.mark.parametrize("down", [True, False], ids=["downsample", "none"])
def test_optional_submodule_and_add_into_a_layer_result(down: bool) -> None:
    m = _Block(down).eval()
    x = sm.randn(2, 4, 5, 5)
    with sm.no_grad():
        want = m(x.clone())
        got = sm.jit.script(m)(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


class _Pass(nn.Module):
    def forward(self, x):
        return x


class _AddIntoAlias(nn.Module):
    """``out += 1`` where ``out`` is the caller's tensor itself (an Identity layer's or a
    user module's result): Python writes the argument, and so must the script."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x):
        out = self.layer(x)
        out += 1
        return out * 2


@pytest.mark.parametrize("layer", [nn.Identity, _Pass], ids=["Identity", "user-module"])
def test_add_into_a_result_that_is_the_argument_writes_the_argument(layer) -> None:
    m = _AddIntoAlias(layer()).eval()
    x, y = sm.zeros(3), sm.zeros(3)
    want = m(x)
    got = sm.jit.script(m)(y)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(y.numpy(), x.numpy())      # [1, 1, 1]: written in place


def _torchvision_source(name: str) -> str:
    """torchvision's ``models/<name>.py`` read from its installed files (not imported: its
    package needs its compiled ops), or skip."""
    import importlib.util
    import pathlib
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        pytest.skip("torchvision is not installed")
    return (pathlib.Path(spec.origin).parent / "models" / f"{name}.py").read_text()


def _ported(src: str) -> str:
    """torchvision source with its torch imports pointed at scriptmod and its package-relative
    imports dropped."""
    import re
    for old, new in (("import torch.nn as nn", "from scriptmod import nn"),
                     ("from torch import nn, Tensor", "from scriptmod import nn, Tensor"),
                     ("from torch import Tensor", "from scriptmod import Tensor"),
                     ("import torch\n", "import scriptmod as torch\n")):
        src = src.replace(old, new)
    return re.sub(r"^from \.\..*$|^from \._.*$", "", src, flags=re.M)


_HEAD = ("import warnings\nfrom functools import partial\n"
         "from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar, Union\n"
         "def _log_api_usage_once(obj):\n    pass\n"
         "def _make_ntuple(x, n):\n    import collections.abc, itertools\n"
         "    if isinstance(x, collections.abc.Iterable):\n        return tuple(x)\n"
         "    return tuple(itertools.repeat(x, n))\n")


def _check_scripted(tmp_path, source: str, build) -> None:
    """Import ``source`` as a module, ``build(module)`` a model from it, and check that the
    model scripts and gives eager's outputs."""
    import sys
    (tmp_path / "tv_ported_src.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        import tv_ported_src
        m = build(tv_ported_src).eval()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tv_ported_src", None)
    x = sm.randn(2, 3, 32, 32)
    with sm.no_grad():
        want = m(x)
        got = sm.jit.script(m)(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block,layers", [("BasicBlock", [2, 2, 2, 2]),
                                          ("Bottleneck", [3, 4, 6, 3])],
                         ids=["resnet18", "resnet50"])
def test_torchvision_resnet_scripts_unchanged(block: str, layers: list, tmp_path) -> None:
    """torchvision's ``models/resnet.py`` with only its imports pointed at scriptmod (its
    weights machinery, after ``_resnet``, left out) scripts and gives eager's outputs."""
    src = _ported(_torchvision_source("resnet"))
    _check_scripted(tmp_path, _HEAD + src[:src.index("def _resnet(")],
                    lambda tv: tv.ResNet(getattr(tv, block), layers))


def test_torchvision_mobilenet_v2_scripts_unchanged(tmp_path) -> None:
    """torchvision's ``models/mobilenetv2.py`` and the ``ops/misc.py`` blocks it builds on
    (``Conv2dNormActivation``: a ``Sequential`` subclass that keeps Sequential's forward),
    imports pointed at scriptmod, scripts and gives eager's outputs."""
    misc = _ported(_torchvision_source("../ops/misc"))
    misc = misc[:misc.index("class Conv3dNormActivation")].replace("import warnings\n", "")
    utils = _torchvision_source("_utils")
    divisible = utils[utils.index("def _make_divisible"):]
    divisible = divisible[:divisible.index("\ndef ", 10)]
    mobile = _ported(_torchvision_source("mobilenetv2"))
    _check_scripted(tmp_path, "\n".join([_HEAD, divisible, misc,
                                         mobile[:mobile.index("_COMMON_META = {")]]),
                    lambda tv: tv.MobileNetV2(width_mult=0.5))


class _WithUnused(nn.Module):
    def forward(self, x):
        if self.training:
            return self.export_only(x)
        return x * 2

    @sm.jit.unused
    def export_only(self, x):
        import numpy                                    # never compiled
        return numpy.asarray(x)


def test_an_unused_method_compiles_to_a_raise_where_it_is_called() -> None:
    m = sm.jit.script(_WithUnused().eval())
    np.testing.assert_array_equal(m(sm.ones(2)).numpy(), [2.0, 2.0])
    m.train()
    with pytest.raises(RuntimeError, match="_WithUnused.export_only was called, but it is "
                                           "marked @unused"):
        m(sm.ones(2))


def _formatted(x: sm.Tensor, n: int) -> sm.Tensor:
    a = "{}-{}".format(n, n + 1)
    b = "%d items" % n
    c = "%s/%s" % (n, "x")
    return x * len(a + b + c)


def _enumerate_zip(xs: List[sm.Tensor], y: sm.Tensor) -> sm.Tensor:
    out = y * 0
    for i, (a, b) in enumerate(zip(xs, y)):
        out = out + a * b * i
    for k, pair in enumerate(zip(y, y), start=1):
        out = out + pair[0] * k
    return out


@pytest.mark.parametrize("fn,args", [(_formatted, (sm.ones(2), 12)),
                                     (_enumerate_zip, ([sm.randn(3) for _ in range(4)],
                                                       sm.randn(4, 3)))],
                         ids=["percent-format", "enumerate-zip"])
def test_string_formatting_and_enumerate_over_zip(fn, args) -> None:
    np.testing.assert_allclose(sm.jit.script(fn)(*args).numpy(), fn(*args).numpy(),
                               rtol=1e-6)


def test_a_lambda_is_refused_with_a_frontend_error() -> None:
    """(Its source line, a dict entry, once reached ``ast.parse`` and raised SyntaxError.)"""
    table = {"double": (lambda x: x * 2, 1)}
    with pytest.raises(FrontendError, match="cannot script a lambda .*define it with 'def'"):
        sm.jit.script(table["double"][0])


class _Detections(NamedTuple):
    boxes: sm.Tensor
    scores: sm.Tensor
    count: int
    label: str = "box"


def _detect(x: sm.Tensor) -> _Detections:
    return _Detections(x * 2, scores=x.sum(1), count=x.size(0))


def _read_fields(x: sm.Tensor) -> sm.Tensor:
    d = _detect(x)
    boxes, scores, n, label = d
    return d.boxes + d.scores[:, None] * d.count + d[0] + boxes * n + len(label)


def _plain_tuple_as_named(x: sm.Tensor) -> _Detections:
    return (x, x[:, 0], 1, "plain")


class _Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: sm.Tensor) -> _Detections:
        return _Detections(self.fc(x), self.fc(x).amax(1), x.size(0))


@pytest.mark.parametrize("fn", [_detect, _read_fields, _plain_tuple_as_named])
def test_namedtuple_results_fields_and_class(fn) -> None:
    """A ``NamedTuple`` class builds (fields by position or keyword, defaults), reads by
    name, index and unpacking, and a function declared to return it gives an instance of
    the class, as TorchScript's NamedTuple."""
    x = sm.randn(4, 3)
    want, got = fn(x), sm.jit.script(fn)(x)
    # (a plain tuple returned where the NamedTuple is declared comes back as the class too)
    assert type(got) is (type(want) if fn is _read_fields else _Detections)
    for g, w in zip(got, want):
        if isinstance(w, sm.Tensor):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
        else:
            assert g == w


def test_namedtuple_from_a_module_survives_save_and_load(tmp_path) -> None:
    """A scripted module's NamedTuple result comes back as the class, and after ``jit.load``
    (no user class) as a namedtuple of the same name and fields."""
    m = _Head().eval()
    s = sm.jit.script(m)
    x = sm.randn(5, 3)
    with sm.no_grad():
        want, got = m(x), s(x)
    assert type(got) is _Detections and got.count == 5
    np.testing.assert_allclose(got.boxes.numpy(), want.boxes.numpy(), rtol=1e-5, atol=1e-6)
    sm.jit.save(s, tmp_path / "head.smod")
    loaded = sm.jit.load(tmp_path / "head.smod")
    with sm.no_grad():
        again = loaded(x)
    assert type(again).__name__ == "_Detections" and again._fields == _Detections._fields
    np.testing.assert_allclose(again.scores.numpy(), want.scores.numpy(), rtol=1e-5, atol=1e-6)


def _wrong_field(x: sm.Tensor) -> _Detections:
    return _Detections(x, 1, 2)


def test_a_namedtuple_field_of_the_wrong_type_is_a_frontend_error() -> None:
    with pytest.raises(FrontendError, match="field 'scores' must be Tensor, got int"):
        sm.jit.script(_wrong_field)


def _log_usage(obj: Any) -> None:
    pass


def _eager_only(x: sm.Tensor) -> sm.Tensor:
    if not sm.jit.is_scripting() and not sm.jit.is_tracing():
        _log_usage(_eager_only)                   # a function value: never compiled
    y = x * 2 if sm.jit.is_scripting() else x.undefined_method()
    return y if sm.jit.is_scripting() or x.also_undefined() else x


def _takes_any(tag: Any, x: sm.Tensor) -> sm.Tensor:
    _log_usage(tag)
    return x + 1


def test_is_scripting_decides_statically_and_any_passes_through() -> None:
    """``not jit.is_scripting() and ...``, ``a if jit.is_scripting() else b`` and ``or``
    fold as TorchScript's do: the eager-only side is never compiled (torchvision's
    ``_log_api_usage_once`` guard); an ``Any`` parameter takes any value."""
    x = sm.randn(3)
    np.testing.assert_allclose(sm.jit.script(_eager_only)(x).numpy(), (x * 2).numpy())
    s = sm.jit.script(_takes_any)
    for tag in (3, "a", None, [1, 2]):
        np.testing.assert_allclose(s(tag, x).numpy(), (x + 1).numpy())


# ---- issue 42, second round: the corpus's remaining constructs ------------------------------

def _size_plus_tuple(x: sm.Tensor, a: int) -> List[int]:
    return x.size()[:2] + (a, 3) + x.shape[:-1] + (-1,)


def _repeat_lists(xs: List[float], n: int) -> List[float]:
    return 2 * xs + xs * n


def test_list_plus_a_tuple_and_list_repetition() -> None:
    """``x.size()[:2] + (a, b)`` is a list, as in TorchScript (DeBERTa, Conv1D); ``n * lst``
    and ``lst * n`` repeat it (torchaudio's median smoothing)."""
    x = sm.zeros(2, 3, 4)
    assert sm.jit.script(_size_plus_tuple)(x, 5) == [2, 3, 5, 3, 2, 3, -1]
    assert sm.jit.script(_repeat_lists)([1.0, 2.0], 2) == _repeat_lists([1.0, 2.0], 2)


def _list_plus_float_tuple(x: sm.Tensor) -> List[int]:
    return x.size() + (1.5,)


def test_a_tuple_of_other_items_does_not_add_to_a_list() -> None:
    with pytest.raises(FrontendError, match=r"cannot add a \(float\) to a int\[\]") as info:
        sm.jit.script(_list_plus_float_tuple)
    assert "test_public_idioms.py" in str(info.value) and "~~~" in str(info.value)


@sm.jit.script
def _scripted_helper(x: sm.Tensor, n: int = 2, y: Optional[sm.Tensor] = None) -> sm.Tensor:
    if y is not None:
        x = x + y
    return x * n


def _calls_scripted(x: sm.Tensor) -> sm.Tensor:
    return _scripted_helper(x) + _scripted_helper(x, 3) + _scripted_helper(n=1, x=x, y=x)


def _calls_scripted_badly(x: sm.Tensor) -> sm.Tensor:
    return _scripted_helper(x, z=1)


def test_calling_a_scripted_function_binds_names_and_defaults() -> None:
    """A ``@jit.script``-decorated function called from scripted code (fairseq's model_utils,
    DeBERTa's helpers): its graph inlined, arguments bound as Python binds them."""
    x = sm.randn(3)
    np.testing.assert_allclose(sm.jit.script(_calls_scripted)(x).numpy(),
                               _calls_scripted(x).numpy(), rtol=1e-6)
    with pytest.raises(FrontendError, match=r"unexpected keyword argument\(s\) \['z'\]"):
        sm.jit.script(_calls_scripted_badly)


def _warns(x: sm.Tensor, n: int) -> sm.Tensor:
    if n > 2:
        warnings.warn(f"n is {n}")
    if n > 3:
        warnings.warn("deprecated", DeprecationWarning, stacklevel=2)
    return x


def test_warnings_warn_warns_when_the_program_runs() -> None:
    s = sm.jit.script(_warns)
    for n, want in ((1, []), (3, [(UserWarning, "n is 3")]),
                    (4, [(UserWarning, "n is 4"), (DeprecationWarning, "deprecated")])):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            s(sm.ones(1), n)
        assert [(w.category, str(w.message)) for w in seen] == want


_CPU = sm.device("cpu")


def _device_and_dtype(x: sm.Tensor, device: sm.device = _CPU,
                      dtype: Optional[sm.dtype] = None) -> sm.Tensor:
    if dtype is None:
        dtype = sm.float64
    return sm.zeros(2, device=device, dtype=dtype) + x.to(device)


def _dtype_in_a_branch(x: sm.Tensor, wide: bool) -> sm.Tensor:
    dt = sm.float32
    if wide:
        dt = sm.float64
    return x.to(dt)


def test_device_and_dtype_annotations_and_defaults() -> None:
    """``device: torch.device = torch.device("cpu")`` and ``Optional[torch.dtype]``
    (torchaudio's resample kernel, fairseq's mask_for_xformers); a dtype bound in one
    branch is the If's value (it was the value before the If)."""
    s, x = sm.jit.script(_device_and_dtype), sm.ones(1)
    for args in ((), (sm.device("cpu"), sm.int32), (_CPU, sm.float32)):
        got, want = s(x, *args), _device_and_dtype(x, *args)
        assert got.dtype == want.dtype and np.allclose(got.numpy(), want.numpy())
    b = sm.jit.script(_dtype_in_a_branch)
    assert b(x, True).dtype == sm.float64 and b(x, False).dtype == sm.float32


def _norms(normalized: Union[str, bool]) -> Tuple[bool, bool]:
    frame, window = False, False
    if sm.jit.isinstance(normalized, str):
        if normalized not in ["frame_length", "window"]:
            raise ValueError("Invalid normalized parameter: {}".format(normalized))
        frame = normalized == "frame_length"
        window = normalized == "window"
    elif isinstance(normalized, bool):
        if normalized:
            window = True
        if normalized is True:
            frame = True
    return frame, window


def test_a_union_of_scalars_is_told_apart_at_run_time() -> None:
    """``Union[bool, str]`` (torchaudio's spectrogram ``normalized``): ``jit.isinstance``,
    ``==``, truth and ``is True`` on it, as Python."""
    s = sm.jit.script(_norms)
    for v in (False, True, "window", "frame_length"):
        assert s(v) == _norms(v), v
    with pytest.raises(ValueError, match="Invalid normalized parameter: x"):
        s("x")


def _bool_ops(a: bool, b: bool, i: int, j: int) -> Tuple[bool, bool, bool, int, int, int]:
    assert a ^ b
    return a ^ b, a & b, a | b, i & j, i | j, i ^ j


def _tensor_bound(x: sm.Tensor, n: sm.Tensor) -> sm.Tensor:
    return x[:, :n] * sm.is_complex(x)


def _real_part(x: sm.Tensor) -> sm.Tensor:
    return x.real + x.T.imag


def test_bool_operators_tensor_slice_bounds_is_complex_and_real() -> None:
    """``a ^ b`` of bools (fairseq), a 0-dim tensor as a slice bound (VITS),
    ``torch.is_complex`` (torchaudio's TimeStretch) and ``.code`` writing ``x.real`` as the
    property it is (torchaudio's _tik_reg)."""
    s = sm.jit.script(_bool_ops)
    assert s(True, False, 6, 3) == _bool_ops(True, False, 6, 3)
    with pytest.raises(AssertionError):
        s(True, True, 1, 1)
    x = sm.arange(12.).reshape(3, 4)
    for k in (1, 3):
        assert sm.jit.script(_tensor_bound)(x, sm.tensor(k)).shape == (3, k)
    assert not sm.is_complex(x) and sm.is_complex(x.to(sm.complex64))
    c = sm.jit.script(_real_part)
    assert "x.real\n" in c.code and ".real()" not in c.code
    z = sm.ones(2, 2, dtype=sm.complex64)
    np.testing.assert_allclose(c(z).numpy(), _real_part(z).numpy())


def _floating_only(x: sm.Tensor) -> sm.Tensor:
    return x * 2 if sm.is_floating_point(x) else x


def test_top_level_is_floating_point() -> None:
    """``torch.is_floating_point(t)`` (torchvision's ``adjust_contrast``), eager and scripted."""
    s = sm.jit.script(_floating_only)
    for x in (sm.ones(2), sm.ones(2, dtype=sm.int64), sm.ones(2, dtype=sm.float64)):
        assert sm.is_floating_point(x) == x.is_floating_point()
        np.testing.assert_array_equal(s(x).numpy(), _floating_only(x).numpy())
