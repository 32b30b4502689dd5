"""The benchmark workloads of WORKLOADS.md (W1–W6, and W4G: W4 with grad enabled), built
from scriptmod's own layers, the attention micro-benchmarks A128 and A512, the training
rows T2, T3, T5 (one AdamW step of W2, W3, W5 in train mode; ``bench.training``) and the
convolutional rows of issue 40 (models in ``bench.cnn``): C1 ResNet-18 and C2 MobileNetV2
inference (compiled with ``jit.optimize_for_inference``: BatchNorm folded), TC1 one
ResNet-18 training step (cross-entropy, SGD with momentum), M1 pytorch/examples' MNIST net
and CONV1–CONV5 single convolutions; and the recurrent rows of issue 41 (``bench.rnn``): R1
pytorch/examples' word-language LSTM, R2 a bidirectional GRU encoder, TR1 R1's training
step (cross-entropy, ``clip_grad_norm_``, SGD). All are traced (``jit.trace``) except W6, whose loop
exits on the data: it is scripted (``jit.script``).

    >>> w = WORKLOADS["W1"]; model, x = w.build(quick=True)
    >>> x.shape
    scriptmod.Size([256, 256])
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, ContextManager

import scriptmod as sm
import scriptmod.nn.functional as F
from scriptmod import nn
from scriptmod.bench import cnn


class EwChain(nn.Module):
    """W1: ``y = gelu_tanh(x * a + b) + x`` with learnable row vectors ``a`` and ``b``."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.a = nn.Parameter(sm.randn(n))
        self.b = nn.Parameter(sm.randn(n))
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.act(x * self.a + self.b) + x


class ActivationZoo(nn.Module):
    """W2: GELU -> PReLU -> Sigmoid*Tanh -> Threshold -> ReLU(h + x)."""

    def __init__(self) -> None:
        super().__init__()
        self.gelu = nn.GELU()
        self.prelu = nn.PReLU(init=0.25)
        self.sigmoid = nn.Sigmoid()
        self.tanh = nn.Tanh()
        self.threshold = nn.Threshold(0.1, 0.0)
        self.relu = nn.ReLU()

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = self.gelu(x)
        h = self.prelu(h)
        h = self.sigmoid(h) * self.tanh(h)
        h = self.threshold(h)
        return self.relu(h + x)


class MLP(nn.Module):
    """W3: ``Linear(d, 4d) -> GELU(tanh) -> Linear(4d, d)`` plus the residual."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return self.fc2(self.act(self.fc1(x))) + x


def tiny_latency() -> nn.Module:
    """W4: four times ``Linear(64, 64) -> ReLU``, then ``Linear(64, 10)``."""
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(64, 10))


class TransformerBlock(nn.Module):
    """W5: pre-norm block, ``h = x + MHA(LN(x))``, ``y = h + MLP(LN(h))`` (GELU erf form)."""

    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = self.ln1(x)
        h = x + self.attn(h, h, h, need_weights=False)[0]
        return h + self.mlp(self.ln2(h))


class Attention(nn.Module):
    """A128 / A512: ``F.scaled_dot_product_attention(q, k, v)`` alone (no mask, no dropout,
    scale 1/sqrt(d)): QKᵀ, softmax and AV for every batch and head. The one input stacks
    q, k and v, shape (3, B, H, T, d), so that the bench's one-input protocol applies
    (``--batch`` sets B, dim 1); ``x[0]``, ``x[1]``, ``x[2]`` are contiguous views.

        >>> model, x = WORKLOADS["A128"].build(quick=True)
        >>> tuple(x.shape), tuple(model(x).shape)
        ((3, 2, 2, 16, 16), (2, 2, 16, 16))
        >>> model.matmul_flops(tuple(x.shape)) == 2 * 2 * (2 * 2) * 16 * 16 * 16
        True
    """

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        return F.scaled_dot_product_attention(x[0], x[1], x[2])

    @staticmethod
    def matmul_flops(x_shape: tuple[int, ...]) -> int:
        """QKᵀ and AV: ``2 * 2*B*H*T*T*d`` (``floors.matmul_flops`` asks the module)."""
        _, b, h, t, d = x_shape
        return 2 * 2 * b * h * t * t * d


class GRUCell(nn.Module):
    """PyTorch's ``nn.GRUCell`` written out (same gate order r, z, n and the same equations):
    ``r = σ(W_ir x + W_hr h)``, ``z = σ(W_iz x + W_hz h)``, ``n = tanh(W_in x + r ⊙ W_hn h)``
    (biases included), ``h' = (1 - z) ⊙ n + z ⊙ h``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.x2h = nn.Linear(input_size, 3 * hidden_size)
        self.h2h = nn.Linear(hidden_size, 3 * hidden_size)

    def forward(self, x: sm.Tensor, h: sm.Tensor) -> sm.Tensor:
        gx, gh, k = self.x2h(x), self.h2h(h), self.hidden_size
        r = sm.sigmoid(gx[:, :k] + gh[:, :k])
        z = sm.sigmoid(gx[:, k:2 * k] + gh[:, k:2 * k])
        n = sm.tanh(gx[:, 2 * k:] + r * gh[:, 2 * k:])
        return (1 - z) * n + z * h


class PonderingGRU(nn.Module):
    """W6: a GRU encoder with adaptive computation time (Graves, 2016), scripted.

    A recurrent encoder that reads a (batch, time, features) sequence one step at a time and
    stops reading when it has seen enough: a halting unit ``σ(w · h + b)`` adds to each
    sequence's halting budget every step, a sequence whose budget reached ``1 - ε`` stops
    updating its state, and the loop exits when every sequence has stopped (ACT's halting
    rule, batched as users write it). It is the recurrent model users script rather than
    trace: tracing would freeze the number of steps at the example's value, and the exit is
    decided by the data, with one ``float(...)`` on the device each step.

    Random weights do not know when to halt, so the halting bias starts at
    ``-log(ponder_steps - 1)``: each step adds about ``1 / ponder_steps``, and the bench
    input exits after about that many steps (``steps_taken`` counts them: 53 of 64 at the
    full size, 27 of 32 quick), so the loop really runs and the exit really fires.

    Sizes (batch 32, input 64, hidden 128): a step is two small GEMMs (32×64×384 and
    32×128×384, 2.4 M multiply-adds, tens of µs in BLAS) and about twenty elementwise ops,
    slices and a reduction on 32×128 values, each a few µs of dispatch eagerly but
    nanoseconds of work. Per-step overhead and the math are of the same order, so what a
    compiler removes (dispatch, the gate math fused, the loop run without the interpreter)
    shows, and the GEMMs keep it honest; a larger hidden size would hide the overhead
    behind BLAS, a smaller one would measure nothing but overhead.

        >>> model, x = WORKLOADS["W6"].build(quick=True)
        >>> tuple(x.shape), model.steps_taken(x)        # (batch, time, features)
        ((4, 32, 16), 27)
    """

    def __init__(self, input_size: int, hidden_size: int, ponder_steps: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.threshold = 0.99                          # ACT's 1 - ε
        self.cell = GRUCell(input_size, hidden_size)
        self.halt = nn.Linear(hidden_size, 1)
        with sm.no_grad():
            self.halt.bias.fill_(-math.log(ponder_steps - 1))

    def forward(self, x: sm.Tensor) -> sm.Tensor:
        h = x.new_zeros((x.size(0), self.hidden_size))
        budget = x.new_zeros((x.size(0), 1))          # halting probability spent so far
        for t in range(x.size(1)):
            h, budget = self.step(x[:, t], h, budget)
            if float(budget.min()) >= self.threshold:
                break
        return h

    def step(self, x_t: sm.Tensor, h: sm.Tensor,
             budget: sm.Tensor) -> tuple[sm.Tensor, sm.Tensor]:
        """One time step: sequences still running read ``x_t`` and spend halting budget."""
        running = budget < self.threshold
        h = sm.where(running, self.cell(x_t, h), h)
        return h, sm.where(running, budget + sm.sigmoid(self.halt(h)), budget)

    def steps_taken(self, x: sm.Tensor) -> int:
        """How many steps ``forward(x)`` runs before every sequence has halted (eager)."""
        h = x.new_zeros((x.size(0), self.hidden_size))
        budget = x.new_zeros((x.size(0), 1))
        with sm.no_grad():
            for t in range(x.size(1)):
                h, budget = self.step(x[:, t], h, budget)
                if float(budget.min()) >= self.threshold:
                    return t + 1
        return int(x.size(1))


def _steps_note(model: nn.Module, x: sm.Tensor) -> str:
    steps = model.steps_taken(x)                   # type: ignore[operator]
    return (f"unfused and fused are jit.script(model); its loop exits after {steps} of "
            f"{x.shape[1]} steps on the run input")


@dataclass(frozen=True)
class Workload:
    id: str
    name: str
    make: Callable[[bool], nn.Module]
    shape: tuple[int, ...]
    quick_shape: tuple[int, ...]
    floor: str            # "bytes", "flops" or "none"
    description: str
    grad: bool = False    # run with grad enabled (parameters require grad), not no_grad
    script: bool = False  # compiled with jit.script (control flow kept), not jit.trace
    run_note: Callable[[nn.Module, sm.Tensor], str] | None = None   # a line for the report
    batch_dim: int = 0    # the dim ``--batch`` sets
    train: bool = False   # a training row: the model in train mode, timed per optimizer step
    loss: str = "mse"     # a training row's loss (``training.LOSSES``)
    optimizer: str = "adamw"   # a training row's optimizer (``training.OPTIMIZERS``)
    freeze: bool = False  # compiled as jit.optimize_for_inference(trace): BatchNorm folded
    measure: Callable[..., None] | None = None   # its own measurement (``bench.dynamic``):
    # ``measure(result, model, x, opts, stage)`` instead of the compile/check/time steps

    def grad_mode(self) -> ContextManager[object]:
        """``no_grad()``, or no change for a grad-enabled workload (W4G)."""
        return contextlib.nullcontext() if self.grad else sm.no_grad()

    def build(self, quick: bool = False, seed: int = 0, batch: int | None = None,
              dtype: sm.dtype = sm.float32) -> tuple[nn.Module, sm.Tensor]:
        """The model in eval mode (train mode for a training row) and a fresh random-normal
        input (fixed seed)."""
        sm.manual_seed(seed)
        model = self.make(quick).train(self.train).to(dtype)
        shape = list(self.quick_shape if quick else self.shape)
        if batch is not None:
            shape[self.batch_dim] = batch
        return model, sm.randn(*shape, dtype=dtype)


_LOSS_NAMES = {"mse": "MSE", "cross_entropy": "cross-entropy"}
_OPTIMIZER_NAMES = {"adamw": "AdamW", "sgd_momentum": "SGD momentum 0.9",
                    "sgd_clip": "clip_grad_norm_ 0.25, SGD lr 20"}


def training_row(w: Workload, tid: str, loss: str = "mse", optimizer: str = "adamw",
                 **changes: object) -> Workload:
    """The training row of forward workload ``w``: same model, input (unless ``changes``
    say otherwise: ``shape``, ``quick_shape``) and floor kind, in train mode with grad
    enabled, with ``loss`` and ``optimizer`` (what each step does: ``bench.training``; its
    floor: ``floors.training_work``).

        >>> t = training_row(WORKLOADS["W3"], "T3"); t.train, t.grad, t.shape
        (True, True, (256, 1024))
    """
    return dataclasses.replace(
        w, id=tid, name=f"train {w.name}", grad=True, train=True, freeze=False, loss=loss,
        optimizer=optimizer, description=f"one training step of {w.id} (forward, "
        f"{_LOSS_NAMES[loss]} loss, backward, {_OPTIMIZER_NAMES[optimizer]})", **changes)


_FORWARD: tuple[Workload, ...] = (
    Workload("W1", "ew-chain", lambda q: EwChain(256 if q else 4096), (4096, 4096), (256, 256),
             "bytes", "gelu_tanh(x * a + b) + x"),
    Workload("W2", "activation-zoo", lambda q: ActivationZoo(), (2048, 2048), (256, 256),
             "bytes", "GELU, PReLU, Sigmoid*Tanh, Threshold, ReLU(h + x)"),
    Workload("W3", "mlp", lambda q: MLP(128, 512) if q else MLP(1024, 4096), (256, 1024),
             (32, 128), "flops", "Linear -> GELU(tanh) -> Linear + x"),
    Workload("W4", "tiny-latency", lambda q: tiny_latency(), (1, 64), (1, 64), "none",
             "4 x (Linear(64, 64) -> ReLU) -> Linear(64, 10)"),
    Workload("W4G", "tiny-latency (grad enabled)", lambda q: tiny_latency(), (1, 64), (1, 64),
             "none", "W4 called with grad enabled: its parameters require grad", grad=True),
    Workload("W5", "transformer-block", lambda q: TransformerBlock(64, 4, 256) if q else
             TransformerBlock(256, 4, 1024), (8, 128, 256), (2, 16, 64), "flops",
             "pre-norm MHA(4 heads) + MLP(GELU) block"),
    Workload("W6", "scripted-gru", lambda q: PonderingGRU(16, 32, 24) if q else
             PonderingGRU(64, 128, 48), (32, 64, 64), (4, 32, 16), "none",
             "GRU cell over T = 64 steps, ACT early exit (jit.script)", script=True,
             run_note=_steps_note),
    Workload("A128", "attention T=128", lambda q: Attention(), (3, 8, 4, 128, 64),
             (3, 2, 2, 16, 16), "flops", "scaled_dot_product_attention, B 8, 4 heads, T 128, "
             "d 64 (q, k, v stacked)", batch_dim=1),
    Workload("A512", "attention T=512", lambda q: Attention(), (3, 8, 4, 512, 64),
             (3, 2, 2, 32, 16), "flops", "scaled_dot_product_attention, B 8, 4 heads, T 512, "
             "d 64 (q, k, v stacked)", batch_dim=1),
)


def _cnn(full: cnn.Recipe, quick: cnn.Recipe) -> Callable[[bool], nn.Module]:
    """A CNN row's ``make``: ``bench.cnn``'s model of ``full`` (``quick``: a small one of the
    same architecture)."""
    return lambda q: cnn.build(quick if q else full)


_RESNET18 = _cnn(cnn.Recipe("ResNet", {"width": 64, "num_classes": 1000}),
                 cnn.Recipe("ResNet", {"width": 8, "num_classes": 10}))
_C1 = Workload("C1", "ResNet-18", _RESNET18, (8, 3, 224, 224), (2, 3, 32, 32), "flops",
               "torchvision's resnet18, eval, jit.optimize_for_inference (BatchNorm folded)",
               freeze=True)
_CNN: tuple[Workload, ...] = (
    _C1,
    Workload("C2", "MobileNetV2", _cnn(cnn.Recipe("MobileNetV2", {"width_mult": 1.0}),
                                       cnn.Recipe("MobileNetV2", {"width_mult": 0.25,
                                                                  "num_classes": 10})),
             (8, 3, 224, 224), (2, 3, 32, 32), "flops", "torchvision's mobilenet_v2 (width "
             "1.0), eval, jit.optimize_for_inference (BatchNorm folded)", freeze=True),
    training_row(_C1, "TC1", "cross_entropy", "sgd_momentum", shape=(8, 3, 64, 64),
                 quick_shape=(4, 3, 32, 32)),
    Workload("M1", "MNIST net", _cnn(cnn.Recipe("MnistNet"), cnn.Recipe("MnistNet")),
             (64, 1, 28, 28), (4, 1, 28, 28), "flops", "pytorch/examples' MNIST Net (2 convs, "
             "max pool, 2 Linear, log_softmax), eval, traced at batch 64"),
)


def _conv_row(i: int, n: int, c: int, o: int, hw: int, groups: int, what: str) -> Workload:
    """CONV<i>: one ``Conv2d(c, o, 3, padding=1, groups=groups, bias=False)`` on a batch of
    ``n`` ``hw`` x ``hw`` images, traced; quick: at most 2 images, channels / 8, side / 4."""
    def recipe(c: int, o: int, g: int) -> cnn.Recipe:
        return cnn.Recipe("Conv2d", {"in_channels": c, "out_channels": o, "kernel_size": 3,
                                     "padding": 1, "groups": g, "bias": False})
    qc, qo = max(1, c // 8), max(1, o // 8)
    qg = qc if groups > 1 else 1
    return Workload(f"CONV{i}", what, _cnn(recipe(c, o, groups), recipe(qc, qo, qg)),
                    (n, c, hw, hw), (min(n, 2), qc, hw // 4, hw // 4), "flops",
                    f"conv2d 3x3 pad 1 alone, {'depthwise ' if groups > 1 else ''}"
                    f"{c}->{o} channels, batch {n}, {hw}x{hw}")


_CONV: tuple[Workload, ...] = (
    _conv_row(1, 8, 64, 64, 56, 1, "conv b8 64->64 56²"),
    _conv_row(2, 1, 64, 64, 56, 1, "conv b1 64->64 56²"),
    _conv_row(3, 8, 256, 256, 14, 1, "conv b8 256->256 14²"),
    _conv_row(4, 32, 1, 32, 28, 1, "conv b32 1->32 28² stem"),
    _conv_row(5, 8, 32, 32, 112, 32, "conv b8 depthwise 32 112²"),
)
_R1 = Workload("R1", "word-language LSTM",
               _cnn(cnn.Recipe("WordLM"), cnn.Recipe("WordLM", {"ntoken": 100, "ninp": 16,
                                                                "nhid": 32})),
               (35, 16), (5, 2), "none", "pytorch/examples' word-language model: "
               "Embedding(10000, 256), 2-layer LSTM(256 -> 512), Linear(512, 10000); T 35, "
               "batch 16 (tokens read off the input)", batch_dim=1)
_RNN: tuple[Workload, ...] = (
    _R1,
    Workload("R2", "bidirectional GRU encoder",
             _cnn(cnn.Recipe("GRUEncoder"), cnn.Recipe("GRUEncoder", {"input_size": 8,
                                                                      "hidden_size": 16})),
             (32, 64, 128), (2, 5, 8), "none", "2-layer bidirectional GRU(128 -> 256), "
             "batch_first, T 64, batch 32"),
    training_row(_R1, "TR1", "cross_entropy", "sgd_clip"),
)
_BY_ID = {w.id: w for w in _FORWARD}

WORKLOADS: dict[str, Workload] = {w.id: w for w in (
    *_FORWARD, training_row(_BY_ID["W2"], "T2"), training_row(_BY_ID["W3"], "T3"),
    training_row(_BY_ID["W5"], "T5"), *_CNN, *_CONV, *_RNN)}

GROUPS: dict[str, tuple[str, ...]] = {
    "CONV": tuple(w.id for w in _CONV),
    "CNN": tuple(w.id for w in (*_CNN, *_CONV)),
    "RNN": tuple(w.id for w in _RNN),
}
"""Names ``--workload`` takes for several rows at once (``--workload C1,CONV``)."""
