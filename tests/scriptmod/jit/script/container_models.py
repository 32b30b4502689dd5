"""Modules whose forward branches inside a loop over a module container (the loop is
unrolled when scripted): ModuleList, Sequential, ModuleDict items()/values(), enumerate, zip,
nested containers, with conditions known only at run time (an int or bool argument, a
tensor's value) and constant ones (a loop counter, a key, a module attribute).

``build(lib)`` defines them against ``lib`` (``scriptmod`` or ``torch``), so that the same
source is scripted by both; each entry lists argument tuples (after the input tensor) that
take every branch. Kept out of the test module so that its classes have plain source."""
from __future__ import annotations

from typing import Any, Callable


def build(lib: Any) -> dict[str, tuple[Callable[[], Any], list[tuple]]]:
    nn = lib.nn

    class Gated(nn.Module):
        """issue 35's repro: a counter compared with a run-time int."""

        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
            self.act = nn.GELU()

        def forward(self, x, depth: int):
            i = 0
            for layer in self.layers:
                if i < depth:
                    x = self.act(layer(x)) + x
                i += 1
            return x

    class EnumerateElse(nn.Module):
        """enumerate(ModuleList), if/else on run-time ints, the else branch another layer."""

        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
            self.other = nn.Linear(8, 8)

        def forward(self, x, skip: int, swap: int):
            for i, layer in enumerate(self.layers):
                if i == skip:
                    x = x * 0.5
                elif i == swap:
                    x = self.other(x).tanh()
                else:
                    x = layer(x).relu() + x
            return x

    class SequentialMixed(nn.Module):
        """for over a Sequential: a constant branch (a module attribute, the counter) and a
        run-time one (a tensor's mean against a float argument)."""

        def __init__(self) -> None:
            super().__init__()
            self.seq = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
            self.residual = True

        def forward(self, x, t: float):
            n = 0
            for layer in self.seq:
                h = layer(x)
                if self.residual and n > 0:
                    h = h + x
                if float(h.mean()) > t:
                    x = h.sigmoid()
                else:
                    x = h.tanh() * 2.0
                n += 1
            return x

    class DictBranches(nn.Module):
        """ModuleDict .items() branching on the key (constant) and a bool argument, then
        .values() branching on a run-time int."""

        def __init__(self) -> None:
            super().__init__()
            self.heads = nn.ModuleDict({"a": nn.Linear(8, 8), "b": nn.Linear(8, 8),
                                        "c": nn.Linear(8, 8)})

        def forward(self, x, flag: bool, k: int):
            for name, head in self.heads.items():
                if name == "b":
                    x = head(x) - x
                elif flag:
                    x = head(x).relu()
            j = 0
            for head in self.heads.values():
                if j == k:
                    x = x + head(x)
                j += 1
            return x

    class ZipGates(nn.Module):
        """zip of two ModuleLists under a bool argument."""

        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
            self.gates = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

        def forward(self, x, use_gate: bool):
            for layer, gate in zip(self.layers, self.gates):
                if use_gate:
                    x = layer(x) * gate(x).sigmoid()
                else:
                    x = layer(x)
            return x

    class OneBranchValues(nn.Module):
        """A value assigned in one branch only (used inside it), another in both and used
        after the merge, the input itself reassigned in one branch only."""

        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])

        def forward(self, x, t: float):
            for layer in self.layers:
                h = layer(x)
                if float(h.sum()) > t:
                    z = h.relu()
                    y = z * 2.0
                    x = x + z
                else:
                    y = h.sigmoid()
                x = x * y
            return x

    class NestedLoops(nn.Module):
        """A ModuleList of ModuleLists, with a run-time range loop inside and both kinds of
        condition (the counter's parity, an int argument)."""

        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])
                                         for _ in range(2)])

        def forward(self, x, n: int, limit: int):
            i = 0
            for block in self.blocks:
                for layer in block:
                    for r in range(n):
                        if i % 2 == 0:
                            x = layer(x).tanh()
                        elif r < limit:
                            x = layer(x).relu() + x
                    i += 1
            return x

    return {
        "Gated": (Gated, [(0,), (1,), (2,), (3,)]),
        "EnumerateElse": (EnumerateElse, [(0, 1), (1, 2), (5, 5), (2, 0)]),
        "SequentialMixed": (SequentialMixed, [(-10.0,), (10.0,), (0.0,)]),
        "DictBranches": (DictBranches, [(True, 0), (False, 2), (True, 7)]),
        "ZipGates": (ZipGates, [(True,), (False,)]),
        "OneBranchValues": (OneBranchValues, [(-100.0,), (100.0,), (0.0,)]),
        "NestedLoops": (NestedLoops, [(0, 0), (1, 0), (2, 1), (3, 3)]),
    }
