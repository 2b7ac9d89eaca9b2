"""Issue 33 (robust6): every wait of the early encoding map is bounded (core/cluster.py `EarlyMap`, `ChunkJob`'s
in-order merge, `coded_chunks.live_slices`). Before, `EarlyMap.result` joined its merge thread without a bound and
the merge waited on Dask futures without one: a task that never finished (a lost or paused worker) left the party
step waiting until its command's limit, and a task's error came back raw. Now a wait past VERTISYNTH_DASK_WAIT_S
seconds with no news cancels what is queued and raises a one-line DataError naming what it waited for."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from vertisynth.core.errors import DataError
from vertisynth.core.encoding import TableSchema
from vertisynth.run.stream import coded_chunks

from dask_blocking import RELEASE, add as _add, blocked as _blocked, count as _count, within as _within
from encoder_helpers import SpilledStream

distributed = pytest.importorskip("distributed")

def _boom(rows, ids):
    raise ValueError("a worker's bad day")


def test_a_task_that_never_finishes_ends_the_wait_with_one_line_and_is_cancelled(client, spill, monkeypatch):
    from vertisynth.core.cluster import EarlyMap
    monkeypatch.setenv("VERTISYNTH_DASK_WAIT_S", "1.5")
    RELEASE.clear()
    early = EarlyMap(client, SpilledStream(spill), spill.domain, _blocked, _add, 10_000)
    assert early.running
    start = time.monotonic()
    got, came = _within(early.result, 30)
    assert came, "EarlyMap.result waited without a bound"
    assert isinstance(got, DataError) and "\n" not in str(got), got
    assert "waited" in str(got) and "map task(s) queued on the cluster" in str(got) and "VERTISYNTH_DASK_WAIT_S" in str(got)
    assert time.monotonic() - start < 15
    early._thread.join(15)   # the queued tasks were cancelled: the merge thread saw them go and ended
    assert not early.running and not early._thread.is_alive() and not early._queued
    RELEASE.set()


def test_a_task_error_and_a_merge_error_come_back_as_one_line(client, spill, monkeypatch):
    from vertisynth.core.cluster import EarlyMap
    monkeypatch.setenv("VERTISYNTH_DASK_WAIT_S", "30")
    early = EarlyMap(client, SpilledStream(spill), spill.domain, _boom, _add, 10_000)
    got, came = _within(early.result, 30)
    assert came and isinstance(got, DataError), got
    assert "ValueError: a worker's bad day" in str(got) and "the early map's task on rows" in str(got), got
    assert "\n" not in str(got)

    def bad_merge(a, b):
        raise MemoryError("merge")
    early = EarlyMap(client, SpilledStream(spill), spill.domain, _count, bad_merge, 10_000)
    got, came = _within(early.result, 30)
    assert came and isinstance(got, DataError) and "MemoryError: merge" in str(got), got


def test_the_in_order_merge_of_a_chunk_job_is_bounded_too(client, spill, monkeypatch):
    from vertisynth.plugins.encoders.chunked import ChunkJob
    monkeypatch.setenv("VERTISYNTH_DASK_WAIT_S", "1.5")
    RELEASE.clear()
    job = ChunkJob(spill.domain, _blocked, _add, lambda acc, n: (acc, n))
    got, came = _within(lambda: job.run_cluster(SpilledStream(spill), client, 10_000), 30)
    RELEASE.set()
    assert came, "ChunkJob.run_cluster waited without a bound"
    assert isinstance(got, DataError) and "the map of chunk 0" in str(got) and "\n" not in str(got), got
    assert job.run_cluster(SpilledStream(spill), client, 10_000)[1] == 30_000   # and a healthy job still maps


def test_a_first_pass_begun_before_the_map_waited_gives_its_spill_not_a_hang(tmp_path):
    """The pass took the stream's watchers before `live_slices` registered its own, so it never tells it; once
    the pass has completed its spill, the waiting slices come from it (before: a wait of 900 s, then an error)."""
    frame = pd.DataFrame({"a": np.arange(1_000) % 3})
    frame.to_csv(tmp_path / "t.csv", index=False)
    codec = TableSchema.from_config({"a": {"kind": "categorical", "categories": [0, 1, 2]}}).fit(
        frame, None, np.random.default_rng(0))
    chunks = coded_chunks(tmp_path / "t.csv", codec, 100)
    first = chunks()
    next(first)                    # the first pass is under way
    waiting = chunks.live_slices(250)
    for _ in first:                # and completes, telling no one
        pass
    got, came = _within(lambda: list(waiting), 20)
    assert came, "live_slices waited for news from a pass that had completed"
    assert [(s.start, s.stop) for s in got] == [(0, 250), (250, 500), (500, 750), (750, 1000)]
    chunks.close()
