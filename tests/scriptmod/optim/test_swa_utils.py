"""``optim.swa_utils`` against ``torch.optim.swa_utils``: averaged weights (SWA, EMA, a
custom ``avg_fn``, ``use_buffers``), ``update_bn`` statistics, and ``SWALR``'s lrs step by
step; NumPy running means for the default SWA."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import scriptmod as sm
from scriptmod import nn
from scriptmod.optim import swa_utils

torch = pytest.importorskip("torch")
torch.set_num_threads(1)    # tiny tensors: threads only contend for the shared cores

RNG = np.random.default_rng(0)
WEIGHTS = [RNG.standard_normal((3, 4)) for _ in range(4)]
BATCHES = [RNG.standard_normal((5, 4)) for _ in range(3)]


def _model(lib: Any) -> Any:
    """Linear + BatchNorm1d in float64, the same initial weights in either library."""
    model = lib.nn.Sequential(lib.nn.Linear(4, 3), lib.nn.BatchNorm1d(3)).double()
    with lib.no_grad():
        model[0].weight.copy_(lib.tensor(WEIGHTS[-1]))
        model[0].bias.copy_(lib.tensor(np.linspace(-1, 1, 3)))
    return model


def _average(lib: Any, **kw: Any) -> Any:
    """Averages the model over WEIGHTS (each step also moves its BatchNorm stats)."""
    model = _model(lib)
    swa = lib.optim.swa_utils
    kw = {k: (getattr(swa, v[0])(*v[1:]) if isinstance(v, tuple) else v) for k, v in kw.items()}
    avg = swa.AveragedModel(model, **kw)
    for w, x in zip(WEIGHTS, BATCHES * 2):
        with lib.no_grad():
            model[0].weight.copy_(lib.tensor(w))
        model(lib.tensor(x))
        avg.update_parameters(model)
    return avg


@pytest.mark.parametrize("kw", [{}, dict(multi_avg_fn=("get_ema_multi_avg_fn", 0.8)),
                                dict(avg_fn=("get_ema_avg_fn", 0.5)),
                                dict(avg_fn=("get_swa_avg_fn",), use_buffers=True),
                                dict(use_buffers=True)],
                         ids=["swa", "ema-multi", "ema", "swa-buffers", "default-buffers"])
def test_averaged_model_matches_torch(kw: dict[str, Any]) -> None:
    theirs, mine = _average(torch, **kw), _average(sm, **kw)
    t_sd, m_sd = theirs.state_dict(), mine.state_dict()
    assert list(t_sd) == list(m_sd)
    for k in t_sd:
        np.testing.assert_allclose(m_sd[k].numpy(), t_sd[k].numpy(), rtol=1e-14, err_msg=k)


def test_default_average_is_the_running_mean() -> None:
    avg = _average(sm)
    np.testing.assert_allclose(avg.module[0].weight.detach().numpy(), np.mean(WEIGHTS, axis=0),
                               rtol=1e-12)
    assert int(avg.n_averaged) == len(WEIGHTS)


def test_update_bn_matches_torch() -> None:
    stats = []
    for lib in (torch, sm):
        model = _model(lib)
        model.eval()
        lib.optim.swa_utils.update_bn([(lib.tensor(x), 0) for x in BATCHES], model)
        bn = model[1]
        stats.append((bn.running_mean.numpy(), bn.running_var.numpy(), bn.momentum,
                      model.training, int(bn.num_batches_tracked)))
    np.testing.assert_allclose(stats[1][0], stats[0][0], rtol=1e-12)
    np.testing.assert_allclose(stats[1][1], stats[0][1], rtol=1e-12)
    assert stats[1][2:] == stats[0][2:]


@pytest.mark.parametrize("kw", [dict(swa_lr=0.05), dict(swa_lr=[0.05, 0.2], anneal_epochs=3,
                                                        anneal_strategy="linear"),
                                dict(swa_lr=0.1, anneal_epochs=0)])
def test_swalr_matches_torch(kw: dict[str, Any]) -> None:
    seqs = []
    for lib in (torch, sm):
        ps = [lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(2))]
        opt = lib.optim.SGD([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.5}], lr=1.0)
        sched = lib.optim.swa_utils.SWALR(opt, **kw)
        seq = [sched.get_last_lr()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(12):
                sched.step()
                seq.append(sched.get_last_lr())
        seqs.append(seq)
        seqs.append(sorted(sched.state_dict()))
    assert seqs[1] == seqs[3]
    np.testing.assert_allclose(np.array(seqs[2]), np.array(seqs[0]), rtol=1e-12)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="Invalid decay value"):
        swa_utils.get_ema_avg_fn(1.5)
    opt = sm.optim.SGD([nn.Parameter(sm.ones(2))], lr=1.0)
    with pytest.raises(ValueError, match="anneal_strategy must be one of"):
        swa_utils.SWALR(opt, swa_lr=0.1, anneal_strategy="step")
