"""State-dict keys and _metadata, old torch checkpoints, version counters, writes into expand()."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scriptmod as sm  # noqa: E402
from ._common import F  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")


# ---- state dicts and version counters ---------------------------------------------------------
def _nested(L: Any) -> Any:
    nn = L.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn, self.ln = nn.BatchNorm1d(4), nn.LayerNorm(4)
            self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(),
                                     nn.ModuleList([nn.Linear(4, 4), nn.BatchNorm1d(4)]))
            self.md = nn.ModuleDict({"a": nn.Embedding(5, 4), "b": nn.BatchNorm2d(3)})
            self.register_buffer("buf", L.ones(2))
            self.register_buffer("scratch", L.ones(2), persistent=False)
            self.p = nn.Parameter(L.ones(3))
    return Block()


def test_state_dict_keys_and_metadata_equal_torchs() -> None:
    theirs, ours = _nested(torch).state_dict(), _nested(sm).state_dict()
    assert list(ours) == list(theirs)
    assert dict(ours._metadata) == dict(theirs._metadata)


@pytest.mark.parametrize("with_metadata", [True, False])
def test_old_torch_checkpoint_loads_strictly(with_metadata: bool) -> None:
    """A torch state dict as NumPy arrays, as an old checkpoint: no num_batches_tracked and
    every module at _metadata version 1 (or no _metadata at all)."""
    import collections
    src = _nested(torch)
    for p in src.parameters():
        torch.nn.init.normal_(p)
    sd = src.state_dict()
    old: Any = collections.OrderedDict((k, v.numpy()) for k, v in sd.items()
                                       if not k.endswith("num_batches_tracked"))
    if with_metadata:
        old._metadata = collections.OrderedDict((k, {"version": 1}) for k in sd._metadata)
    ours = _nested(sm)
    result = ours.load_state_dict(old, strict=True)
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    for k, v in ours.state_dict().items():
        want = np.zeros(()) if k.endswith("num_batches_tracked") else sd[k].numpy()
        np.testing.assert_array_equal(v.numpy(), want, err_msg=k)


def _versions(L: Any) -> list[Any]:
    """Version counters through in-place ops, views, .data/.detach aliases, no_grad writes,
    inplace functionals, optimizer steps, BatchNorm running stats and load_state_dict."""
    out: list[Any] = []
    x = L.zeros(4, 3)
    x.add_(1)
    x[0] = 2.0
    out.append(x._version)
    v = x[1]
    v.mul_(3)
    t = x.t()
    t.zero_()
    vv = x.view(12)
    vv.fill_(1.0)
    out += [x._version, v._version, t._version, vv._version]
    d = x.detach()
    d.add_(1)
    dd = x.data
    dd.add_(1)
    out += [x._version, d._version, dd._version]
    with L.no_grad():
        x.sub_(1)
    out += [x._version, x.clone()._version]
    for step in (lambda: x.copy_(L.ones(4, 3)), lambda: x.clamp_(min=0), lambda: x.relu_(),
                 lambda: x.masked_fill_(x > 0, 1.0), lambda: x[:, 1].add_(1),
                 lambda: F(L).relu(x, inplace=True), lambda: x.copy_(x),
                 lambda: F(L).dropout(x, 0.5, False, True)):
        step()
        out.append(x._version)
    e = L.ones(4)
    e.expand(1, 4).mul_(2)
    out.append(e._version)
    lin = L.nn.Linear(3, 2)
    w = lin.weight
    for opt in (L.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9),
                L.optim.Adam(lin.parameters(), lr=0.1), L.optim.AdamW(lin.parameters(), lr=0.1)):
        for _ in range(2):
            opt.zero_grad()
            lin(L.ones(1, 3)).sum().backward()
            opt.step()
            out.append((w._version, w.grad._version))
    bn = L.nn.BatchNorm1d(3)
    bn(L.randn(4, 3))
    lin.load_state_dict(lin.state_dict())
    L.nn.init.zeros_(lin.weight)
    out += [bn.running_mean._version, bn.num_batches_tracked._version, lin.weight._version]
    return out


def test_version_counters_equal_torchs() -> None:
    assert _versions(sm) == _versions(torch)


EXPAND_WRITES: dict[str, Callable[[Any], Any]] = {
    "add_ overlapping": lambda L: L.ones(3, 1).expand(3, 4).add_(1),
    "setitem overlapping": lambda L: L.ones(3, 1).expand(3, 4).__setitem__(0, 2.0),
    "copy_ overlapping": lambda L: L.ones(3, 1).expand(3, 4).copy_(L.zeros(3, 4)),
    "row of overlapping": lambda L: L.ones(3, 1).expand(3, 4)[0].add_(1),
}


@pytest.mark.parametrize("name", list(EXPAND_WRITES))
def test_inplace_on_overlapping_expand_raises_torchs_error(name: str) -> None:
    for L in (torch, sm):
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            EXPAND_WRITES[name](L)


def test_inplace_on_non_overlapping_expand_writes_through_as_torch() -> None:
    for L in (torch, sm):
        a, b = L.ones(3, 4), L.ones(4)
        a.expand(3, 4).add_(1)
        b.expand(1, 4).mul_(3)
        assert (a.sum().item(), b.sum().item(), a._version, b._version) == (24.0, 12.0, 1, 1)


