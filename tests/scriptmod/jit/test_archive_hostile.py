"""Hostile archives: every malformed, truncated, corrupted or malicious file must raise
``ArchiveError`` with a message saying what is wrong; never another exception, a hang, an
allocation sized by a lie, or code from the file running."""
from __future__ import annotations

import hashlib
import io
import json
import pickle
import random
import struct
import zipfile

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import jit, nn
from scriptmod.jit import _archive_format as _archive
from scriptmod.jit.archive import _zip
from scriptmod.serialization import _as_bytes

ArchiveError = jit.ArchiveError


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.act = nn.GELU()
        self.register_buffer("shift", sm.arange(3).float())

    def forward(self, x):
        return self.act(self.fc(x)) + self.shift + sm.tensor([1.0, -1.0, 0.5])


X = sm.randn(2, 4)


@pytest.fixture(scope="module")
def good() -> bytes:
    sm.manual_seed(0)
    buf = io.BytesIO()
    jit.trace(Small().eval(), X).save(buf, _extra_files={"extra.txt": "AAAAAAAA"})
    return buf.getvalue()


@pytest.fixture(scope="module")
def expected(good: bytes) -> np.ndarray:
    with sm.no_grad():
        return jit.load(io.BytesIO(good))(X).numpy()


def entries(data: bytes) -> dict[str, bytes]:
    zf = zipfile.ZipFile(io.BytesIO(data))
    return {n: zf.read(n) for n in zf.namelist()}


def rezip(items: dict[str, bytes]) -> bytes:
    return _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()])


def with_manifest(data: bytes, edit) -> bytes:
    items = entries(data)
    man = json.loads(items["manifest.json"])
    edit(man)
    items["manifest.json"] = json.dumps(man).encode()
    return rezip(items)


def with_sealed_manifest(data: bytes, edit) -> bytes:
    """``edit`` applied to the manifest after its entry digests were computed (so they stay
    as edited), the manifest's own digest recomputed: only the checks of the fields run."""
    items = entries(data)
    man = json.loads(items["manifest.json"])
    edit(man)
    items["manifest.json"] = json.dumps(man).encode()
    items["manifest.sha256"] = hashlib.sha256(items["manifest.json"]).hexdigest().encode()
    return _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()], seal=False)


def replace_in(data: bytes, entry: str, old: str, new: str) -> bytes:
    items = entries(data)
    assert old.encode() in items[entry], (old, items[entry][:400])
    items[entry] = items[entry].replace(old.encode(), new.encode())
    return rezip(items)


def rejects(data: bytes, *words: str) -> str:
    with pytest.raises(ArchiveError) as info:
        jit.load(io.BytesIO(data))
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    return msg


# ---- not archives, truncation, corruption --------------------------------------------------
@pytest.mark.parametrize("blob", [b"", b"hello", b"PK\x03\x04" + b"\0" * 40, bytes(range(256)) * 8,
                                  b"\x80\x04K\x01."])
def test_not_a_zip(blob):
    rejects(blob, "not a ScriptModule archive")


def test_a_plain_safetensors_file_is_not_an_archive():
    rejects(_as_bytes({"w": sm.ones(3)}), "not a ScriptModule archive")


def test_truncated_files(good):
    for cut in sorted({1, 10, 100, len(good) // 3, len(good) // 2, len(good) - 30, len(good) - 1}
                      | set(range(0, len(good), max(1, len(good) // 40)))):
        with pytest.raises(ArchiveError):
            jit.load(io.BytesIO(good[:cut]))


def test_random_byte_mutations_load_correctly_or_raise_archive_error(good, expected):
    rng = random.Random(1234)
    outcomes = {"loaded": 0, "rejected": 0}
    for trial in range(200):
        data = bytearray(good)
        for _ in range(rng.choice((1, 1, 2, 8))):
            data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        try:
            m = jit.load(io.BytesIO(bytes(data)))
        except ArchiveError:
            outcomes["rejected"] += 1
            continue
        with sm.no_grad():   # CRCs matched: the content is the original's
            np.testing.assert_array_equal(m(X).numpy(), expected)
        outcomes["loaded"] += 1
    assert outcomes["rejected"] > 100


SYNTAX = '0[]{}",:%().-_a '


def test_random_mutations_of_entry_contents(good, expected):
    """Valid zip, corrupted content (manifest JSON, IR, code, safetensors header): the checks
    behind the container must catch it or the module must load and run."""
    rng = random.Random(99)
    items0 = entries(good)
    names = sorted(items0)
    loaded = 0
    for trial in range(200):
        items = dict(items0)
        name = rng.choice(names)
        data = bytearray(items[name])
        limit = min(len(data), 400) if name == "data.safetensors" else len(data)
        for _ in range(rng.choice((1, 2, 4))):
            i = rng.randrange(limit)
            data[i] = rng.randrange(256) if rng.random() < 0.5 else ord(rng.choice(SYNTAX))
        items[name] = bytes(data)
        try:
            m = jit.load(io.BytesIO(rezip(items)))
        except ArchiveError:
            continue
        loaded += 1
        with sm.no_grad():
            assert m(X).shape == expected.shape
    assert loaded < 100


def test_lying_sizes_in_the_zip_headers(good, expected):
    for name in ("data.safetensors", "manifest.json"):
        for delta in (-1, 1, 1000):
            rejects(patch_central(good, name, zipfile._CD_UNCOMPRESSED_SIZE, delta))
            rejects(patch_central(good, name, zipfile._CD_CRC, delta))
            try:     # a deflate stream ends by itself: extra compressed bytes may go unread
                m = jit.load(io.BytesIO(patch_central(good, name, zipfile._CD_COMPRESSED_SIZE,
                                                      delta)))
            except ArchiveError:
                continue
            with sm.no_grad():
                np.testing.assert_array_equal(m(X).numpy(), expected)


def patch_central(data: bytes, name: str, field: int, delta: int) -> bytes:
    """Add ``delta`` to one field of ``name``'s central directory record."""
    pos = data.find(b"PK\x01\x02")
    out = bytearray(data)
    while pos != -1:
        rec = list(struct.unpack(zipfile.structCentralDir, data[pos:pos + 46]))
        fname = data[pos + 46:pos + 46 + rec[zipfile._CD_FILENAME_LENGTH]].decode()
        if fname == name:
            rec[field] = (rec[field] + delta) % 2**32
            out[pos:pos + 46] = struct.pack(zipfile.structCentralDir, *rec)
            return bytes(out)
        pos = data.find(b"PK\x01\x02", pos + 4)
    raise AssertionError(name)


# ---- zip bombs and caps ---------------------------------------------------------------------
def test_zip_bomb_declared_size_is_rejected_before_reading(good, monkeypatch):
    items = entries(good)
    items["extra/extra.txt"] = b"\0" * (32 * 2**20)          # 32 MiB of zeros, ~32 KiB deflated
    bomb = rezip(items)
    assert len(bomb) < 200_000
    monkeypatch.setattr(_archive.LIMITS, "max_text_bytes", 2**20)
    rejects(bomb, "extra/extra.txt", "zip bomb")
    monkeypatch.setattr(_archive.LIMITS, "max_text_bytes", 2**30)
    monkeypatch.setattr(_archive.LIMITS, "max_total_bytes", 2**20)
    rejects(bomb, "zip bomb")


def test_huge_declared_uncompressed_size(good):
    rejects(patch_central(good, "graphs/m0/forward.ir", zipfile._CD_UNCOMPRESSED_SIZE, 2**31),
            "zip bomb")


def test_too_many_entries(good, monkeypatch):
    monkeypatch.setattr(_archive.LIMITS, "max_entries", 5)
    rejects(good, "entries", "limit")


# ---- entry names ----------------------------------------------------------------------------
@pytest.mark.parametrize("evil,words", [
    ("../../../etc/pw", ["..", "traversal"]), ("/tmp/evil.txt12", ["absolute"]),
    ("C:/Windows/x.tx", ["absolute"]), ("extra/../../x.y", ["traversal"]),
    ("extra\\..\\xx.txt", ["traversal"]), ("extra/.hidden.x", ["not a valid name"]),
    ("extra//a.txt.xx", ["not a valid name"]), ("extra/a b c.txt", ["not a valid name"]),
])
def test_bad_entry_names(good, evil, words):
    name = "extra/extra.txt"
    assert len(evil) == len(name)
    rejects(good.replace(name.encode(), evil.encode()), *words)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_duplicate_entries(good):
    items = list(entries(good).items())
    rejects(_zip([(n, d, True) for n, d in items + [items[0]]]), "twice")


def test_missing_and_unexpected_entries(good):
    for name in ("manifest.json", "data.safetensors", "graphs/m0/forward.ir",
                 "code/m1/forward.py", "extra/extra.txt"):
        items = entries(good)
        del items[name]
        rejects(rezip(items), "missing", name)
    items = entries(good)
    items["extra/unlisted.txt"] = b"x"
    rejects(rezip(items), "does not explain")


def test_a_pickle_inside_is_never_unpickled(good, tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    items = entries(good)
    items["data.pkl"] = pickle.dumps(Evil())
    rejects(rezip(items), "data.pkl")
    items = entries(good)
    items["data.safetensors"] = pickle.dumps(Evil())
    rejects(rezip(items))
    assert not marker.exists()


def test_encrypted_or_odd_compression(good):
    rejects(patch_central(good, "manifest.json", 5, 1), "encrypted")         # flag bits
    rejects(patch_central(good, "manifest.json", 6, 4), "compression")       # method 8 -> 12


# ---- manifest -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,words", [
    (b"{", ["not valid JSON"]), (b"[]", ["expected a JSON object"]), (b"null", ["JSON object"]),
    (b'{"format": "scriptmod.archive", "format": "x"}', ["twice"]),
    (b'{"format": NaN}', ["NaN"]), (b"[" * 100_000, ["JSON"]), (b"\xff\xfe", ["UTF-8"]),
])
def test_bad_json(good, text, words):
    items = entries(good)
    items["manifest.json"] = text
    rejects(rezip(items), *words)


@pytest.mark.parametrize("version,words", [
    (3, ["newer", "version 2"]), (99, ["newer", "upgrade"]), (0, ["not valid"]),
    (1, ["entries", "not allowed in format version 1"]),
    ("1", ["integer"]), (True, ["integer"]), (None, ["integer"]), (1.0, ["integer"]),
])
def test_versions(good, version, words):
    rejects(with_manifest(good, lambda m: m.update(format_version=version)), *words)


def test_wrong_format_name(good):
    rejects(with_manifest(good, lambda m: m.update(format="torchscript")), "format")


def _set(path, value):
    def edit(m):
        obj = m
        for k in path[:-1]:
            obj = obj[k]
        if value is KeyError:
            del obj[path[-1]]
        else:
            obj[path[-1]] = value
    return edit


@pytest.mark.parametrize("path,value,words", [
    (("root",), "0", ["manifest.root", "integer"]),
    (("root",), 7, ["out of range"]),
    (("modules",), {}, ["manifest.modules", "list"]),
    (("modules", 0, "training"), 1, ["training", "boolean"]),
    (("modules", 0, "methods", 0, "arg_names"), "x", ["arg_names", "list"]),
    (("modules", 0, "parameters"), [{"name": "w"}], ["missing", "tensor"]),
    (("modules", 0, "extra_field"), 1, ["unexpected", "extra_field"]),
    (("modules", 0, "buffers"), KeyError, ["missing", "buffers"]),
    (("tensors", 0, "shape"), ["3", 4], ["shape[0]", "integer"]),
    (("tensors", 0, "shape"), [-3, 4], ["shape"]),
    (("tensors", 0, "dtype"), "object", ["dtype", "not allowed"]),
    (("tensors", 0, "device"), "../x", ["device"]),
    (("tensors", 0, "parameter"), "yes", ["parameter", "boolean"]),
    (("modules", 0, "buffers", 0, "tensor"), 5, ["tensor", "string or null"]),
    (("modules", 0, "buffers", 0, "tensor"), "nope", ["not in manifest.tensors"]),
    (("modules", 0, "buffers", 0, "name"), "_methods", ["shadow"]),
    (("modules", 0, "buffers", 0, "name"), "__class__", ["shadow"]),
    (("modules", 0, "buffers", 0, "name"), "a.b", ["not a valid name"]),
    (("modules", 0, "buffers", 0, "name"), "fc", ["not unique"]),
    (("modules", 0, "qualified_name"), "os.system(1)", ["qualified_name"]),
    (("modules", 0, "methods", 0, "name"), "../../x", ["not a valid name"]),
    (("modules", 0, "submodules", 0, "module"), 0, ["cycle"]),
    (("modules", 0, "submodules", 0, "module"), None, ["not reachable"]),
    (("extra_files",), ["../x"], ["traversal"]),
    (("ops",), ["sm::add", "os::system"], ["unknown op", "os::system"]),
    (("ops",), ["sm::no_such_op"], ["unknown op"]),
    (("ops",), ["prim::PythonOp"], ["not allowed"]),
])
def test_manifest_field_errors(good, path, value, words):
    rejects(with_manifest(good, _set(path, value)), *words)


def test_every_field_with_a_wrong_type(good):
    """Replace each leaf of the manifest by a value of another JSON type: always ArchiveError."""
    man = json.loads(entries(good)["manifest.json"])
    paths = list(_leaves(man, ()))
    assert len(paths) > 20
    for path, leaf in paths:
        edit = with_manifest if path[0] != "entries" else with_sealed_manifest
        for other in ({}, [], "s", 1, True, None):
            if type(other) is type(leaf) or (leaf is None and other is None):
                continue
            rejects(edit(good, _set(path, other)))


def _leaves(obj, path):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list) and obj:
        yield from _leaves(obj[0], path + (0,))
    else:
        yield path, obj


# ---- tensors --------------------------------------------------------------------------------
def _tensor(man, key):
    return next(t for t in man["tensors"] if t["key"] == key)


def test_oversized_declared_shape(good):
    rejects(with_manifest(good, lambda m: _tensor(m, "fc.weight").update(shape=[2**40, 2**40])),
            "elements", "limit")


def test_shape_that_does_not_match_the_data(good):
    rejects(with_manifest(good, lambda m: _tensor(m, "fc.weight").update(shape=[3, 5])),
            "manifest declares")
    data = replace_in(good, "data.safetensors", '"shape":[3,4]', '"shape":[3,9]')
    rejects(with_manifest(data, lambda m: _tensor(m, "fc.weight").update(shape=[3, 9])),
            "bytes", "needs")
    data = replace_in(good, "data.safetensors", '"shape":[3,4]', '"shape":[9,9]')
    rejects(with_manifest(data, lambda m: _tensor(m, "fc.weight").update(shape=[9, 9])),
            "needs")


def test_bad_data_offsets_and_headers(good):
    st = entries(good)["data.safetensors"]
    n = struct.unpack("<Q", st[:8])[0]
    header = json.loads(st[8:8 + n])
    for key, info in [("fc.weight", {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 10**9]}),
                      ("fc.weight", {"dtype": "F32", "shape": [3, 4], "data_offsets": [8, 4]}),
                      ("fc.weight", {"dtype": "I32", "shape": [3, 4], "data_offsets": [0, 48]}),
                      ("fc.weight", {"dtype": "F32", "shape": [3, 4]}),
                      ("evil", {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})]:
        h = dict(header, **{key: info})
        text = json.dumps(h).encode()
        items = entries(good)
        items["data.safetensors"] = struct.pack("<Q", len(text)) + text + st[8 + n:]
        rejects(rezip(items), "data.safetensors")
    for blob in (b"", b"\x01" * 7, struct.pack("<Q", 2**60) + b"{}", struct.pack("<Q", 2) + b"[]"):
        items = entries(good)
        items["data.safetensors"] = blob
        rejects(rezip(items), "data.safetensors")


# ---- IR -------------------------------------------------------------------------------------
IR = "graphs/m0/forward.ir"


def _ir_edit(good, old, new, ops=None):
    data = replace_in(good, IR, old, new)
    if ops:
        data = with_manifest(data, lambda m: m["ops"].extend(ops))
    return data


def test_unknown_op_in_the_ir(good):
    rejects(_ir_edit(good, "sm::add", "sm::evil", ["sm::add"]), "unknown op", "sm::evil")
    rejects(_ir_edit(good, "sm::add", "os::system"), "os::system")


def test_op_not_listed_in_manifest_ops(good):
    data = with_manifest(good, lambda m: m["ops"].remove("sm::add"))
    rejects(data, "sm::add", "manifest.ops")


def test_unknown_prim_kinds(good):
    rejects(_ir_edit(good, "prim::GetAttr[name=\"fc\"]", "prim::PythonOp[name=\"fc\"]",
                     ["prim::PythonOp"]), "PythonOp")
    rejects(_ir_edit(good, "prim::GetAttr[name=\"fc\"]", "prim::Evil[name=\"fc\"]"), "Evil")


def test_ir_that_does_not_parse_or_verify(good):
    rejects(_ir_edit(good, "return (", "retrun ("), "does not parse")
    rejects(_ir_edit(good, "sm::add(%", "sm::add(%x, %"), "graphs/m0/forward.ir")
    text = entries(good)[IR].decode()
    first = text.splitlines()[1]
    out = first.split(" = ")[0].split(" : ")[0]
    rejects(_ir_edit(good, first, first + "\n" + first), "defined twice", out.strip())


def test_hostile_attribute_references(good):
    rejects(_ir_edit(good, 'name="fc"', 'name="__class__"'), "__class__")
    rejects(_ir_edit(good, 'name="fc"', 'name="_methods"'), "_methods")
    rejects(_ir_edit(good, 'prim::CallMethod[name="forward"]', 'prim::CallMethod[name="nope"]'),
            "nope")


def test_method_call_cycles(good):
    text = entries(good)[IR].decode()
    assert "prim::CallMethod" in text
    # let the root call itself: swap the CallMethod's module operand for %self
    lines = text.splitlines()
    idx = next(i for i, ln in enumerate(lines) if "prim::CallMethod" in ln)
    call = lines[idx]
    target = call.split("](")[1].split(",")[0].rstrip(")")
    lines[idx] = call.replace(f"]({target}", "](%self", 1)
    items = entries(good)
    items[IR] = ("\n".join(lines) + "\n").encode()
    rejects(rezip(items), IR)


def test_deeply_nested_ir_is_rejected(good):
    depth = 3000
    body = ["graph(%self : __module__.x, %c : bool):"]
    for d in range(depth):
        body.append("  " * (d + 1) + "= prim::If(%c)")
        body.append("  " * (d + 1) + "  block0():")
    for d in reversed(range(depth)):
        body.append("  " * (d + 2) + "-> ()")
        body.append("  " * (d + 1) + "  block1():\n" + "  " * (d + 2) + "-> ()")
    body.append("  return ()")
    items = entries(good)
    items[IR] = "\n".join(body).encode()
    rejects(rezip(items), IR)


def test_edited_code_or_signature(good):
    data = replace_in(good, "code/m0/forward.py", "def forward", "def forwarded")
    rejects(data, "does not match")
    rejects(with_manifest(good, lambda m: m["modules"][0]["methods"][0].update(outputs=["int"])),
            "signature")


def test_tensor_constant_mismatches(good):
    man = json.loads(entries(good)["manifest.json"])
    const = man["modules"][0]["methods"][0]["constants"]
    assert len(const) == 1
    rejects(with_manifest(good, lambda m: m["modules"][0]["methods"][0].update(constants=[])),
            const[0], "not used")
    rejects(with_manifest(good, lambda m: m["modules"][0]["methods"][0]["constants"].append(
        "fc.bias")), "Parameter")
    data = replace_in(good, IR, "Float(3) = prim::Constant", "Float(7) = prim::Constant")
    rejects(data, "does not fit")


def test_cuda_tensor_on_a_machine_without_cuda(good):
    from scriptmod.runtime.arrays import cuda_available
    if cuda_available():
        pytest.skip("this machine has CUDA")
    data = with_manifest(good, lambda m: _tensor(m, "fc.weight").update(device="cuda:0"))
    rejects(data, "fc.weight", "map_location")
    with sm.no_grad():
        assert jit.load(io.BytesIO(data), map_location="cpu")(X).shape == (2, 3)


def test_messages_name_the_problem(good):
    msg = rejects(with_manifest(good, lambda m: m.update(format_version=3)))
    assert "3" in msg and "2" in msg
