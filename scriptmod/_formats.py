"""What kind of weights file is this? Sniffed from the first bytes (and a zip's entry names),
so that every loader can name the format it found and the call that reads it.

    >>> from scriptmod._formats import sniff
    >>> sniff(b"PK\\x03\\x04")          # a zip whose directory cannot be read
    'zip'
"""
from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from typing import Any

SAFETENSORS = "safetensors"           # scriptmod.save, safetensors.torch.save_file
TORCH_ZIP = "torch"                   # torch.save (zip of data.pkl + storages)
TORCHSCRIPT = "torchscript"           # torch.jit.save
ARCHIVE = "archive"                   # scriptmod.jit.save
TORCH_LEGACY = "torch-legacy"         # torch.save(..., _use_new_zipfile_serialization=False)
PICKLE = "pickle"
ZIP = "zip"
UNKNOWN = "unknown"
EMPTY = "empty"

_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
_ARCHIVE_MANIFEST = "manifest.json"   # scriptmod.jit._archive_format.MANIFEST

DESCRIPTION = {
    SAFETENSORS: "a safetensors file (scriptmod.save or safetensors' save_file); load it with "
                 "scriptmod.load",
    TORCH_ZIP: "a PyTorch checkpoint (torch.save); load it with scriptmod.load",
    TORCHSCRIPT: "a TorchScript archive (torch.jit.save), which scriptmod cannot run: load it "
                 "in PyTorch with torch.jit.load, save its state_dict() with torch.save, then "
                 "load that file with scriptmod.load into the equivalent scriptmod model",
    ARCHIVE: "a scriptmod ScriptModule archive (scriptmod.jit.save); load it with "
             "scriptmod.jit.load",
    TORCH_LEGACY: "a PyTorch checkpoint in the legacy non-zip format (torch < 1.6 or "
                  "_use_new_zipfile_serialization=False), which scriptmod does not read: load "
                  "it in PyTorch and save it again with torch.save(obj, path)",
    PICKLE: "a plain pickle file, which scriptmod never unpickles (unpickling runs code from "
            "the file); save the tensors with torch.save or safetensors instead",
    ZIP: "a zip file that is neither a PyTorch checkpoint nor a scriptmod archive",
    UNKNOWN: "not a safetensors file, PyTorch checkpoint or scriptmod archive",
    EMPTY: "an empty file",
}


class SerializationError(RuntimeError):
    """A file that is not a valid scriptmod / safetensors / PyTorch weights file."""


class UnpicklingRefused(SerializationError, pickle.UnpicklingError):
    """A checkpoint's pickle asked for something outside the allow-list; nothing was run."""


def sniff(f: str | os.PathLike | bytes | bytearray | memoryview | Any) -> str:
    """The kind of ``f`` (a path, bytes or a seekable binary file, left at its position)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return sniff(fh)
    if isinstance(f, (bytes, bytearray, memoryview)):
        f = io.BytesIO(bytes(f))
    start = f.tell()
    try:
        head = f.read(16)
        f.seek(start)
        if head[:2] == b"PK":
            return _zip_kind(f)
        return _head_kind(head)
    finally:
        f.seek(start)


def _head_kind(head: bytes) -> str:
    if not head:
        return EMPTY
    if len(head) > 8 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] >= 2:
        return SAFETENSORS
    if head.startswith(_LEGACY_MAGIC):
        return TORCH_LEGACY
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return PICKLE
    return UNKNOWN


def _zip_kind(f: Any) -> str:
    try:
        names = zipfile.ZipFile(f).namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return ZIP
    return zip_kind(names)


def zip_kind(names: list[str]) -> str:
    """The kind of a zip from its entry names alone."""
    if _ARCHIVE_MANIFEST in names:
        return ARCHIVE
    parts = [n.split("/") for n in names]
    if any(len(p) >= 2 and (p[1] == "constants.pkl" or p[1] == "code") for p in parts):
        return TORCHSCRIPT
    if any(len(p) == 2 and p[1] == "data.pkl" for p in parts):
        return TORCH_ZIP
    return ZIP


def describe(kind: str) -> str:
    return DESCRIPTION[kind]
