"""Physical floors, measured in the same run as the results they bound.

Two machine rates: copy bandwidth (a large ``copyto``, bytes read + bytes written per second,
best of several) and matmul throughput (a large square ``matmul``, FLOP/s, best of several).
A workload's floor is the time it would take at those rates: bytes moved (read x + write y)
over copy bandwidth, or its matmul FLOPs over matmul throughput.

    >>> rates = measure(np, "float32", quick=True, threads=2)
    >>> work = 2 * 4 * 4096 * 4096                  # W1: read and write 4096² float32
    >>> floor_seconds("bytes", rates, work) == work / rates.copy_bytes_per_s
    True
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

import scriptmod
from scriptmod import nn

COPY_BYTES = 256 << 20           # each of source and destination: far beyond the caches
COPY_BYTES_QUICK = 32 << 20
MATMUL_N = 2048
MATMUL_N_QUICK = 512


@dataclass(frozen=True)
class Rates:
    """Measured machine rates: bytes/s of a copy (read + write), FLOP/s of a matmul."""

    copy_bytes_per_s: float
    matmul_flop_per_s: float
    dtype: str
    device: str
    copy_threads: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {"copy_bytes_per_s": self.copy_bytes_per_s,
                "matmul_flop_per_s": self.matmul_flop_per_s, "copy_threads": self.copy_threads,
                "dtype": self.dtype, "device": self.device}


def _best(fn: Callable[[], None], repeats: int, sync: Callable[[], None]) -> float:
    """Fastest of ``repeats`` timed calls after one untimed call (page faults, warm-up)."""
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


def copy_bandwidth(xp: ModuleType, nbytes: int, repeats: int = 5,
                   sync: Callable[[], None] = lambda: None, threads: int = 1) -> float:
    """Bytes read + bytes written per second by ``xp.copyto`` of ``nbytes`` (best of runs),
    split over ``threads`` threads (one ``copyto`` per contiguous chunk; NumPy releases the
    GIL while it copies), so the floor of an N-thread kernel is an N-thread copy."""
    src = xp.ones(nbytes // 4, dtype="float32")
    dst = xp.empty_like(src)
    if threads <= 1 or xp is not np:
        seconds = _best(lambda: xp.copyto(dst, src), repeats, sync)
        return 2 * src.nbytes / seconds
    bounds = np.linspace(0, src.size, threads + 1).astype(int)
    chunks = [(dst[lo:hi], src[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    with ThreadPoolExecutor(threads - 1) as pool:
        def copy() -> None:
            futures = [pool.submit(np.copyto, d, s) for d, s in chunks[1:]]
            np.copyto(*chunks[0])
            for f in futures:
                f.result()
        seconds = _best(copy, repeats, sync)
    return 2 * src.nbytes / seconds


def matmul_peak(xp: ModuleType, n: int, dtype: str, repeats: int = 3,
                sync: Callable[[], None] = lambda: None) -> float:
    """FLOP/s (2 n^3 per product) of an ``n x n`` matmul in ``dtype`` (best of runs)."""
    rng = xp.random.default_rng(0) if hasattr(xp.random, "default_rng") else xp.random
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    out = xp.empty((n, n), dtype=dtype)
    seconds = _best(lambda: xp.matmul(a, b, out=out), repeats, sync)
    return 2.0 * n ** 3 / seconds


def measure(xp: ModuleType, dtype: str, quick: bool = False, device: str = "cpu",
            sync: Callable[[], None] = lambda: None, threads: int = 1) -> Rates:
    """Both rates (copy over ``threads`` threads; matmul with the BLAS's own threads),
    small and fast with ``quick``."""
    nbytes = COPY_BYTES_QUICK if quick else COPY_BYTES
    n = MATMUL_N_QUICK if quick else MATMUL_N
    return Rates(copy_bandwidth(xp, nbytes, 3 if quick else 7, sync, threads),
                 matmul_peak(xp, n, dtype, 2 if quick else 4, sync), dtype, device, threads)


def best(a: Rates, b: Rates) -> Rates:
    """The higher of each rate (the floors are what the machine *can* do)."""
    return Rates(max(a.copy_bytes_per_s, b.copy_bytes_per_s),
                 max(a.matmul_flop_per_s, b.matmul_flop_per_s), a.dtype, a.device,
                 a.copy_threads)


# ---- what each workload must do at least ---------------------------------------------------

def matmul_flops(model: nn.Module, x_shape: tuple[int, ...]) -> int:
    """FLOPs of the matrix products ``model`` computes on an input of ``x_shape``.

    Counts ``Linear`` layers (2 * tokens * in * out) and ``MultiheadAttention``'s packed
    input projection and its two batched products (scores and weighted sum); elementwise
    work is left out, so the result is a lower bound. Tokens are all rows of the input.
    A model with a ``matmul_flops(x_shape)`` method of its own (the attention benchmarks'
    ``scaled_dot_product_attention``: QKᵀ and AV) is asked instead, and one with
    convolutions is counted by ``conv_flops``.
    """
    own = getattr(model, "matmul_flops", None)
    if callable(own):
        return int(own(x_shape))
    if any(isinstance(m, _CONVS) for m in model.modules()):
        return conv_flops(model, x_shape)
    tokens = 1
    for n in x_shape[:-1]:
        tokens *= n
    flops = 0
    for m in model.modules():
        if isinstance(m, nn.Linear):
            flops += 2 * tokens * m.in_features * m.out_features
        elif isinstance(m, nn.MultiheadAttention):
            flops += _attention_flops(m, x_shape, tokens)
    return flops


_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def conv_flops(model: nn.Module, x_shape: tuple[int, ...]) -> int:
    """FLOPs of the convolutions and ``Linear`` layers ``model`` runs on an input of
    ``x_shape`` (the CNN rows C1, C2, M1, TC1 and CONV1–CONV5): ``2 * N * O * prod(out) *
    C/G * prod(kernel)`` per convolution, ``2 * rows * in * out`` per ``Linear``.

    Each layer's output shape is read by a forward hook during one eval-mode, no-grad call at
    batch 1 (zeros; the count is linear in the batch, and eval mode leaves BatchNorm's
    running statistics alone), then scaled to ``x_shape``'s batch; every module's mode is
    restored. Pooling, normalization, activations and residual adds are left out: a lower
    bound.

        >>> conv_flops(nn.Conv2d(4, 6, 3, padding=1), (2, 4, 5, 5)) == 2 * 2 * 6 * 25 * 4 * 9
        True
    """
    counted: list[int] = []

    def hook(m: Any, args: tuple[Any, ...], out: Any) -> None:
        per_output = m.in_features if isinstance(m, nn.Linear) else \
            m.in_channels // m.groups * math.prod(m.kernel_size)
        counted.append(2 * out.numel() * per_output)

    modes = [m.training for m in model.modules()]
    p = next(model.parameters())
    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (*_CONVS, nn.Linear))]
    try:
        model.eval()
        with scriptmod.no_grad():
            model(scriptmod.zeros(1, *x_shape[1:], dtype=p.dtype, device=p.device))
    finally:
        for h in handles:
            h.remove()
        for m, mode in zip(model.modules(), modes):
            m.training = mode
    return sum(counted) * x_shape[0]


def _attention_flops(m: nn.MultiheadAttention, x_shape: tuple[int, ...], tokens: int) -> int:
    d = m.embed_dim
    seq = x_shape[1] if m.batch_first else x_shape[0]
    in_proj = 2 * tokens * d * 3 * d                  # out_proj is a Linear, counted there
    products = 2 * 2 * tokens * seq * d               # Q K^T and A V over all heads
    return in_proj + products


def training_work(kind: str, model: nn.Module, x_shape: tuple[int, ...], y_shape: tuple[int, ...],
                  itemsize: int) -> float:
    """What a training row's floor divides (T2, T3, T5, TC1: one forward, loss, backward and
    optimizer step), as a lower bound.

    - FLOPs (T3, T5, TC1): 3x the forward's matmul FLOPs (``matmul_flops``), the issue's
      definition: the forward product, and two of its size in the backward (the gradient of
      the weight and of the layer's input). The first layer's input gradient is not needed
      (the input takes no grad), so the true count is a little lower; the rest of the
      step (elementwise work, the optimizer's pass over weights and moments) is left out.
    - bytes (T2): the least traffic of a step whose loss is compiled with the model (the
      training rows trace ``WithLoss(model)``): the input and the target (the output's
      shape) are read once, and nothing of their size is written: the output feeds only
      the loss, the activations' derivatives and the parameters' gradient reductions come
      from the same pass, and the input takes no grad. That is ``|x| + |y|`` bytes; W2's
      only parameter (PReLU's weight) makes the optimizer's traffic nothing.

        >>> training_work("bytes", nn.Identity(), (2048, 2048), (2048, 2048), 4) / 2**20
        32.0
    """
    if kind == "flops":
        return 3.0 * matmul_flops(model, x_shape)
    if kind == "bytes":
        return float(itemsize * (_numel(x_shape) + _numel(y_shape)))
    return 0.0


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def floor_seconds(kind: str, rates: Rates, work: float) -> float | None:
    """The floor in seconds of ``work`` bytes (kind ``"bytes"``) or FLOPs (``"flops"``);
    ``None`` for kind ``"none"``."""
    if kind == "bytes":
        return work / rates.copy_bytes_per_s
    if kind == "flops":
        return work / rates.matmul_flop_per_s
    return None
