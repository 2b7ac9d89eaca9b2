"""`pytest -n N` (xdist's default `--dist load`) keeps the modules of KEEP_WHOLE on one worker.

xdist's `load` sends each worker runs of consecutive tests, cut wherever the count falls; a cut inside a module
runs its module-scoped fixtures on both workers: ~4 CPU s for tests/run/test_stream_cluster.py's process Dask
cluster, about every other run (issue 33; docs/lab/ci-speed-2026-11-30.md, twelfth pass). For the modules below, a
run sent to a worker is extended to the end of the module its last test belongs to; the order within a worker and
the refill are xdist's. Only these modules: keeping every module whole would leave a worker idle at the end while
the other finishes a large module (and CI's slow steps have few, long modules). `--dist loadgroup` or `loadscope`
would keep modules whole too, but the README's command is plain `-n 2`; an explicit `--dist` is kept.
"""
from __future__ import annotations

import pytest


# modules whose module-scoped fixture, or whose runs several tests read (seeded_runs.run_once) or per-process price
# timings (the he encoder's `_op_costs`), cost seconds of CPU on each worker that runs one of its tests (measured split
# vs whole: docs/lab/ci-speed-2026-11-30.md, twelfth and fourteenth passes)
KEEP_WHOLE = frozenset({"tests/run/test_stream_cluster.py", "tests/run/test_model_release.py",
                        "tests/vertical/test_release_measures.py",
                        "tests/plugins/synthesizers/test_vertical_twins.py",
                        "tests/plugins/synthesizers/test_vertical_twins_pgm_dpsyn.py",
                        "tests/plugins/synthesizers/test_vertical_privmrf.py",
                        "tests/plugins/encoders/test_he_vertimrf.py"})


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def whole_modules_count(collection: list[str], pending: list[int], num: int,
                        whole: frozenset[str] | None = KEEP_WHOLE) -> int:
    """How many of PENDING (indices into COLLECTION, in order) to send so that at least NUM go and, where the last
    one sent is in a module of WHOLE (None: every module), it ends its module's run."""
    num = min(max(num, 0), len(pending))
    if num == 0:
        return 0
    last = module_of(collection[pending[num - 1]])
    if whole is not None and last not in whole:
        return num
    while num < len(pending) and module_of(collection[pending[num]]) == last:
        num += 1
    return num


def _scheduler_class(whole: frozenset[str] | None = KEEP_WHOLE):
    from xdist.scheduler import LoadScheduling

    class WholeModuleScheduling(LoadScheduling):
        def _send_tests(self, node, num: int) -> None:
            super()._send_tests(node, whole_modules_count(self.collection, self.pending, num, whole))

    return WholeModuleScheduling


@pytest.hookimpl(tryfirst=True, optionalhook=True)   # before xdist's own (registered later, so called first)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "load":
        return None
    return _scheduler_class()(config, log)
