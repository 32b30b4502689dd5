"""Constructs public TorchScript code uses that ``jit.script`` once refused (issue 42): a tuple
literal as a value (``t.dtype in (float32, float64)``, torchvision's ``_upcast``), a name
rebound to another type in straight-line code (torchvision detection's
``concat_box_prediction_layers``, fairseq's sinusoidal embedding), an optional submodule
(``if self.downsample is not None``, torchvision's ``BasicBlock``) and ``out += identity``
on a submodule's result. Each runs scripted with the Python function's numbers; a type that
differs where control flow merges is still an error, but only where the name is read."""
from __future__ import annotations

import math
from typing import List

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
