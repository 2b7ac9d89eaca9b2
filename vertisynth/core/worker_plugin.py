"""The Dask worker plugin that pins a worker's numeric thread pools (core/cluster.py: `pin_worker_threads`).
A module of its own because it imports dask.distributed, which vertisynth loads only when a cluster is used."""
from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from .cluster import _pin_threads


class PinThreads(WorkerPlugin):
    """`_pin_threads` on every worker of the cluster, those that join later included."""

    name = "vertisynth-pin-threads"
    idempotent = True

    def setup(self, worker: Any) -> None:
        _pin_threads()
