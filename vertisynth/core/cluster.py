"""A Dask cluster to map chunks over (`--scheduler tcp://...`, `dask_scheduler = ...`): the client, with clear
errors, for every part that maps work (the encoders' chunk jobs, the party's counting passes, PSI/PSU blinding).
dask.distributed is optional (the `dask` extra) and imported only when a scheduler is configured."""
from __future__ import annotations

import contextlib
import os
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from .errors import ConfigError, VertisynthWarning

_CHECKED: weakref.WeakSet = weakref.WeakSet()   # clients whose workers were set up (threads) and looked at (malloc)
# every thread pool a numeric library may start: a worker runs `nthreads` tasks at once, each single-threaded
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def dask_client(scheduler: Any) -> Any:
    """A `distributed.Client` for an address (or the Client given), with clear errors."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("a Dask scheduler is configured but dask.distributed is not installed "
                          "(pip install 'vertisynth[dask]')") from None
    if isinstance(scheduler, Client):
        client = scheduler
    else:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"cannot reach the Dask scheduler {scheduler!r}: {exc}") from None
    if client not in _CHECKED:
        _CHECKED.add(client)
        pin_worker_threads(client)
        warn_malloc_trim(client)
    return client


def _pin_threads() -> dict[str, int]:   # runs on each worker
    """One thread per numeric thread pool in this process (and in any process it starts): the pools are
    sized to the machine's cores, and with one task per worker thread they only oversubscribe the cores."""
    for var in THREAD_VARIABLES:
        os.environ[var] = "1"
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:   # the environment variables still reach libraries loaded later
        return {}
    threadpool_limits(1)
    return {info["internal_api"]: info["num_threads"] for info in threadpool_info()}


def pin_worker_threads(client: Any) -> None:
    """Every worker of the client's cluster, now and later, runs its numeric libraries on one thread per task."""
    try:
        from .worker_plugin import PinThreads   # imports distributed: only here, where a cluster is in use
        client.register_plugin(PinThreads(), name=PinThreads.name)
    except Exception:   # an older distributed, or a worker that cannot answer: the workers there now at least
        try:
            client.run(_pin_threads)
        except Exception:   # reported by the real work, with its own error
            pass


def _sees(piece: Any) -> bool:   # runs on each worker
    return bool(piece.visible())


def workers_see(client: Any, piece: Any) -> bool:
    """Whether every worker sees the spilled file of `piece` (a `SpillSlice`): then the workers read their rows
    themselves, else the rows are sent."""
    try:
        got = client.run(_sees, piece)
    except Exception:
        return False
    return bool(got) and all(got.values())


def _malloc_trim_setting() -> str | None:   # runs on each worker
    return os.environ.get("MALLOC_TRIM_THRESHOLD_")


def warn_malloc_trim(client: Any) -> list[str]:
    """Warn (once per client) about workers started with Dask's nanny default `MALLOC_TRIM_THRESHOLD_=65536`:
    glibc then returns every freed large buffer and the next chunk faults it in again, which doubled the
    encoder's chunk cost in docs/scale.md. A warning, not a change: the cluster is the user's."""
    try:
        got = client.run(_malloc_trim_setting)
    except Exception:   # a worker that cannot answer is reported by the real work, with its own error
        return []
    slow = sorted(worker for worker, value in got.items() if value is not None)
    if slow:
        warnings.warn(f"{len(slow)} of the Dask cluster's {len(got)} workers run with MALLOC_TRIM_THRESHOLD_="
                      f"{got[slow[0]]} (the nanny's default), which made the chunk jobs about 2x slower "
                      "(docs/scale.md): start the workers with it unset (dask config "
                      "distributed.nanny.pre-spawn-environ, or `dask worker --no-nanny`)",
                      VertisynthWarning, stacklevel=3)
    return slow


@contextlib.contextmanager
def dask_session(scheduler: Any) -> Iterator[Any]:
    """A client for an address (closed afterwards) or the Client given (left open: its owner closes it)."""
    client = dask_client(scheduler)
    try:
        yield client
    finally:
        if client is not scheduler:
            client.close()


def is_client(obj: Any) -> bool:
    """Whether `obj` is a `distributed.Client` (False when dask.distributed is not installed)."""
    try:
        from distributed import Client
    except ImportError:
        return False
    return isinstance(obj, Client)
