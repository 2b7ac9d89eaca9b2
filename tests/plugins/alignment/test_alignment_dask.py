"""PSI/PSU blinding mapped over a Dask cluster in chunks gives the elements and alignment of one process (issue 21)."""
from __future__ import annotations

import numpy as np
import pytest

from vertisynth.core.errors import DataError, MessageError
from vertisynth.plugins.alignment import group
from vertisynth.plugins.alignment.private_sets import PSIConfig, PSUConfig, _run

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  dashboard_address=None) as cl:
        yield cl


def _ids(seed):
    rng = np.random.default_rng(seed)
    people = [f"person-{i:04d}" for i in range(300)]
    return {p: [people[i] for i in np.sort(rng.choice(300, size=rng.integers(120, 200), replace=False))]
            for p in ("A", "B", "C")}


def test_hashing_and_blinding_on_dask_equal_one_process(cluster, monkeypatch):
    monkeypatch.setattr(group, "DASK_CHUNK", 7)   # many chunks, the last one short
    ids = [f"id-{i}" for i in range(50)]
    scalar = group.random_scalar(np.random.default_rng(0))
    with distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as tasks:
            hashed = group.hash_to_group(ids, b"ctx", client)
            blinded = group.exp(hashed, scalar, client)
        assert np.array_equal(hashed, group.hash_to_group(ids, b"ctx"))
        assert np.array_equal(blinded, group.exp(hashed, scalar))
        assert sum(t["key"].startswith("_exp_chunk") for t in tasks.data) == 8   # ceil(50 / 7) tasks
        with pytest.raises(MessageError, match="not a valid ristretto255"):   # a bad element still refused
            group.exp(np.zeros((3, 32), np.uint8), scalar, client)
    with pytest.raises(DataError, match="positive number of processes or a Dask client"):
        group.exp(hashed, scalar, "four")


@pytest.mark.parametrize("protocol,cls", [("psi", PSIConfig), ("psu", PSUConfig)])
def test_alignment_with_a_dask_scheduler_equals_the_local_run(cluster, monkeypatch, protocol, cls):
    monkeypatch.setattr(group, "DASK_CHUNK", 40)
    ids = _ids(1)
    local = _run(protocol, ids, cls(workers=1), np.random.default_rng(5))
    remote = _run(protocol, ids, cls(dask_scheduler=cluster.scheduler_address), np.random.default_rng(5))
    assert set(local) == set(remote)
    for p in local:
        assert np.array_equal(local[p].rows, remote[p].rows) and local[p].n_common == remote[p].n_common
