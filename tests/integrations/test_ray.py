"""Compiled archives on Ray (``scriptmod.integrations.ray``, issue 18).

The predictor's own behaviour is checked in this process against the eager model it was
traced from; then one local Ray cluster (``ray.init(num_cpus=2)``, module scope) runs the
archive through Ray Data with two actors and through Ray Serve, whose 1,000 concurrent
requests come from a ``DeploymentHandle`` in this process (and a few over HTTP). Skipped
without the extra (``pip install scriptmod[ray]``). Most of the file's time is Ray starting
processes: the cluster, 2 + 1 Ray Data actors, Serve's controller, proxy and replica.
"""
from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import scriptmod
from scriptmod import nn
from scriptmod.bench import ray_bench
from scriptmod.integrations.ray import ArchivePredictor, map_archive, serve_deployment
from scriptmod.ir.errors import ShapeError
from scriptmod.jit import ArchiveError

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
serve = pytest.importorskip("ray.serve")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")

FEATURES, OUTPUTS = 16, 4
WRONG_SIZE = "cannot be multiplied"   # the compiled model's message for a wrong feature size


@pytest.fixture(scope="module")
def model() -> nn.Module:
    scriptmod.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.GELU(approximate="tanh"),
                         nn.Linear(32, OUTPUTS)).eval()


@pytest.fixture(scope="module")
def archive(model: nn.Module, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ray") / "mlp.smod"
    scriptmod.jit.save(scriptmod.jit.trace(model, scriptmod.randn(64, FEATURES)), path)
    return path


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("kernel-cache"))


def eager(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with scriptmod.no_grad():
        return model(scriptmod.from_numpy(np.ascontiguousarray(x, np.float32))).numpy()


def rows(n: int, seed: int = 0, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, FEATURES)).astype(dtype)


# ---- the predictor in this process ---------------------------------------------------------
def test_any_batch_size_matches_the_eager_model(model: nn.Module, archive: Path) -> None:
    predict = ArchivePredictor(archive.read_bytes(), warmup_rows=8)
    for n in (1, 7, 64, 1000):
        x = rows(n, seed=n)
        out = predict({"data": x})
        assert list(out) == ["output"] and out["output"].shape == (n, OUTPUTS)
        np.testing.assert_allclose(out["output"], eager(model, x), rtol=1e-5, atol=1e-5)


def test_columns_are_stacked_cast_and_passed_through(model: nn.Module, archive: Path) -> None:
    x = rows(10, dtype=np.float64)        # as read from Parquet: float64 scalar columns
    batch = {f"f{i}": x[:, i] for i in range(FEATURES)} | {"id": np.arange(10)}
    predict = ArchivePredictor(archive, batch_key=[f"f{i}" for i in range(FEATURES)],
                               output_key="y", passthrough=["id"], warmup_rows=0)
    out = predict(batch)
    assert out["y"].dtype == np.float32 and out["id"].tolist() == list(range(10))
    np.testing.assert_allclose(out["y"], eager(model, x), rtol=1e-5, atol=1e-5)


def test_requests_run_as_one_call_and_split_back(model: nn.Module, archive: Path) -> None:
    predict = ArchivePredictor(archive, warmup_rows=0)
    x = rows(6)
    outs = predict.predict_many([x[0], x[1:4], x[4], x[5:]])
    assert [o.shape for o in outs] == [(OUTPUTS,), (3, OUTPUTS), (OUTPUTS,), (1, OUTPUTS)]
    np.testing.assert_allclose(np.vstack(outs), eager(model, x), rtol=1e-5, atol=1e-5)


def test_bad_input_names_what_was_expected(archive: Path) -> None:
    predict = ArchivePredictor(archive, warmup_rows=0)
    with pytest.raises(ShapeError, match=WRONG_SIZE):
        predict({"data": np.ones((5, FEATURES + 1), np.float32)})
    with pytest.raises(KeyError, match="no column 'data'.*'x'"):
        predict({"x": rows(2)})
    with pytest.raises(TypeError, match="castable to float32.*complex128"):
        predict({"data": rows(2).astype(np.complex128)})
    with pytest.raises(TypeError, match="batch_key"):
        ArchivePredictor(archive, batch_key=3)
    with pytest.raises(ValueError, match="device"):
        ArchivePredictor(archive, device="tpu")


def test_a_corrupt_archive_raises_archive_error(archive: Path) -> None:
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(ArchiveError):
        ArchivePredictor(bytes(data))
    with pytest.raises(ArchiveError, match="not a ScriptModule archive"):
        ArchivePredictor(b"not an archive")


def test_bench_report_compares_with_the_loop_at_every_core() -> None:
    r = ray_bench.RayBenchResult("W3", rows=1024, batch=256, cores=2, ray_version="2.60.0")
    r.rows_table = [ray_bench.Row("plain loop, 1 thread", 500.0, 2.0),
                    ray_bench.Row("plain loop, 2 threads", 1000.0, 1.0),
                    ray_bench.Row("Ray Data, 2 actors", 800.0, 1.25, 900.0)]
    lines = ray_bench.format_report(r).splitlines()
    ratios = {line.split("  ")[0]: line.split()[-2 if "Ray" in line else -1]
              for line in lines if line.startswith(("plain", "Ray Data"))}
    assert ratios == {"plain loop, 1 thread": "0.50x", "plain loop, 2 threads": "1.00x",
                      "Ray Data, 2 actors": "0.80x"}


# ---- on a local Ray cluster ----------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True   # row for row, in order
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.mark.slow
def test_two_actors_equal_one_process_row_for_row(cluster: None, archive: Path,
                                                  kernel_cache: str) -> None:
    x = rows(100_000)
    expected = ArchivePredictor(archive, warmup_rows=0).predict(x)
    ds = ray.data.from_numpy(np.array_split(x, 8))            # 8 blocks for 2 actors
    ds = map_archive(ds, archive.read_bytes(), actors=2, batch_size=4096,
                     cache_dir=kernel_cache)
    got = np.concatenate([b["output"] for b in ds.iter_batches(batch_size=None,
                                                              batch_format="numpy")])
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_corrupt_archive_fails_the_actors_at_start_up(cluster: None) -> None:
    with pytest.raises(ArchiveError):                          # checked on the driver
        map_archive(ray.data.from_numpy(rows(10)), b"corrupt")
    ds = ray.data.from_numpy(rows(10)).map_batches(
        ArchivePredictor, fn_constructor_args=(b"corrupt",), batch_size=5,
        compute=ray.data.ActorPoolStrategy(size=1), num_cpus=1)
    with pytest.raises(ray.exceptions.RayActorError,
                       match="ArchiveError: not a ScriptModule archive"):
        ds.materialize()


@pytest.mark.slow
def test_serve_answers_1000_concurrent_requests(cluster: None, model: nn.Module,
                                               archive: Path, kernel_cache: str) -> None:
    """1,000 single-row requests in flight at once through a ``DeploymentHandle``, one of
    the wrong width among them (it fails alone, with the model's message); then a few rows
    over HTTP (JSON)."""
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    handle = serve.run(serve_deployment(archive.read_bytes(), cache_dir=kernel_cache),
                       name="archive", route_prefix="/mlp")
    x = rows(1000, seed=1)
    responses = [handle.predict.remote(row) for row in x]     # all in flight at once
    bad = handle.predict.remote(np.ones(FEATURES + 1, np.float32))
    got = np.stack([r.result(timeout_s=60) for r in responses])
    np.testing.assert_allclose(got, eager(model, x), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match=WRONG_SIZE):
        bad.result(timeout_s=60)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/mlp", method="POST",
                                     data=json.dumps({"data": x[:3].tolist()}).encode())
    with urllib.request.urlopen(request, timeout=60) as reply:
        body = json.load(reply)
    np.testing.assert_allclose(np.array(body["output"]), got[:3], rtol=1e-6, atol=1e-6)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
