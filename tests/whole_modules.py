"""`pytest -n N` (xdist's default `--dist load`) hands each worker whole test modules.

xdist's `load` sends each worker runs of consecutive tests, cut wherever the count falls; a cut inside a module
runs its module-scoped fixtures (a process Dask cluster, a deployment, a fitted model) on both workers: ~4 CPU s
for tests/run/test_stream_cluster.py's cluster, about every other run (issue 33; docs/lab/ci-speed-2026-11-30.md,
twelfth pass). Here a run sent to a worker is extended to the end of the module its last test belongs to; the
order within a worker and the refill (a worker short of tests gets more) are xdist's. `--dist loadgroup` or
`loadscope` would keep modules whole too, but the README's command is plain `-n 2`; an explicit `--dist` is kept.
"""
from __future__ import annotations

import pytest


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def whole_modules_count(collection: list[str], pending: list[int], num: int) -> int:
    """How many of PENDING (indices into COLLECTION, in order) to send so that at least NUM go and the last one
    sent ends its module's run."""
    num = min(max(num, 0), len(pending))
    if num == 0:
        return 0
    last = module_of(collection[pending[num - 1]])
    while num < len(pending) and module_of(collection[pending[num]]) == last:
        num += 1
    return num


def _scheduler_class():
    from xdist.scheduler import LoadScheduling

    class WholeModuleScheduling(LoadScheduling):
        def _send_tests(self, node, num: int) -> None:
            super()._send_tests(node, whole_modules_count(self.collection, self.pending, num))

    return WholeModuleScheduling


@pytest.hookimpl(tryfirst=True, optionalhook=True)   # before xdist's own (registered later, so called first)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    return _scheduler_class()(config, log)
