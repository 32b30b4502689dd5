"""Random number state per device. ``manual_seed`` reseeds every device's generator.

Impure kernels draw from here; autograd can snapshot and replay a draw (dropout's mask)."""
from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from . import arrays

_seed: list[int] = [np.random.SeedSequence().entropy % (2 ** 63)]
_generators: dict[str, Any] = {}


def manual_seed(seed: int) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"manual_seed: expected an int seed, got {type(seed).__name__}")
    _seed[0] = seed % (2 ** 63)
    _generators.clear()


def initial_seed() -> int:
    return _seed[0]


def generator(device: str = "cpu") -> Any:
    g = _generators.get(device)
    if g is None:
        g = _generators[device] = seeded(device, _seed[0])
    return g


def seeded(device: str, seed: int) -> Any:
    """A new generator for ``device`` started from ``seed``."""
    if device == "cpu":
        return np.random.Generator(np.random.PCG64(seed))
    xp = arrays.module_for_device(device)
    with xp.cuda.Device(int(device.split(":")[1]) if ":" in device else 0):
        return xp.random.default_rng(seed)


def get_state(device: str = "cpu") -> Any:
    """A snapshot of the device's generator, for ``replay``."""
    return copy.deepcopy(generator(device))


@contextmanager
def drawing_from(device: str, gen: Any) -> Iterator[None]:
    """Draws inside the block come from ``gen`` (a user's ``Generator``), which they advance."""
    saved = _generators.get(device)
    _generators[device] = gen
    try:
        yield
    finally:
        if saved is None:
            _generators.pop(device, None)
        else:
            _generators[device] = saved


@contextmanager
def replay(device: str, snapshot: Any) -> Iterator[None]:
    """Draws inside the block repeat the draws made right after ``snapshot`` was taken."""
    with drawing_from(device, copy.deepcopy(snapshot)):
        yield
