"""Compiled archives on Ray: batch inference with Ray Data, serving with Ray Serve
(``pip install scriptmod[ray]``; written and tested against Ray 2.60).

``ArchivePredictor`` is a callable class for ``Dataset.map_batches``: each actor of the pool
loads the archive once, compiles and warms its kernels, then maps NumPy batches (a dict of
columns) to NumPy outputs. Any batch size runs, the ragged last batch too. It needs no Ray
itself:

    >>> from scriptmod.integrations.ray import ArchivePredictor
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    >>> scriptmod.jit.save(scriptmod.jit.trace(model, scriptmod.ones(16, 4)), "mlp.smod")
    >>> predict = ArchivePredictor("mlp.smod", batch_key="x", passthrough=["id"])
    >>> out = predict({"x": np.ones((3, 4), np.float32), "id": np.arange(3)})
    >>> out["output"].shape, out["id"].tolist()
    ((3, 2), [0, 1, 2])

On Ray Data (``compute=ActorPoolStrategy(size=n)``, as Ray 2.60 documents; its older
``concurrency=n`` is deprecated there)::

    ds = ray.data.read_parquet("features/")
    ds = ds.map_batches(ArchivePredictor, fn_constructor_args=("mlp.smod",),
                        fn_constructor_kwargs={"batch_key": ["f0", "f1", "f2", "f3"]},
                        batch_size=4096, batch_format="numpy", num_cpus=1,
                        compute=ray.data.ActorPoolStrategy(size=2))

or ``map_archive(ds, "mlp.smod", actors=2, ...)``, which also checks the archive on the
driver first. On Ray Serve, ``serve.run(serve_deployment("mlp.smod"))`` returns a handle whose
``predict.remote(row)`` requests are batched into one compiled call.

An archive that cannot be loaded raises ``ArchiveError`` in the actor's constructor: Ray
fails the pipeline at start-up with that message (inside Ray's ``ActorDiedError``), and
``map_archive``/``serve_deployment`` raise the ``ArchiveError`` itself on the driver. A batch
of the wrong feature size fails with the compiled model's own shape or guard message.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np

import scriptmod
from scriptmod.ir.types import TensorType
from scriptmod.runtime.arrays import np_dtype

if TYPE_CHECKING:
    import ray.data
    from ray.serve import Application

Archive = Union[str, "os.PathLike[str]", bytes]
BatchKey = Union[str, Sequence[str]]

__all__ = ["ArchivePredictor", "map_archive", "serve_deployment"]


class ArchivePredictor:
    """Runs a saved archive over NumPy batches: ``{column: array}`` in, ``{output_key:
    array}`` (plus the ``passthrough`` columns) out.

    ``archive``: a path (read on the actor's node) or the archive's bytes. ``batch_key``:
    the column holding the model's input (rows first), or a list of scalar columns stacked as
    the features of each row. The input is cast to the dtype the model was traced with
    (float64 Parquet columns to float32, say) where NumPy's ``same_kind`` casting allows.
    ``device``: ``"cpu"`` or ``"cuda[:n]"``. ``cache_dir`` sets ``SCRIPTMOD_CACHE_DIR`` in
    this process, so that the actors of one node share their compiled kernels. ``threads``:
    kernel and BLAS threads (default: the CPUs Ray assigned to this actor, else unchanged).
    ``warmup_rows``: the rows of the warm-up call made at start-up (0: none).
    """

    def __init__(self, archive: Archive, batch_key: BatchKey = "data", *,
                 output_key: str = "output", passthrough: Sequence[str] = (),
                 device: str = "cpu", cache_dir: str | os.PathLike[str] | None = None,
                 threads: int | None = None, warmup_rows: int = 256) -> None:
        self.batch_key = _check_batch_key(batch_key)
        self.output_key, self.passthrough = output_key, list(passthrough)
        self.device = _check_device(device)
        if cache_dir is not None:
            os.environ["SCRIPTMOD_CACHE_DIR"] = os.fspath(cache_dir)
        threads = threads if threads is not None else _ray_actor_cpus()
        if threads is not None:
            scriptmod.set_num_threads(threads)
        self.module = load_archive(archive, self.device)
        self.input_type = _single_input(self.module)
        if warmup_rows < 0:
            raise ValueError(f"ArchivePredictor: warmup_rows: expected >= 0, got {warmup_rows}")
        if warmup_rows:
            self.predict(np.ones(self.row_shape(warmup_rows), np_dtype(self.input_type.dtype)))

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out = {name: np.asarray(_column(batch, name)) for name in self.passthrough}
        out[self.output_key] = self.predict(self.features(batch))
        return out

    def features(self, batch: Mapping[str, Any]) -> np.ndarray:
        """The model's input from a batch: the ``batch_key`` column, or its columns stacked."""
        if isinstance(self.batch_key, str):
            return _dense(_column(batch, self.batch_key))
        return np.stack([np.asarray(_column(batch, c)) for c in self.batch_key], axis=-1)

    def predict(self, x: Any) -> np.ndarray:
        """One compiled call on the rows of ``x`` (any number of them)."""
        x = np.ascontiguousarray(self._cast(np.asarray(x)))
        with scriptmod.no_grad():
            y = self.module(scriptmod.from_numpy(x).to(self.device))
        if not isinstance(y, scriptmod.Tensor):
            raise TypeError(f"ArchivePredictor: expected the archive's forward to return one "
                            f"Tensor, got {type(y).__name__}")
        return y.cpu().numpy()

    def predict_many(self, requests: Sequence[Any]) -> list[np.ndarray]:
        """Requests of one row or several each, run as one compiled call, split back: a
        request of one row (one dim fewer than the traced input) gets one output row."""
        arrays = [np.asarray(r) for r in requests]
        single = [a.ndim == len(self.input_type.shape) - 1 for a in arrays]
        rows = [a[None] if one else a for a, one in zip(arrays, single)]
        y = self.predict(np.concatenate(rows))
        parts = np.split(y, np.cumsum([len(r) for r in rows])[:-1])
        return [p[0] if one else p for p, one in zip(parts, single)]

    def fits(self, x: np.ndarray) -> bool:
        """Whether ``x`` (one row or several) has the traced input's per-row shape; False
        also when that shape is not known (symbolic beyond the batch dim)."""
        per_row = self.input_type.shape[1:]
        if not all(isinstance(d, int) for d in per_row):
            return False
        return x.ndim in (len(per_row), len(per_row) + 1) and \
            tuple(x.shape[x.ndim - len(per_row):]) == tuple(per_row)

    def row_shape(self, rows: int) -> tuple[int, ...]:
        """The traced input's shape with ``rows`` rows (other symbolic dims: 1)."""
        return (rows,) + tuple(d if isinstance(d, int) else 1 for d in self.input_type.shape[1:])

    def _cast(self, x: np.ndarray) -> np.ndarray:
        want = np_dtype(self.input_type.dtype)
        if x.dtype == want:
            return x
        if not np.can_cast(x.dtype, want, casting="same_kind"):
            raise TypeError(f"ArchivePredictor: batch {self.batch_key!r}: expected values "
                            f"castable to {want} (the traced input's dtype), got {x.dtype}")
        return x.astype(want)


def load_archive(archive: Archive, device: str = "cpu") -> Any:
    """The archive (a path or its bytes) loaded onto ``device``; ``ArchiveError`` if invalid."""
    if not isinstance(archive, (str, os.PathLike, bytes, bytearray, memoryview)):
        raise TypeError(f"archive: expected a path or the archive's bytes, got "
                        f"{type(archive).__name__}")
    return scriptmod.jit.load(archive, map_location=device).eval()


def map_archive(ds: ray.data.Dataset, archive: Archive, *, actors: int = 2,
                batch_size: int = 4096, num_cpus: float = 1, num_gpus: float = 0,
                **predictor_kwargs: Any) -> ray.data.Dataset:
    """``ds.map_batches(ArchivePredictor, ...)`` over a fixed pool of ``actors`` actors of
    ``num_cpus`` CPUs each, after checking the archive on the driver: an invalid archive
    raises ``ArchiveError`` here, before any actor starts. Lazy, as ``map_batches`` is.
    Actors that take every CPU of the cluster leave none to the tasks that read and write
    the data set (``read_parquet``), which then never run: on 2 CPUs, 2 actors need
    ``num_cpus=0.5``."""
    from ray.data import ActorPoolStrategy
    load_archive(archive)
    return ds.map_batches(ArchivePredictor, fn_constructor_args=(archive,),
                          fn_constructor_kwargs=predictor_kwargs, batch_size=batch_size,
                          batch_format="numpy", compute=ActorPoolStrategy(size=actors),
                          num_cpus=num_cpus, num_gpus=num_gpus)


def serve_deployment(archive: Archive, *, name: str = "ArchiveDeployment",
                     max_batch_size: int = 64, batch_wait_timeout_s: float = 0.002,
                     num_replicas: int = 1, ray_actor_options: dict[str, Any] | None = None,
                     **predictor_kwargs: Any) -> Application:
    """A Ray Serve application over the archive (checked here, on the driver): requests wait
    up to ``batch_wait_timeout_s`` to be batched, ``max_batch_size`` at most, into one compiled
    call. ``serve.run(app)`` returns a handle: ``handle.predict.remote(rows)``, rows a NumPy
    array of one row or several; over HTTP, POST ``{batch_key: rows}`` (JSON lists) answers
    ``{output_key: rows}``. A request of the wrong per-row shape runs alone, so that its error
    (the model's own) fails only it."""
    from ray import serve
    load_archive(archive)
    options = {"num_cpus": 1, **(ray_actor_options or {})}
    deployment = serve.deployment(name=name, num_replicas=num_replicas,
                                  max_ongoing_requests=4 * max_batch_size,
                                  ray_actor_options=options)(
        _server_class(max_batch_size, batch_wait_timeout_s))
    return deployment.bind(archive, **predictor_kwargs)


def _server_class(max_batch_size: int, batch_wait_timeout_s: float) -> type:
    """The deployment's class; built here because ``serve.batch`` needs Ray at definition."""
    from ray import serve

    class ArchiveServer:
        def __init__(self, archive: Archive, **predictor_kwargs: Any) -> None:
            self.predictor = ArchivePredictor(archive, **predictor_kwargs)

        async def predict(self, rows: Any) -> np.ndarray:
            rows = np.asarray(rows)
            if not self.predictor.fits(rows):
                return self.predictor.predict_many([rows])[0]
            return await self._batched(rows)

        @serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s)
        async def _batched(self, requests: list[np.ndarray]) -> list[np.ndarray]:
            return self.predictor.predict_many(requests)

        async def __call__(self, request: Any) -> dict[str, Any]:
            body = await request.json()
            key, out = self.predictor.batch_key, self.predictor.output_key
            if not isinstance(key, str) or key not in body:
                raise ValueError(f"request: expected a JSON object with the key {key!r}")
            return {out: (await self.predict(body[key])).tolist()}

    return ArchiveServer


def _ray_actor_cpus() -> int | None:
    """The CPUs Ray assigned to this actor (None outside a Ray actor): its kernels and BLAS
    use that many threads, not every core of the node."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    if context.get_actor_id() is None:
        return None
    cpus = context.get_assigned_resources().get("CPU", 0)
    return max(1, int(cpus)) if cpus else None


def _single_input(module: Any) -> TensorType:
    inputs = [v.type for v in list(module.graph.inputs)[1:]]
    if len(inputs) != 1 or not isinstance(inputs[0], TensorType) or not inputs[0].shape:
        raise TypeError(f"ArchivePredictor: expected an archive whose forward takes one tensor "
                        f"with a batch dim, got inputs {inputs}")
    return inputs[0]


def _column(batch: Mapping[str, Any], name: str) -> Any:
    try:
        return batch[name]
    except KeyError:
        raise KeyError(f"ArchivePredictor: the batch has no column {name!r}; its columns are "
                       f"{sorted(batch)}") from None


def _dense(column: Any) -> np.ndarray:
    """A column as one array; a column of per-row arrays (object dtype) is stacked."""
    array = np.asarray(column)
    return np.stack(list(array)) if array.dtype == object else array


def _check_batch_key(key: Any) -> BatchKey:
    if isinstance(key, str) or (isinstance(key, Sequence) and key and
                                all(isinstance(k, str) for k in key)):
        return key if isinstance(key, str) else list(key)
    raise TypeError(f"ArchivePredictor: batch_key: expected a column name or a list of them, "
                    f"got {key!r}")


def _check_device(device: Any) -> str:
    device = str(device)
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"ArchivePredictor: device: expected 'cpu' or 'cuda[:n]', got {device!r}")
    return device
