import os
from pathlib import Path

# One thread per numeric thread pool (BLAS, OpenMP) in the test processes and in all they start (forked roles,
# cold CLI subprocesses, Dask workers): with two xdist workers on two cores, pool threads spin-waiting for cores
# the other worker holds doubled the CPU seconds of the linear-algebra tests (docs/testing.md, issue 33), as
# vertisynth.testing.audit found for its classifiers. Set before numpy loads them; a value already set wins.
# tests/run/test_stream_cluster.py and tests/pgm/test_pgm_warm_starts.py unset or raise it where they test threads.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                     "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")   # vertisynth.core.cluster.THREAD_VARIABLES
for _var in _THREAD_VARIABLES:
    os.environ.setdefault(_var, "1")

# Dask's diagnostics in the test clusters (LocalCluster here, its spawned workers through the environment): the
# workers' stack profiler (every 10 ms), the event-loop tick (20 ms), the system monitor (0.5 s) and the nannies'
# memory monitor (0.1 s) cost an idle two-worker cluster ~0.1 CPU s per wall second, charged at teardown, and a
# loaded machine stretches a module's wall (issue 33; docs/lab/ci-speed-2026-11-29.md). No test reads them: the
# tasks, their results and where they run are the same. Set before dask loads its config; a value already set wins.
for _var, _value in (("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", "False"),
                     ("DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL", "1s"),
                     ("DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL", "2s"),
                     ("DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL", "1s")):
    os.environ.setdefault(_var, _value)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

if all(os.environ[v] == "1" for v in _THREAD_VARIABLES):
    threadpool_limits(1)   # also the pools a plugin loaded before this file (the variables reach only later loads)

# The DP conformance kit's fixtures, --vertisynth-audit option and Hypothesis CI profile; --cpu-durations=N;
# --audit-cost (each privacy audit's sampling CPU, estimated from a few samples, instead of running it); spill_dir;
# under plain `-n N`, the modules of whole_modules.KEEP_WHOLE each kept on one worker (their fixtures built once).
pytest_plugins = ["vertisynth.testing.plugin", "cpu_durations", "audit_cost", "spill_helpers", "whole_modules"]

from sshd_helpers import sftp_env, sshd  # noqa: E402,F401  (a real OpenSSH server for the sftp:// tests)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def data_dir():
    """The NLTCS/Adult folder: $VERTISYNTH_DATA or ../shared/data; skips when absent."""
    path = Path(os.environ.get("VERTISYNTH_DATA", SHARED_DATA))
    if not (path / "nltcs").is_dir():
        pytest.skip(f"benchmark data folder not found at {path}")
    return path


@pytest.fixture
def cold_start(monkeypatch):
    """The roles as `python -m vertisynth.cli` subprocesses from a cold start (deploy_helpers), instead of
    processes forked from a warm interpreter: the end-to-end flow kept for each deployment kind."""
    import deploy_helpers

    monkeypatch.setattr(deploy_helpers, "COLD", True)


@pytest.fixture
def in_process(monkeypatch):
    """`cli` and `parallel` (deploy_helpers) run each role in a thread of this process: the same commands over the
    same exchange, for the flows whose deployment kind another test already runs as processes (issue 33)."""
    import deploy_helpers

    monkeypatch.setattr(deploy_helpers, "THREADS", True)


@pytest.fixture
def forked_bridges(monkeypatch):
    """The flower bridges' steps forked from the warm forkserver (forked_cli.start_bridge_step) instead of a cold
    `python -m vertisynth.deploy.flower.worker` + `python -m vertisynth.cli` each: every relay flow but the one
    kept cold (tests/deploy/test_flower_relay.py::test_relay_and_bridges_publish_the_simulated_table)."""
    import forked_cli

    from vertisynth.deploy.flower.bridge import Bridge

    monkeypatch.setattr(Bridge, "_start", forked_cli.start_bridge_step)
