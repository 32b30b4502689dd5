"""scriptmod.save / scriptmod.load: safetensors files, nested structures, no pickle."""
import io
import json
import struct
from collections import OrderedDict

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.nn import Parameter
from scriptmod.serialization import (SerializationError, load, load_safetensors, save,
                                     save_safetensors)


def net():
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def test_state_dict_round_trip(tmp_path):
    m = net()
    path = tmp_path / "m.pt"
    save(m.state_dict(), path)
    sd = load(path)
    assert isinstance(sd, OrderedDict) and list(sd) == list(m.state_dict())
    for k, v in m.state_dict().items():
        assert sd[k].dtype is v.dtype and np.array_equal(sd[k].numpy(), v.numpy())
    m2 = net()
    m2.load_state_dict(sd)
    x = sm.randn(5, 3)
    np.testing.assert_array_equal(m2.eval()(x).detach().numpy(), m.eval()(x).detach().numpy())


def test_nested_checkpoint_with_int_keys_and_scalars():
    t = sm.randn(2, 2)
    ckpt = {
        "model": OrderedDict(w=t),
        "optim": {"state": {0: {"step": sm.tensor(3.0), "exp_avg": sm.zeros(2)}},
                  "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0],
                                    "amsgrad": False, "name": None}]},
        "epoch": 7, "loss": float("inf"), "tag": "run-1", "cplx": 1 + 2j,
        "shape": sm.Size([2, 3]), "dtype": sm.bfloat16, "device": sm.device("cpu"),
        "same": t, "np": np.float32(1.5),
    }
    buf = io.BytesIO()
    save(ckpt, buf)
    out = load(io.BytesIO(buf.getvalue()))
    assert list(out["optim"]["state"]) == [0]
    assert out["optim"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert out["optim"]["param_groups"][0]["params"] == [0]
    assert out["optim"]["param_groups"][0]["name"] is None
    assert out["epoch"] == 7 and out["loss"] == float("inf") and out["tag"] == "run-1"
    assert out["cplx"] == 1 + 2j and out["shape"] == sm.Size([2, 3])
    assert out["dtype"] is sm.bfloat16 and out["device"] == sm.device("cpu")
    assert out["np"] == 1.5
    assert isinstance(out["model"], OrderedDict) and type(out["optim"]) is dict
    assert out["same"] is out["model"]["w"]                 # one tensor stored once
    assert float(out["optim"]["state"][0]["step"]) == 3.0


def test_dtypes_including_bfloat16_and_flags(tmp_path):
    vals = {d.name: sm.ones(2, 3, dtype=d) for d in
            (sm.float32, sm.float64, sm.float16, sm.bfloat16, sm.int64, sm.int8, sm.uint8,
             sm.bool, sm.complex64)}
    vals["param"] = Parameter(sm.randn(3))
    vals["frozen"] = Parameter(sm.randn(3), requires_grad=False)
    vals["leaf"] = sm.randn(2, requires_grad=True)
    vals["scalar"] = sm.tensor(4.0)
    vals["empty"] = sm.zeros(0, 3)
    save(vals, tmp_path / "d.st")
    out = load(tmp_path / "d.st")
    for k, v in vals.items():
        assert out[k].dtype is v.dtype and tuple(out[k].shape) == tuple(v.shape), k
        assert np.array_equal(np.asarray(out[k].detach().numpy(), dtype=np.complex128),
                              np.asarray(v.detach().numpy(), dtype=np.complex128)), k
    assert isinstance(out["param"], Parameter) and out["param"].requires_grad
    assert isinstance(out["frozen"], Parameter) and not out["frozen"].requires_grad
    assert out["leaf"].requires_grad and not isinstance(out["leaf"], Parameter)


def test_file_is_standard_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    save({"a": {"w": sm.arange(4, dtype=sm.float32)}, "b": sm.ones(2, dtype=sm.int64)},
         tmp_path / "f.safetensors")
    arrays = st.load_file(str(tmp_path / "f.safetensors"))
    assert sorted(arrays) == ["a.w", "b"] and arrays["a.w"].tolist() == [0, 1, 2, 3]
    st.save_file({"x": np.arange(3, dtype=np.float32)}, str(tmp_path / "g.safetensors"))
    assert load(tmp_path / "g.safetensors")["x"].tolist() == [0.0, 1.0, 2.0]
    assert load_safetensors(tmp_path / "g.safetensors")["x"].tolist() == [0.0, 1.0, 2.0]


def test_torch_reads_our_bfloat16(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors.torch")
    from safetensors.torch import load_file
    save_safetensors({"w": sm.tensor([1.5, -2.0], dtype=sm.bfloat16)}, tmp_path / "b.st")
    w = load_file(str(tmp_path / "b.st"))["w"]
    assert w.dtype == torch.bfloat16 and w.tolist() == [1.5, -2.0]


def test_unsupported_objects_are_refused():
    with pytest.raises(TypeError, match=r"cannot store object at a.1"):
        save({"a": [1, object()]}, io.BytesIO())
    with pytest.raises(TypeError, match="unexpected keyword"):
        save({}, io.BytesIO(), foo=1)


def _raw(header: dict, data: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("blob, match", [
    (b"abc", "too short"),
    (struct.pack("<Q", 10 ** 12) + b"{}", "header length"),
    (struct.pack("<Q", 3) + b"{x}", "not valid JSON"),
    (_raw({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8), "offsets"),
    (_raw({"t": {"dtype": "XX", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "bad header"),
    (_raw({"__metadata__": {"structure": '{"T": "nope"}', "scriptmod_format_version": "1"}}),
     "missing tensor"),
    (_raw({"__metadata__": {"structure": '{"evil": 1}', "scriptmod_format_version": "1"}}),
     "unknown structure tag"),
    (_raw({"__metadata__": {"structure": "1", "scriptmod_format_version": "99"}}),
     "format version"),
])
def test_hostile_or_broken_files_raise_clearly(blob, match):
    with pytest.raises(SerializationError, match=match):
        load(io.BytesIO(blob))


def test_map_location(tmp_path):
    save({"w": sm.ones(2)}, tmp_path / "m.st")
    assert load(tmp_path / "m.st", map_location="cpu")["w"].device.type == "cpu"
    assert load(tmp_path / "m.st", map_location={"cuda:0": "cpu"})["w"].device.type == "cpu"
    seen = []
    load(tmp_path / "m.st", map_location=lambda t, loc: seen.append(loc))
    assert seen == ["cpu"]
    from scriptmod.runtime.arrays import cuda_available
    if not cuda_available():
        with pytest.raises(RuntimeError, match="map_location='cpu'"):
            load(tmp_path / "m.st", map_location="cuda")


def test_single_tensor_and_weights_only_flag(tmp_path):
    save(sm.arange(3), tmp_path / "t.st")
    t = load(tmp_path / "t.st", weights_only=True)
    assert t.tolist() == [0, 1, 2] and t.dtype is sm.int64


def test_save_and_load_weights(tmp_path):
    m = net()
    m.save_weights(tmp_path / "w.safetensors")
    m2 = net()
    res = m2.load_weights(tmp_path / "w.safetensors")
    assert repr(res) == "<All keys matched successfully>"
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert np.array_equal(a.numpy(), b.numpy())
    st = pytest.importorskip("safetensors.numpy")
    assert sorted(st.load_file(str(tmp_path / "w.safetensors"))) == sorted(m.state_dict())
