"""Issue 33 (robust7): the last unbounded waits on the Dask path. `workers_see` (whether the workers see a spill,
asked by `ChunkJob.run_cluster` through `task_slices`) called `client.run` with no time limit, and `encode_csv`'s
Dask path waited on `fut.result()` with none: a worker that never answered (lost, paused) held the party step until
its command's limit. Now both wait at most VERTISYNTH_DASK_WAIT_S seconds, cancel what is outstanding and raise a
one-line DataError naming what they waited for. Real LocalCluster (in-process workers), a tiny wait, and a worker
call that blocks until the test releases it; on the old code these tests see the wait last past their bound."""
from __future__ import annotations

import time

import attrs
import numpy as np
import pytest

from vertisynth.core.chunks import SpillSlice
from vertisynth.core.errors import DataError

from dask_blocking import RELEASE, add as _add, blocked as _blocked, count as _count, within as _within
from encoder_helpers import SpilledStream, planned, toy_data

distributed = pytest.importorskip("distributed")

BOUND = 15.0                  # seconds: far past the 1 s wait, far below the 60 s a blocked call lasts


def _stuck_visible(self):   # a worker that never answers the "do you see the spill?" question
    RELEASE.wait(60)
    return True


def test_the_workers_check_of_a_spill_is_bounded_where_a_chunk_job_maps_it(client, spill, monkeypatch):
    from vertisynth.plugins.encoders.chunked import ChunkJob
    monkeypatch.setenv("VERTISYNTH_DASK_WAIT_S", "1")
    monkeypatch.setattr(SpillSlice, "visible", _stuck_visible)   # in-process workers: the same class
    RELEASE.clear()
    job = ChunkJob(spill.domain, _count, _add, lambda acc, n: (acc, n))
    start = time.monotonic()
    got, came = _within(lambda: job.run_cluster(SpilledStream(spill), client, 10_000), BOUND)
    RELEASE.set()
    assert came, "ChunkJob.run_cluster waited on workers_see (client.run) without a bound"
    assert isinstance(got, DataError) and "\n" not in str(got), got
    assert "the workers' check that they see the spilled rows" in str(got) and "VERTISYNTH_DASK_WAIT_S" in str(got)
    assert time.monotonic() - start < BOUND
    monkeypatch.undo()
    counts, n = job.run_cluster(SpilledStream(spill), client, 10_000)   # a healthy cluster still maps
    assert n == 30_000 and counts.sum() == 30_000


def test_workers_see_still_answers_on_a_healthy_cluster(client, spill):
    from vertisynth.core.cluster import workers_see
    piece = spill.slices(1000)[0]
    assert workers_see(client, piece, wait=30) is True
    assert workers_see(client, attrs.evolve(piece, codes="/nonexistent/codes.bin"), wait=30) is False


def _grr_on_bobs_csv(tmp_path, n, seed):
    """A planned GRR encoder and bob's columns of a toy table written to a CSV: (encoder, ledger, view, path)."""
    from vertisynth.plugins.encoders.grr import GRREncoder
    data, part = toy_data(n, seed=seed)
    enc = GRREncoder()
    ledger = planned(enc, data, part, 1.0)
    view = part.views(data)["bob"]
    path = tmp_path / "bob.csv"
    view.to_frame().to_csv(path, index=False)
    return enc, ledger, view, path


def test_encode_csv_on_dask_waits_a_bounded_time_for_each_span_and_cancels_the_rest(client, tmp_path, monkeypatch):
    from vertisynth.plugins.encoders.chunked import encode_csv
    enc, ledger, view, path = _grr_on_bobs_csv(tmp_path, 700, seed=2)
    real = enc.chunk_job
    enc.chunk_job = lambda *a: attrs.evolve(real(*a), mapper=_blocked)   # every span's task blocks on its worker
    monkeypatch.setenv("VERTISYNTH_DASK_WAIT_S", "1")
    RELEASE.clear()
    start = time.monotonic()
    got, came = _within(lambda: encode_csv(enc, "bob", path, view.domain, ledger, np.random.default_rng(4),
                                           chunk_rows=100, scheduler=client), BOUND)
    assert came, "encode_csv waited on a Dask future without a bound"
    assert isinstance(got, DataError) and "\n" not in str(got), got
    assert "the map of CSV span 0 of 7" in str(got) and "VERTISYNTH_DASK_WAIT_S" in str(got), got
    assert time.monotonic() - start < BOUND
    # nothing of the job stays queued on the cluster: every span's task was cancelled
    deadline = time.monotonic() + 10
    while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == 0
    RELEASE.set()


def _stuck_span(*args):   # a first-pass task whose worker never finishes it
    RELEASE.wait(60)
    return ("ok", 0, [])


def test_a_first_pass_on_the_workers_waits_a_bounded_time_for_its_spans(client, tmp_path, monkeypatch):
    """run/stream.py's first pass over CSV byte spans waited on `as_completed` with no bound: a worker that never
    finished a span held the party step. Now each wait for the next finished span is bounded and the rest are
    cancelled."""
    import pandas as pd

    import vertisynth.run.stream as stream
    from vertisynth.core.chunks import ChunkedCounts
    from vertisynth.core.encoding import TableSchema
    path = tmp_path / "t.csv"
    rng = np.random.default_rng(3)
    pd.DataFrame({"a": np.array(["x", "y", "z"])[rng.integers(0, 3, 3_000)],
                  "c": rng.integers(0, 2, 3_000)}).to_csv(path, index=False)
    schema = TableSchema.from_config({"a": {"kind": "categorical", "categories": ["x", "y", "z"]},
                                      "c": {"kind": "categorical", "categories": ["0", "1"]}})
    codec = schema.fit(pd.DataFrame({"a": [], "c": []}, dtype=object), None, np.random.default_rng(0))
    monkeypatch.setenv("VERTISYNTH_DASK_WAIT_S", "1")
    monkeypatch.setenv("VERTISYNTH_SPILL_DIR", str(tmp_path / "spill"))
    monkeypatch.setattr(stream, "code_span", _stuck_span)   # in-process workers: the patched function runs there
    RELEASE.clear()
    chunks = stream.coded_chunks(path, codec, 1_000)
    start = time.monotonic()
    got, came = _within(lambda: ChunkedCounts(chunks, codec.domain, first_pass=client).prefetch_pairs(), BOUND)
    RELEASE.set()
    assert came, "the first pass on the workers waited for its spans without a bound"
    assert isinstance(got, DataError) and "\n" not in str(got), got
    assert "first-pass span" in str(got) and "VERTISYNTH_DASK_WAIT_S" in str(got), got
    assert time.monotonic() - start < BOUND
    chunks.close()


def test_an_unreachable_scheduler_is_one_line_for_encode_csv_and_the_study(tmp_path, monkeypatch):
    """encode_csv and the study's Dask path opened their own `Client(address)` (distributed's OSError traceback
    after its own timeout, and no thread pinning); both now go through `dask_client` like every other path."""
    import socket

    from vertisynth.core import cluster
    from vertisynth.core.errors import ConfigError
    from vertisynth.plugins.encoders.chunked import encode_csv
    from vertisynth.study.runner import _run_dask
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", "1s")
    with socket.socket() as s:   # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    enc, ledger, view, path = _grr_on_bobs_csv(tmp_path, 200, seed=3)
    for call in (lambda: encode_csv(enc, "bob", path, view.domain, ledger, np.random.default_rng(4),
                                    chunk_rows=100, scheduler=address),
                 lambda: _run_dask([], str(tmp_path), None, address, None)):
        got, came = _within(call, BOUND)
        assert came, "no bound on reaching the scheduler"
        assert isinstance(got, ConfigError) and "\n" not in str(got), got
        assert "cannot reach the Dask scheduler" in str(got), got
