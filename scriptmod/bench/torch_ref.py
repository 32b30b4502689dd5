"""PyTorch twins of W1–W6, A128/A512 and the CNN rows for ``scriptmod bench --compare
torch`` (the attention twins call ``torch.nn.functional.scaled_dot_product_attention``; the
CNN rows' twins are ``bench.cnn``'s models built over ``torch.nn``; the training rows T2,
T3, T5 and TC1 train the twins of W2, W3, W5 and ResNet-18: ``torch_train``).

Each twin has the module structure of the scriptmod model, so the scriptmod ``state_dict``
(buffers included: BatchNorm's running statistics) loads into it key for key: both sides compute with the same weights and the same input,
and the twin's output is checked against eager scriptmod's before it is timed. The three
PyTorch columns are measured in a child process (``python -m scriptmod.bench.torch_ref
JOB_DIR``) after scriptmod's own timings, all under ``torch.no_grad()`` (grad enabled for
W4G, whose TorchScript is traced but not frozen: freezing turns the parameters into
constants that take no gradient) and with the parent's timing protocol (first call,
check, warm-up, median of samples):

- ``torch_eager``: the twin itself;
- ``torch_jit``: TorchScript, ``torch.jit.freeze(torch.jit.trace(twin, x))`` of the eval
  twin ("torch.jit trace+freeze", as WORKLOADS.md measures it); the trace and freeze time
  is ``torch_jit_build_s``;
- ``torch_ofi`` instead, for a row whose scriptmod side is frozen too (C1, C2: BatchNorm
  folded by ``optimize_for_inference`` on both sides' traced paths, as WORKLOADS.md asks):
  ``torch.jit.optimize_for_inference(torch.jit.trace(twin, x))``, which freezes (folding
  each BatchNorm into its convolution) and converts the convolutions to oneDNN's layout;
- ``torch_script`` instead, for a scripted workload (W6, whose loop a trace would freeze):
  ``torch.jit.script(twin)`` of the eval twin ("torch.jit.script", not frozen), as the
  issue compares against;
- ``torch_compile``: ``torch.compile(twin)`` in its default mode.

The child is killed after the timeout because torch.compile's compile time is unbounded;
each column is written to the job folder as it completes, and whatever did not finish
reads "n/a".

    >>> TorchSide.create(WORKLOADS["W1"], model, x, ref, opts).finish(result)   # doctest: +SKIP

(Not run as a doctest: it needs torch, which scriptmod does not depend on, and a child
process that runs for seconds.)
"""
from __future__ import annotations

import functools
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Tuple

import numpy as np

from scriptmod.bench import cnn
from scriptmod.bench.child import run_child
from scriptmod.bench.timing import Timing, Variant, time_variants

TORCH_COMPILE_MODE = "default"
COLUMNS = ("torch_eager", "torch_jit", "torch_compile")
SCRIPT_COLUMNS = ("torch_eager", "torch_script", "torch_compile")   # a scripted workload's
FROZEN_COLUMNS = ("torch_eager", "torch_ofi", "torch_compile")      # a frozen workload's
TRAIN_COLUMNS = ("torch_eager", "torch_compile")                    # a training row's
TWIN_OF = {"W4G": "W4",            # workload variants that run another workload's model
           "T2": "W2", "T3": "W3", "T5": "W5"}


def dims_of(wid: str, model: Any) -> dict[str, Any]:
    """The constructor sizes of a scriptmod workload model (a CNN row's: its ``cnn.Recipe``,
    read off the model)."""
    recipe = cnn.config_of(model)
    if recipe is not None:
        return {"arch": recipe.arch, "config": recipe.config}
    wid = TWIN_OF.get(wid, wid)
    if wid == "W1":
        return {"n": int(model.a.shape[0])}
    if wid == "W3":
        return {"d": model.fc1.in_features, "hidden": model.fc1.out_features}
    if wid == "W5":
        return {"d": int(model.ln1.normalized_shape[0]), "heads": model.attn.num_heads,
                "hidden": model.mlp[0].out_features}
    if wid == "W6":
        return {"input": model.cell.x2h.in_features, "hidden": model.hidden_size}
    return {}


def columns(script: bool, train: bool = False, freeze: bool = False) -> tuple[str, ...]:
    """The PyTorch columns of a traced (``COLUMNS``), scripted (``SCRIPT_COLUMNS``), frozen
    (``FROZEN_COLUMNS``) or training (``TRAIN_COLUMNS``) workload."""
    return (TRAIN_COLUMNS if train else SCRIPT_COLUMNS if script else
            FROZEN_COLUMNS if freeze else COLUMNS)


@functools.lru_cache(maxsize=None)
def _elementwise_twins() -> dict[str, Callable[[dict[str, int]], Any]]:
    import torch
    from torch import nn

    class EwChain(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.a, self.b = nn.Parameter(torch.empty(n)), nn.Parameter(torch.empty(n))
            self.act = nn.GELU(approximate="tanh")

        def forward(self, x: Any) -> Any:
            return self.act(x * self.a + self.b) + x

    class ActivationZoo(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gelu, self.prelu = nn.GELU(), nn.PReLU(init=0.25)
            self.sigmoid, self.tanh = nn.Sigmoid(), nn.Tanh()
            self.threshold, self.relu = nn.Threshold(0.1, 0.0), nn.ReLU()

        def forward(self, x: Any) -> Any:
            h = self.prelu(self.gelu(x))
            h = self.threshold(self.sigmoid(h) * self.tanh(h))
            return self.relu(h + x)

    return {"W1": lambda d: EwChain(d["n"]), "W2": lambda d: ActivationZoo()}


@functools.lru_cache(maxsize=None)
def _block_twins() -> dict[str, Callable[[dict[str, int]], Any]]:
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self, d: int, hidden: int) -> None:
            super().__init__()
            self.fc1, self.act = nn.Linear(d, hidden), nn.GELU(approximate="tanh")
            self.fc2 = nn.Linear(hidden, d)

        def forward(self, x: Any) -> Any:
            return self.fc2(self.act(self.fc1(x))) + x

    class TransformerBlock(nn.Module):
        def __init__(self, d: int, heads: int, hidden: int) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))

        def forward(self, x: Any) -> Any:
            h = self.ln1(x)
            h = x + self.attn(h, h, h, need_weights=False)[0]
            return h + self.mlp(self.ln2(h))

    class Attention(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.nn.functional.scaled_dot_product_attention(x[0], x[1], x[2])

    def tiny(d: dict[str, int]) -> Any:
        layers: list[Any] = []
        for _ in range(4):
            layers += [nn.Linear(64, 64), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(64, 10))

    return {"W3": lambda d: MLP(d["d"], d["hidden"]), "W4": tiny,
            "W5": lambda d: TransformerBlock(d["d"], d["heads"], d["hidden"]),
            "A128": lambda d: Attention(), "A512": lambda d: Attention()}


@functools.lru_cache(maxsize=None)
def _recurrent_twins() -> dict[str, Callable[[dict[str, int]], Any]]:
    import torch
    from torch import nn

    class GRUCell(nn.Module):
        def __init__(self, input_size: int, hidden_size: int) -> None:
            super().__init__()
            self.hidden_size = hidden_size
            self.x2h = nn.Linear(input_size, 3 * hidden_size)
            self.h2h = nn.Linear(hidden_size, 3 * hidden_size)

        def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            gx, gh, k = self.x2h(x), self.h2h(h), self.hidden_size
            r = torch.sigmoid(gx[:, :k] + gh[:, :k])
            z = torch.sigmoid(gx[:, k:2 * k] + gh[:, k:2 * k])
            n = torch.tanh(gx[:, 2 * k:] + r * gh[:, 2 * k:])
            return (1 - z) * n + z * h

    class PonderingGRU(nn.Module):
        def __init__(self, input_size: int, hidden_size: int) -> None:
            super().__init__()
            self.hidden_size = hidden_size
            self.threshold = 0.99
            self.cell = GRUCell(input_size, hidden_size)
            self.halt = nn.Linear(hidden_size, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x.new_zeros((x.size(0), self.hidden_size))
            budget = x.new_zeros((x.size(0), 1))
            for t in range(x.size(1)):
                h, budget = self.step(x[:, t], h, budget)
                if float(budget.min()) >= self.threshold:
                    break
            return h

        def step(self, x_t: torch.Tensor, h: torch.Tensor,
                 budget: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
            running = budget < self.threshold
            h = torch.where(running, self.cell(x_t, h), h)
            return h, torch.where(running, budget + torch.sigmoid(self.halt(h)), budget)

    return {"W6": lambda d: PonderingGRU(d["input"], d["hidden"])}


def build_twin(wid: str, dims: dict[str, Any], weights: dict[str, np.ndarray]) -> Any:
    """The PyTorch model of workload ``wid`` in eval mode, holding ``weights`` exactly
    (a training row's caller sets train mode)."""
    import torch
    if "arch" in dims:
        config = {k: tuple(v) if isinstance(v, list) else v for k, v in dims["config"].items()}
        twin = cnn.twin(cnn.Recipe(dims["arch"], config), torch.nn)
    else:
        twins = {**_elementwise_twins(), **_block_twins(), **_recurrent_twins()}
        twin = twins[TWIN_OF.get(wid, wid)](dims)
    dtype = next(iter(weights.values())).dtype if weights else np.float32
    twin = twin.to(torch.float64 if dtype == np.float64 else torch.float32).eval()
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()},
                         strict=True)
    return twin


def weights_of(model: Any) -> dict[str, np.ndarray]:
    return {k: np.ascontiguousarray(v.numpy(force=True)) for k, v in model.state_dict().items()}


class TorchSide:
    """The PyTorch columns of one workload, measured in a child process after scriptmod's
    own timings: PyTorch's OpenMP workers spin after each parallel region, and would steal
    a core from whatever scriptmod variant ran next if they lived in this process."""

    def __init__(self, wid: str, opts: Any, cols: tuple[str, ...], note: str = "") -> None:
        self.wid, self.opts, self.columns, self.note = wid, opts, cols, note
        self.job: dict[str, Any] = {}

    @classmethod
    def create(cls, workload: Any, model: Any, x: Any, ref: Any, opts: Any,
               target: Any = None) -> "TorchSide":
        """``ref``: eager's output, or for a training row (``target`` given) eager's loss
        and gradients (``training.gradients``) from the model's current weights."""
        w = workload
        cols = columns(w.script, w.train, w.freeze)
        if opts.device != "cpu":
            return cls(w.id, opts, cols, "the PyTorch columns are measured on the CPU only")
        if importlib.util.find_spec("torch") is None:
            return cls(w.id, opts, cols, "PyTorch is not importable: pip install torch")
        side = cls(w.id, opts, cols)
        side.job = {"wid": w.id, "grad": w.grad, "script": w.script, "train": w.train,
                    "freeze": w.freeze, "loss": w.loss, "optimizer": w.optimizer,
                    "dims": dims_of(w.id, model), "weights": weights_of(model),
                    "x": x.numpy(force=True), "ref": ref}
        if w.train:
            side.job["target"] = target.numpy(force=True)
        return side

    def finish(self, res: Any) -> None:
        """Run the child; record its checks and timings ("n/a" for whatever it lacks)."""
        for name in self.columns:
            res.times[name] = None
        if self.note:
            res.notes.append(self.note)
            return
        result = run_torch_job(self.job, self.opts)
        if self.job["train"]:
            from scriptmod.bench.training import describe_optimizer
            res.notes.append(f"PyTorch: torch.optim.{describe_optimizer(self.job['optimizer'])}"
                             f", default options otherwise; the torch.compile column compiles "
                             f"the model with its loss (forward and backward)")
        elif self.job["grad"]:
            res.notes.append("grad enabled: torch.jit is trace only (no freeze), so that the "
                             "weights take grad")
        for name in self.columns:
            part = result.get(name)
            if part:
                _record(res, name, part)
        if "error" in result:
            res.notes.append(f"PyTorch: {result['error']}")


def _record(res: Any, name: str, part: dict[str, Any]) -> None:
    from scriptmod.bench.check import Match
    res.matches[name] = Match(**part["match"])
    res.times[name] = Timing(**part["timing"])
    for key in ("first_call_s", "build_s"):
        if key in part:
            res.compile[f"{name}_{key}"] = part[key]


def run_torch_job(job: dict[str, Any], opts: Any) -> dict[str, Any]:
    """PyTorch eager, TorchScript, then torch.compile, in a child process killed after the
    timeout; what finished before a failure or the timeout is kept. The child's inductor
    cache folder is new and empty, so torch.compile's first call is a cold compile every
    run (with the user's cache it was 13 s in one run and 2 s in the next for T5)."""
    with tempfile.TemporaryDirectory(prefix="scriptmod-torch-") as d:
        spec = write_job(Path(d), job, opts)
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1",
               "TORCHINDUCTOR_CACHE_DIR": str(Path(d) / "inductor")}
        result = run_child(["-m", "scriptmod.bench.torch_ref", d],
                           opts.torch_compile_timeout_s, env)
        for name in columns(spec["script"], spec["train"], spec["freeze"]):
            done = Path(d) / f"{name}.json"
            if name not in result and done.exists():
                result[name] = json.loads(done.read_text())
        return result


def write_job(d: Path, job: dict[str, Any], opts: Any) -> dict[str, Any]:
    """The job folder the child reads: weights, input, reference (a training row's loss
    and gradients, and its target) and ``job.json``, the spec it returns."""
    np.savez(d / "weights.npz", **job["weights"])
    np.save(d / "x.npy", job["x"])
    train = job.get("train", False)
    if train:
        np.save(d / "target.npy", job["target"])
        np.savez(d / "ref.npz", **{k: v for k, v in job["ref"].items() if v is not None})
    else:
        np.save(d / "ref.npy", job["ref"])
    spec = {"wid": job["wid"], "grad": job["grad"], "script": job.get("script", False),
            "train": train, "freeze": job.get("freeze", False), "loss": job.get("loss", "mse"),
            "optimizer": job.get("optimizer", "adamw"), "dims": job["dims"],
            "threads": opts.threads, "dtype": opts.dtype, "budget": opts.budget,
            "repeat": opts.repeat, "min_reps": opts.min_reps}
    (d / "job.json").write_text(json.dumps(spec))
    return spec


def torchscript(twin: Any, x: Any, freeze: bool = True) -> Any:
    """TorchScript of the eval twin as WORKLOADS.md measures it: ``torch.jit.trace``, then
    ``torch.jit.freeze`` (parameters folded in as constants) unless ``freeze`` is off.
    PyTorch 2.13 deprecates both in favour of torch.compile; the column exists to compare
    against them, so their DeprecationWarnings are silenced here."""
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(twin.eval(), (x,))
        return torch.jit.freeze(traced) if freeze else traced


def torchscript_optimized(twin: Any, x: Any) -> Any:
    """``torch.jit.optimize_for_inference(torch.jit.trace(twin, x))`` of the eval twin, for a
    row whose scriptmod side runs ``scriptmod.jit.optimize_for_inference`` (C1, C2): frozen,
    each BatchNorm folded into its convolution, the convolutions in oneDNN's layout. Its
    DeprecationWarning (PyTorch 2.13) is silenced as in ``torchscript``."""
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.optimize_for_inference(torch.jit.trace(twin.eval(), (x,)))


def torchscript_scripted(twin: Any) -> Any:
    """``torch.jit.script`` of the eval twin, for a workload whose control flow a trace
    would freeze (W6); not frozen, as the issue's column is ``torch.jit.script``. Its
    DeprecationWarning (PyTorch 2.13) is silenced as in ``torchscript``."""
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(twin.eval())


def _timed_part(model: Any, x: Any, ref: np.ndarray, spec: dict[str, Any]) -> dict[str, Any]:
    """First call, check against eager scriptmod, then timing, like the parent's variants."""
    from scriptmod.bench.check import compare
    from scriptmod.bench.timing import time_once
    first = time_once(lambda: model(x))
    match = compare(model(x), ref, spec["dtype"])
    timing = time_variants({"v": Variant(lambda: model(x))}, spec["budget"], spec["repeat"],
                           spec["min_reps"])["v"]
    return {"match": match.as_dict(), "timing": timing.as_dict(), "first_call_s": first}


def _child_main(job_dir: str) -> dict[str, Any]:
    import torch
    d = Path(job_dir)
    spec = json.loads((d / "job.json").read_text())
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    if spec.get("train"):
        from scriptmod.bench.torch_train import train_columns
        return train_columns(d, spec)
    twin = build_twin(spec["wid"], spec["dims"], dict(np.load(d / "weights.npz")))
    x, ref = torch.from_numpy(np.load(d / "x.npy")), np.load(d / "ref.npy")
    builders: dict[str, Callable[[], Any]] = {"torch_eager": lambda: twin}
    if spec.get("script"):
        builders["torch_script"] = lambda: torchscript_scripted(twin)
    elif spec.get("freeze"):
        builders["torch_ofi"] = lambda: torchscript_optimized(twin, x)
    else:
        builders["torch_jit"] = lambda: torchscript(twin, x, freeze=not spec.get("grad", False))
    builders["torch_compile"] = lambda: torch.compile(twin, mode=TORCH_COMPILE_MODE)
    with torch.enable_grad() if spec.get("grad") else torch.no_grad():
        return run_columns(d, {name: (lambda make=make: _built_and_timed(make, x, ref, spec))
                               for name, make in builders.items()})


def run_columns(d: Path, columns: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, Any]:
    """Each column in turn, its result written to ``d/NAME.json`` when done; a column that
    fails is left out and named under ``"error"``."""
    out: dict[str, Any] = {}
    errors = []
    for name, run in columns.items():
        try:
            out[name] = run()
        except Exception as exc:  # noqa: BLE001  (reported to the parent as n/a)
            errors.append(f"{LABELS[name]}: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        (d / f"{name}.json").write_text(json.dumps(out[name]))
    if errors:
        out["error"] = "; ".join(errors)
    return out


LABELS = {"torch_eager": "torch eager", "torch_jit": "torch.jit trace+freeze",
          "torch_ofi": "torch.jit.optimize_for_inference", "torch_script": "torch.jit.script",
          "torch_compile": "torch.compile"}


def _built_and_timed(make: Callable[[], Any], x: Any, ref: np.ndarray,
                     spec: dict[str, Any]) -> dict[str, Any]:
    from scriptmod.bench.timing import time_once
    model: list[Any] = []
    build_s = time_once(lambda: model.append(make()))
    return {**_timed_part(model[0], x, ref, spec), "build_s": build_s}


if __name__ == "__main__":
    try:
        print(json.dumps(_child_main(sys.argv[1])))
    except Exception as exc:  # noqa: BLE001  (reported to the parent as n/a)
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:300]}"}))
