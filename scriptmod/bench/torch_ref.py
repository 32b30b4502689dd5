"""PyTorch twins of W1–W5 for ``scriptmod bench --compare torch``.

Each twin has the module structure of the scriptmod model, so the scriptmod ``state_dict``
loads into it key for key: both sides compute with the same weights and the same input,
and the twin's output is checked against eager scriptmod's before it is timed. PyTorch
eager is timed in this process, interleaved with the scriptmod variants. torch.compile runs
in a child process (``python -m scriptmod.bench.torch_ref JOB_DIR``) killed after the
timeout, because its compile time is unbounded; a failure or a timeout reads "n/a".

    >>> side = TorchSide.create(WORKLOADS["W1"], model, x, ref, opts)   # doctest: +SKIP
"""
from __future__ import annotations

import functools
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


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


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
    """The PyTorch columns of one workload: eager in process, torch.compile in a child."""

    def __init__(self, wid: str, opts: Any, note: str = "") -> None:
        self.wid, self.opts, self.note = wid, opts, note
        self.twin: Any = None
        self.x: Any = None
        self.job: dict[str, Any] = {}
        self.match: Any = None

    @classmethod
    def create(cls, workload: Any, model: Any, x: Any, ref: np.ndarray, opts: Any) -> "TorchSide":
        if opts.device != "cpu":
            return cls(workload.id, opts, "the PyTorch columns are measured on the CPU only")
        if not torch_available():
            return cls(workload.id, opts, "PyTorch is not importable: pip install torch")
        side = cls(workload.id, opts)
        side.setup(dims_of(workload.id, model), weights_of(model), x.numpy(force=True), ref)
        return side

    def setup(self, dims: dict[str, int], weights: dict[str, np.ndarray], x: np.ndarray,
              ref: np.ndarray) -> None:
        import torch
        from scriptmod.bench.runner import compare
        if self.opts.threads is not None:
            torch.set_num_threads(self.opts.threads)
        self.twin = build_twin(self.wid, dims, weights)
        self.x = torch.from_numpy(np.ascontiguousarray(x))
        with torch.no_grad():
            self.match = compare(self.twin(self.x), ref, self.opts.dtype)
        self.job = {"wid": self.wid, "dims": dims, "weights": weights, "x": x, "ref": ref}

    def variants(self) -> dict[str, Variant]:
        if self.twin is None:
            return {}
        import torch
        twin, x = self.twin, self.x
        return {"torch_eager": Variant(lambda: twin(x), torch.no_grad)}

    def finish(self, res: Any) -> None:
        """Record the eager check and run torch.compile in a child process."""
        res.times.setdefault("torch_eager", None)
        res.times["torch_compile"] = None
        if self.note:
            res.notes.append(self.note)
            return
        res.matches["torch_eager"] = self.match
        result = run_compile_job(self.job, self.opts)
        if "error" in result:
            res.notes.append(f"torch.compile n/a: {result['error']}")
            return
        from scriptmod.bench.runner import Match
        res.matches["torch_compile"] = Match(**result["match"])
        res.times["torch_compile"] = Timing(**result["timing"])
        res.compile["torch_compile_first_call_s"] = result["first_call_s"]


def run_compile_job(job: dict[str, Any], opts: Any) -> dict[str, Any]:
    """Run torch.compile for one workload in a child process; ``{"error": ...}`` on failure."""
    with tempfile.TemporaryDirectory(prefix="scriptmod-torch-") as d:
        np.savez(Path(d) / "weights.npz", **job["weights"])
        np.save(Path(d) / "x.npy", job["x"])
        np.save(Path(d) / "ref.npy", job["ref"])
        spec = {"wid": job["wid"], "dims": job["dims"], "threads": opts.threads,
                "dtype": opts.dtype, "budget": opts.budget, "repeat": opts.repeat,
                "min_reps": opts.min_reps}
        (Path(d) / "job.json").write_text(json.dumps(spec))
        return _child([sys.executable, "-m", "scriptmod.bench.torch_ref", d],
                      opts.torch_compile_timeout_s)


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


def _compile_main(job_dir: str) -> dict[str, Any]:
    import torch
    from scriptmod.bench.runner import compare
    from scriptmod.bench.timing import time_once
    d = Path(job_dir)
    spec = json.loads((d / "job.json").read_text())
    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    weights = dict(np.load(d / "weights.npz"))
    twin = build_twin(spec["wid"], spec["dims"], weights)
    x, ref = torch.from_numpy(np.load(d / "x.npy")), np.load(d / "ref.npy")
    compiled = torch.compile(twin, mode=TORCH_COMPILE_MODE)
    with torch.no_grad():
        first = time_once(lambda: compiled(x))
        match = compare(compiled(x), ref, spec["dtype"])
        timing = time_variants({"c": Variant(lambda: compiled(x))}, spec["budget"],
                               spec["repeat"], spec["min_reps"])["c"]
    return {"match": match.as_dict(), "timing": timing.as_dict(), "first_call_s": first}


if __name__ == "__main__":
    try:
        print(json.dumps(_compile_main(sys.argv[1])))
    except Exception as exc:  # noqa: BLE001  (reported to the parent as n/a)
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:300]}"}))
