"""A Dask cluster to map chunks over (`--scheduler tcp://...`, `dask_scheduler = ...`): the client, with clear
errors, for every part that maps work (the encoders' chunk jobs, the party's counting passes, PSI/PSU blinding).
dask.distributed is optional (the `dask` extra) and imported only when a scheduler is configured. Also the
workers' setup (one thread per numeric library) and the map of a party's spilled rows over them: each task a
path and a row range (`SpillSlice`) that the worker reads itself, started early where the map is known
(`EarlyMap`)."""
from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

from .chunks import Chunks, TaskSizes, chunk_slices, live_slices
from .dataset import Dataset
from .domain import Domain
from .errors import ConfigError, DataError, VertisynthError, VertisynthWarning

CONNECT_TIMEOUT = "20s"   # reaching the scheduler: past it a one-line ConfigError, not a hang
MIN_TASK_ROWS = 10_000   # a task's fixed cost (its sketch arrays, the merge) stays far below its rows' cost

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
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
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
            run_on_workers(client, _pin_threads, what="the workers' thread setup")
        except Exception:   # reported by the real work, with its own error
            pass


def _sees(piece: Any) -> bool:   # runs on each worker
    return bool(piece.visible())


def run_on_workers(client: Any, fn: Callable, *args: Any, wait: float | None = None, what: str) -> dict:
    """`client.run(fn, *args)` (fn on every worker, {worker: result}) within `wait` seconds (default
    `dask_wait_s()`); past that the broadcast is cancelled and a one-line DataError names `what` was waited for.
    `Client.run` names no time limit, but hands its keywords to its sync call, which takes `callback_timeout`."""
    wait = dask_wait_s() if wait is None else float(wait)
    try:
        return client.run(fn, *args, callback_timeout=wait)
    except TimeoutError:   # asyncio's, distributed's and the builtin are one class
        raise DataError(f"waited {wait:.0f} s on the Dask cluster for {what} and it did not come: cancelled "
                        f"(a lost or paused worker? {DASK_WAIT_ENV} sets the wait; docs/scale.md)") from None


def workers_see(client: Any, piece: Any, wait: float | None = None) -> bool:
    """Whether every worker sees the spilled file of `piece` (a `SpillSlice`): then the workers read their rows
    themselves, else the rows are sent. Bounded by `dask_wait_s()`: a worker that does not answer is an error
    (`run_on_workers`), not a hang; a worker's own error means "send the rows"."""
    try:
        got = run_on_workers(client, _sees, piece, wait=wait, what="the workers' check that they see the spilled rows")
    except DataError:
        raise
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
        got = run_on_workers(client, _malloc_trim_setting, what="the workers' MALLOC_TRIM_THRESHOLD_ setting")
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


# -- mapping a party's spilled rows over the workers -------------------------------------------------------
def _workers(client: Any) -> int:
    """The cluster's worker threads (tasks it runs at once)."""
    workers = client.scheduler_info().get("workers", {})
    return max(sum(int(w.get("nthreads", 1) or 1) for w in workers.values()), 1)


def window_for(client: Any) -> int:
    return max(4 * _workers(client), 8)


def task_rows(client: Any, n: int, chunk_rows: int) -> int:
    """Rows per task for n rows: about four tasks per worker thread, at most chunk_rows, at least MIN_TASK_ROWS."""
    return min(chunk_rows, max(-(-n // (4 * _workers(client))), MIN_TASK_ROWS))


def task_slices(client: Any, chunks: Chunks, chunk_rows: int, wait: float | None = None) -> list | None:
    """The stream's spilled rows as task slices, about four per worker (`task_rows`), if the workers see the
    spill; else None. The workers' answer is waited for at most `wait` seconds (default `dask_wait_s()`)."""
    parts = chunk_slices(chunks, chunk_rows)
    if not parts or not workers_see(client, parts[0], wait):
        return None
    return chunk_slices(chunks, task_rows(client, parts[-1].stop, chunk_rows))


def same_map(a: Any, b: Any) -> bool:
    """Whether two chunk maps are the same function of the same arguments (`functools.partial`s compare so)."""
    if isinstance(a, partial) and isinstance(b, partial):
        return a.func is b.func and a.args == b.args and a.keywords == b.keywords
    return a is b


DASK_WAIT_ENV = "VERTISYNTH_DASK_WAIT_S"
DASK_WAIT_S = 900.0   # the default: a task of chunk_rows rows takes seconds, a first pass's chunk as long to spill


def dask_wait_s() -> float:
    """The longest a party waits on the cluster without news (a task finished, a first pass's chunk spilled):
    `VERTISYNTH_DASK_WAIT_S` seconds, default 900. Past it the wait is an error naming what it waited for, not a
    hang (a lost worker, a paused one, a pass that stopped telling)."""
    text = os.environ.get(DASK_WAIT_ENV, "").strip()
    if not text:
        return DASK_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{DASK_WAIT_ENV}={text!r}: give the seconds a wait on the Dask cluster may last, e.g. 900")
    return value


def future_result(fut: Any, wait: float, what: str) -> Any:
    """A Dask future's result within `wait` seconds; else the future is cancelled and a one-line DataError names
    `what` was waited for. A task's own error comes back as one line too."""
    try:
        return fut.result(timeout=wait)
    except TimeoutError:   # distributed's and the builtin are one class
        fut.cancel()
        raise DataError(f"waited {wait:.0f} s on the Dask cluster for {what} and it did not come: cancelled "
                        f"(a lost or paused worker? {DASK_WAIT_ENV} sets the wait; docs/scale.md)") from None
    except VertisynthError:
        raise
    except Exception as exc:   # noqa: BLE001 - a worker's error, a killed worker, a cancelled task: one line
        raise DataError(f"{what} failed on the Dask cluster: {type(exc).__name__}: {exc}") from None


class EarlyMap:
    """A party's chunk map started on the cluster before its job exists (`early_mapper`): from its first pass
    on (`live_slices`: each slice as soon as the pass has spilled it) or from its spilled rows, its tasks run
    while the party reads, counts and fits; a thread here keeps at most a window of tasks queued and merges
    each result as it completes (the merge is order-free), so memory holds one merged result.
    `ChunkJob.run_cluster(..., early=)` (plugins/encoders/chunked.py) takes the merged result if the job's map
    is this one, else stops it and maps anew; so does a map whose rows the workers do not see.
    Every wait is bounded (`dask_wait_s`): `result` gives up when the thread has had no news (a task done, a
    slice spilled) for that long, cancels what is queued and names what the thread waited for; a task's error
    or the thread's own comes back from `result` as one line."""

    def __init__(self, client: Any, chunks: Chunks, domain: Domain, mapper: Callable, combine: Callable,
                 chunk_rows: int, wait: float | None = None):
        self.mapper, self.combine, self.domain = mapper, combine, domain
        self.wait = dask_wait_s() if wait is None else float(wait)
        self.running, self._stop, self._done = False, threading.Event(), threading.Event()
        self._acc: Any = None
        self.n = 0
        self._error: BaseException | None = None
        self._unseen = False
        self._client = client
        self._queued: dict[str, tuple[Any, Any]] = {}   # key -> (future, its slice): the tasks not merged yet
        self._lock = threading.Lock()
        self._news, self._waiting = time.monotonic(), "the workers' check of the spilled rows"
        # guided where the rows are known (a first pass on the workers, a spill): large tasks first, a last wave
        # of MIN_TASK_ROWS ones (docs/scale.md, "Guided task sizes")
        pieces = live_slices(chunks, TaskSizes(_workers(client), chunk_rows, MIN_TASK_ROWS))
        if pieces is None:
            parts = task_slices(client, chunks, chunk_rows, self.wait)
            if parts is None:
                self._done.set()
                return
            pieces = iter(parts)
        self.running = True
        self._thread = threading.Thread(target=self._run, args=(client, pieces), daemon=True,
                                        name="vertisynth-early-map")
        self._thread.start()

    def _told(self, waiting: str) -> None:
        self._news, self._waiting = time.monotonic(), waiting

    def _pieces(self, client: Any, pieces: Iterator) -> Iterator:
        for i, piece in enumerate(pieces):
            if self._stop.is_set():
                return
            if i == 0 and not workers_see(client, piece, self.wait):
                self._unseen = True
                return
            self.n += piece.stop - piece.start
            yield piece

    def _submit(self, client: Any, piece: Any) -> Any:
        fut = client.submit(map_slice, piece, self.domain, self.mapper, pure=False)
        with self._lock:
            self._queued[fut.key] = (fut, piece)
        return fut

    def _next(self, todo: Iterator) -> Any:
        self._waiting = "the next rows the party's first pass spills"
        piece = next(todo, None)
        self._told(f"the results of {len(self._queued)} map task(s) queued on the cluster")
        return piece

    def _run(self, client: Any, pieces: Iterator) -> None:
        from distributed import as_completed
        try:
            todo = self._pieces(client, pieces)
            first = [self._submit(client, piece) for piece in itertools.islice(todo, window_for(client))]
            self._told(f"the results of {len(first)} map task(s) queued on the cluster")
            queued = as_completed(first)
            for fut in queued:
                with self._lock:
                    piece = self._queued.pop(fut.key, (None, None))[1]
                if self._stop.is_set():
                    fut.cancel()
                    continue
                self._told(f"the results of {len(self._queued)} map task(s) queued on the cluster")
                if fut.status != "finished":   # an error in the task, a worker lost for good, a cancelled task
                    rows = f"rows {piece.start}..{piece.stop - 1}" if piece is not None else "a slice"
                    future_result(fut, self.wait, f"the early map's task on {rows}")
                part = fut.result()
                fut.release()
                self._acc = part if self._acc is None else self.combine(self._acc, part)
                piece = self._next(todo)
                if piece is not None and not self._stop.is_set():
                    queued.add(self._submit(client, piece))
        except BaseException as exc:   # noqa: BLE001 - raised in the party's thread by `result`
            self._error = exc
        finally:
            if self._error is not None or self._stop.is_set():
                self._cancel()
            self._done.set()

    def _cancel(self) -> None:
        """Cancel every task not merged yet (their workers drop them; their results are never fetched)."""
        with self._lock:
            futures = [fut for fut, _ in self._queued.values()]
            self._queued.clear()
        if futures:
            with contextlib.suppress(Exception):   # a client already closed: its tasks went with it
                self._client.cancel(futures)

    def result(self) -> tuple[Any, int] | None:
        """(the merged map over every row, the rows) once every task has finished; None if the workers did not
        see the rows or there were none (the caller maps anew). A DataError, with the queued tasks cancelled, if
        the map has had no news for `wait` seconds, or if a task or the thread failed."""
        while not self._done.wait(min(1.0, self.wait)):
            idle = time.monotonic() - self._news
            if idle > self.wait:
                waited, rows = self._waiting, self.n
                self.stop(wait=0.0)
                raise DataError(f"the early encoding map waited {idle:.0f} s for {waited} with no news ({rows} rows "
                                f"sent so far): cancelled (a lost or paused Dask worker, or a first pass that "
                                f"stopped? {DASK_WAIT_ENV} sets the wait; docs/scale.md)")
        self.running = False
        if isinstance(self._error, VertisynthError):
            raise self._error
        if self._error is not None:
            raise DataError(f"the early encoding map failed: {type(self._error).__name__}: {self._error}") \
                from self._error
        return None if self._unseen or self._acc is None else (self._acc, self.n)

    def stop(self, wait: float = 60.0) -> None:
        """Stop queueing tasks and cancel those queued (the party step failed, or its job maps differently).
        A thread still waiting for a first pass that never comes is left (a daemon; it ends when the pass's
        wait does) after `wait` seconds."""
        if self.running:
            self._stop.set()
            self._cancel()
            self._thread.join(wait)
            self.running = False


_TASKS = {"cpu_s": 0.0, "rows": 0}   # this process's map_slice tasks: their own thread's CPU seconds and rows


def map_slice(piece: Any, domain: Domain, mapper: Callable[[Dataset, np.ndarray], Any]) -> Any:
    """A Dask task: read a slice of the spilled rows and map it."""
    start = time.thread_time()
    ids, rows = piece.read()
    if rows.domain != domain:
        raise DataError(f"chunk domain {rows.domain} differs from the party's {domain}")
    out = mapper(rows, ids)
    _TASKS["cpu_s"] += time.thread_time() - start
    _TASKS["rows"] += rows.n
    return out


def task_cpu() -> dict[str, float]:
    """What this worker's `map_slice` tasks cost in their own threads so far (apart from Dask's own work):
    `client.run(task_cpu)` (benchmarks/stream_party.py)."""
    return dict(_TASKS)
