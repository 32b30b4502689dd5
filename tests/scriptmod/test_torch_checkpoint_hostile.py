"""Hostile ``torch.save``-style checkpoints: ``scriptmod.load`` reads them like
``torch.load(weights_only=True)`` and must refuse each with a ``SerializationError`` that says
what it refused, never importing a module or calling anything from the file. The files are
built by hand (no torch needed)."""
from __future__ import annotations

import builtins
import io
import os
import pickle
import struct
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

import scriptmod as sm
from scriptmod.serialization import SerializationError


# ---- building checkpoints by hand ------------------------------------------------------------
def _str(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(n: int) -> bytes:
    return b"J" + struct.pack("<i", n) if -2**31 <= n < 2**31 else \
        b"\x8a" + bytes([8]) + n.to_bytes(8, "little", signed=True)


def _tuple(items: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(_int(i) for i in items) + b"t"


def tensor_pickle(key="0", numel=4, size=(4,), stride=(1,), offset=0, storage="FloatStorage",
                  rebuild="_rebuild_tensor_v2", location="cpu") -> bytes:
    """The opcodes torch writes for one tensor: _rebuild_tensor_v2(persistent storage, ...)."""
    pid = b"(" + _str("storage") + f"ctorch\n{storage}\n".encode() + _str(key) + _str(location) \
        + _int(numel) + b"tQ"
    return (f"ctorch._utils\n{rebuild}\n".encode() + b"(" + pid + _int(offset) + _tuple(size)
            + _tuple(stride) + b"\x89" + b"ccollections\nOrderedDict\n)R" + b"tR")


def state_dict_pickle(**tensors: bytes) -> bytes:
    body = b"".join(_str(k) + v for k, v in tensors.items())
    return b"\x80\x02ccollections\nOrderedDict\n)R(" + body + b"u."


def checkpoint(pkl: bytes, storages: dict[str, bytes] | None = None, prefix="archive") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{prefix}/data.pkl", pkl)
        zf.writestr(f"{prefix}/byteorder", "little")
        for key, data in (storages or {}).items():
            zf.writestr(f"{prefix}/data/{key}", data)
        zf.writestr(f"{prefix}/version", "3\n")
    return buf.getvalue()


FOUR = np.arange(4, dtype=np.float32).tobytes()


def test_the_hand_built_checkpoint_loads():
    """The builder is right: the same bytes with an allowed tensor load to the values."""
    sd = sm.load(checkpoint(state_dict_pickle(w=tensor_pickle()), {"0": FOUR}))
    assert sd["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    sd = sm.load(checkpoint(state_dict_pickle(w=tensor_pickle(size=(2,), stride=(2,))),
                            {"0": FOUR}))
    assert sd["w"].tolist() == [0.0, 2.0]


def test_a_checkpoint_saved_on_cuda_needs_a_map_location_without_cuda():
    from scriptmod.runtime.arrays import cuda_available
    ckpt = checkpoint(state_dict_pickle(w=tensor_pickle(location="cuda:0")), {"0": FOUR})
    seen = []
    sm.load(ckpt, map_location=lambda t, loc: seen.append(loc))
    assert seen == ["cuda:0"]
    assert sm.load(ckpt, map_location="cpu")["w"].device.type == "cpu"
    assert sm.load(ckpt, map_location={"cuda:0": "cpu"})["w"].device.type == "cpu"
    if not cuda_available():
        with pytest.raises(RuntimeError, match="map_location='cpu'"):
            sm.load(ckpt)
    else:
        assert sm.load(ckpt)["w"].device.type == "cuda"


# ---- pickles that would run code -----------------------------------------------------------
class _Reduce:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _hostile(marker) -> dict[str, tuple[object, str]]:
    cmd = f"touch {marker}"
    return {
        "os.system": (_Reduce(os.system, cmd), f"{os.system.__module__}.system"),
        "builtins.eval": (_Reduce(builtins.eval, f"open({str(marker)!r}, 'w')"), "builtins.eval"),
        "builtins.exec": (_Reduce(builtins.exec, f"open({str(marker)!r}, 'w')"), "builtins.exec"),
        "subprocess.Popen": (_Reduce(subprocess.Popen, ["touch", str(marker)]),
                             "subprocess.Popen"),
        "nested": ({"model": {"w": _Reduce(os.system, cmd)}}, "system"),
    }


@pytest.mark.parametrize("case", ["os.system", "builtins.eval", "builtins.exec",
                                  "subprocess.Popen", "nested"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_code_running_pickles_are_refused_and_never_run(case, protocol, tmp_path):
    marker = tmp_path / "pwned"
    obj, name = _hostile(marker)[case]
    pkl = pickle.dumps(obj, protocol=protocol)
    for blob in (checkpoint(pkl), pkl):              # inside a checkpoint, and a bare pickle
        path = tmp_path / "evil.pt"
        path.write_bytes(blob)
        with pytest.raises(SerializationError) as info:
            sm.load(path, weights_only=False)
        if blob is not pkl:
            assert name in str(info.value) and "Nothing was imported or run" in str(info.value)
            assert isinstance(info.value, pickle.UnpicklingError)
        else:
            assert "plain pickle file" in str(info.value)
    time.sleep(0.05)
    assert not marker.exists()


def test_an_unknown_module_is_never_imported(tmp_path):
    mod = "scriptmod_hostile_test_module"
    (tmp_path / f"{mod}.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        pkl = b"\x80\x02c" + f"{mod}\nfunc\n".encode() + b")R."
        with pytest.raises(SerializationError, match=f"refused the global '{mod}.func'"):
            sm.load(checkpoint(pkl))
        stack_global = b"\x80\x04" + _str(mod) + _str("func") + b"\x93)R."
        with pytest.raises(SerializationError, match=f"'{mod}.func'"):
            sm.load(checkpoint(stack_global))
    finally:
        sys.path.remove(str(tmp_path))
    assert mod not in sys.modules and not (tmp_path / "imported").exists()


@pytest.mark.parametrize("pkl, words", [
    # an allowed global used in a way torch never does: setting attributes on a tensor, calling
    # a non-allowed object, opcodes that instantiate classes by name
    (b"\x80\x02" + tensor_pickle() + b"}" + _str("__class__") + b"Ns" + b"b.", "state"),
    (b"\x80\x02ccollections\nOrderedDict\n)R}" + _str("items") + b"Nsb.", "_metadata"),
    (b"\x80\x02ctorch\nfloat32\n)R.", "not an allowed function"),
    (b"\x80\x02(ccollections\nOrderedDict\no.", "opcode OBJ"),
    (b"\x80\x02(ibuiltins\nlist\n.", "opcode INST"),
    (b"\x80\x02\x82\x01.", "opcode EXT1"),
    (b"\x80\x02cbuiltins\ngetattr\n.", "builtins.getattr"),
    (b"\x80\x02c__builtin__\nsetattr\n.", "builtins.setattr"),
    (b"\x80\x02ctorch\nload\n.", "torch.load"),
    (b"\x80\x02ctorch._utils\n_rebuild_from_type_v2\n.", "_rebuild_from_type_v2"),
    (b"\x80\x02c_codecs\nencode\n" + _str("x") + _str("rot13") + b"\x86R.", "latin1"),
])
def test_allowed_pieces_cannot_be_misused(pkl, words):
    with pytest.raises(SerializationError, match=words):
        sm.load(checkpoint(pkl, {"0": FOUR}))


# ---- storages and sizes that lie -------------------------------------------------------------
@pytest.mark.parametrize("tensor, storages, words", [
    (tensor_pickle(key="../../etc/passwd"), {}, "refers to the storage"),
    (tensor_pickle(key="7"), {"0": FOUR}, "entry 'archive/data/7' is missing"),
    (tensor_pickle(numel=2**60), {"0": FOUR}, "declares 1152921504606846976 elements"),
    (tensor_pickle(numel=8), {"0": FOUR}, "holds 16 bytes"),
    (tensor_pickle(size=(5,)), {"0": FOUR}, "does not fit its storage"),
    (tensor_pickle(offset=3, size=(2,)), {"0": FOUR}, "does not fit"),
    (tensor_pickle(size=(2, 2), stride=(3, 1)), {"0": FOUR}, "does not fit"),
    (tensor_pickle(size=(2**31 - 1, 2**31 - 1), stride=(0, 0)), {"0": FOUR}, "does not fit"),
    (tensor_pickle(size=(2, 2), stride=(1,)), {"0": FOUR}, "differ in length"),
    (tensor_pickle(size=(-1,)), {"0": FOUR}, "non-negative ints"),
    (tensor_pickle(storage="QInt8Storage"), {"0": FOUR}, "torch.QInt8Storage"),
])
def test_lying_storages_are_refused_before_allocating(tensor, storages, words):
    with pytest.raises(SerializationError, match=words.replace("(", r"\(").replace(".", r"\.")):
        sm.load(checkpoint(state_dict_pickle(w=tensor), storages))


def test_two_tensors_of_one_storage_must_agree_on_its_dtype():
    pkl = state_dict_pickle(a=tensor_pickle(), b=tensor_pickle(storage="LongStorage", numel=2,
                                                               size=(2,)))
    with pytest.raises(SerializationError, match="storage '0'"):
        sm.load(checkpoint(pkl, {"0": FOUR}))


def test_truncated_and_corrupted_checkpoints(tmp_path):
    good = checkpoint(state_dict_pickle(w=tensor_pickle()), {"0": FOUR})
    for cut in range(1, len(good), 7):
        with pytest.raises(SerializationError):
            sm.load(good[:cut])
    pkl = state_dict_pickle(w=tensor_pickle())
    for cut in range(1, len(pkl) - 1):
        with pytest.raises(SerializationError):
            sm.load(checkpoint(pkl[:cut], {"0": FOUR}))


def test_zip_entries_that_lie_about_their_size():
    good = bytearray(checkpoint(state_dict_pickle(w=tensor_pickle()), {"0": FOUR}))
    central = good.index(b"PK\x01\x02")
    while not good[central + 46:].startswith(b"archive/data/0"):
        central = good.index(b"PK\x01\x02", central + 4)
    for field, size in ((24, 2**31), (24, 8), (20, 2)):   # uncompressed, compressed size
        bad = bytearray(good)
        struct.pack_into("<I", bad, central + field, size)
        with pytest.raises(SerializationError):
            sm.load(bytes(bad))


def test_a_memo_bomb_is_read_in_linear_time():
    """Billion laughs: each list holds the previous one ten times, 30 levels deep."""
    body = b"\x80\x02]q\x00"
    for i in range(1, 30):
        body += b"(" + b"h" + bytes([i - 1]) + (b"h" + bytes([i - 1])) * 9 + b"lq" + bytes([i])
    start = time.perf_counter()
    got = sm.load(checkpoint(body + b"."))
    assert time.perf_counter() - start < 2
    assert isinstance(got, list) and len(got) == 10


def test_a_deeply_nested_pickle_raises_cleanly():
    pkl = b"\x80\x02" + b"]" * 200_000 + b"a" * 199_999 + b"."
    with pytest.raises(SerializationError, match="nests too deeply"):
        sm.load(checkpoint(pkl))
