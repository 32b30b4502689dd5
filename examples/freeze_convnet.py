"""Benchmark freezing on a conv net with BatchNorm: eager vs traced vs ``jit.freeze`` vs
``jit.optimize_for_inference`` (and PyTorch's same four when torch is installed).

    python examples/freeze_convnet.py                # batch 32, 3x64x64, float32
    python examples/freeze_convnet.py --quick        # batch 4, 3x32x32 (a smoke run)
    python examples/freeze_convnet.py --calls 50     # median of 50 timed calls per column

The net is three ``Conv2d(3x3) -> BatchNorm2d -> ReLU`` blocks, a global average pool and a
``Linear``, in eval mode with non-trivial running statistics. Every column runs in this one
process on the same input, the columns taking turns call by call; each prints the median
time of ``--calls`` calls after warm-up and the largest difference from scriptmod's eager
output.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import scriptmod as sm  # noqa: E402
from scriptmod import nn  # noqa: E402

CHANNELS = (3, 32, 64, 64)


def conv_net(nn_: Any) -> Any:
    """The benchmark net in ``nn_`` (``scriptmod.nn`` or ``torch.nn``)."""
    layers: list[Any] = []
    for cin, cout in zip(CHANNELS, CHANNELS[1:]):
        layers += [nn_.Conv2d(cin, cout, 3, padding=1), nn_.BatchNorm2d(cout), nn_.ReLU()]

    class ConvNet(nn_.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn_.Sequential(*layers)
            self.fc = nn_.Linear(CHANNELS[-1], 10)

        def forward(self, x: Any) -> Any:
            return self.fc(self.features(x).mean(dim=(2, 3)))
    return ConvNet()


def _with_statistics(model: nn.Module) -> nn.Module:
    with sm.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(sm.randn(m.num_features) * 0.1)
                m.running_var.copy_(sm.rand(m.num_features) + 0.5)
                m.weight.copy_(sm.rand(m.num_features) + 0.5)
                m.bias.copy_(sm.randn(m.num_features) * 0.1)
    return model.eval()


def median_ms(columns: dict[str, Callable[[], Any]], calls: int) -> dict[str, float]:
    """Median milliseconds per column; the columns take turns call by call, so that load
    from elsewhere on the machine falls on all of them alike."""
    for fn in columns.values():
        fn(), fn()
    times: dict[str, list[float]] = {name: [] for name in columns}
    for _ in range(calls):
        for name, fn in columns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def scriptmod_columns(model: nn.Module, x: sm.Tensor) -> dict[str, Callable[[], Any]]:
    traced = sm.jit.trace(model, x)
    frozen = sm.jit.freeze(sm.jit.trace(model, x))
    optimized = sm.jit.optimize_for_inference(sm.jit.trace(model, x))
    return {"scriptmod eager": lambda: model(x), "scriptmod traced": lambda: traced(x),
            "scriptmod freeze": lambda: frozen(x),
            "scriptmod optimize_for_inference": lambda: optimized(x)}


def torch_columns(model: nn.Module, x: sm.Tensor) -> dict[str, Callable[[], Any]]:
    try:
        import torch
    except ImportError:
        return {}
    ref = conv_net(torch.nn)
    ref.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy())
                         for k, v in model.state_dict().items()})
    ref.eval()
    tx = torch.from_numpy(x.numpy().copy())
    import warnings
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)     # torch.jit is deprecated
        traced = torch.jit.trace(ref, tx)
        frozen = torch.jit.freeze(torch.jit.trace(ref, tx))
        optimized = torch.jit.optimize_for_inference(torch.jit.trace(ref, tx))

    def timed(f: Callable[[Any], Any]) -> Callable[[], Any]:
        def call() -> Any:
            with torch.no_grad():
                return f(tx)
        return call
    return {"torch eager": timed(ref), "torch traced": timed(traced),
            "torch freeze": timed(frozen), "torch optimize_for_inference": timed(optimized)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="batch 4, 3x32x32")
    p.add_argument("--calls", type=int, default=30, help="timed calls per column")
    args = p.parse_args(argv)
    batch, side = (4, 32) if args.quick else (32, 64)
    sm.manual_seed(0)
    model = _with_statistics(conv_net(nn))
    x = sm.randn(batch, 3, side, side)
    with sm.no_grad():
        want = model(x).numpy()
        columns = {**scriptmod_columns(model, x), **torch_columns(model, x)}
        diffs = {name: float(np.abs(fn().numpy() - want).max()) for name, fn in columns.items()}
        ms = median_ms(columns, args.calls)
    print(f"conv-bn-relu x3 + pool + linear, batch {batch}, 3x{side}x{side}, float32, "
          f"median of {args.calls} calls")
    for name in columns:
        print(f"  {name:34s} {ms[name]:8.2f} ms   max |diff| {diffs[name]:.1e}")

if __name__ == "__main__":
    main()
