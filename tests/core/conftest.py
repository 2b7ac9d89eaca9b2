"""Fixtures of the bounded-wait tests: an in-process Dask cluster (its workers run the tests' blocking functions
as they are) and a small spill."""
from __future__ import annotations

import numpy as np
import pytest

from vertisynth.core.domain import Domain
from vertisynth.run.stream import CodeSpill

from dask_blocking import RELEASE


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cl, \
            distributed.Client(cl) as c:
        yield c
    RELEASE.set()


@pytest.fixture()
def spill():
    dom = Domain(["a", "b"], [3, 4])
    out = CodeSpill(dom, "vertisynth-test-")
    out.append(np.random.default_rng(0).integers(0, dom.shape, size=(30_000, 2)))
    yield out.finish()
    out.close()
