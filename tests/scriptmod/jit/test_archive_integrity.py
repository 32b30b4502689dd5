"""Archive integrity and bounds (format version 2): every entry's size and sha256 in the
manifest, the manifest's own digest in ``manifest.sha256``; sizes checked against the
manifest before anything is decompressed; reads that stop at the limit; version-1 archives
(no digests) still load; methods typed at load, loops bounded, layers complete."""
from __future__ import annotations

import hashlib
import io
import json
import struct
import time
import zipfile
import zlib

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import Tensor, _safetensors, jit, nn
from scriptmod.jit import _archive_format as A
from scriptmod.jit.archive import _zip

ArchiveError = jit.ArchiveError


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.register_buffer("shift", sm.arange(3).float())

    def forward(self, x):
        return self.fc(x).relu() + self.shift


class Counted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        for _ in range(3):
            x = self.fc(x).tanh()
        return x


X = sm.randn(5, 4)


def saved(module=None, **kw) -> bytes:
    sm.manual_seed(0)
    buf = io.BytesIO()
    (module or jit.trace(Net().eval(), sm.randn(2, 4))).save(buf, **kw)
    return buf.getvalue()


def entries(data: bytes) -> dict[str, bytes]:
    zf = zipfile.ZipFile(io.BytesIO(data))
    return {n: zf.read(n) for n in zf.namelist()}


def rezip(items: dict[str, bytes], seal: bool) -> bytes:
    return _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()], seal=seal)


def output(data: bytes, x=X) -> np.ndarray:
    with sm.no_grad():
        return jit.load(io.BytesIO(data))(x).numpy()


def refused(data: bytes, *words: str) -> str:
    with pytest.raises(ArchiveError) as info:
        jit.load(io.BytesIO(data))
    for w in words:
        assert w in str(info.value), str(info.value)
    return str(info.value)


def version_1(items: dict[str, bytes]) -> dict[str, bytes]:
    """What format version 1 wrote: no ``entries`` field, no ``manifest.sha256``."""
    man = json.loads(items["manifest.json"])
    man["format_version"] = 1
    del man["entries"]
    out = {"manifest.json": json.dumps(man, indent=1, sort_keys=True).encode()}
    out.update((n, d) for n, d in items.items() if n not in ("manifest.json", "manifest.sha256"))
    return out


# ---- digests ---------------------------------------------------------------------------------
def test_every_entry_has_its_size_and_sha256():
    items = entries(saved(_extra_files={"notes.txt": "v1"}))
    man = json.loads(items["manifest.json"])
    assert man["format_version"] == 2
    listed = {e["name"]: (e["size"], e["sha256"]) for e in man["entries"]}
    assert set(listed) == set(items) - {"manifest.json", "manifest.sha256"}
    for name, (size, digest) in listed.items():
        assert size == len(items[name]) and digest == hashlib.sha256(items[name]).hexdigest()
    own = hashlib.sha256(items["manifest.json"]).hexdigest().encode()
    assert items["manifest.sha256"].strip() == own


@pytest.mark.parametrize("entry,old,new", [
    ("graphs/m0/forward.ir", "sm::relu", "sm::tanh"),            # same size, other op
    ("code/m0/forward.py", "relu", "rel_"),
    ("extra/notes.txt", "v1", "v2"),
])
def test_an_edited_entry_fails_its_digest(entry, old, new):
    items = entries(saved(_extra_files={"notes.txt": "v1"}))
    items[entry] = items[entry].replace(old.encode(), new.encode())
    refused(rezip(items, seal=False), entry, "sha256", "modified after it was saved")


def test_changed_tensor_data_fails_its_digest():
    items = entries(saved())
    data = bytearray(items["data.safetensors"])
    data[-1] ^= 0x40                                              # one bit of one float
    items["data.safetensors"] = bytes(data)
    refused(rezip(items, seal=False), "data.safetensors", "sha256")


def test_an_edited_manifest_fails_its_digest():
    items = entries(saved())
    items["manifest.json"] = items["manifest.json"].replace(b'"training": false',
                                                            b'"training": true ')
    refused(rezip(items, seal=False), "manifest.json", "sha256")


def test_a_version_2_archive_without_its_manifest_digest_is_refused():
    items = entries(saved())
    del items["manifest.sha256"]
    refused(rezip(items, seal=False), "manifest.sha256", "missing")


def test_zip_header_sizes_must_agree_with_the_manifest_before_decompression():
    items = entries(saved())
    man = json.loads(items["manifest.json"])
    next(e for e in man["entries"] if e["name"] == "graphs/m0/forward.ir")["size"] += 1
    items["manifest.json"] = json.dumps(man).encode()
    items["manifest.sha256"] = hashlib.sha256(items["manifest.json"]).hexdigest().encode()
    refused(rezip(items, seal=False), "graphs/m0/forward.ir", "zip header declares")


# ---- version 1 -------------------------------------------------------------------------------
def test_version_1_archives_load_without_digests():
    data = saved()
    old = rezip(version_1(entries(data)), seal=False)
    assert "manifest.sha256" not in zipfile.ZipFile(io.BytesIO(old)).namelist()
    np.testing.assert_array_equal(output(old), output(data))
    with sm.no_grad():
        sm.manual_seed(0)
        eager = Net().eval()
        # compiled GEMM against eager's BLAS: float32 rounding (the BLAS kernel, and so the
        # order of the sums, depends on the CPU)
        np.testing.assert_allclose(output(old), eager(X).numpy(), rtol=1e-5, atol=1e-6)


def test_version_1_with_digest_fields_is_refused():
    items = version_1(entries(saved()))
    man = json.loads(items["manifest.json"])
    man["entries"] = []
    items["manifest.json"] = json.dumps(man).encode()
    refused(rezip(items, seal=False), "manifest.entries", "not allowed in format version 1")


# ---- bounded reads ---------------------------------------------------------------------------
def _raw_zip(members):
    """(name, stored bytes, method, crc, declared size) -> a zip saying exactly that."""
    out, central = io.BytesIO(), io.BytesIO()
    for name, data, method, crc, usize in members:
        offset, fname = out.tell(), name.encode()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc,
                              len(data), usize, len(fname), 0) + fname + data)
        central.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x314, 20, 0, method, 0,
                                  0x21, crc, len(data), usize, len(fname), 0, 0, 0, 0,
                                  0o100644 << 16, offset) + fname)
    cd = central.getvalue()
    return out.getvalue() + cd + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members),
                                             len(members), len(cd), out.tell(), 0)


def _bomb(items, name, size, declared):
    co, crc, chunk, parts = zlib.compressobj(9, zlib.DEFLATED, -15), 0, bytes(2**20), []
    for _ in range(size // 2**20):
        parts.append(co.compress(chunk))
        crc = zlib.crc32(chunk, crc)
    members = []
    for n, d in items.items():
        if n == name:
            members.append((n, b"".join(parts) + co.flush(), 8, crc, declared))
        else:
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            members.append((n, c.compress(d) + c.flush(), 8, zlib.crc32(d), len(d)))
    return _raw_zip(members)


def test_a_tensor_data_bomb_is_refused_from_the_manifest_before_decompressing():
    """Version 1 (no sizes in the manifest): the data entry may hold the declared tensors
    plus a bounded header, so 256 MiB of zeros is refused before a byte is inflated."""
    items = version_1(entries(saved()))
    bomb = _bomb(items, "data.safetensors", 256 * 2**20, 256 * 2**20)
    t0 = time.perf_counter()
    refused(bomb, "data.safetensors", "more than the", "the manifest allows")
    assert time.perf_counter() - t0 < 2.0


def test_a_header_that_understates_a_bomb_stops_at_the_declared_size():
    items = entries(saved())
    size = len(items["graphs/m0/forward.ir"])
    bomb = _bomb(items, "graphs/m0/forward.ir", 64 * 2**20, size)
    t0 = time.perf_counter()
    refused(bomb, "graphs/m0/forward.ir")           # at the declared size: its CRC, or more data
    assert time.perf_counter() - t0 < 2.0


def test_ir_text_is_capped(monkeypatch):
    data = saved()
    monkeypatch.setattr(A.LIMITS, "max_ir_bytes", 100)
    refused(data, "bytes of IR text", "max_ir_bytes")


def test_tensor_data_longer_than_its_tensors_and_header_cap_is_refused():
    items = entries(saved())
    st = items["data.safetensors"]
    (n,) = struct.unpack("<Q", st[:8])
    tensors = json.loads(items["manifest.json"])["tensors"]
    padded = st[8:8 + n] + b" " * (A.header_cap(tensors) + 8)
    items["data.safetensors"] = struct.pack("<Q", len(padded)) + padded + st[8 + n:]
    refused(rezip(items, seal=True), "data.safetensors", "the manifest allows")


# ---- loaded means callable -------------------------------------------------------------------
def test_types_that_disagree_with_the_saved_tensors_are_refused_at_load():
    """A consistent archive (digests recomputed) whose bias is one longer than its Linear's
    output: the first call would fail in shape propagation, so loading refuses it."""
    items = entries(saved())
    man = json.loads(items["manifest.json"])
    bias = next(t for t in man["tensors"] if t["key"] == "fc.bias")
    bias["shape"] = [4]
    arrays, _ = _safetensors.decode(items["data.safetensors"])
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    arrays["fc.bias"] = np.zeros(4, np.float32)
    items["data.safetensors"] = b"".join(_safetensors.encode(arrays))
    items["manifest.json"] = json.dumps(man).encode()
    refused(rezip(items, seal=True), "graphs/m0/forward.ir", "types do not check",
            "do not broadcast")


def _trips(items: dict[str, bytes], n: int) -> bytes:
    """The scripted loop's ``range(3)`` made ``range(n)`` in its IR and code, resealed."""
    out = dict(items)
    out["graphs/m0/forward.ir"] = items["graphs/m0/forward.ir"].replace(
        b"prim::Constant[value=3]()", b"prim::Constant[value=%d]()" % n, 1)
    out["code/m0/forward.py"] = items["code/m0/forward.py"].replace(b"max(3, 0)",
                                                                    b"max(%d, 0)" % n)
    return rezip(out, seal=True)


def test_counted_loops_above_the_cap_are_refused():
    sm.manual_seed(0)
    items = entries(saved(jit.script(Counted().eval())))
    with sm.no_grad():
        five = jit.load(io.BytesIO(_trips(items, 5)))(X).numpy()
    sm.manual_seed(0)
    eager = Counted().eval()
    with sm.no_grad():
        x = X
        for _ in range(5):                             # what five rounds compute
            x = eager.fc(x).tanh()
    np.testing.assert_allclose(five, x.numpy(), rtol=1e-5, atol=1e-6)
    refused(_trips(items, 2**40), "prim::Loop runs 1099511627776 rounds",
            str(A.LIMITS.max_trip_count))


def test_a_while_loop_over_run_time_values_loads():
    @jit.script
    def halve(x: Tensor, limit: float) -> Tensor:
        while float(x.abs().max()) > limit:
            x = x / 2
        return x
    buf = io.BytesIO()
    halve._module.save(buf)
    again = jit.load(io.BytesIO(buf.getvalue()))
    np.testing.assert_array_equal(again(sm.full((2,), 10.0), 1.0).numpy(), [0.625, 0.625])


def test_a_layer_without_a_parameter_its_forward_reads_is_refused():
    items = entries(saved(jit.script(Counted().eval())))
    man = json.loads(items["manifest.json"])
    fc = next(m for m in man["modules"] if m["path"] == "fc")
    assert fc["layer"]["class"] == "scriptmod.nn.Linear"
    fc["parameters"][0]["name"] = "weights"
    items["manifest.json"] = json.dumps(man).encode()
    refused(rezip(items, seal=True), "layer 'fc'", "['weight']", "forward reads")


def test_tensor_byte_ranges_must_cover_the_data_exactly():
    """A header length one short (its padding absorbs it) would shift every tensor by a
    byte; ranges that overlap would read one tensor's bytes twice."""
    items = entries(saved())
    st = items["data.safetensors"]
    (n,) = struct.unpack("<Q", st[:8])
    assert st[8 + n - 1:8 + n] == b" "                       # padded to 8 bytes
    shifted = dict(items, **{"data.safetensors": struct.pack("<Q", n - 1) + st[8:]})
    refused(rezip(shifted, seal=True), "data.safetensors", "data section has")
    header = json.loads(st[8:8 + n])
    a, b = (k for k in header if header[k]["shape"] == [3])   # fc.bias and shift: 12 bytes each
    header[b]["data_offsets"] = header[a]["data_offsets"]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    overlap = dict(items, **{"data.safetensors": struct.pack("<Q", len(text)) + text
                             + st[8 + n:]})
    refused(rezip(overlap, seal=True), "data.safetensors", "overlap")


def test_a_layer_configuration_of_the_wrong_type_is_refused():
    items = entries(saved(jit.script(Counted().eval())))
    man = json.loads(items["manifest.json"])
    fc = next(m for m in man["modules"] if m["path"] == "fc")
    fc["layer"]["config"]["in_features"] = 1.5
    items["manifest.json"] = json.dumps(man).encode()
    refused(rezip(items, seal=True), "layer 'fc'", "'in_features' is 1.5", "takes int")


@pytest.mark.parametrize("suffix", ["?", "[]"])
def test_a_resealed_archive_with_a_type_nested_thousands_deep_is_an_archive_error(suffix):
    """Issue 44, item 1: a consistent archive (every digest recomputed) whose input type is
    ``Tensor??????...`` thousands deep overflowed the stack in every walk of the type (the
    signature check's ``repr``: a RecursionError out of ``jit.load``; here, verification).
    Types nest at most ``ir.parser.MAX_TYPE_DEPTH`` deep; a deeper one is refused when the
    IR is parsed, as the file's fault, before anything walks it."""
    from scriptmod.ir.parser import MAX_TYPE_DEPTH
    buf = io.BytesIO()
    jit.save(jit.trace(nn.Linear(3, 2), sm.ones(1, 3)), buf)
    items = {n: d for n, d in _entries(buf.getvalue())}
    name = next(n for n in items if n.endswith("forward.ir"))
    text = items[name].decode()
    head, rest = text.split(":", 1)
    typ = rest.lstrip().split(")", 1)[0].split(",")[0]
    items[name] = text.replace(typ, typ + suffix * 3000, 1).encode()
    data = _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()], seal=True)
    with pytest.raises(A.ArchiveError, match=f"more than {MAX_TYPE_DEPTH} deep"):
        jit.load(io.BytesIO(data))


def _entries(data: bytes) -> list[tuple[str, bytes]]:
    zf = zipfile.ZipFile(io.BytesIO(data))
    return [(n, zf.read(n)) for n in zf.namelist()]
