"""A table as a re-startable stream of (global record ids, coded rows) chunks, and a counts-only table
over such a stream: what a party's stages and a streamed run's evaluation read instead of the whole table.

Marginal counts are additive over chunks, so `ChunkedCounts` answers `counts` by a pass over the chunks
(int64 sums: equal to `Dataset.counts`, bit for bit), cached; several marginals share one pass; with a
`distributed.Client` the per-chunk counting runs on the cluster's workers.

A stream whose rows sit in a spilled codes file also describes itself as `SpillSlice`s (`slices`): a few
numbers and a path, which a Dask worker that sees the file reads itself, so the party's process ships no rows.
"""
from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs
import numpy as np

from .dataset import Dataset
from .domain import Domain
from .errors import DataError
from .factor import Factor


Chunks = Callable[[], Iterator[tuple[np.ndarray, Dataset]]]   # a re-startable stream of (ids, rows)

# A stream whose first pass runs in a forked party process hands its spill to the parent, which would otherwise
# read the file again for its later passes (a streamed run's evaluation): each such stream is registered here
# under a token (the same in both processes), the child lists what it hands over, the parent adopts it.
_ADOPTABLE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_HANDED: dict[int, Any] = {}
_TOKENS = itertools.count()


def adoptable(stream: Any) -> int:
    """Register `stream` (with an `adopt(state)` method); its token."""
    token = next(_TOKENS)
    _ADOPTABLE[token] = stream
    return token


def hand_over(token: int, state: Any) -> None:
    """In a forked process: the state of the stream `token` that its parent adopts (`handed`, `adopt_all`)."""
    _HANDED[token] = state


def handed() -> dict[int, Any]:
    """What this process hands over (and forgets)."""
    out = dict(_HANDED)
    _HANDED.clear()
    return out


def adopt_all(states: dict[int, Any]) -> None:
    """In the parent: each registered stream adopts what its copy in a child handed over."""
    for token, state in states.items():
        stream = _ADOPTABLE.get(token)
        if stream is not None:
            stream.adopt(state)


def view_chunks(view: Dataset, chunk_rows: int) -> Chunks:
    """An in-memory table as a stream of slices (views, no copies): the in-memory run is this case."""
    def gen() -> Iterator[tuple[np.ndarray, Dataset]]:
        for start in range(0, max(view.n, 1), chunk_rows):
            stop = min(start + chunk_rows, view.n)
            yield np.arange(start, stop, dtype=np.int64), Dataset(view.codes[start:stop], view.domain)
    return gen


def _count_chunk(rows: Dataset, plan: list) -> tuple[int, list[np.ndarray]]:
    """One chunk's row count and int64 counts of each marginal (axes, shape) in `plan` (a Dask task)."""
    return _count_codes(rows.codes, plan)


def _count_codes(codes: np.ndarray, plan: list) -> tuple[int, list[np.ndarray]]:
    """`_count_chunk` on a chunk's code columns (any integer type; the plan's axes index these columns)."""
    n = len(codes)
    out = []
    for axes, shape in plan:
        size = int(np.prod(shape, dtype=np.int64))
        if not axes or not n:
            out.append(np.zeros(size, dtype=np.int64))
            continue
        cols = codes[:, axes]
        out.append(np.bincount(np.ravel_multi_index(tuple(cols.T), shape), minlength=size).astype(np.int64))
    return n, out


@attrs.frozen
class SpillSlice:
    """Rows [start, stop) of a spilled codes file (rows x columns of `dtype`, C order) and of its int64 ids file
    (None: the ids are the row numbers): what a Dask worker reads for itself instead of receiving the rows.
    `size`: the bytes the file holds at least once the slice is written (a file being written grows), so a
    worker can check that it sees the file (same host, or a shared file system)."""

    codes: str
    ids: str | None
    dtype: str
    domain: Domain
    start: int
    stop: int
    size: int

    def read(self) -> tuple[np.ndarray, Dataset]:
        """(global ids, int64 coded rows): one slice from the file (a seek and a read, no memory map kept)."""
        width, dt = len(self.domain), np.dtype(self.dtype)
        rows = self.stop - self.start
        codes = np.fromfile(self.codes, dtype=dt, count=rows * width, offset=self.start * width * dt.itemsize)
        if codes.size != rows * width:
            raise DataError(f"spilled codes {self.codes!r}: rows {self.start}..{self.stop} are not there "
                            "(the file changed or is another host's)")
        ids = (np.fromfile(self.ids, dtype=np.int64, count=rows, offset=self.start * 8) if self.ids is not None
               else np.arange(self.start, self.stop, dtype=np.int64))
        return ids, Dataset(codes.reshape(rows, width).astype(np.int64), self.domain)

    def visible(self) -> bool:
        """Whether this process sees the spilled file (a worker on the same host or a shared file system)."""
        try:
            return os.path.getsize(self.codes) >= self.size
        except OSError:
            return False


@attrs.frozen
class MappedSlice:
    """A slice read with a per-row map applied (binning): `fn` must be picklable (a module-level function or
    a `functools.partial` of one)."""

    inner: Any
    fn: Callable[[Dataset], Dataset]

    def read(self) -> tuple[np.ndarray, Dataset]:
        ids, rows = self.inner.read()
        return ids, self.fn(rows)

    def visible(self) -> bool:
        return self.inner.visible()

    @property
    def start(self) -> int:
        return self.inner.start

    @property
    def stop(self) -> int:
        return self.inner.stop


@attrs.frozen
class TaskSizes:
    """How a map over `workers` worker threads cuts a party's rows into tasks. Where the rows the map will get
    are known (`remaining`: those not handed out yet), guided: each task takes 1/(2 x workers) of them, at most
    `most` and at least `least` rows, so the first tasks are large (a task's fixed cost, its sketch arrays and
    its result's transfer and merge, is paid a few times, not once per `least` rows) and the last wave is of
    small tasks that end nearly together. Where they are not known, `most // workers` rows (at least `least`)."""

    workers: int
    most: int
    least: int

    def rows(self, remaining: int | None) -> int:
        if remaining is None:
            return max(self.least, self.most // max(self.workers, 1))
        return max(self.least, min(self.most, -(-int(remaining) // (2 * max(self.workers, 1)))))

    def cuts(self, first: int, stop: int, remaining: int | None = None) -> list[tuple[int, int]]:
        """(start, stop) of the tasks over rows first..stop-1, of which `remaining` (these included) were not
        handed out before; a guided cut leaves no piece below `least // 2` rows (a small rest is shared with the
        piece before it, half each)."""
        out, s = [], first
        while s < stop:
            e = min(s + self.rows(remaining), stop)
            if remaining is not None:
                if 0 < stop - e < self.least // 2:
                    e = s + (stop - s + 1) // 2
                remaining -= e - s
            out.append((s, e))
            s = e
        return out


def spill_slices(codes: str, ids: str | None, dtype: Any, domain: Domain, n: int, rows: int | TaskSizes,
                 first: int = 0, remaining: int | None = None) -> list[SpillSlice]:
    """The spill's rows first..n-1 cut into slices of at most `rows` rows, or as `rows` (a `TaskSizes`) cuts them
    with `remaining` rows (these included) still to hand out."""
    size = n * len(domain) * np.dtype(dtype).itemsize
    sizes = rows if isinstance(rows, TaskSizes) else TaskSizes(1, max(int(rows), 1), 1)
    return [SpillSlice(str(codes), None if ids is None else str(ids), np.dtype(dtype).str, domain, s, e, size)
            for s, e in sizes.cuts(first, n, remaining if isinstance(rows, TaskSizes) else None)]


def live_slices(chunks: Chunks, rows: int | TaskSizes) -> Iterator | None:
    """The stream's slices of at most `rows` rows as its next first pass spills them (an iterator that waits
    for each; it ends with the pass, or raises `DataError` if the pass is abandoned), or its slices now if it
    is spilled already; None if it cannot describe itself so."""
    get = getattr(chunks, "live_slices", None)
    return get(rows) if get is not None else None


def chunk_slices(chunks: Chunks, rows: int) -> list | None:
    """The stream as picklable slices of at most `rows` rows, if it can describe itself so (its rows are
    spilled and every map on it is picklable); else None (the rows must be sent)."""
    get = getattr(chunks, "slices", None)
    return get(rows) if get is not None else None


class mapped:
    """The stream with `fn` applied to every chunk's rows (e.g. binning: a per-row map); its slices carry `fn`."""

    def __init__(self, chunks: Chunks, fn: Callable[[Dataset], Dataset]):
        self.chunks, self.fn = chunks, fn

    def __call__(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        return ((ids, self.fn(rows)) for ids, rows in self.chunks())

    def slices(self, rows: int) -> list | None:
        inner = chunk_slices(self.chunks, rows)
        return None if inner is None else [MappedSlice(s, self.fn) for s in inner]

    def live_slices(self, rows: int | TaskSizes) -> Iterator | None:
        inner = live_slices(self.chunks, rows)
        return None if inner is None else (MappedSlice(s, self.fn) for s in inner)


class counted:
    """The stream, counting the rows of each full pass (`rows`: one count per pass, for a party's rows tag); its
    slices are the stream's, so a Dask worker still reads the spilled rows itself (docs/scale.md, Dask)."""

    def __init__(self, chunks: Chunks):
        self.chunks, self.rows = chunks, []

    def __call__(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        n = 0
        for ids, rows in self.chunks():
            n += rows.n
            yield ids, rows
        self.rows.append(n)

    def slices(self, rows: int) -> list | None:
        return chunk_slices(self.chunks, rows)

    def live_slices(self, rows: int | TaskSizes) -> Iterator | None:
        return live_slices(self.chunks, rows)


class ChunkedCounts:
    """Stands in for a Dataset where only `n` and `counts` are read: each marginal from one pass over the
    chunks (int64 sums, so equal to `Dataset.counts`), cached."""

    def __init__(self, chunks: Chunks, domain: Domain, client: Any = None, window: int | None = None,
                 first_pass: Any = None):
        """`client`: a `distributed.Client`; each pass then maps the counting over its workers (at most
        `window` chunks in flight, default twice the workers), this process only reading the chunks.
        `first_pass`: a `distributed.Client` on whose workers a stream that can (`counted_spans`: a party's
        CSV) reads, codes, spills and counts its rows in its first pass, this process reading none."""
        self._chunks, self.domain = chunks, domain
        self._cache: dict[tuple[str, ...], np.ndarray] = {}
        self._n: int | None = None
        self.passes = 0
        self._client, self._window, self._first_pass = client, window, first_pass

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.domain.attributes

    @property
    def n(self) -> int:
        if self._n is None:
            self.prefetch([()])
        return int(self._n)

    def prefetch(self, sets: Iterable[Sequence[str]]) -> None:
        """Count every marginal in `sets` not yet cached, all in one pass over the chunks."""
        todo = list(dict.fromkeys(tuple(self.domain.check(s)) for s in sets if tuple(s) not in self._cache))
        todo = [s for s in todo if s not in self._cache]
        if not todo and self._n is not None:
            return
        plan = [(list(self.domain.axes(s)), self.domain.project(s).shape) for s in todo]
        acc = [np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=np.int64) for _, shape in plan]
        n = 0
        self.passes += 1
        for part in self._counted(plan):   # int64 sums: any order gives the same counts
            n += part[0]
            for vec, got in zip(acc, part[1]):
                vec += got
        if self._n is not None and n != self._n:
            raise DataError(f"the table changed while it was read: {self._n} rows, then {n}")
        self._n = n
        for s, vec in zip(todo, acc):
            self._cache[s] = vec if s else np.array([n], dtype=np.int64)

    def _counted(self, plan: list) -> Iterator[tuple[int, list[np.ndarray]]]:
        """Each chunk's (rows, counts per marginal of `plan`), here or on the Dask workers."""
        spans = getattr(self._chunks, "counted_spans", None) if self._first_pass is not None else None
        parts = spans(self._first_pass, plan) if spans is not None else None
        if parts is not None:   # the stream's first pass on the workers: (rows, counts) from them
            yield from parts
            return
        need = sorted({a for axes, _ in plan for a in axes})
        narrow = getattr(self._chunks, "columns", None) if self._client is None else None
        parts = narrow(need, self.domain) if narrow is not None else None
        if parts is not None:   # a spilled stream: only the columns the plan counts, in their stored type
            at = {a: i for i, a in enumerate(need)}
            local = [([at[a] for a in axes], shape) for axes, shape in plan]
            for cols in parts:
                yield _count_codes(cols, local)
            return
        chunks = (rows for _, rows in self._chunks())
        if self._client is None:
            for rows in chunks:
                yield _count_chunk(self._checked(rows), plan)
            return
        window = self._window or max(2 * len(self._client.scheduler_info().get("workers", {})), 2)
        pending: list[Any] = []
        for rows in chunks:
            pending.append(self._client.submit(_count_chunk, self._checked(rows), plan, pure=False))
            if len(pending) >= window:
                fut = pending.pop(0)
                yield fut.result()
                fut.release()
        for fut in pending:
            yield fut.result()
            fut.release()

    def _checked(self, rows: Dataset) -> Dataset:
        if rows.domain != self.domain:
            raise DataError(f"chunk domain {rows.domain} differs from the party's {self.domain}")
        return rows

    def counts(self, attrs_: Iterable[str], weights: np.ndarray | None = None) -> Factor:
        if weights is not None:
            raise DataError("weighted counts need the rows themselves; a chunked table answers only plain counts")
        attrs_ = tuple(self.domain.check(attrs_))
        if attrs_ not in self._cache:
            self.prefetch([attrs_])
        sub = self.domain.project(attrs_)
        if not attrs_:
            return Factor(sub, np.asarray(float(self.n)))
        return Factor(sub, self._cache[attrs_].astype(float).reshape(sub.shape))

    def prefetch_pairs(self) -> None:
        """The single attributes and pairs (R-scores, value distributions): the local fit's first reads."""
        a = self.domain.attributes
        self.prefetch([()] + [(x,) for x in a] + list(itertools.combinations(a, 2)))
