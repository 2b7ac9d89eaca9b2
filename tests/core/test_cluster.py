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
