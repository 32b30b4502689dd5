"""Modules that build a list (or dict) while they run and hand it to a library call: ``cat``,
``stack``, a reduction of the stacked items, ``tensor`` of run-time floats, ``split``, a
layer, ``view``/``reshape``/``zeros`` with a ``List[int]`` of sizes. The list is filled by
``append``, ``extend``, ``insert``, ``+=``, a comprehension, in straight-line code, inside
``for`` loops over a run-time and a constant range, inside if-branches, and read again after
it grew (issue 35: the call read the empty literal the list started as), and items of
other shapes than the first (whose sizes were read from the first item's type).

``build(lib)`` defines them against ``lib`` (``scriptmod`` or ``torch``), so that the same
source is scripted by both; each entry lists the argument tuples passed after the input
tensor (which is ``(batch, 8)``). Kept out of the test module so that its classes have
plain source."""
from __future__ import annotations

from typing import Any, Callable, Dict, List


def build(lib: Any) -> dict[str, tuple[Callable[[], Any], list[tuple]]]:
    nn = lib.nn

    class AppendCat(nn.Module):
        """issue 35's repro: two appends in straight-line code, then ``cat``."""

        def forward(self, x):
            xs: List[lib.Tensor] = []
            xs.append(x)
            xs.append(x * 2)
            return lib.cat(xs, 0)

    class LoopStack(nn.Module):
        """appends in a loop over a run-time range, then ``stack`` and a reduction."""

        def forward(self, x, n: int):
            xs: List[lib.Tensor] = [x]
            for i in range(n):
                xs.append(x * float(i + 2))
            return lib.stack(xs, 0).sum(0)

    class ConstantLoopCat(nn.Module):
        """appends in a loop over a constant range, feeding a layer."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(24, 8)

        def forward(self, x):
            parts: List[lib.Tensor] = []
            for i in range(3):
                parts.append((x + float(i)).tanh())
            return self.fc(lib.cat(parts, 1))

    class BranchAppend(nn.Module):
        """appends in both branches of a run-time ``if`` and in one branch only."""

        def forward(self, x, k: int):
            xs: List[lib.Tensor] = [x]
            if k > 0:
                xs.append(x.relu())
            else:
                xs.append(x.sigmoid())
                xs.append(x * 3)
            if k > 1:
                xs.append(x.tanh())
            return lib.cat(xs, 1)

    class ExtendInsert(nn.Module):
        """``extend`` and ``insert``, then ``stack``."""

        def forward(self, x):
            xs: List[lib.Tensor] = []
            xs.extend([x, x * 2])
            xs.insert(0, x - 1)
            return lib.stack(xs, 1)

    class Iadd(nn.Module):
        """``+=`` of a list literal, then an ``append`` to the result."""

        def forward(self, x):
            xs: List[lib.Tensor] = [x]
            xs += [x.exp()]
            xs.append(x * 3)
            return lib.stack(xs, 1)

    class Comprehension(nn.Module):
        """a list comprehension over a run-time range, then ``stack``."""

        def forward(self, x, n: int):
            ys = [x * float(i) for i in range(n + 1)]
            return lib.stack(ys, 0).mean(0)

    class ReadThenGrow(nn.Module):
        """the same list read before and after it grows: each call sees its own items."""

        def forward(self, x):
            xs: List[lib.Tensor] = [x]
            first = lib.cat(xs, 1)
            xs.append(x * 5)
            second = lib.cat(xs, 1)
            return second + lib.cat([first, first], 1)

    class NestedLoops(nn.Module):
        """appends in nested loops (run-time outer, constant inner) and a ``while``."""

        def forward(self, x, n: int):
            xs: List[lib.Tensor] = []
            for i in range(n):
                for j in range(2):
                    xs.append(x * float(i + j))
            k = 0
            while k < 2:
                xs.append(x - float(k))
                k += 1
            return lib.stack(xs, 0).sum(0)

    class RuntimeShape(nn.Module):
        """``view``/``reshape`` with a ``List[int]`` built at run time, and ``zeros`` of it."""

        def forward(self, x, parts: int):
            shape: List[int] = []
            shape.append(x.size(0))
            shape.append(parts)
            shape.append(-1)
            y = x.view(shape)
            dims: List[int] = []
            for d in y.shape:
                dims.append(d)
            z = lib.zeros(dims)
            flat = [x.size(0), x.size(1)]
            flat.reverse()
            return (y + z).reshape(flat)

    class RuntimeSplit(nn.Module):
        """``split`` with sizes appended in a loop, the pieces summed in a loop."""

        def forward(self, x, n: int):
            sizes: List[int] = []
            for i in range(n):
                sizes.append(1)
            sizes.append(8 - n)
            total = x[:, :1] * 0.0
            for p in lib.split(x, sizes, 1):
                total = total + p.sum(1, keepdim=True)
            return total

    class TensorOfFloats(nn.Module):
        """``tensor`` of floats appended at run time, scaling the input."""

        def forward(self, x, n: int):
            vals: List[float] = []
            for i in range(8):
                vals.append(float(i % (n + 1)) + 0.5)
            return x * lib.tensor(vals)

    class DictFilled(nn.Module):
        """a ``Dict[str, lib.Tensor]`` filled at run time (in a loop and a branch), then read by
        key, through ``values()`` into ``stack``, and in a comprehension."""

        def forward(self, x, k: int):
            d: Dict[str, lib.Tensor] = {}
            d["a"] = x.relu()
            for i in range(k):
                d["b" + str(i)] = x * float(i)
            if k > 1:
                d["a"] = d["a"] + 1.0
            s = lib.stack(list(d.values()), 0).sum(0)
            keys = ["a"]
            return s + lib.cat([d[key] for key in keys], 1)

    class LayerOnItems(nn.Module):
        """layers applied to items of a run-time list, the results collected and summed."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, n: int):
            hs: List[lib.Tensor] = [x]
            for i in range(n):
                hs.append(self.fc(hs[-1]).tanh())
            outs: List[lib.Tensor] = []
            for h in hs:
                outs.append(self.fc(h))
            return lib.stack(outs, 0).sum(0)

    class GrowingItems(nn.Module):
        """items of growing shapes appended in a loop: a read sees its own item's size, not
        the first item's."""

        def forward(self, x, n: int):
            xs: List[lib.Tensor] = [x]
            for i in range(n):
                xs.append(lib.cat([xs[-1], xs[-1]], 0))
            last = xs[-1]
            return last[:x.size(0)] * float(last.size(0))

    class ShapesPerStore(nn.Module):
        """a branch appends an item of another shape, a dict gets a value of another shape
        (by key and by ``update``), a store by index replaces an item with one of another
        shape."""

        def forward(self, x, k: int):
            xs = [x]
            if k > 0:
                xs.append(x[:1])
            d = {"all": x}
            d["first"] = x[:1]
            ys = [x, x]
            ys[1] = x[1:]
            e = {"all": x}
            e.update({"rest": x[1:]})
            n = xs[-1].size(0) + 10 * d["first"].size(0) + 100 * ys[1].size(0) + \
                1000 * e["rest"].size(0)
            return x * float(n) + d["first"]

    return {
        "AppendCat": (AppendCat, [()]),
        "LoopStack": (LoopStack, [(0,), (1,), (3,)]),
        "ConstantLoopCat": (ConstantLoopCat, [()]),
        "BranchAppend": (BranchAppend, [(0,), (1,), (2,)]),
        "ExtendInsert": (ExtendInsert, [()]),
        "Iadd": (Iadd, [()]),
        "Comprehension": (Comprehension, [(0,), (2,)]),
        "ReadThenGrow": (ReadThenGrow, [()]),
        "NestedLoops": (NestedLoops, [(0,), (2,)]),
        "RuntimeShape": (RuntimeShape, [(2,), (4,)]),
        "RuntimeSplit": (RuntimeSplit, [(1,), (3,)]),
        "TensorOfFloats": (TensorOfFloats, [(0,), (2,)]),
        "DictFilled": (DictFilled, [(0,), (1,), (3,)]),
        "LayerOnItems": (LayerOnItems, [(0,), (2,)]),
        "GrowingItems": (GrowingItems, [(0,), (1,), (3,)]),
        "ShapesPerStore": (ShapesPerStore, [(0,), (1,)]),
    }
