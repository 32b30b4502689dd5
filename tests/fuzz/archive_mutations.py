"""Structured mutations of a saved archive, each ``kind(rng, archive) -> bytes``.

``TAMPER`` kinds change a file after it was saved (its digests kept as they were): the
archive must be refused, or load and give the original's numbers. ``RESEAL`` kinds also
recompute every digest, which makes a consistent, hostile archive: it must be refused, or
load and run its ops (other numbers allowed) without an internal error, a hang or a crash.
"""
from __future__ import annotations

import functools
import io
import json
import random
import re
import struct
import zipfile
import zlib
from typing import Any, Callable

from scriptmod.jit.archive import _zip

Items = dict[str, bytes]


def entries(data: bytes) -> Items:
    zf = zipfile.ZipFile(io.BytesIO(data))
    return {n: zf.read(n) for n in zf.namelist()}


def rezip(items: Items, seal: bool) -> bytes:
    return _zip([(n, d, not n.endswith(".safetensors")) for n, d in items.items()], seal=seal)


# ---- values ---------------------------------------------------------------------------------
_INTS = [0, 1, -1, 2, 3, 7, 255, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, -2**63, 10**30]


def other_int(rng: random.Random, v: int) -> int:
    return rng.choice([v + 1, v - 1, v * 2, -v, v + rng.randrange(1, 100)] + _INTS)


def other_value(rng: random.Random, v: Any, pool: list[Any]) -> Any:
    """Another JSON value: a nearby one of the same type mostly, any type sometimes."""
    if rng.random() < 0.15:
        return rng.choice([None, True, False, 0, 1.5, "", "x", [], {}, [None], {"a": 1}])
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return other_int(rng, v)
    if isinstance(v, float):
        return rng.choice([v * 2, -v, 0.0, 1e308])
    if isinstance(v, str):
        strings = [p for p in pool if isinstance(p, str) and p != v]
        return rng.choice([v[:-1], v + rng.choice("a._0/"), v.upper(), "", "../x",
                           v.replace(".", "_")] + strings[:50])
    if isinstance(v, list):
        if not v:
            return rng.choice(pool) if pool else [None]
        w = list(v)
        op = rng.randrange(4)
        if op == 0:
            del w[rng.randrange(len(w))]
        elif op == 1:
            w.insert(rng.randrange(len(w) + 1), rng.choice(w))
        elif op == 2:
            rng.shuffle(w)
        else:
            w.reverse()
        return w
    if isinstance(v, dict):
        w = dict(v)
        if w and rng.random() < 0.6:
            del w[rng.choice(sorted(w))]
        else:
            key = rng.choice(["extra", "name", "tensor", "size", "__class__"])
            w[key] = rng.choice(pool or [1])
        return w
    return rng.choice([0, "", [], {}])


def _nodes(obj: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out = [(path, obj)]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _nodes(v, path + (i,))
    return out


def mutate_json(rng: random.Random, obj: Any) -> Any:
    nodes = _nodes(obj)
    path, value = rng.choice(nodes[1:] or nodes)
    new = other_value(rng, value, [v for _, v in nodes if not isinstance(v, (dict, list))])
    if not path:
        return new
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = new
    return obj


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode()


# ---- manifest, IR text, safetensors header ---------------------------------------------------
def manifest(rng: random.Random, items: Items) -> None:
    items["manifest.json"] = _dumps(mutate_json(rng, json.loads(items["manifest.json"])))


_TOKEN = re.compile(r"%[\w.]+|[A-Za-z_][\w:.]*|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|[^\s\w]")
_SPECIAL = ["Float", "Long", "Bool", "Double", "Tensor", "int", "float", "bool", "B", "0", "1",
            "-1", "2", "65536", "4294967297", "1e308", "nan", "sm::add", "sm::mul",
            "sm::matmul", "sm::relu", "sm::reshape", "sm::sum", "prim::Loop", "prim::If",
            "prim::GetAttr", "prim::CallMethod", "prim::FusionGroup", "(", ")", "[", "]",
            ",", "=", ":", "%self", '"forward"', '"weight"']


def ir(rng: random.Random, items: Items) -> None:
    name = rng.choice(sorted(n for n in items if n.endswith(".ir")))
    text = items[name].decode()
    lines = text.split("\n")
    op = rng.randrange(10)
    if op == 0 and len(lines) > 3:                   # drop, duplicate or swap lines
        i = rng.randrange(1, len(lines) - 2)
        del lines[i]
    elif op == 1 and len(lines) > 3:
        i = rng.randrange(1, len(lines) - 2)
        lines.insert(i, lines[rng.randrange(1, len(lines) - 2)])
    elif op == 2 and len(lines) > 4:
        i, j = rng.randrange(1, len(lines) - 2), rng.randrange(1, len(lines) - 2)
        lines[i], lines[j] = lines[j], lines[i]
    else:                                            # one token for another
        tokens = list(_TOKEN.finditer(text))
        t = rng.choice(tokens)
        same = [u.group() for u in tokens if _kind(u.group()) == _kind(t.group())]
        new = rng.choice(same + _SPECIAL if rng.random() < 0.7 else _SPECIAL)
        items[name] = (text[:t.start()] + new + text[t.end():]).encode()
        return
    items[name] = "\n".join(lines).encode()


def _kind(token: str) -> str:
    if token.startswith("%"):
        return "value"
    if token[:1].isdigit() or token[:1] == "-":
        return "number"
    if "::" in token:
        return "op"
    return "word" if token[:1].isalpha() or token[:1] == "_" else "punct"


def st_header(rng: random.Random, items: Items) -> None:
    data = items["data.safetensors"]
    (n,) = struct.unpack("<Q", data[:8])
    header, body = json.loads(data[8:8 + n]), data[8 + n:]
    op = rng.randrange(6)
    if op == 0:                                      # the header length field
        n2 = other_int(rng, n) % 2**64
        items["data.safetensors"] = struct.pack("<Q", n2) + data[8:]
        return
    if op == 1:                                      # the data section's length
        cut = rng.randrange(len(body) + 1)
        body = body[:cut] if rng.random() < 0.5 else body + bytes(rng.randrange(1, 64))
    else:
        key = rng.choice(sorted(header))
        if op == 2 and isinstance(header[key], dict):
            header[key]["dtype"] = rng.choice(["F64", "F32", "F16", "BF16", "I64", "I32", "I8",
                                               "U8", "BOOL", "C64", "F8_E4M3", "U64", "f32"])
        else:
            header = mutate_json(rng, header)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    items["data.safetensors"] = struct.pack("<Q", len(text)) + text + body


def _structured(change: Callable[[random.Random, Items], None], seal: bool
                ) -> Callable[[random.Random, bytes], bytes]:
    def kind(rng: random.Random, archive: bytes) -> bytes:
        items = entries(archive)
        change(rng, items)
        return rezip(items, seal=seal)   # unsealed: the digests stay the original's
    return kind


# ---- the zip container -----------------------------------------------------------------------
# (structure signature, {field: (offset, size)})
_LOCAL = (b"PK\x03\x04", {"version": (4, 2), "flags": (6, 2), "method": (8, 2), "time": (10, 2),
                          "date": (12, 2), "crc": (14, 4), "csize": (18, 4), "usize": (22, 4),
                          "name_len": (26, 2), "extra_len": (28, 2)})
_CENTRAL = (b"PK\x01\x02", {"made_by": (4, 2), "version": (6, 2), "flags": (8, 2),
                            "method": (10, 2), "time": (12, 2), "date": (14, 2), "crc": (16, 4),
                            "csize": (20, 4), "usize": (24, 4), "name_len": (28, 2),
                            "extra_len": (30, 2), "comment_len": (32, 2), "disk": (34, 2),
                            "iattr": (36, 2), "eattr": (38, 4), "offset": (42, 4)})
_END = (b"PK\x05\x06", {"disk": (4, 2), "cd_disk": (6, 2), "disk_entries": (8, 2),
                        "entries": (10, 2), "cd_size": (12, 4), "cd_offset": (16, 4),
                        "comment_len": (20, 2)})
_FMT = {2: "<H", 4: "<I"}


def zip_field(rng: random.Random, archive: bytes) -> bytes:
    sig, fields = rng.choice([_LOCAL, _CENTRAL, _CENTRAL, _END])
    starts = [m.start() for m in re.finditer(re.escape(sig), archive)]
    at = rng.choice(starts)
    field = rng.choice(sorted(fields))
    off, size = fields[field]
    (old,) = struct.unpack(_FMT[size], archive[at + off:at + off + size])
    top = 2 ** (8 * size) - 1
    new = rng.choice([0, 1, top, old + 1, old - 1, old * 2, old // 2, rng.randrange(top + 1),
                      8, 12, 14, 99]) % (top + 1)
    return archive[:at + off] + struct.pack(_FMT[size], new) + archive[at + off + size:]


def byte_flip(rng: random.Random, archive: bytes) -> bytes:
    data = bytearray(archive)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
    return bytes(data)


def truncate(rng: random.Random, archive: bytes) -> bytes:
    return archive[:rng.randrange(len(archive))]


# ---- decompression bombs, many entries, deep nesting, huge text ------------------------------
@functools.lru_cache(maxsize=None)
def _zeros_deflated(size: int) -> tuple[bytes, int]:
    """(raw deflate stream, crc32) of ``size`` zero bytes, made in 1 MiB steps."""
    co, crc, chunk = zlib.compressobj(9, zlib.DEFLATED, -15), 0, bytes(2**20)
    parts = []
    for _ in range(size // len(chunk)):
        parts.append(co.compress(chunk))
        crc = zlib.crc32(chunk, crc)
    parts.append(co.flush())
    return b"".join(parts), crc


def raw_zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip of (name, stored bytes, method, crc, declared uncompressed size): the sizes and
    data are whatever the caller says."""
    out, central = io.BytesIO(), io.BytesIO()
    for name, data, method, crc, usize in members:
        offset = out.tell()
        fname = name.encode()
        head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data),
                           usize, len(fname), 0)
        out.write(head + fname + data)
        central.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x314, 20, 0, method, 0,
                                  0x21, crc, len(data), usize, len(fname), 0, 0, 0, 0,
                                  0o100644 << 16, offset) + fname)
    cd = central.getvalue()
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(cd),
                      out.tell(), 0)
    return out.getvalue() + cd + end


def _members(items: Items) -> list[tuple[str, bytes, int, int, int]]:
    out = []
    for name, data in items.items():
        co = zlib.compressobj(6, zlib.DEFLATED, -15)
        out.append((name, co.compress(data) + co.flush(), 8, zlib.crc32(data), len(data)))
    return out


def as_version_1(items: Items) -> Items:
    """The same archive as format version 1 wrote it: no digests."""
    man = json.loads(items["manifest.json"])
    man["format_version"] = 1
    man.pop("entries", None)
    out = {"manifest.json": _dumps(man)}
    out.update((n, d) for n, d in items.items() if n not in ("manifest.json", "manifest.sha256"))
    return out


_BOMB_SIZES = [40 * 2**20, 300 * 2**20, 1 * 2**30]


def bomb(rng: random.Random, archive: bytes) -> bytes:
    items = entries(archive)
    if rng.random() < 0.5:
        items = as_version_1(items)
    members = _members(items)
    op = rng.randrange(6)
    if op == 4:                                      # many entries
        extra = [(f"extra/f{i}", b"", 0, 0, 0) for i in range(rng.choice([1000, 65_000]))]
        return raw_zip(members + extra)
    if op == 5:                                      # deep JSON nesting or huge IR text
        k = rng.randrange(len(members))
        name = members[k][0]
        text = (b"[" * 200_000 if name.startswith("manifest") else
                b"".join(b"  %%v%d : int = prim::Constant[value=1]()\n" % i
                         for i in range(rng.choice([10_000, 400_000]))))
        items[name] = text
        return raw_zip(_members(items))
    k = rng.randrange(len(members))
    name = members[k][0]
    size = rng.choice(_BOMB_SIZES)
    stream, crc = _zeros_deflated(size)
    declared = {0: size, 1: members[k][4], 2: 2**32 - 1, 3: size // 2}[op]
    members[k] = (name, stream, 8, crc, declared)
    return raw_zip(members)


TAMPER: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "manifest": _structured(manifest, seal=False),
    "ir": _structured(ir, seal=False),
    "st_header": _structured(st_header, seal=False),
    "zip_field": zip_field,
    "byte_flip": byte_flip,
    "truncate": truncate,
    "bomb": bomb,
}
RESEAL: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "manifest+reseal": _structured(manifest, seal=True),
    "ir+reseal": _structured(ir, seal=True),
    "st_header+reseal": _structured(st_header, seal=True),
}
