"""A party's table as a stream of (global ids, rows) chunks, and the counts the party's stages read off it.

The party phase reads its table only through marginal counts (the local PrivMRF fit, the value
distributions: counts are additive over chunks) and through the encoder (a map over chunks, merged by
max or concatenation). So the table itself is never held whole: `ChunkedCounts` answers `counts` by a
pass over the chunks (cached; the pairs and single attributes the local fit asks first come in one pass),
and the encoder maps its `chunk_job` over the same chunks. Integer counts summed over chunks equal the
one-shot `Dataset.counts` exactly, so every stage equals the in-memory run bit for bit.
"""
from __future__ import annotations

import itertools
import multiprocessing
import pickle
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

import numpy as np

from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import DataError, VertisynthError
from vertisynth.core.factor import Factor
from vertisynth.core.messages import Message
from vertisynth.core.privacy import Charge, PrivacyLedger

Chunks = Callable[[], Iterator[tuple[np.ndarray, Dataset]]]   # a re-startable stream of (ids, rows)


def view_chunks(view: Dataset, chunk_rows: int) -> Chunks:
    """An in-memory table as a stream of slices (views, no copies): the in-memory run is this case."""
    def gen() -> Iterator[tuple[np.ndarray, Dataset]]:
        for start in range(0, max(view.n, 1), chunk_rows):
            stop = min(start + chunk_rows, view.n)
            yield np.arange(start, stop, dtype=np.int64), Dataset(view.codes[start:stop], view.domain)
    return gen


def _count_chunk(rows: Dataset, plan: list) -> tuple[int, list[np.ndarray]]:
    """One chunk's row count and int64 counts of each marginal (axes, shape) in `plan` (a Dask task)."""
    out = []
    for axes, shape in plan:
        size = int(np.prod(shape, dtype=np.int64))
        if not axes or not rows.n:
            out.append(np.zeros(size, dtype=np.int64))
            continue
        cols = rows.codes[:, axes]
        out.append(np.bincount(np.ravel_multi_index(tuple(cols.T), shape), minlength=size).astype(np.int64))
    return rows.n, out


def mapped(chunks: Chunks, fn: Callable[[Dataset], Dataset]) -> Chunks:
    """The stream with `fn` applied to every chunk's rows (e.g. binning: a per-row map)."""
    return lambda: ((ids, fn(rows)) for ids, rows in chunks())


class ChunkedCounts:
    """Stands in for a Dataset where only `n` and `counts` are read: each marginal from one pass over the
    chunks (int64 sums, so equal to `Dataset.counts`), cached."""

    def __init__(self, chunks: Chunks, domain: Domain, client: Any = None, window: int | None = None):
        """`client`: a `distributed.Client`; each pass then maps the counting over its workers (at most
        `window` chunks in flight, default twice the workers), this process only reading the chunks."""
        self._chunks, self.domain = chunks, domain
        self._cache: dict[tuple[str, ...], np.ndarray] = {}
        self._n: int | None = None
        self.passes = 0
        self._client, self._window = client, window

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


def party_phase(synth: Any, views: Mapping[str, Dataset], ledger: PrivacyLedger,
                rngs: Mapping[str, np.random.Generator], processes: int = 1) -> list[Message]:
    """Every party's `party_step`, in the order of `views`, and their messages concatenated in that order.

    With processes > 1 (and fork available) the parties run at once, each in a forked process: the parties
    are independent organisations, so nothing one computes reaches another; each child gets its own
    stream, returns its messages and the charges it spent, and the parent records those charges in party
    order. The messages equal a sequential run's bit for bit (each party reads only its own view and stream)."""
    names = list(views)
    if processes <= 1 or len(names) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [m for p in names for m in synth.party_step(p, views[p], ledger, rngs[p])]
    results: dict[str, tuple[list[Message], list[Any]]] = {}
    for wave in range(0, len(names), processes):
        results.update(_forked(synth, names[wave:wave + processes], views, ledger, rngs))
    out: list[Message] = []
    for p in names:
        messages, spent = results[p]
        for charge in spent:   # the parent's ledger refuses anything its plan does not hold
            ledger.spend(charge)
        out += messages
    return out


def _forked(synth: Any, names: Sequence[str], views: Mapping[str, Dataset], ledger: PrivacyLedger,
            rngs: Mapping[str, np.random.Generator]) -> dict[str, tuple[list[Message], list[Any]]]:
    """One forked child per party (it inherits the views: nothing is copied in), the results back by pipe."""
    ctx = multiprocessing.get_context("fork")
    running = []
    for p in names:
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, synth, p, views[p], ledger, rngs[p]), daemon=True,
                           name=f"vertisynth-party-{p}")
        proc.start()
        send.close()
        running.append((p, proc, recv))
    out: dict[str, tuple[list[Message], list[Any]]] = {}
    try:
        for p, proc, recv in running:
            blob = None
            while blob is None:   # bounded by the child's life: a dead child without a result is an error
                if recv.poll(0.2):
                    try:
                        blob = recv.recv_bytes()
                    except EOFError:
                        blob = b""
                elif not proc.is_alive() and not recv.poll(0):
                    blob = b""
            proc.join(timeout=30)
            if not blob:
                raise DataError(f"party {p!r}: its process ended (exit code {proc.exitcode}) without a result")
            status, payload = pickle.loads(blob)
            if status != "ok":
                kind, text = payload
                raise (kind if isinstance(kind, type) and issubclass(kind, VertisynthError) else DataError)(text)
            out[p] = payload
    finally:
        for _, proc, recv in running:
            recv.close()
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    return out


@attrs.define
class _RecordingLedger(PrivacyLedger):
    """The parent's ledger in a party's process, keeping the charges as the mechanisms passed them (the parent
    spends those again: recorded ones would get group privacy applied twice)."""

    passed: list[Charge] = attrs.field(factory=list, kw_only=True)

    def spend(self, charge: Charge) -> None:
        super().spend(charge)
        self.passed.append(charge)


def _child(send: Any, synth: Any, party: str, view: Dataset, ledger: PrivacyLedger,
           rng: np.random.Generator) -> None:
    mine = _RecordingLedger(ledger.budget, list(ledger.planned), list(ledger.spent), ledger.group_size,
                            noise=ledger.noise)
    try:
        messages = synth.party_step(party, view, mine, rng)
        blob = pickle.dumps(("ok", (messages, mine.passed)), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:   # noqa: BLE001 - reported to the parent, which raises it
        text = f"party {party!r}: {exc}" if isinstance(exc, VertisynthError) else \
            f"party {party!r} failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
        blob = pickle.dumps(("error", (type(exc) if isinstance(exc, VertisynthError) else None, text)))
    send.send_bytes(blob)
    send.close()
