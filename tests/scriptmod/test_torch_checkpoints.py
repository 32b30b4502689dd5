"""``scriptmod.load`` on files PyTorch writes (``torch.save`` zip checkpoints, safetensors), and
on hostile pickles that must be refused without running anything. torch writes the files in
the test run; the loader itself never imports torch."""
from __future__ import annotations

import io
import pickle
import subprocess
import sys
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.serialization import SerializationError

torch = pytest.importorskip("torch")
tnn = torch.nn


def as_np(t) -> np.ndarray:
    """Values of a torch or scriptmod tensor as NumPy (bfloat16 through float32)."""
    if isinstance(t, torch.Tensor):
        return (t.float() if t.dtype == torch.bfloat16 else t).detach().numpy()
    return np.asarray((t.float() if t.dtype == sm.bfloat16 else t).detach().numpy())


def saved(obj, tmp_path, name="ckpt.pt", **kw):
    path = tmp_path / name
    torch.save(obj, path, **kw)
    return path


# ---- real models: torch saves, scriptmod loads into the same architecture ------------------
def convnet(n):
    return n.Sequential(n.Conv2d(3, 4, 3, padding=1), n.BatchNorm2d(4), n.ReLU(), n.MaxPool2d(2),
                        n.Flatten(), n.Linear(4 * 4 * 4, 5), n.LayerNorm(5))


def mlp(n):
    return n.Sequential(n.Linear(6, 8), n.BatchNorm1d(8), n.GELU(), n.Linear(8, 3), n.PReLU())


class Attention:
    """The same two-layer attention block in either namespace."""

    def __new__(cls, n):
        class Block(n.Module):
            def __init__(self):
                super().__init__()
                self.emb = n.Embedding(11, 8)
                self.attn = n.MultiheadAttention(8, 2, batch_first=True)
                self.norm = n.LayerNorm(8)

            def forward(self, ids):
                x = self.emb(ids)
                return self.norm(x + self.attn(x, x, x, need_weights=False)[0])
        return Block()


MODELS = {
    "convnet": (convnet, lambda: np.random.default_rng(0).standard_normal((2, 3, 8, 8))),
    "mlp": (mlp, lambda: np.random.default_rng(1).standard_normal((4, 6))),
    "attention": (Attention, lambda: np.random.default_rng(2).integers(0, 11, (2, 5))),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_state_dicts_of_torch_models_load_into_the_same_scriptmod_model(name, tmp_path):
    build, data = MODELS[name]
    torch.manual_seed(0)
    tm = build(tnn)
    x = data()
    tx = torch.from_numpy(x.astype(np.float32) if x.dtype.kind == "f" else x)
    tm.train()(tx)                      # non-trivial BatchNorm running statistics
    tm.eval()
    path = saved(tm.state_dict(), tmp_path)

    sd = sm.load(path)
    assert list(sd) == list(tm.state_dict())
    model = build(nn).eval()
    assert not model.load_state_dict(sd).missing_keys
    with torch.no_grad(), sm.no_grad():
        expected = tm(tx).numpy()
        got = model(sm.tensor(tx.numpy())).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_state_dict_metadata_and_strict_errors(tmp_path):
    tm = tnn.Sequential(tnn.Linear(2, 3), tnn.BatchNorm1d(3))
    sd = sm.load(saved(tm.state_dict(), tmp_path))
    assert isinstance(sd, OrderedDict)
    assert sd._metadata == tm.state_dict()._metadata          # versions, as torch keeps them
    assert sd["1.num_batches_tracked"].dtype == sm.int64
    with pytest.raises(RuntimeError, match="Missing key"):
        nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1)).load_state_dict(sd)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool, torch.complex64, torch.complex128])
def test_dtypes(dtype, tmp_path):
    t = (torch.randn(3, 4) * 10).to(dtype) if dtype != torch.bool else torch.rand(3, 4) > 0.5
    if dtype.is_complex:
        t = torch.complex(torch.randn(3, 4), torch.randn(3, 4)).to(dtype)
    got = sm.load(saved({"t": t, "scalar": t[1, 2].clone()}, tmp_path))
    assert got["t"].dtype.name == str(dtype).replace("torch.", "")
    np.testing.assert_array_equal(as_np(got["t"]), as_np(t))
    assert got["scalar"].shape == () and as_np(got["scalar"]) == as_np(t[1, 2])


def test_views_share_storage_and_strided_tensors_keep_their_values(tmp_path):
    base = torch.arange(24.0).reshape(4, 6)
    obj = {"base": base, "row": base[2], "tail": base.view(-1)[5:17], "t": base.t(),
           "step": base[::2, 1::3], "narrow": base.narrow(1, 2, 3), "expand": base[0:1].expand(5, 6),
           "empty": base[:0], "scalar": base[1, 1]}
    got = sm.load(saved(obj, tmp_path))
    for k, v in obj.items():
        assert got[k].shape == tuple(v.shape), k
        np.testing.assert_array_equal(as_np(got[k]), v.numpy(), err_msg=k)
    # contiguous views are views of the one storage, as in torch
    assert np.shares_memory(got["row"]._data, got["base"]._data)
    assert np.shares_memory(got["tail"]._data, got["base"]._data)
    got["base"].mul_(2)
    np.testing.assert_array_equal(as_np(got["row"]), 2 * base[2].numpy())


def test_nested_checkpoints_come_back_as_plain_containers(tmp_path):
    tm = tnn.Linear(3, 2)
    opt = torch.optim.Adam(tm.parameters(), lr=0.1)
    tm(torch.randn(4, 3)).sum().backward()
    opt.step()
    obj = {"model": tm.state_dict(), "optim": opt.state_dict(), "epoch": 3, "loss": 0.25,
           "name": "run-1", "shape": torch.Size([2, 3]), "dtype": torch.float16,
           "device": torch.device("cpu"), "tags": {"a", "b"}, "pair": (1, [2, None]),
           "blob": b"\x00\xffraw", "z": 1 - 2j, "mask": torch.tensor([True, False])}
    got = sm.load(saved(obj, tmp_path))
    assert got["epoch"] == 3 and got["loss"] == 0.25 and got["name"] == "run-1"
    assert got["shape"] == sm.Size([2, 3]) and got["dtype"] == sm.float16
    assert got["device"] == sm.device("cpu") and got["tags"] == {"a", "b"}
    assert got["pair"] == (1, [2, None]) and got["blob"] == b"\x00\xffraw" and got["z"] == 1 - 2j
    state = got["optim"]["state"][0]
    np.testing.assert_allclose(as_np(state["exp_avg"]), opt.state_dict()["state"][0]["exp_avg"])
    assert got["optim"]["param_groups"][0]["lr"] == 0.1
    model = nn.Linear(3, 2)
    model.load_state_dict(got["model"])
    np.testing.assert_allclose(as_np(model.weight), tm.weight.detach().numpy())


def test_parameters_and_requires_grad(tmp_path):
    obj = {"p": tnn.Parameter(torch.ones(2)), "frozen": tnn.Parameter(torch.ones(2), False),
           "leaf": torch.zeros(3, requires_grad=True), "plain": torch.zeros(1)}
    got = sm.load(saved(obj, tmp_path))
    assert isinstance(got["p"], nn.Parameter) and got["p"].requires_grad
    assert isinstance(got["frozen"], nn.Parameter) and not got["frozen"].requires_grad
    assert got["leaf"].requires_grad and not isinstance(got["leaf"], nn.Parameter)
    assert not got["plain"].requires_grad


def test_one_tensor_and_a_list_at_the_root(tmp_path):
    assert as_np(sm.load(saved(torch.arange(3), tmp_path))).tolist() == [0, 1, 2]
    got = sm.load(saved([torch.ones(1), torch.zeros(2)], tmp_path))
    assert isinstance(got, list) and [t.shape for t in got] == [(1,), (2,)]


def test_map_location_weights_only_and_file_objects(tmp_path):
    path = saved({"w": torch.ones(2)}, tmp_path)
    seen = []
    sm.load(path, map_location=lambda t, loc: seen.append(loc))
    assert seen == ["cpu"]
    for kw in ({"map_location": "cpu"}, {"map_location": {"cuda:0": "cpu"}},
               {"weights_only": True}, {"weights_only": False}, {"mmap": True}):
        assert as_np(sm.load(path, **kw)["w"]).tolist() == [1.0, 1.0], kw
    with open(path, "rb") as fh:
        assert sm.load(fh)["w"].shape == (2,)
    assert sm.load(path.read_bytes())["w"].shape == (2,)
    with pytest.raises(TypeError, match="unexpected keyword"):
        sm.load(path, bogus=1)


def _rewrite(path, edit) -> bytes:
    """The zip at ``path`` with ``edit(name, data) -> data`` applied to every entry."""
    src = zipfile.ZipFile(path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in src.namelist():
            zf.writestr(name, edit(name, src.read(name)))
    return buf.getvalue()


def test_big_endian_checkpoints(tmp_path):
    obj = {"f": torch.randn(3), "h": torch.randn(2).half(), "b": torch.randn(2).bfloat16(),
           "c": torch.randn(2, dtype=torch.complex64), "i": torch.arange(3), "u": torch.ones(2).byte()}
    path = saved(obj, tmp_path)
    order = {f"ckpt/data/{k}": v for k, v in _storage_keys(path).items()}

    def to_big(name, data):
        if name == "ckpt/byteorder":
            return b"big"
        if name in order:
            unit = obj[order[name]].element_size() // (2 if obj[order[name]].is_complex() else 1)
            return np.frombuffer(data, f"<u{unit}").astype(f">u{unit}").tobytes() if unit > 1 else data
        return data
    got = sm.load(_rewrite(path, to_big))
    for k, v in obj.items():
        np.testing.assert_array_equal(as_np(got[k]), as_np(v), err_msg=k)


def _storage_keys(path) -> dict[str, str]:
    """storage key -> tensor name, from the order torch writes them (one storage each)."""
    names = list(torch.load(path))
    return {str(i): n for i, n in enumerate(names)}


def test_safetensors_written_by_torch(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tm = convnet(tnn).eval()
    sd = {k: v.contiguous() for k, v in tm.state_dict().items()}
    sd["bf16"] = torch.randn(3).bfloat16()
    path = tmp_path / "model.safetensors"
    st.save_file(sd, path, metadata={"who": "torch"})
    got = sm.load(path)
    assert set(got) == set(sd)
    for k, v in sd.items():
        np.testing.assert_array_equal(as_np(got[k]), as_np(v), err_msg=k)
    model = convnet(nn).eval()
    model.load_state_dict({k: v for k, v in got.items() if k != "bf16"})
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad(), sm.no_grad():
        np.testing.assert_allclose(model(sm.tensor(x.numpy())).numpy(), tm(x).numpy(), atol=1e-5)
    assert set(sm.serialization.load_safetensors(path)) == set(sd)
    assert as_np(sm.load(path, mmap=True)["bf16"]).tolist() == as_np(sd["bf16"]).tolist()


def test_safetensors_written_by_scriptmod_are_read_by_the_library(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    w = sm.randn(3, 2).to(sm.bfloat16)
    sm.save({"w": w, "i": sm.arange(5), "h": sm.ones(3, dtype=sm.float16)}, tmp_path / "m.st")
    back = st.load_file(tmp_path / "m.st")
    assert back["w"].dtype == torch.bfloat16
    np.testing.assert_array_equal(as_np(back["w"]), as_np(w))
    assert back["i"].tolist() == [0, 1, 2, 3, 4]


# ---- files that are not (safe) checkpoints ---------------------------------------------------
def test_unsupported_dtype_is_named(tmp_path):
    with pytest.raises(SerializationError, match=r"dtype torch\.uint16"):
        sm.load(saved({"t": torch.ones(2, dtype=torch.uint16)}, tmp_path))


def test_a_pickled_module_is_refused_with_the_way_out(tmp_path):
    with pytest.raises(pickle.UnpicklingError,
                       match=r"torch\.nn\.modules\.linear\.Linear.*state_dict\(\)"):
        sm.load(saved(tnn.Linear(2, 2), tmp_path))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")      # torch.jit.script / save
def test_torchscript_and_legacy_files_are_named(tmp_path):
    ts = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.script(tnn.Linear(2, 2)), ts)
    with pytest.raises(SerializationError, match="TorchScript archive.*torch.jit.load.*state_dict"):
        sm.load(ts)
    with pytest.raises(sm.jit.ArchiveError, match="TorchScript archive"):
        sm.jit.load(ts)
    legacy = saved({"w": torch.ones(2)}, tmp_path, "old.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(SerializationError, match="legacy non-zip format"):
        sm.load(legacy)


def test_each_loader_points_to_the_other(tmp_path):
    ckpt = saved({"w": torch.ones(2)}, tmp_path)
    with pytest.raises(sm.jit.ArchiveError, match=r"PyTorch checkpoint.*scriptmod\.load"):
        sm.jit.load(ckpt)
    sm.save({"w": sm.ones(2)}, tmp_path / "w.st")
    with pytest.raises(sm.jit.ArchiveError, match=r"safetensors file.*scriptmod\.load"):
        sm.jit.load(tmp_path / "w.st")
    sm.jit.save(sm.jit.trace(nn.Linear(2, 2), sm.ones(1, 2)), tmp_path / "m.smod")
    with pytest.raises(SerializationError, match=r"ScriptModule archive.*scriptmod\.jit\.load"):
        sm.load(tmp_path / "m.smod")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_inspect_names_the_format_and_lists_tensors(tmp_path, capsys):
    from scriptmod.cli import main
    ckpt = saved({"fc.weight": torch.ones(3, 2).half(), "step": torch.tensor(4)}, tmp_path)
    assert main(["inspect", str(ckpt)]) == 0
    out = capsys.readouterr().out
    assert "PyTorch checkpoint" in out and "fc.weight: float16[3, 2]" in out and "step: int64[]" in out
    ts = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.script(tnn.Linear(2, 2)), ts)
    assert main(["inspect", str(ts)]) == 1
    assert "TorchScript archive" in capsys.readouterr().err


def test_the_loader_never_imports_torch(tmp_path):
    path = saved({"w": torch.ones(2, dtype=torch.bfloat16)}, tmp_path)
    code = ("import sys, scriptmod; sd = scriptmod.load(sys.argv[1]); "
            "assert 'torch' not in sys.modules, 'torch was imported'; print(sd['w'].dtype)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "bfloat16" in out.stdout
