"""Every ModuleInfo of PyTorch's ``module_db``: each sample's forward (and buffers after a
training forward), backward and ``jit.trace`` agree with torch on torch's weights.

By default each class runs its first ``SAMPLES`` samples per dtype and mode (the suite's time
budget); ``SCRIPTMOD_TORCH_DB=all`` runs every sample. A class scriptmod does not have yet
must be listed in ``NOT_YET`` with the issue that brings it; the list is checked both ways.
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
common_modules = pytest.importorskip("torch.testing._internal.common_modules")

import scriptmod as sm  # noqa: E402
from .harness import Unsupported, check_module_sample, module_samples  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")   # torch's own TracerWarnings

ALL = os.environ.get("SCRIPTMOD_TORCH_DB") == "all"
SAMPLES = {torch.float64: 3, torch.float32: 2}
INFOS = {info.module_cls.__name__: info for info in common_modules.module_db}

# classes still missing, each with the issue that adds it
NOT_YET: dict[str, str] = {}

# classes whose every sample passes a torch object this harness cannot convert, each with
# where the class is checked against torch instead
UNCONVERTIBLE = {
    "TransformerEncoder": "its samples pass a torch TransformerEncoderLayer; checked against "
                          "torch in tests/scriptmod/nn/test_transformer_layers.py",
}


def test_missing_classes_are_exactly_the_listed_ones() -> None:
    missing = {name for name in INFOS if not hasattr(sm.nn, name)}
    assert sorted(missing - set(NOT_YET)) == [], "classes missing without an entry in NOT_YET"
    assert sorted(set(NOT_YET) - missing) == [], "NOT_YET lists classes that exist now"


@pytest.mark.parametrize("name", sorted(n for n in INFOS if n not in NOT_YET))
def test_module_db_samples(name: str) -> None:
    if name in UNCONVERTIBLE:
        pytest.skip(UNCONVERTIBLE[name])
    info = INFOS[name]
    dtypes = [d for d in (torch.float64, torch.float32) if d in set(info.supported_dtypes("cpu"))]
    modes = (True, False) if info.train_and_eval_differ else (True,)
    failures, checked = [], 0
    for dtype in dtypes:
        for training in modes:
            samples = module_samples(info, dtype, training)
            for mi in samples if ALL else samples[:SAMPLES[dtype]]:
                try:
                    check_module_sample(info, mi, dtype, training)
                    checked += 1
                except Unsupported:
                    pass
                except Exception as e:  # noqa: BLE001 - collected, reported together
                    failures.append(f"[{dtype}, training={training}] {mi.desc}: "
                                    f"{type(e).__name__}: {str(e)[:300]}")
    assert not failures, f"{len(failures)} sample(s) differ from torch:\n" + "\n".join(failures)
    assert checked, f"no sample of {name} could be compared"
