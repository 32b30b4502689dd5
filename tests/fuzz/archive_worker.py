"""The subprocess that loads and runs fuzzed archives for ``test_archive_mutations``.

It reads requests from stdin (a length-prefixed JSON header, then the archive's bytes) and
answers one JSON line per request. ``original`` loads an unmutated archive and keeps its
outputs for fixed inputs; ``try`` loads a mutated one and classifies it against them. Its
address space is capped (``RLIMIT_AS``, the size after start-up plus ``--mem-mib``), so an
allocation sized by a lie fails here, not in the test run; the parent kills it on a timeout.
"""
from __future__ import annotations

import io
import json
import resource
import struct
import sys
import traceback
from typing import Any

import numpy as np

import scriptmod as sm
from scriptmod import jit
from scriptmod.ir.errors import (ArgumentError, ArgumentValueError, DeviceError, DTypeError,
                                 ShapeError)
from scriptmod.ir.passes.shapes import ShapePropagationError

# user-level errors a program may raise for its inputs (the same eager code would)
USER_ERRORS = (ShapeError, DTypeError, ArgumentError, ArgumentValueError, DeviceError,
               ZeroDivisionError, IndexError, OverflowError)


def internal(e: BaseException) -> bool:
    """An error a call must never raise: shape propagation's, a bare ``InterpreterError`` (its
    user-level subclasses, ``ShapeFailure``..., are also ``USER_ERRORS``), or a Python error
    from inside the machinery."""
    return isinstance(e, ShapePropagationError) or not isinstance(e, USER_ERRORS)


def inputs(shapes: list[list[int]]) -> list[sm.Tensor]:
    rng = np.random.default_rng(1234)
    return [sm.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]


def run(module: Any, xs: list[sm.Tensor]) -> list[Any]:
    out = []
    for x in xs:
        try:
            with sm.no_grad():
                y = module(x)
            out.append(("value", np.asarray(y.numpy()).copy()))
        except Exception as e:      # noqa: BLE001 - classified by the caller
            out.append(("error", e))
    return out


def same(a: list[Any], b: list[Any]) -> bool:
    for (ka, va), (kb, vb) in zip(a, b):
        if ka != kb:
            return False
        if ka == "value" and not (va.dtype == vb.dtype and va.shape == vb.shape
                                  and np.array_equal(va, vb, equal_nan=True)):
            return False
        if ka == "error" and type(va) is not type(vb):
            return False
    return True


def attempt(data: bytes, ref: list[Any], xs: list[sm.Tensor]) -> dict[str, str]:
    try:
        module = jit.load(io.BytesIO(data))
    except jit.ArchiveError as e:
        return {"outcome": "refused", "detail": str(e)[:300]}
    except BaseException as e:      # noqa: BLE001 - any other exception is the finding
        return {"outcome": "load-error", "detail": f"{type(e).__name__}: {e}"[:600]
                + traceback.format_exc()[-1500:]}
    got = run(module, xs)
    if same(got, ref):
        return {"outcome": "equal", "detail": ""}
    errors = [v for k, v in got if k == "error"]
    bad = [e for e in errors if internal(e)]
    if bad:
        e = bad[0]
        return {"outcome": "call-internal", "detail": f"{type(e).__name__}: {e}"[:600]}
    if errors:
        return {"outcome": "call-error", "detail": f"{type(errors[0]).__name__}: {errors[0]}"[:300]}
    return {"outcome": "different", "detail": ""}


def _read(n: int) -> bytes:
    data = sys.stdin.buffer.read(n)
    if len(data) != n:
        raise SystemExit(0)
    return data


def main() -> None:
    mem_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    refs: dict[str, tuple[list[Any], list[sm.Tensor]]] = {}
    limited = False
    while True:
        (hlen,) = struct.unpack("<I", _read(4))
        header = json.loads(_read(hlen))
        (dlen,) = struct.unpack("<Q", _read(8))
        data = _read(dlen)
        if header["op"] == "original":
            xs = inputs(header["shapes"])
            refs[header["model"]] = (run(jit.load(io.BytesIO(data)), xs), xs)
            answer: dict[str, Any] = {"outcome": "ok"}
        else:
            if not limited:            # after the originals: the cap is above their size
                with open("/proc/self/status") as fh:
                    vm = next(int(l.split()[1]) for l in fh if l.startswith("VmSize:")) * 1024
                resource.setrlimit(resource.RLIMIT_AS, (vm + mem_mib * 2**20,) * 2)
                limited = True
            ref, xs = refs[header["model"]]
            answer = attempt(data, ref, xs)
        answer["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
