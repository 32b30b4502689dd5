"""``op_cases`` rows of convolution (imported by ``op_cases`` at its end; build rows with its
``case`` and sample builders): ``conv1d``/``conv2d``/``conv3d``, their backward ops (which are
also the transposed convolutions, so they are gradchecked too) and ``im2col``/``col2im``.

The references are float64 loops over kernel taps, written from the definition (each tap
reads a strided slice of the zero-padded input), not from the kernels' window views; each
backward reference is the forward loop's adjoint (the same slices, added into).
"""
from __future__ import annotations

import itertools
from typing import Any, Iterator, Sequence

import numpy as np

from op_cases import FLOATS, Gen, Sample, SampleFn, case


def _taps(k: Sequence[int], out: Sequence[int], stride: Sequence[int],
          dilation: Sequence[int]) -> Iterator[tuple[tuple[int, ...], tuple]]:
    """Each kernel tap and the slice of the padded input it reads at every output position."""
    for tap in itertools.product(*(range(n) for n in k)):
        yield tap, (slice(None), slice(None), *(
            slice(t * d, t * d + s * (o - 1) + 1, s)
            for t, d, s, o in zip(tap, dilation, stride, out)))


def _out(size: Sequence[int], k: Sequence[int], stride: Sequence[int], padding: Sequence[int],
         dilation: Sequence[int]) -> list[int]:
    return [(n + 2 * p - d * (kk - 1) - 1) // s + 1
            for n, kk, s, p, d in zip(size, k, stride, padding, dilation)]


def _padded(x: np.ndarray, padding: Sequence[int]) -> np.ndarray:
    return np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])


def _crop(xp: np.ndarray, padding: Sequence[int]) -> np.ndarray:
    return xp[(slice(None), slice(None), *(slice(p, xp.shape[2 + i] - p)
                                           for i, p in enumerate(padding)))]


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], groups: int = 1) -> np.ndarray:
    xp, w = _padded(x, padding), w.astype(np.float64)
    o, cg = w.shape[:2]
    og = o // groups
    out = np.zeros((x.shape[0], o, *_out(x.shape[2:], w.shape[2:], stride, padding, dilation)))
    for tap, sl in _taps(w.shape[2:], out.shape[2:], stride, dilation):
        patch = xp[sl]
        for g in range(groups):
            out[:, g * og:(g + 1) * og] += np.einsum(
                "nc...,oc->no...", patch[:, g * cg:(g + 1) * cg], w[(slice(g * og, (g + 1) * og),
                                                                    slice(None), *tap)])
    return out if b is None else out + b.reshape(1, -1, *(1,) * (w.ndim - 2))


def _grad_input_ref(gy: np.ndarray, w: np.ndarray, input_size: Sequence[int],
                    stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                    groups: int) -> np.ndarray:
    o, cg = w.shape[:2]
    og = o // groups
    xp = _padded(np.zeros(input_size), padding)
    for tap, sl in _taps(w.shape[2:], gy.shape[2:], stride, dilation):
        for g in range(groups):
            xp[sl][:, g * cg:(g + 1) * cg] += np.einsum(
                "no...,oc->nc...", gy[:, g * og:(g + 1) * og],
                w[(slice(g * og, (g + 1) * og), slice(None), *tap)])
    return _crop(xp, padding)


def _grad_weight_ref(gy: np.ndarray, x: np.ndarray, weight_size: Sequence[int],
                     stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                     groups: int) -> np.ndarray:
    xp, gw = _padded(x, padding), np.zeros(weight_size)
    o, cg = weight_size[:2]
    og = o // groups
    for tap, sl in _taps(weight_size[2:], gy.shape[2:], stride, dilation):
        patch = xp[sl]
        for g in range(groups):
            summed = [0, *range(2, gy.ndim)]                 # batch and positions
            gw[(slice(g * og, (g + 1) * og), slice(None), *tap)] += np.tensordot(
                gy[:, g * og:(g + 1) * og], patch[:, g * cg:(g + 1) * cg], (summed, summed))
    return gw


# (label, input shape, weight shape, bias, attrs) per rank
_CONV_ROWS: dict[int, list[tuple[str, tuple, tuple, bool, dict]]] = {
    1: [("basic", (1, 2, 6), (3, 2, 3), True, {}),
        ("stride-pad-dilation-groups", (2, 4, 9), (4, 2, 2), True,
         {"stride": [2], "padding": [1], "dilation": [2], "groups": 2}),
        ("one-channel", (3, 1, 5), (2, 1, 5), False, {"padding": [2]})],
    2: [("basic", (1, 2, 4, 4), (3, 2, 3, 3), True, {}),
        ("stride-pad", (2, 2, 5, 4), (2, 2, 2, 3), False, {"stride": [2, 1], "padding": [1, 2]}),
        ("dilation-groups", (1, 4, 5, 5), (4, 2, 2, 2), True, {"dilation": [2, 1], "groups": 2})],
    3: [("basic", (1, 2, 4, 4, 3), (3, 2, 2, 2, 2), True, {}),
        ("stride-pad-dilation-groups", (1, 2, 5, 4, 4), (2, 1, 3, 2, 2), False,
         {"stride": [2, 1, 2], "padding": [1, 0, 1], "dilation": [1, 2, 1], "groups": 2})],
}


def _full(rank: int, attrs: dict) -> dict:
    return {"stride": [1] * rank, "padding": [0] * rank, "dilation": [1] * rank,
            "groups": 1} | attrs


def _conv_samples(rank: int) -> SampleFn:
    def make(g: Gen) -> list[Sample]:
        out = [Sample(label, (g.arr(xs), g.arr(ws), g.arr((ws[0],)) if bias else None), attrs,
                      g.grad_of(0, 1, 2) if bias else g.grad_of(0, 1))
               for label, xs, ws, bias, attrs in _CONV_ROWS[rank]]
        xs, ws = _CONV_ROWS[rank][0][1:3]
        return out + [Sample("noncontig", (g.arr(xs, noncontig=True), g.arr(ws), None), {},
                             g.grad_of(0, 1))]
    return make


def _grad_samples(rank: int, wrt_input: bool) -> SampleFn:
    """The backward ops' samples: an output gradient of each forward sample's shape, and a
    transposed convolution whose ``output_padding`` leaves its last row unreached."""
    def make(g: Gen) -> list[Sample]:
        out = []
        for label, xs, ws, _, attrs in _CONV_ROWS[rank]:
            kw = _full(rank, attrs)
            gy = g.arr([xs[0], ws[0], *_out(xs[2:], ws[2:], kw["stride"], kw["padding"],
                                            kw["dilation"])])
            other = g.arr(ws) if wrt_input else g.arr(xs)
            size = list(xs) if wrt_input else list(ws)
            out.append(Sample(label, (gy, other, size), kw, g.grad_of(0, 1)))
        # 3 positions of a (3-wide, stride 2) window over 8 inputs: the last one is reached
        # by no window; over 9 inputs a 4th window exists that the gradient leaves out
        kw, gy = _full(rank, {"stride": [2] * rank}), g.arr((1, 3) + (3,) * rank)
        if wrt_input:
            size = [1, 2, *(8,) * rank]
            out.append(Sample("output-padding", (gy, g.arr((3, 2) + (3,) * rank), size), kw,
                              g.grad_of(0, 1)))
        else:
            out.append(Sample("unreached-input", (gy, g.arr((1, 2) + (9,) * rank),
                                                  [3, 2, *(3,) * rank]), kw, g.grad_of(0, 1)))
        return out
    return make


def _forward_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, **attrs: Any) -> np.ndarray:
    return _conv_ref(x, w, b, **_full(w.ndim - 2, attrs))


for _rank in (1, 2, 3):
    case(f"conv{_rank}d", _conv_samples(_rank), _forward_ref, FLOATS)
    case(f"conv{_rank}d_grad_input", _grad_samples(_rank, True), _grad_input_ref,
         ("float32", "float64"))
    case(f"conv{_rank}d_grad_weight", _grad_samples(_rank, False), _grad_weight_ref,
         ("float32", "float64"))


# ---- im2col / col2im (unfold / fold) ------------------------------------------------------
_BLOCK_ROWS = [("basic", (2, 3, 4, 5), {"kernel_size": [2, 2], "dilation": [1, 1],
                                        "padding": [0, 0], "stride": [1, 1]}),
               ("all-options", (1, 2, 6, 7), {"kernel_size": [3, 2], "dilation": [2, 1],
                                              "padding": [1, 2], "stride": [2, 3]})]


def _blocks(size: Sequence[int], a: dict) -> list[int]:
    return _out(size, a["kernel_size"], a["stride"], a["padding"], a["dilation"])


def _im2col_ref(x: np.ndarray, kernel_size: Sequence[int], dilation: Sequence[int],
                padding: Sequence[int], stride: Sequence[int]) -> np.ndarray:
    xp = _padded(x, padding)
    out = _blocks(x.shape[2:], {"kernel_size": kernel_size, "dilation": dilation,
                                "padding": padding, "stride": stride})
    n, c = x.shape[:2]
    cols = np.zeros((n, c, int(np.prod(kernel_size)), int(np.prod(out))))
    for i, (_, sl) in enumerate(_taps(kernel_size, out, stride, dilation)):
        cols[:, :, i] = xp[sl].reshape(n, c, -1)
    return cols.reshape(n, -1, cols.shape[-1])


def _col2im_ref(cols: np.ndarray, output_size: Sequence[int], kernel_size: Sequence[int],
                dilation: Sequence[int], padding: Sequence[int],
                stride: Sequence[int]) -> np.ndarray:
    a = {"kernel_size": kernel_size, "dilation": dilation, "padding": padding, "stride": stride}
    out, k = _blocks(output_size, a), int(np.prod(kernel_size))
    n, c = cols.shape[0], cols.shape[1] // k
    xp = _padded(np.zeros((n, c, *output_size)), padding)
    blocks = cols.astype(np.float64).reshape(n, c, k, *out)
    for i, (_, sl) in enumerate(_taps(kernel_size, out, stride, dilation)):
        xp[sl] += blocks[:, :, i]
    return _crop(xp, padding)


def _im2col_samples(g: Gen) -> list[Sample]:
    return [Sample(label, (g.arr(shape),), a, g.grad_of(0)) for label, shape, a in _BLOCK_ROWS] \
        + [Sample("noncontig", (g.arr((1, 2, 3, 4), noncontig=True),), _BLOCK_ROWS[0][2],
                  g.grad_of(0))]


def _col2im_samples(g: Gen) -> list[Sample]:
    out = []
    for label, shape, a in _BLOCK_ROWS:
        rows = shape[1] * int(np.prod(a["kernel_size"]))
        cols = g.arr((shape[0], rows, int(np.prod(_blocks(shape[2:], a)))))
        out.append(Sample(label, (cols, list(shape[2:])), a, g.grad_of(0)))
    return out


case("im2col", _im2col_samples, _im2col_ref, FLOATS)
case("col2im", _col2im_samples, _col2im_ref, FLOATS)
