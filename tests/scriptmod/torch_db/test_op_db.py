"""Every OpInfo entry of PyTorch's ``op_db`` in the namespaces scriptmod covers (top-level and
Tensor methods, ``nn.functional``, ``linalg``, ``special``, ``fft``): each sample's result
equals torch's (or both refuse it), and one float64 sample's gradients equal torch's.

By default each entry runs its first ``SAMPLES`` samples per dtype (the suite's time budget);
``SCRIPTMOD_TORCH_DB=all`` runs the first five, as ``shared/tools/torch_db.py`` does. An entry
scriptmod does not have must be listed in ``NOT_YET`` with its reason; the list is checked
both ways.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
common_methods = pytest.importorskip("torch.testing._internal.common_methods_invocations")

from .harness_ops import (GRAD_NOT_COMPARED, Unsupported, check_grad,  # noqa: E402
                          check_sample, dtypes_of, entry_key, namespace, resolve, samples)

pytestmark = pytest.mark.filterwarnings("ignore")

ALL = os.environ.get("SCRIPTMOD_TORCH_DB") == "all"
SAMPLES = {torch.float64: 2, torch.float32: 1, torch.int64: 2}
ENTRIES = {entry_key(op): op for op in common_methods.op_db if namespace(op) != "other"}

# entries scriptmod does not have, each with its reason
NOT_YET = {
    "to_sparse": "sparse layouts are not supported (dense strided tensors only)",
    "hash_tensor": "its result is uint64, a dtype scriptmod does not have",
    "max_pool2d_with_indices_backward": "an ATen backward kernel called through torch.ops.aten "
                                        "(scriptmod has no aten namespace)",
}
# entries scriptmod has and refuses with a clear error, each with its reason
REFUSED = {
    "chalf": "complex32 (ComplexHalf): NumPy has no such dtype",
}


def test_missing_entries_are_exactly_the_listed_ones() -> None:
    missing = {k for k, op in ENTRIES.items() if dtypes_of(op) and resolve(op) is None}
    assert sorted(missing - set(NOT_YET)) == [], "entries missing without a NOT_YET reason"
    working = []
    for key in set(NOT_YET) - missing:   # a lambda resolves, and must still fail to run
        op = ENTRIES[key]
        try:
            check_sample(op, resolve(op), samples(op, dtypes_of(op)[0], 1)[0])
            working.append(key)
        except Exception:  # noqa: BLE001
            pass
    assert sorted(working) == [], "NOT_YET lists entries that work now"


def test_refused_entries_raise_a_clear_error() -> None:
    import scriptmod as sm
    for key in REFUSED:
        assert resolve(ENTRIES[key]) is not None, key
    with pytest.raises(TypeError, match="complex32"):
        sm.randn(2).chalf()


@pytest.mark.parametrize("key", sorted(k for k in ENTRIES if k not in NOT_YET and
                                       k not in REFUSED))
def test_op_db_samples(key: str) -> None:
    op = ENTRIES[key]
    dtypes, call = dtypes_of(op), resolve(op)
    if not dtypes:
        pytest.skip("no float64/float32/int64 dtype on the CPU")
    failures, checked, unsupported = [], 0, 0
    for dtype in dtypes:
        for i, sample in enumerate(samples(op, dtype, 5 if ALL else SAMPLES[dtype])):
            try:
                check_sample(op, call, sample)
                checked += 1
            except Unsupported:
                unsupported += 1
            except Exception as e:  # noqa: BLE001 - collected, reported together
                failures.append(f"[{dtype}, sample {i}] {type(e).__name__}: {str(e)[:300]}")
    if not failures and op.supports_autograd and dtypes != [torch.int64] \
            and key not in GRAD_NOT_COMPARED:
        try:
            check_grad(op, call)
        except Unsupported:
            pass
        except Exception as e:  # noqa: BLE001
            failures.append(f"[gradient] {type(e).__name__}: {str(e)[:300]}")
    assert not failures, f"{len(failures)} sample(s) differ from torch:\n" + "\n".join(failures)
    if not checked and unsupported:
        pytest.skip("every sample passes a torch object this harness cannot convert")
    assert checked, f"no sample of {key} could be compared"
