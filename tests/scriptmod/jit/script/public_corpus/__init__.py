"""Issue 42's corpus of public TorchScript code: functions and modules that torchvision,
fairseq, transformers and torchaudio ship scripted (``@torch.jit.script``, ``jit.script`` of
a module, or code their tests script), copied as published. Each entry's ``source`` names a file
of ``sources/`` that holds the original text (with a comment naming where it was copied
from and its licence); ``ported`` points its torch imports at scriptmod and changes nothing else,
which is all a user adapting it would do.

The tests (``test_public_corpus.py``) run every entry as plain Python on scriptmod, scripted
by ``scriptmod.jit.script``, and, where torch is installed, scripted by
``torch.jit.script`` from the unported source, and compare the three on the same inputs.

An entry's ``inputs(rng)`` gives the argument tuples as NumPy arrays and Python values
(``to_backend`` makes them tensors of either library); a module entry's ``build(ns)`` makes
the module from the loaded source's namespace, and the torch twin gets the scriptmod
module's ``state_dict``.
"""
from __future__ import annotations

import importlib.util
import itertools
import math
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np

# every entry's source is loaded below this header (the imports published code relies on)
HEADER = """\
import math
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union
import torch
import torch.nn.functional as F
from torch import nn, Tensor
"""


@dataclass(frozen=True)
class Entry:
    """One published function or module.

    ``name``: the test id; ``origin``: ``owner/repo path@commit`` it was copied from;
    ``source``: the file of ``sources/`` holding its text as published (with the helpers it
    calls, also copied; several entries may share a file); ``entry``:
    the function or class to script; ``inputs(rng)``: argument tuples; ``build(ns)``: for a
    module, the instance (``ns`` the loaded namespace), None for a function; ``rtol`` /
    ``atol``: the tolerance against torch (float32 results of another summation order);
    ``xfail``: why scriptmod does not script it yet (a strict xfail: fixing it fails the
    test until the mark goes)."""

    name: str
    origin: str
    source: str
    entry: str
    inputs: Callable[[np.random.Generator], list[tuple]]
    build: Callable[[Any], Any] | None = None
    rtol: float = 1e-5
    atol: float = 1e-5
    xfail: str = ""
    notes: str = ""


_IMPORTS = (
    (r"^import torch\.nn\.functional as F$", "import scriptmod.nn.functional as F"),
    (r"^from torch\.nn import functional as F$", "from scriptmod.nn import functional as F"),
    (r"^import torch\.nn as nn$", "from scriptmod import nn"),
    (r"^from torch import (.*)$", r"from scriptmod import \1"),
    (r"^from torch\.nn import (.*)$", r"from scriptmod.nn import \1"),
    (r"^import torch$", "import scriptmod as torch"),
)


def ported(source: str) -> str:
    """``source`` with its torch imports pointed at scriptmod; nothing else changes."""
    for old, new in _IMPORTS:
        source = re.sub(old, new, source, flags=re.M)
    return source


SOURCES = Path(__file__).parent / "sources"
_DIR = Path(tempfile.mkdtemp(prefix="scriptmod_public_corpus_"))
_count = itertools.count()


def load(entry: Entry, backend: str) -> ModuleType:
    """The entry's source (after ``HEADER``) imported as a fresh module from a real file (so
    ``inspect`` finds its lines): on torch as published (``backend="torch"``) or ported to
    scriptmod (``"scriptmod"``)."""
    text = HEADER + "\n" + (SOURCES / entry.source).read_text()
    if backend == "scriptmod":
        text = ported(text)
    slug = re.sub(r"\W", "_", entry.name)
    name = f"public_corpus_{backend}_{slug}_{next(_count)}"
    path = _DIR / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def target(entry: Entry, module: ModuleType) -> Any:
    """The function, or a fresh module instance, to script."""
    if entry.build is None:
        return getattr(module, entry.entry)
    return entry.build(module)


def to_backend(value: Any, lib: Any) -> Any:
    """NumPy arrays as ``lib``'s tensors (copies), containers item by item."""
    if isinstance(value, np.ndarray):
        return lib.from_numpy(np.array(value, copy=True))
    if isinstance(value, list):
        return [to_backend(v, lib) for v in value]
    if isinstance(value, tuple):
        return tuple(to_backend(v, lib) for v in value)
    if isinstance(value, dict):
        return {k: to_backend(v, lib) for k, v in value.items()}
    return value


def plain(value: Any) -> Any:
    """A result of either library as NumPy arrays (``(dtype name, array)``) and Python
    values, for comparing scriptmod with torch."""
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        a = value.detach().numpy()
        return ("tensor", str(a.dtype), np.array(a, copy=True))
    if isinstance(value, (list, tuple)):
        return type(value).__name__ if not hasattr(value, "_fields") else "namedtuple", \
            [plain(v) for v in value]
    if isinstance(value, dict):
        return "dict", {k: plain(v) for k, v in value.items()}
    return value


def assert_close(got: Any, want: Any, rtol: float, atol: float, where: str) -> None:
    """``plain`` results equal: tensors of the same dtype and shape, allclose; floats
    isclose; the rest equal."""
    if isinstance(want, tuple) and len(want) == 3 and want[0] == "tensor":
        assert isinstance(got, tuple) and got[0] == "tensor", f"{where}: want a tensor, got {got!r}"
        assert got[1] == want[1], f"{where}: dtype {got[1]} != {want[1]}"
        assert got[2].shape == want[2].shape, f"{where}: shape {got[2].shape} != {want[2].shape}"
        if want[2].dtype.kind in "fc":
            np.testing.assert_allclose(got[2], want[2], rtol=rtol, atol=atol, err_msg=where)
        else:
            np.testing.assert_array_equal(got[2], want[2], err_msg=where)
    elif isinstance(want, tuple) and len(want) == 2 and isinstance(want[1], list):
        assert isinstance(got, tuple) and len(got[1]) == len(want[1]), \
            f"{where}: want {want[0]} of {len(want[1])}, got {got!r}"
        for i, (g, w) in enumerate(zip(got[1], want[1])):
            assert_close(g, w, rtol, atol, f"{where}[{i}]")
    elif isinstance(want, tuple) and len(want) == 2 and want[0] == "dict":
        assert isinstance(got, tuple) and got[0] == "dict" and list(got[1]) == list(want[1]), \
            f"{where}: want dict keys {list(want[1])}, got {got!r}"
        for k in want[1]:
            assert_close(got[1][k], want[1][k], rtol, atol, f"{where}[{k!r}]")
    elif isinstance(want, float):
        assert isinstance(got, (float, int)) and math.isclose(got, want, rel_tol=rtol,
                                                              abs_tol=atol), \
            f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def entries() -> list[Entry]:
    """Every entry of the corpus, from its source files."""
    from . import fairseq, torchaudio, torchvision_ops, transformers
    return [*torchvision_ops.ENTRIES, *fairseq.ENTRIES, *transformers.ENTRIES,
            *torchaudio.ENTRIES]
