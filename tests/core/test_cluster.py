"""core/cluster.py: the Dask client warns when the workers run with the nanny's malloc trim setting."""
from __future__ import annotations

import warnings

import pytest

from vertisynth.core.cluster import dask_client
from vertisynth.core.errors import VertisynthWarning


def test_workers_with_the_nannys_malloc_trim_are_named_once_and_unset_ones_are_not(monkeypatch):
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    # a LocalCluster's nannies live in this process and os.environ.update() their pre-spawn settings into it
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        with pytest.warns(VertisynthWarning, match="1 of the Dask cluster's 1 workers run with MALLOC_TRIM_THRESHOLD_"):
            client = dask_client(cluster.scheduler_address)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert dask_client(client) is client   # checked once per client
        client.close()
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    env = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    env["MALLOC_TRIM_THRESHOLD_"] = None
    with dask.config.set({"distributed.nanny.pre-spawn-environ": env}), \
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                     host="127.0.0.1") as cluster:
        with warnings.catch_warnings():
            warnings.simplefilter("error", VertisynthWarning)
            dask_client(cluster.scheduler_address).close()


@pytest.mark.parametrize("n, workers", [(3_000_000, 14), (1_000_000, 14), (3_000_000, 2), (300_000, 2)])
def test_the_guided_task_plan_covers_every_row_once_large_first_and_fills_the_last_wave(n, workers):
    """The early map's cut of a first pass on the workers (spans of n / 4W rows, never across a 100k chunk,
    told one at a time): every row once, in order; the first tasks whole spans; the last wave (one task a
    worker) of about MIN_TASK_ROWS rows, so it ends nearly together; and at 3M rows on 14 workers about a
    third of the tasks of the old fixed cut (at most 10k rows each: 330 a party, each with its fixed cost)."""
    from vertisynth.core.chunks import TaskSizes
    from vertisynth.core.cluster import MIN_TASK_ROWS
    chunk_rows = 100_000
    span = min(chunk_rows, max(-(-n // (4 * workers)), MIN_TASK_ROWS))
    plan = TaskSizes(workers, chunk_rows, MIN_TASK_ROWS)
    regions = [(s, min(s + span, c + chunk_rows, n)) for c in range(0, n, chunk_rows)
               for s in range(c, min(c + chunk_rows, n), span)]
    left, tasks = n, []
    for a, b in regions:
        tasks += plan.cuts(a, b, left)
        left -= b - a
    assert [a for a, _ in tasks] == [0] + [b for _, b in tasks[:-1]] and tasks[-1][1] == n
    sizes = [b - a for a, b in tasks]
    assert sizes[0] == span
    assert all(MIN_TASK_ROWS // 2 <= s <= MIN_TASK_ROWS for s in sizes[-workers:]), sizes[-workers:]
    if workers == 14 and n == 3_000_000:
        old = max(MIN_TASK_ROWS, chunk_rows // workers)
        assert len(tasks) <= 120 and 2.5 * len(tasks) < sum(-(-(b - a) // old) for a, b in regions) == 330
    # without the rows known (a first pass in the party process): the old fixed cut
    assert TaskSizes(workers, chunk_rows, MIN_TASK_ROWS).cuts(0, 25_000) == \
        [(s, min(s + max(MIN_TASK_ROWS, chunk_rows // workers), 25_000))
         for s in range(0, 25_000, max(MIN_TASK_ROWS, chunk_rows // workers))]
