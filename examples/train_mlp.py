"""Train a small MLP on three interleaved 2-D spirals and report its accuracy.

    python examples/train_mlp.py                 # full run: asserts >= 95% accuracy
    python examples/train_mlp.py --epochs 40     # shorter (SCRIPTMOD_EXAMPLE_EPOCHS works too)
    python examples/train_mlp.py --compare       # eager, then compiled: epoch times side by side

Everything is scriptmod: data made with ``scriptmod.rand/randn`` and served in shuffled
batches by ``scriptmod.utils.data.DataLoader``, ``nn.Sequential`` of ``Linear``/``GELU``,
``CrossEntropyLoss``, ``AdamW`` with ``CosineAnnealingLR``.

``--compare`` trains twice from the same seed (same data, weights, shuffles and number of
steps): once the ``nn.Module`` eagerly, once ``scriptmod.jit.trace(model, x)`` called with
grad enabled (``loss.backward()`` through it, ``AdamW(fused=True)``), and prints each
run's accuracy and median epoch time; both must reach the accuracy.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm  # noqa: E402

import scriptmod as sm  # noqa: E402
from scriptmod import nn, optim  # noqa: E402
from scriptmod.optim.lr_scheduler import CosineAnnealingLR  # noqa: E402
from scriptmod.utils.data import DataLoader, TensorDataset  # noqa: E402

TARGET_ACCURACY = 0.95


def make_spirals(n_per_class: int, classes: int = 3,
                 noise: float = 0.15) -> tuple[sm.Tensor, sm.Tensor]:
    """Points (r cos a, r sin a) on ``classes`` interleaved arms; labels are the arm index."""
    r = sm.rand(classes, n_per_class)
    arm = sm.arange(classes, dtype=sm.float32).unsqueeze(1) * (2 * math.pi / classes)
    angle = arm + r * 4.0 + sm.randn(classes, n_per_class) * noise
    x = sm.stack([r * angle.cos(), r * angle.sin()], dim=-1).reshape(-1, 2)
    y = sm.arange(classes).unsqueeze(1).expand(classes, n_per_class).reshape(-1)
    return x, y


def batches(x: sm.Tensor, y: sm.Tensor, batch_size: int) -> DataLoader:
    """Shuffled ``(x, y)`` batches, a new order each epoch (from the global generator, so
    ``manual_seed`` repeats it). A plain ``TensorDataset`` with the default collation is
    served with one gather per tensor and batch, not row by row."""
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)


def make_model(hidden: int = 64, classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(2, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, classes))


def accuracy(model: nn.Module, x: sm.Tensor, y: sm.Tensor) -> float:
    model.eval()
    with sm.no_grad():
        acc = float((model(x).argmax(dim=1) == y).float().mean().item())
    model.train()
    return acc


def train(epochs: int, batch_size: int = 64, seed: int = 0, progress: bool = True,
          compiled: bool = False) -> tuple[float, list[float]]:
    """Train on 900 points; return the accuracy on 900 fresh points of the same spirals and
    each epoch's seconds. ``compiled``: step ``jit.trace(model, x)`` instead of the model."""
    sm.manual_seed(seed)
    x, y = make_spirals(300)
    x_test, y_test = make_spirals(300)
    model, loss_fn = make_model(), nn.CrossEntropyLoss()
    forward = sm.jit.trace(model, x[:batch_size]) if compiled else model
    opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4,
                      fused=True if compiled else None)
    sched = CosineAnnealingLR(opt, T_max=epochs)
    loader = batches(x, y, batch_size)
    bar = tqdm(range(epochs), desc="compiled" if compiled else "eager", disable=not progress)
    seconds = []
    for _ in bar:
        start = time.perf_counter()
        for xb, yb in loader:
            loss = loss_fn(forward(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        seconds.append(time.perf_counter() - start)
        bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{sched.get_last_lr()[0]:.4f}")
    return accuracy(model, x_test, y_test), seconds


def epoch_line(name: str, acc: float, seconds: list[float]) -> str:
    """``eager: accuracy 98.7%, 48.58 ms per epoch (median of 24 after the first; first
    494.7 ms)``: the first epoch apart, since the compiled run compiles in it."""
    med = statistics.median(seconds[1:] or seconds)
    return (f"{name}: accuracy {acc:.1%}, {med * 1e3:.2f} ms per epoch (median of "
            f"{max(1, len(seconds) - 1)} after the first; first {seconds[0] * 1e3:.1f} ms)")


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int,
                        default=int(os.environ.get("SCRIPTMOD_EXAMPLE_EPOCHS", "60")))
    parser.add_argument("--min-accuracy", type=float, default=TARGET_ACCURACY)
    parser.add_argument("--compare", action="store_true",
                        help="train eagerly, then the traced model; print both epoch times")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    acc, eager_s = train(args.epochs, progress=not args.no_progress)
    print(f"final test accuracy: {acc:.1%}")
    assert acc >= args.min_accuracy, f"accuracy {acc:.1%} is below {args.min_accuracy:.0%}"
    if args.compare:
        compiled_acc, compiled_s = train(args.epochs, progress=not args.no_progress,
                                         compiled=True)
        print(epoch_line("eager", acc, eager_s))
        print(epoch_line("compiled (jit.trace)", compiled_acc, compiled_s))
        ratio = statistics.median(compiled_s[1:] or compiled_s) / statistics.median(
            eager_s[1:] or eager_s)
        print(f"compiled / eager epoch time: {ratio:.2f}x")
        assert compiled_acc >= args.min_accuracy, (
            f"compiled accuracy {compiled_acc:.1%} is below {args.min_accuracy:.0%}")
    return acc


if __name__ == "__main__":
    main()
