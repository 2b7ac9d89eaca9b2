"""Encoding a party's table that does not fit in memory: chunk by chunk, locally or on a Dask cluster.

Both encoders are map-reduce jobs over records. The map runs on one chunk of rows (with their global
record ids, so hash values and per-record randomness do not depend on the chunking); the reduce is
element-wise max for DPFM sketches and in-order concatenation for GRR columns; a final step (phantoms
and floor, or the message) runs once. Results therefore equal one-shot encoding bit for bit.

The ledger is charged when the job is created, before any chunk is read. With a Dask scheduler
address the map runs on that cluster (the party's own machines: the hash key travels to its workers,
never to the server); the reduce streams the results back in chunk order.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from vertisynth.core.capabilities import ChunksOnCluster
from vertisynth.core.chunks import Chunks
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.cluster import (EarlyMap, dask_client, dask_wait_s, future_result, map_slice, same_map,
                                     task_slices, window_for)


class ChunksByConfig:
    """core/capabilities.py ChunksOnCluster as an encoder's config says it: `chunk_rows` rows a chunk, mapped on
    the Dask cluster at `dask_scheduler` (None: in this process). Mixed into the DPFM and GRR encoders."""

    @property
    def chunk_rows(self) -> int:
        return self.config.chunk_rows

    @property
    def dask_scheduler(self) -> str | None:
        return self.config.dask_scheduler


@attrs.frozen
class ChunkJob:
    """mapper(rows, ids) -> partial result; combine(a, b) -> merged; finish(merged, n) -> message."""

    domain: Domain
    mapper: Callable[[Dataset, np.ndarray], Any]
    combine: Callable[[Any, Any], Any]
    finish: Callable[[Any, int], Any]

    def run_local(self, chunks: Iterable[tuple[np.ndarray, Dataset]]) -> Any:
        acc, n = None, 0
        for ids, rows in chunks:
            if rows.domain != self.domain:
                raise DataError(f"chunk domain {rows.domain} differs from the party's {self.domain}")
            part = self.mapper(rows, ids)
            acc = part if acc is None else self.combine(acc, part)
            n += rows.n
        if acc is None:
            raise DataError("no rows to encode (empty input)")
        return self.finish(acc, n)

    def run_cluster(self, chunks: Chunks, scheduler: Any, chunk_rows: int, window: int | None = None,
                    early: EarlyMap | None = None) -> Any:
        """`run_local` over the stream with the map on a Dask cluster. Where the stream's rows are spilled to a
        file the workers see (`slices`: same host or a shared file system), each task gets a path and a row
        range and reads its rows itself, so this process ships no rows; the tasks are cut to about four per
        worker (at most `chunk_rows` rows, at least MIN_TASK_ROWS) so that all workers stay busy to the end.
        Otherwise the chunks are read here and sent (`run_dask`). Same result bit for bit: the map takes global
        ids, the merge is in row order."""
        if early is not None and early.running and same_map(early.mapper, self.mapper):
            done = early.result()
            if done is not None:
                return self.finish(*done)
        if early is not None:
            early.stop()
        client = dask_client(scheduler)
        try:
            parts = task_slices(client, chunks, chunk_rows)
            if parts is None:
                return self.run_dask(chunks(), client, window)
            n = parts[-1].stop
            window = window or window_for(client)   # tasks queued on the cluster; their results wait there
            acc = self._merge_in_order((client.submit(map_slice, piece, self.domain, self.mapper, pure=False)
                                        for piece in parts), window)
            return self.finish(acc, n)
        finally:
            if client is not scheduler:
                client.close()

    def _merge_in_order(self, futures: Iterable[Any], window: int) -> Any:
        """Partial results of `futures` (submitted lazily, at most `window` in flight) combined in their order;
        None when there were none. Each result is waited for at most `dask_wait_s()` seconds; past that, or on a
        task's error, the tasks in flight are cancelled and a one-line DataError says which chunk was awaited."""
        acc, pending, done, wait = None, [], 0, dask_wait_s()

        def merge_first() -> None:
            nonlocal acc, done
            fut = pending.pop(0)
            part = future_result(fut, wait, f"the map of chunk {done} (of the tasks queued so far)")
            acc = part if acc is None else self.combine(acc, part)
            fut.release()
            done += 1

        try:
            for fut in futures:
                pending.append(fut)
                if len(pending) >= window:
                    merge_first()
            while pending:
                merge_first()
        finally:
            for fut in pending:   # an error or a timeout: nothing queued keeps a worker busy
                fut.cancel()
        return acc

    def run_dask(self, chunks: Iterable[tuple[np.ndarray, Dataset]], scheduler: Any, window: int | None = None) -> Any:
        """`run_local` with the map on a Dask cluster (an address such as "tcp://10.0.0.5:8786", or a
        `distributed.Client`): chunks are read here and sent to the workers, at most `window` in flight
        (default twice the workers), so memory stays bounded; partial results merge in chunk order."""
        client = dask_client(scheduler)
        try:
            window = window or max(2 * len(client.scheduler_info().get("workers", {})), 2)
            n = 0

            def submitted() -> Iterator[Any]:
                nonlocal n
                for ids, rows in chunks:
                    if rows.domain != self.domain:
                        raise DataError(f"chunk domain {rows.domain} differs from the party's {self.domain}")
                    yield client.submit(self.mapper, rows, ids, pure=False)
                    n += rows.n

            acc = self._merge_in_order(submitted(), window)
            if acc is None:
                raise DataError("no rows to encode (empty input)")
            return self.finish(acc, n)
        finally:
            if client is not scheduler:
                client.close()


# -- CSV chunks -------------------------------------------------------------------------------------------
def csv_row_count(path: Path) -> int:
    """Data rows of a CSV with a header line (counts newlines in 16 MiB blocks; no parsing)."""
    lines, last = 0, b"\n"
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            lines += block.count(b"\n")
            last = block[-1:]
    return max(lines + (last != b"\n") - 1, 0)


def csv_spans(path: str | Path, chunk_rows: int) -> list[tuple[int, int, int]]:
    """(first row, byte offset, rows) of each span of chunk_rows data rows, from one pass over the file's
    newlines (no parsing): each span is then read by seeking to its offset, not by re-scanning the file
    from the top (which made reading all spans quadratic in the file's length). Line breaks inside quoted
    fields are not supported here (`read_csv_span` notices the short span)."""
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be positive, got {chunk_rows}")
    size = Path(path).stat().st_size
    offsets: list[int] = []  # byte offset of data rows 0, chunk_rows, 2·chunk_rows, ...
    newlines, base = 0, 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            # the newline numbered k (0-based, file-wide) ends line k, so data row k starts after it
            k = newlines + np.arange(nl.size)
            offsets.extend((base + nl[k % chunk_rows == 0] + 1).tolist())
            newlines += nl.size
            base += len(block)
            last = block[-1:]
    if size == 0:
        return []
    rows = newlines + (last != b"\n") - 1
    offsets = [o for o in offsets if o < size][: -(-rows // chunk_rows) if rows > 0 else 0]
    return [(i * chunk_rows, off, min(chunk_rows, rows - i * chunk_rows)) for i, off in enumerate(offsets)]


def read_csv_span(path: str, domain: Domain, start: int, nrows: int, offset: int | None = None) -> tuple[np.ndarray, Dataset]:
    """Rows start..start+nrows-1 (0-based, after the header) of the domain's columns, with global ids.
    `offset`: the byte offset of row `start` (from `csv_spans`); without it the file is scanned for it."""
    import pandas as pd
    header = [str(c) for c in pd.read_csv(path, nrows=0).columns]
    if offset is None:
        spans = [sp for sp in csv_spans(path, start if start > 0 else 1 << 62) if sp[0] == start]
        if not spans:
            raise DataError(f"CSV {str(path)!r} has no row {start}")
        offset = spans[0][1]
    with open(path, "rb") as fh:
        fh.seek(offset)
        frame = pd.read_csv(fh, header=None, names=header, nrows=nrows, usecols=list(domain.attributes))
    if len(frame) != nrows:
        raise DataError(f"CSV {str(path)!r}: expected {nrows} rows from row {start}, read {len(frame)} "
                        "(line breaks inside quoted fields are not supported when reading in spans)")
    frame = frame[list(domain.attributes)]
    rows = Dataset.from_frame(frame, domain)
    return np.arange(start, start + rows.n, dtype=np.int64), rows


def csv_chunks(path: str | Path, domain: Domain, chunk_rows: int) -> Iterator[tuple[np.ndarray, Dataset]]:
    """Stream a CSV as (global ids, rows) chunks of at most chunk_rows rows (one pass, bounded memory)."""
    import pandas as pd
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be positive, got {chunk_rows}")
    path = Path(path)
    if not path.is_file():
        raise DataError(f"CSV file {str(path)!r} does not exist")
    start = 0
    header = pd.read_csv(path, nrows=0).columns.map(str)
    missing = [a for a in domain.attributes if a not in header]
    if missing:
        raise DataError(f"CSV {str(path)!r} lacks the party's columns {missing}; it has {list(header)}")
    for frame in pd.read_csv(path, usecols=list(domain.attributes), chunksize=chunk_rows):
        frame.columns = [str(c) for c in frame.columns]
        rows = Dataset.from_frame(frame, domain)
        yield np.arange(start, start + rows.n, dtype=np.int64), rows
        start += rows.n


def _map_span(path: str, domain: Domain, start: int, nrows: int, mapper: Callable,
              offset: int | None = None) -> tuple[int, Any]:
    ids, rows = read_csv_span(path, domain, start, nrows, offset)
    return rows.n, mapper(rows, ids)


def encode_csv(encoder: Any, party: str, path: str | Path, domain: Domain, ledger: Any, rng: np.random.Generator,
               chunk_rows: int | None = None, scheduler: Any = None) -> Any:
    """Encode the party's columns of a CSV chunk by chunk; on Dask when `scheduler` is an address
    (e.g. "tcp://10.0.0.5:8786") or a `distributed.Client`. Both default to the encoder's config
    (`chunk_rows`, `dask_scheduler`). Returns the encoder's message."""
    declared = isinstance(encoder, ChunksOnCluster)   # its config's chunk_rows and dask_scheduler
    chunk_rows = chunk_rows or (encoder.chunk_rows if declared else 100_000)
    scheduler = scheduler if scheduler is not None else (encoder.dask_scheduler if declared else None)
    job = encoder.chunk_job(party, domain, ledger, rng)
    if scheduler is None:
        return job.run_local(csv_chunks(path, domain, chunk_rows))
    path = Path(path)
    if not path.is_file():
        raise DataError(f"CSV file {str(path)!r} does not exist")
    spans = csv_spans(path, chunk_rows)
    if not spans:
        raise DataError(f"CSV {str(path)!r} has no data rows")
    # as every other cluster path: an unreachable scheduler or a missing dask.distributed is one line, and the
    # workers' numeric libraries are pinned to one thread per task
    client = dask_client(scheduler)
    futures: list = []
    try:
        k, wait = len(spans), dask_wait_s()
        futures = client.map(_map_span, [str(path)] * k, [domain] * k, [sp[0] for sp in spans], [sp[2] for sp in spans],
                             [job.mapper] * k, [sp[1] for sp in spans], pure=False)
        acc, n = None, 0
        for i, fut in enumerate(futures):  # in chunk order: GRR's concatenation needs it, DPFM's max does not care
            # bounded: a lost or paused worker is a one-line DataError naming the span, not a hang
            rows, part = future_result(fut, wait, f"the map of CSV span {i} of {k} (rows from {spans[i][0]}) "
                                                  f"of {str(path)!r}")
            acc = part if acc is None else job.combine(acc, part)
            n += rows
            fut.release()
        return job.finish(acc, n)
    finally:
        for fut in futures:   # an error or a timeout: nothing queued keeps a worker busy (no-op on finished ones)
            if fut.status == "pending":
                fut.cancel()
        if client is not scheduler:
            client.close()
