"""PyTorch twins of W1–W5 for ``scriptmod bench --compare torch``.

Each twin has the module structure of the scriptmod model, so the scriptmod ``state_dict``
loads into it key for key: both sides compute with the same weights and the same input,
and the twin's output is checked against eager scriptmod's before it is timed. Both PyTorch
columns are measured in a child process (``python -m scriptmod.bench.torch_ref JOB_DIR``)
after scriptmod's own timings, eager first, then torch.compile (default mode). The child
is killed after the timeout because torch.compile's compile time is unbounded; whatever
did not finish reads "n/a".

    >>> TorchSide.create(WORKLOADS["W1"], model, x, ref, opts).finish(result)   # doctest: +SKIP

(Not run as a doctest: it needs torch, which scriptmod does not depend on, and a child
process that runs for seconds.)
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from scriptmod.bench.timing import Timing, Variant, time_variants

TORCH_COMPILE_MODE = "default"


def dims_of(wid: str, model: Any) -> dict[str, int]:
    """The constructor sizes of a scriptmod workload model."""
    if wid == "W1":
        return {"n": int(model.a.shape[0])}
    if wid == "W3":
        return {"d": model.fc1.in_features, "hidden": model.fc1.out_features}
    if wid == "W5":
        return {"d": int(model.ln1.normalized_shape[0]), "heads": model.attn.num_heads,
                "hidden": model.mlp[0].out_features}
    return {}


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

    def tiny(d: dict[str, int]) -> Any:
        layers: list[Any] = []
        for _ in range(4):
            layers += [nn.Linear(64, 64), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(64, 10))

    return {"W3": lambda d: MLP(d["d"], d["hidden"]), "W4": tiny,
            "W5": lambda d: TransformerBlock(d["d"], d["heads"], d["hidden"])}


def build_twin(wid: str, dims: dict[str, int], weights: dict[str, np.ndarray]) -> Any:
    """The PyTorch model of workload ``wid`` in eval mode, holding ``weights`` exactly."""
    import torch
    twin = {**_elementwise_twins(), **_block_twins()}[wid](dims)
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

    def __init__(self, wid: str, opts: Any, note: str = "") -> None:
        self.wid, self.opts, self.note = wid, opts, note
        self.job: dict[str, Any] = {}

    @classmethod
    def create(cls, workload: Any, model: Any, x: Any, ref: np.ndarray, opts: Any) -> "TorchSide":
        if opts.device != "cpu":
            return cls(workload.id, opts, "the PyTorch columns are measured on the CPU only")
        if importlib.util.find_spec("torch") is None:
            return cls(workload.id, opts, "PyTorch is not importable: pip install torch")
        side = cls(workload.id, opts)
        side.job = {"wid": workload.id, "dims": dims_of(workload.id, model),
                    "weights": weights_of(model), "x": x.numpy(force=True), "ref": ref}
        return side

    def finish(self, res: Any) -> None:
        """Run the child; record its checks and timings ("n/a" for whatever it lacks)."""
        res.times["torch_eager"] = res.times["torch_compile"] = None
        if self.note:
            res.notes.append(self.note)
            return
        result = run_torch_job(self.job, self.opts)
        for name in ("torch_eager", "torch_compile"):
            part = result.get(name)
            if part:
                _record(res, name, part)
        if "error" in result:
            res.notes.append(f"PyTorch: {result['error']}")


def _record(res: Any, name: str, part: dict[str, Any]) -> None:
    from scriptmod.bench.runner import Match
    res.matches[name] = Match(**part["match"])
    res.times[name] = Timing(**part["timing"])
    if "first_call_s" in part:
        res.compile[f"{name}_first_call_s"] = part["first_call_s"]


def run_torch_job(job: dict[str, Any], opts: Any) -> dict[str, Any]:
    """PyTorch eager, then torch.compile, in a child process killed after the timeout;
    what finished before a failure or the timeout is kept."""
    with tempfile.TemporaryDirectory(prefix="scriptmod-torch-") as d:
        np.savez(Path(d) / "weights.npz", **job["weights"])
        np.save(Path(d) / "x.npy", job["x"])
        np.save(Path(d) / "ref.npy", job["ref"])
        spec = {"wid": job["wid"], "dims": job["dims"], "threads": opts.threads,
                "dtype": opts.dtype, "budget": opts.budget, "repeat": opts.repeat,
                "min_reps": opts.min_reps}
        (Path(d) / "job.json").write_text(json.dumps(spec))
        result = _child([sys.executable, "-m", "scriptmod.bench.torch_ref", d],
                        opts.torch_compile_timeout_s)
        eager = Path(d) / "torch_eager.json"
        if "torch_eager" not in result and eager.exists():
            result["torch_eager"] = json.loads(eager.read_text())
        return result


def _child(cmd: list[str], timeout: float) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get(
        "PYTHONPATH")])), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)      # the child's session: inductor's workers too
        proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"error": f"child exited with {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def _timed_part(model: Any, x: Any, ref: np.ndarray, spec: dict[str, Any]) -> dict[str, Any]:
    """First call, check against eager scriptmod, then timing, like the parent's variants."""
    from scriptmod.bench.runner import compare
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
    twin = build_twin(spec["wid"], spec["dims"], dict(np.load(d / "weights.npz")))
    x, ref = torch.from_numpy(np.load(d / "x.npy")), np.load(d / "ref.npy")
    out: dict[str, Any] = {}
    with torch.no_grad():
        out["torch_eager"] = _timed_part(twin, x, ref, spec)
        (d / "torch_eager.json").write_text(json.dumps(out["torch_eager"]))
        try:
            compiled = torch.compile(twin, mode=TORCH_COMPILE_MODE)
            out["torch_compile"] = _timed_part(compiled, x, ref, spec)
        except Exception as exc:  # noqa: BLE001  (reported to the parent as n/a)
            out["error"] = f"torch.compile: {type(exc).__name__}: {str(exc)[:300]}"
    return out


if __name__ == "__main__":
    try:
        print(json.dumps(_child_main(sys.argv[1])))
    except Exception as exc:  # noqa: BLE001  (reported to the parent as n/a)
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:300]}"}))
