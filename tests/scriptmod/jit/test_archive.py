"""Archives: save/load round trips of every reachable model, determinism, extra files, the
Module API on a loaded module, loading without the model's class, and ``scriptmod inspect``."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.bench.workloads import WORKLOADS
from scriptmod.cli import main as cli_main
from tests.scriptmod.jit.test_trace_models import LAYERS

REPO = Path(__file__).resolve().parents[3]


def _bytes(m) -> bytes:
    buf = io.BytesIO()
    jit.save(m, buf)
    return buf.getvalue()


def _assert_same_module(a, b, x) -> None:
    with sm.no_grad():
        np.testing.assert_array_equal(b(x).numpy(), a(x).numpy())
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_array_equal(sa[k].numpy(), sb[k].numpy())
        assert sa[k].dtype == sb[k].dtype
    assert b.code == a.code
    assert [n for n, _ in b.named_modules()] == [n for n, _ in a.named_modules()]
    assert [m.training for m in b.modules()] == [m.training for m in a.modules()]


def round_trip(model, x):
    """Trace, save, load; check outputs, state, code, and that re-saving is byte-identical."""
    traced = jit.trace(model, x)
    data = _bytes(traced)
    assert _bytes(traced) == data, "saving twice must give identical bytes"
    loaded = jit.load(io.BytesIO(data))
    assert isinstance(loaded, jit.ScriptModule)
    _assert_same_module(traced, loaded, x)
    assert _bytes(loaded) == data, "re-saving a loaded archive must give identical bytes"
    return traced, loaded, data


@pytest.mark.parametrize("wid", sorted(w for w in WORKLOADS if not WORKLOADS[w].script))
def test_workloads_round_trip(wid):
    sm.manual_seed(0)
    model, x = WORKLOADS[wid].build(quick=True)
    traced, loaded, _ = round_trip(model.eval(), x)
    assert str(loaded.graph) == str(traced.graph)
    assert str(loaded.inlined_graph) == str(traced.inlined_graph)
    shape, dim = list(x.shape), WORKLOADS[wid].batch_dim   # A128/A512: dim 0 stacks q, k, v
    shape[dim] = max(1, shape[dim] - 1)
    xb = sm.randn(*shape)                                   # another batch size still runs
    with sm.no_grad():
        np.testing.assert_array_equal(loaded(xb).numpy(), traced(xb).numpy())


class _Wrap(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.attn = layer

    def forward(self, q):
        return self.attn(q, q, q)[0]


@pytest.mark.parametrize("make,shape", LAYERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_layers_round_trip(make, shape):
    sm.manual_seed(0)
    layer = make().eval()
    if isinstance(layer, nn.MultiheadAttention):
        layer = _Wrap(layer).eval()
    round_trip(layer, sm.randn(*shape))


def test_embedding_round_trip():
    emb = nn.Embedding(10, 4, padding_idx=0)
    round_trip(emb, sm.tensor([[1, 2, 0], [4, 5, 9]]))


class Shared(nn.Module):
    """Shared submodule, tied parameter, non-persistent buffer, None slots, a tensor constant,
    a frozen parameter and a submodule left in training mode."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.again = self.fc                       # the same module under two names
        self.head = nn.Linear(4, 4)
        self.head.weight = self.fc.weight          # tied parameter
        self.frozen = nn.Parameter(sm.ones(4), requires_grad=False)
        self.register_buffer("scale", sm.full((4,), 2.0), persistent=False)
        self.register_buffer("steps", sm.zeros((), dtype=sm.int64))
        self.register_buffer("nothing", None)
        self.register_parameter("absent", None)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        h = self.again(self.fc(x)) * self.scale + self.frozen
        return self.drop(self.head(h)) + sm.tensor([1.0, 2.0, 3.0, 4.0])


def _shared_model():
    sm.manual_seed(1)
    m = Shared().eval()
    m.drop.train()
    return m


def test_shared_submodules_and_buffers_round_trip():
    x = sm.randn(3, 4)
    traced, loaded, data = round_trip(_shared_model(), x)
    assert loaded.again is loaded.fc
    assert loaded.head.weight is loaded.fc.weight
    assert "scale" not in loaded.state_dict() and "steps" in loaded.state_dict()
    assert loaded.scale is not None and loaded.nothing is None and loaded.absent is None
    assert not loaded.frozen.requires_grad and loaded.fc.weight.requires_grad
    assert isinstance(loaded.fc.weight, nn.Parameter)
    assert loaded.drop.training and not loaded.training
    assert loaded.state_dict()["steps"].dtype == sm.int64
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert sum(n.startswith("graphs/") for n in names) == len(list(traced.modules()))


def test_archive_is_deterministic_and_holds_no_paths(tmp_path):
    traced = jit.trace(_shared_model(), sm.randn(3, 4))
    traced.save(tmp_path / "a.smod")
    jit.save(traced, str(tmp_path / "b.smod"))
    a, b = (tmp_path / "a.smod").read_bytes(), (tmp_path / "b.smod").read_bytes()
    assert a == b
    zf = zipfile.ZipFile(io.BytesIO(a))
    assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in zf.infolist())
    text = "".join(zf.read(n).decode() for n in zf.namelist() if not n.endswith(".safetensors"))
    for marker in (str(REPO), str(tmp_path), os.path.expanduser("~"), "Traceback"):
        assert marker not in text
    for n in zf.namelist():
        if n.endswith(".ir"):
            for line in zf.read(n).decode().splitlines():
                if "  # " in line:
                    assert "/" not in line.split("  # ", 1)[1], line


def test_source_locations_keep_no_directories():
    traced = jit.trace(nn.Linear(3, 2), sm.randn(2, 3))
    for n in traced.graph.walk():
        n.source = "/home/someone/secret/model.py:12"
    text = zipfile.ZipFile(io.BytesIO(_bytes(traced))).read("graphs/m0/forward.ir").decode()
    assert "# model.py:12" in text and "secret" not in text


def test_manifest_describes_the_module():
    traced = jit.trace(_shared_model(), sm.randn(3, 4))
    man = json.loads(zipfile.ZipFile(io.BytesIO(_bytes(traced))).read("manifest.json"))
    assert man["format_version"] == 2 and man["producer"].startswith("scriptmod ")
    root = man["modules"][man["root"]]
    assert root["original_name"] == "Shared"
    assert {"sm::matmul", "prim::CallMethod"} <= set(man["ops"])
    assert root["methods"][0]["arg_names"] == ["x"]
    scale = next(b for b in root["buffers"] if b["name"] == "scale")
    assert scale["persistent"] is False
    shapes = {t["key"]: (t["dtype"], t["shape"]) for t in man["tensors"]}
    assert shapes["fc.weight"] == ("float32", [4, 4]) and "head.weight" not in shapes


def test_extra_files_round_trip(tmp_path):
    traced = jit.trace(nn.Linear(3, 2), sm.randn(2, 3))
    path = tmp_path / "m.smod"
    jit.save(traced, path, _extra_files={"notes.txt": "hello", "cfg/meta.json": b"\x00{}"})
    extra = {"notes.txt": "", "cfg/meta.json": None, "missing.txt": "unchanged"}
    jit.load(path, _extra_files=extra)
    assert extra == {"notes.txt": b"hello", "cfg/meta.json": b"\x00{}", "missing.txt": "unchanged"}
    again = tmp_path / "again.smod"
    jit.load(path).save(again, _extra_files={"notes.txt": "hello", "cfg/meta.json": b"\x00{}"})
    assert again.read_bytes() == path.read_bytes()
    for bad in ("../x", "/etc/passwd", "a/../../b", "C:/x", ""):
        with pytest.raises(jit.ArchiveError):
            jit.save(traced, io.BytesIO(), _extra_files={bad: "x"})


def test_loaded_module_has_the_module_api():
    x = sm.randn(3, 4)
    traced = jit.trace(_shared_model(), x)
    loaded = jit.load(io.BytesIO(_bytes(traced)))
    calls = []
    loaded.register_forward_hook(lambda mod, args, out: calls.append(out.shape))
    with sm.no_grad():
        before = loaded(x).numpy()
    assert calls == [(3, 4)]
    state = {k: v * 0 for k, v in loaded.state_dict().items()}
    loaded.load_state_dict(state)
    with sm.no_grad():
        np.testing.assert_allclose(loaded(x).numpy(), np.tile([1.0, 2.0, 3.0, 4.0], (3, 1)))
    assert not np.allclose(before, loaded(x).detach().numpy())
    loaded.train()
    assert all(m.training for m in loaded.modules())
    assert loaded.to("cpu") is loaded
    loaded.load_state_dict(traced.state_dict())
    out = loaded(x).sum()
    out.backward()
    assert loaded.fc.weight.grad is not None and loaded.frozen.grad is None
    assert "prim::CallMethod" in str(loaded.graph) and "sm::matmul" in str(loaded.inlined_graph)
    assert loaded.executor().stats["specializations"] >= 1


def test_map_location():
    traced = jit.trace(_shared_model(), sm.randn(3, 4))
    data = _bytes(traced)
    seen = []

    def mover(t, saved):
        seen.append(saved)
        return t
    for where in ("cpu", sm.device("cpu"), {"cuda:0": "cpu"}, mover):
        loaded = jit.load(io.BytesIO(data), map_location=where)
        assert all(p.device.type == "cpu" for p in loaded.parameters())
    assert seen and set(seen) == {"cpu"}


def test_script_function_round_trip():
    fn = jit.trace(lambda a, b: a * b + 1.0, (sm.randn(2, 3), sm.randn(2, 3)))
    loaded = jit.load(io.BytesIO(_bytes(fn)))
    a, b = sm.randn(2, 3), sm.randn(2, 3)
    np.testing.assert_array_equal(loaded(a, b).numpy(), fn(a, b).numpy())
    assert loaded.code == fn.code


def test_local_class_names_are_saved_readably():
    class Local(nn.Module):
        def forward(self, x):
            return x * 2.0
    traced = jit.trace(Local(), sm.randn(2, 2))
    loaded = jit.load(io.BytesIO(_bytes(traced)))
    assert "_locals_" in traced._qualified_name == loaded._qualified_name
    assert str(loaded.graph) == str(traced.graph) and loaded.code == traced.code


_MODEL_SOURCE = """
import scriptmod as sm
from scriptmod import nn

class Secret(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)
        self.register_buffer("shift", sm.arange(3).float())

    def forward(self, x):
        return sm.tanh(self.fc(x)) + self.shift
"""

_LOADER = """
import sys
import numpy as np
import scriptmod as sm
from scriptmod import jit
m = jit.load(sys.argv[1])
x = sm.load(sys.argv[2])["x"]
with sm.no_grad():
    np.testing.assert_array_equal(m(x).numpy(), sm.load(sys.argv[2])["y"].numpy())
assert "secret_model_for_archive" not in sys.modules
try:
    import secret_model_for_archive  # noqa: F401
except ImportError:
    print("OK", m.original_name)
"""


def test_load_in_a_process_that_never_sees_the_class(tmp_path, monkeypatch):
    src = tmp_path / "models"
    src.mkdir()
    (src / "secret_model_for_archive.py").write_text(textwrap.dedent(_MODEL_SOURCE))
    monkeypatch.syspath_prepend(str(src))
    import secret_model_for_archive as mod
    sm.manual_seed(0)
    model, x = mod.Secret().eval(), sm.randn(4, 5)
    traced = jit.trace(model, x)
    traced.save(tmp_path / "secret.smod")
    with sm.no_grad():
        sm.save({"x": x, "y": traced(x)}, tmp_path / "io.pt")
    sys.modules.pop("secret_model_for_archive", None)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)
    res = subprocess.run([sys.executable, "-c", _LOADER, str(tmp_path / "secret.smod"),
                          str(tmp_path / "io.pt")], capture_output=True, text=True, env=env,
                         cwd=str(REPO), timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "OK Secret"


@pytest.fixture(scope="module")
def saved_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("inspect") / "m.smod"
    jit.trace(_shared_model(), sm.randn(3, 4)).save(path, _extra_files={"notes.txt": "hi"})
    return path


@pytest.mark.parametrize("flag,expect", [
    (None, ["format version 2", "Shared", "fc.weight", "Float(4, 4)", "sm::matmul",
            "notes.txt", "again -> fc"]),
    ("--graph", ["graph(%self : __module__.", "prim::CallMethod"]),
    ("--inlined", ["sm::matmul"]),
    ("--code", ["def forward(self, x: Tensor) -> Tensor:"]),
    ("--manifest", ['"format": "scriptmod.archive"']),
])
def test_inspect_cli(saved_file, capsys, flag, expect):
    assert cli_main(["inspect", str(saved_file)] + ([flag] if flag else [])) == 0
    out = capsys.readouterr().out
    for text in expect:
        assert text in out, out
    if flag == "--inlined":
        assert "prim::CallMethod" not in out


def test_inspect_cli_reports_a_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.smod"
    bad.write_bytes(b"not a zip")
    assert cli_main(["inspect", str(bad)]) == 1
    assert "not a ScriptModule archive" in capsys.readouterr().err
