"""Public model source run on scriptmod with only its imports changed: torchvision's resnet18,
mobilenet_v2 and vgg11, and pytorch/examples' word-language TransformerModel. Each is built
twice from the same text, once on torch and once on scriptmod; torch's state dict loads into
ours with ``strict=True`` and the eval-mode outputs must agree.

The source is read where it is installed, not copied here: torchvision's files from the
installed ``torchvision`` package (found without importing it, so its version need not match
torch's; ``pip install --no-deps torchvision``), and the word-language model from a checkout of
pytorch/examples named by ``SCRIPTMOD_PYTORCH_EXAMPLES``. Tests whose source is absent skip.

What "only its imports changed" means here (``_port``): ``import torch`` / ``torch.nn`` /
``from torch import ...`` name scriptmod instead, and torchvision's package-relative imports
name one shim module. The shim runs torchvision's own ``models/_utils.py`` and
``ops/misc.py`` (ported the same way) and stands in only for the pretrained-weights registry
(``Weights``, ``WeightsEnum``, ``register_model``, ``_IMAGENET_CATEGORIES``, the transforms
presets) and logging, none of which a forward pass uses.
"""
import importlib.util
import itertools
import os
import re
import sys
import types
import warnings
from enum import Enum
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402


def _torchvision_dir():
    spec = importlib.util.find_spec("torchvision")
    return Path(next(iter(spec.submodule_search_locations))) if spec else None


TORCHVISION = _torchvision_dir()
EXAMPLES = os.environ.get("SCRIPTMOD_PYTORCH_EXAMPLES")
needs_torchvision = pytest.mark.skipif(TORCHVISION is None,
                                       reason="torchvision's source is not installed")
_IDS = itertools.count()

_IMPORTS = [   # (pattern, replacement) for one backend's import lines; {lib}: the backend
    (r"^(\s*)import torch\.nn\.functional as F$", r"\1import {lib}.nn.functional as F"),
    (r"^(\s*)import torch\.nn as nn$", r"\1import {lib}.nn as nn"),
    (r"^(\s*)import torch$", r"\1import {lib} as torch"),
    (r"^(\s*)from torch(\.[\w.]+)? import ", r"\1from {lib}\2 import "),
    (r"^(\s*)from \.+[\w.]* import ", r"\1from {shim} import "),
]


def _port(text, lib, shim):
    """``text`` with its torch imports naming ``lib`` and its relative imports ``shim``."""
    for pattern, repl in _IMPORTS:
        text = re.sub(pattern, repl.format(lib=lib, shim=shim), text, flags=re.M)
    return text


def _exec(path, lib, shim):
    """Run the ported source of ``path`` as a fresh module (registered, for dataclasses and
    pickling)."""
    name = f"_public_{Path(path).stem}_{lib}_{next(_IDS)}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    code = compile(_port(Path(path).read_text(), lib, shim), str(path), "exec")
    exec(code, module.__dict__)
    return module


class _WeightsEnum(Enum):
    """The registry's enum base: its members' values are ``_Weights``."""

    @classmethod
    def verify(cls, obj):
        if obj is not None:
            raise ValueError("these tests build models without pretrained weights")
        return obj


class _Weights:
    """The pretrained-weights record: kept, never downloaded."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _shim(lib):
    """torchvision's package-relative names for ``lib``: its real model helpers, and stand-ins
    for the weights registry and logging."""
    name = f"_public_torchvision_{lib}_{next(_IDS)}"
    shim = types.ModuleType(name)
    sys.modules[name] = shim
    shim.__dict__.update(
        Weights=_Weights, WeightsEnum=_WeightsEnum,
        register_model=lambda name=None: (lambda fn: fn), _IMAGENET_CATEGORIES=[],
        ImageClassification=lambda **kwargs: None, _log_api_usage_once=lambda obj: None,
        sequence_to_str=lambda seq, separate_last="": ", ".join(map(repr, seq)),
        _make_ntuple=lambda x, n: tuple(x) if isinstance(x, (list, tuple)) else (x,) * n)
    for helper in ("models/_utils.py", "ops/misc.py"):
        shim.__dict__.update({k: v for k, v in vars(_exec(TORCHVISION / helper, lib, name)).items()
                              if not k.startswith("__")})
    return name


def _build(path, lib, builder, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = _exec(path, lib, _shim(lib) if TORCHVISION else "")
        torch.manual_seed(0)
        return getattr(module, builder)(*args, **kwargs)


def _same_model(path, builder, *args, **kwargs):
    """(torch model, scriptmod model with torch's weights), both in eval mode."""
    reference = _build(path, "torch", builder, *args, **kwargs).eval()
    ours = _build(path, "scriptmod", builder, *args, **kwargs).eval()
    state = {k: sm.tensor(v.detach().numpy()) for k, v in reference.state_dict().items()}
    ours.load_state_dict(state, strict=True)
    return reference, ours


# vgg11's classifier holds 120M weights (Linear(25088, 4096)); drawing them with scriptmod's
# nn.init takes about a minute on 2 cores, so it runs with ``--long`` only
_VGG = pytest.param("vgg.py", "vgg11", marks=pytest.mark.slow, id="vgg11")


@needs_torchvision
@pytest.mark.parametrize("file, builder", [("resnet.py", "resnet18"),
                                           ("mobilenetv2.py", "mobilenet_v2"), _VGG])
def test_torchvision_classifier(file, builder, request):
    if builder == "vgg11" and not request.config.getoption("--long"):
        pytest.skip("vgg11 draws 120M initial weights: run with --long")
    reference, ours = _same_model(TORCHVISION / "models" / file, builder)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    with torch.no_grad(), sm.no_grad():
        want = reference(torch.from_numpy(x)).numpy()
        got = ours(sm.tensor(x)).numpy()
    assert got.shape == want.shape == (1, 1000)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def _word_language_model():
    if not EXAMPLES:
        pytest.skip("set SCRIPTMOD_PYTORCH_EXAMPLES to a pytorch/examples checkout")
    return Path(EXAMPLES) / "word_language_model" / "model.py"


# the model keeps its causal mask per length in Python state: the trace guards the length
@pytest.mark.filterwarnings("ignore:Converting a traced size to len")
def test_word_language_transformer_model():
    path = _word_language_model()
    reference, ours = _same_model(path, "TransformerModel", 50, 16, 2, 32, 2, dropout=0.2)
    tokens = np.random.default_rng(0).integers(0, 50, size=(7, 3))
    with torch.no_grad(), sm.no_grad():
        want = reference(torch.from_numpy(tokens)).numpy()
        got = ours(sm.tensor(tokens)).numpy()
        assert got.shape == (7, 3, 50)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        traced = sm.jit.trace(ours, sm.tensor(tokens))
        np.testing.assert_allclose(traced(sm.tensor(tokens)).numpy(), want, rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"])
def test_word_language_rnn_model(rnn_type):
    """pytorch/examples' RNNModel (issue 41): log-probabilities and the carried hidden state
    agree with torch's, eager and traced."""
    reference, ours = _same_model(_word_language_model(), "RNNModel", rnn_type, 50, 16, 24, 2,
                                  dropout=0.2)
    tokens = np.random.default_rng(0).integers(0, 50, size=(7, 3))
    with torch.no_grad(), sm.no_grad():
        want, want_hidden = reference(torch.from_numpy(tokens), reference.init_hidden(3))
        hidden = ours.init_hidden(3)
        got, got_hidden = ours(sm.tensor(tokens), hidden)
        traced, traced_hidden = sm.jit.trace(ours, (sm.tensor(tokens), hidden))(
            sm.tensor(tokens), hidden)
    states = [h if isinstance(h, tuple) else (h,)
              for h in (want_hidden, got_hidden, traced_hidden)]
    pairs = [(want, got), (want, traced), *zip(states[0], states[1]), *zip(states[0], states[2])]
    for w, g in pairs:
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5)
