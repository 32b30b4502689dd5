"""Every OptimizerInfo of PyTorch's ``optim_db``: each config (torch's own list of options)
over five steps of a least-squares problem gives torch's weights."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
common_optimizers = pytest.importorskip("torch.testing._internal.common_optimizers")

import scriptmod as sm  # noqa: E402
from .harness import Unsupported, assert_same, run_optimizer, seed_all, to_sm  # noqa: E402

INFOS = {info.optim_cls.__name__: info for info in common_optimizers.optim_db}


def _configs(info: object) -> list:
    try:
        return info.optim_inputs_func(device="cpu", dtype=torch.float32)
    except TypeError:
        return info.optim_inputs_func(device="cpu")


@pytest.mark.parametrize("name", sorted(INFOS))
def test_optim_db_configs(name: str) -> None:
    info = INFOS[name]
    smcls = getattr(sm.optim, name)
    closure = bool(getattr(info, "step_requires_closure", False))
    failures, checked, refused = [], 0, 0
    for oi in _configs(info):
        if oi.params is not None:
            continue   # explicit parameter groups of torch tensors
        try:
            kwargs = to_sm(dict(oi.kwargs), grad=False)
        except Unsupported:
            continue
        seed_all(0)
        try:
            tw = run_optimizer(torch, info.optim_cls, dict(oi.kwargs), closure)
        except Exception:  # noqa: BLE001 - torch refuses the config: scriptmod must too
            with pytest.raises(Exception):
                run_optimizer(sm, smcls, kwargs, closure)
            refused += 1
            continue
        seed_all(0)
        try:
            sw = run_optimizer(sm, smcls, kwargs, closure)
            assert_same(tw.detach(), sw.detach(), "weight after 5 steps")
            checked += 1
        except Exception as e:  # noqa: BLE001 - collected, reported together
            failures.append(f"{oi.desc} {dict(oi.kwargs)}: {type(e).__name__}: {str(e)[:300]}")
    assert not failures, f"{len(failures)} config(s) differ from torch:\n" + "\n".join(failures)
    # SparseAdam refuses dense gradients in both libraries: every config is a refusal
    assert checked or refused, f"no config of {name} could be compared"
