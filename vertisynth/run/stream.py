"""Reading a party's table in chunks: CSV through pyarrow's streaming reader, Parquet by row groups.

Every value is read as text and coded by the public schema's codec chunk by chunk (the same
`TableCodec.encode` as the in-memory run), so a chunked read equals a whole-table read. Memory holds
one chunk of `chunk_rows` rows (plus the reader's block). A bad value names its line in the file.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import csv
import itertools
import os
import queue
import shutil
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from vertisynth.core.chunks import spill_slices
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import CSV_NULLS, TableCodec, TableSchema
from vertisynth.core.errors import DataError, VertisynthError
from vertisynth.core.privacy import PrivacyLedger

from .spill import new_spill_folder, private_file

if TYPE_CHECKING:   # pandas is imported where a frame is built or read (docs/speed.md, fifth pass)
    import pandas as pd

PARQUET = (".parquet", ".pq")


def table_columns(path: Path) -> list[str]:
    """The column names of a CSV (its header line) or a Parquet file (its schema), without reading rows."""
    import pandas as pd
    if path.suffix.lower() in PARQUET:
        import pyarrow as pa
        import pyarrow.parquet as pq
        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except (pa.ArrowInvalid, OSError) as exc:   # truncated, or not Parquet: one line, not Arrow's traceback
            raise DataError(f"Parquet file {str(path)!r} is unreadable (truncated or not Parquet): "
                            f"{str(exc).splitlines()[0]}") from None
    try:
        return [str(c) for c in pd.read_csv(path, nrows=0).columns]
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read CSV {str(path)!r}: {exc}") from None


def _block_size(path: Path, chunk_rows: int) -> int:
    """pyarrow's block in bytes for about `chunk_rows` rows (from the first 64 KiB's bytes per line)."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
    per_row = len(head) / max(head.count(b"\n"), 1)
    return int(min(max(per_row * chunk_rows * 1.1, 1 << 16), 1 << 28))


def _first_bad_row(codec: TableCodec, frame: pd.DataFrame) -> int:
    """The first row of `frame` that the codec refuses (bisection: log2(rows) encodes)."""
    lo, hi = 0, len(frame)   # invariant: frame[lo:hi] holds a bad row
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            codec.encode(frame.iloc[lo:mid])
            lo = mid
        except VertisynthError:
            hi = mid
    return lo


def frames(path: Path, columns: list[str], chunk_rows: int, keep: frozenset[str] = frozenset()
           ) -> Iterator[tuple[int, pd.DataFrame]]:
    """(first data row, text frame of `columns`) per chunk of at most chunk_rows rows. `keep`: labels that
    are values, not missing cells, even where pandas would read them as missing (a category "None")."""
    import pandas as pd
    if path.suffix.lower() in PARQUET:
        import pyarrow as pa
        import pyarrow.parquet as pq
        start = 0
        batches = pq.ParquetFile(path).iter_batches(batch_size=chunk_rows, columns=columns)
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowInvalid, OSError) as exc:   # a damaged row group: one line naming the file
                raise DataError(f"Parquet file {str(path)!r} is unreadable after row {start}: "
                                f"{str(exc).splitlines()[0]}") from None
            if batch is None:
                break
            frame = batch.to_pandas().astype(object)
            frame = frame.where(frame.isna(), frame.astype(str))
            yield start, frame
            start += len(frame)
        return
    import pyarrow as pa
    import pyarrow.csv as pacsv
    header = table_columns(path)
    start = 0

    def refused(exc: Exception) -> DataError:
        line = _first_wrong_width(path, len(header))
        where = f"line {line}" if line is not None else f"after line {start + 1}"
        return DataError(f"CSV {str(path)!r} {where}: {str(exc).splitlines()[0]}")

    try:   # the reader parses its first block when it opens
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=_block_size(path, chunk_rows)),
                                convert_options=pacsv.ConvertOptions(
                                    include_columns=columns, column_types={c: pa.string() for c in columns},
                                    strings_can_be_null=True, null_values=[v for v in CSV_NULLS if v not in keep]))
    except pa.ArrowInvalid as exc:
        raise refused(exc) from None
    # chunks of exactly chunk_rows (the last one shorter) whatever the reader's batches: the rows a batch
    # leaves over start the next chunk (batches are ~1.1 chunk, so cutting each batch alone gave a 10%
    # chunk after every full one: 183 chunks instead of 100 for 10M rows, each paying a chunk's overhead)
    pending: pd.DataFrame | None = None
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except pa.ArrowInvalid as exc:
            raise refused(exc) from None
        frame = batch.to_pandas()
        if pending is not None and len(pending):
            frame = pd.concat([pending, frame], ignore_index=True)
        full = len(frame) - len(frame) % chunk_rows
        for off in range(0, full, chunk_rows):
            part = frame.iloc[off:off + chunk_rows]
            yield start, part
            start += len(part)
        pending = frame.iloc[full:]
    if pending is not None and len(pending):
        yield start, pending


def _first_wrong_width(path: Path, width: int) -> int | None:
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        for row in itertools.islice(reader, None):
            if len(row) != width:
                return reader.line_num
    return None


def code_dtype(domain: Domain) -> type:
    """The smallest integer type that holds every code of `domain` (what the spills below store)."""
    top = max(domain.shape, default=1)
    return np.uint8 if top <= 256 else np.uint16 if top <= 65536 else np.int64


def _remove_spill(folder: Path, owner: int) -> None:
    if os.getpid() == owner:   # a forked party process must not remove the run's files
        shutil.rmtree(folder, ignore_errors=True)


class CodeSpill:
    """Coded rows appended chunk by chunk to one file (0600) in a private folder (0700) under the user's spill
    root (run/spill.py: a killed run's folder is swept by the next), memory-mapped once `finish`ed: replayed
    in the same chunks, or gathered by row in any order. What every streamed stage keeps its later passes in
    (a party's coded file, an aligned stream's first pass, the synthetic blocks).
    Disk: rows x columns x 1-2 bytes (+ 8 bytes a row with `ids`); memory: one chunk."""

    def __init__(self, domain: Domain, prefix: str, ids: bool = False, watchers: Sequence[Callable] = ()):
        """`watchers`: called with (codes file, first row, rows) after each chunk is appended and flushed (a
        Dask worker may read it from then on), and with (None, -1, 0) if the spill is closed unfinished."""
        self.domain, self.dtype = domain, code_dtype(domain)
        self._watchers = list(watchers)
        folder = new_spill_folder(prefix)
        self._folder: Path | None = folder
        # removed on close, or when collected / at exit if never closed (not after SIGKILL: the sweep's job)
        self._finalizer = weakref.finalize(self, _remove_spill, folder, os.getpid())
        self._files = [private_file(folder / "codes.bin")] + ([private_file(folder / "ids.bin")] if ids else [])
        self._codes: np.ndarray | None = None
        self._ids: np.ndarray | None = None
        self.parts: list[tuple[int, int]] = []   # (first row, rows) of each chunk appended
        self.n = 0

    def append(self, codes: np.ndarray, ids: np.ndarray | None = None) -> None:
        self._files[0].write(np.ascontiguousarray(codes, dtype=self.dtype).tobytes())
        if len(self._files) > 1:
            self._files[1].write(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
        self.parts.append((self.n, len(codes)))
        self.n += len(codes)
        if self._watchers:
            for fh in self._files:
                fh.flush()
            for tell in self._watchers:
                tell(self._folder / "codes.bin", self.n - len(codes), len(codes))

    def finish(self) -> CodeSpill:
        """Close the files and map them: the spill is complete (its watchers are told: (codes file, n, 0))."""
        for fh in self._files:
            fh.close()
        for tell in self._watchers:
            tell(self._folder / "codes.bin", self.n, 0)
        self._watchers = []
        if self.n:
            folder = self._folder
            self._codes = np.memmap(folder / "codes.bin", dtype=self.dtype, mode="r", shape=(self.n, len(self.domain)))
            if len(self._files) > 1:
                self._ids = np.memmap(folder / "ids.bin", dtype=np.int64, mode="r", shape=(self.n,))
        return self

    def replay(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        """The chunks as appended: (their ids, or their rows in the spill; int64 codes)."""
        for at, k in self.parts:
            ids = np.array(self._ids[at:at + k]) if self._ids is not None else np.arange(at, at + k, dtype=np.int64)
            yield ids, Dataset(self._codes[at:at + k].astype(np.int64), self.domain)

    def columns(self, axes: Sequence[int]) -> Iterator[np.ndarray] | None:
        """Per chunk as appended, the codes of the columns `axes` only, in the stored type (a counting pass
        reads no more); None before `finish`."""
        if self._codes is None:
            return None
        codes, axes = self._codes, list(axes)
        return (np.asarray(codes[at:at + k, axes]) for at, k in self.parts)

    def slices(self, rows: int) -> list | None:
        """The finished spill as `SpillSlice`s of at most `rows` rows (a path and a row range each: a Dask worker
        that sees the file reads them itself); None before `finish` or once closed."""
        if self._codes is None or self._folder is None:
            return None
        folder = self._folder
        return spill_slices(folder / "codes.bin", folder / "ids.bin" if self._ids is not None else None, self.dtype,
                            self.domain, self.n, rows)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The int64 codes of the spill's rows `rows`, in that order (the file's pages left to the page cache)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._codes is None:
            return np.zeros((len(rows), len(self.domain)), np.int64)   # an empty spill
        return self._codes[rows].astype(np.int64)

    @property
    def folder(self) -> Path | None:
        return self._folder

    @property
    def closed(self) -> bool:
        return self._folder is None

    def close(self) -> None:
        """Remove the files, if this process made them."""
        if self._codes is None and self._folder is not None:   # unfinished: whoever waits for rows stops
            for tell in self._watchers:
                tell(None, -1, 0)
        self._watchers = []
        for fh in self._files:
            fh.close()
        self._codes = self._ids = None
        if self._folder is not None:
            self._finalizer()
        self._folder = None


class coded_chunks:
    """A re-startable stream of (global ids, coded rows) of the codec's columns of the file.

    The first full pass reads and codes the file; it also appends each chunk's codes, in the smallest
    integer type, to one file of shape (rows, columns) in a private temporary folder (0700, removed with
    this object), from which every later pass (the local fit asks for marginals one pass each) reads them
    instead of parsing the file again, and from which `gather` picks rows in any order (an ID-keyed run's
    aligned chunks). Disk: rows x columns x 1-2 bytes; memory: one chunk (the file is memory-mapped)."""

    def __init__(self, path: Path, codec: TableCodec, chunk_rows: int, spill: bool = True):
        self.path, self.codec, self.chunk_rows, self.spill = Path(path), codec, chunk_rows, spill
        self._spilled: CodeSpill | None = None   # once a pass has completed
        self._watchers: list[Callable] = []      # told of each chunk the next first pass spills

    def live_slices(self, rows: int) -> Iterator | None:
        """The spilled codes as slices of at most `rows` rows, each as soon as the next first pass has written
        it (an iterator that waits: a Dask worker can start on the rows while the pass goes on); the slices now
        if a pass has completed."""
        if not self.spill:
            return None
        if self._spilled is not None:
            return iter(self._spilled.slices(rows))
        news: queue.SimpleQueue = queue.SimpleQueue()
        self._watchers.append(lambda path, first, k: news.put((path, first, k)))
        domain, dtype = self.codec.domain, code_dtype(self.codec.domain)

        def gen() -> Iterator:
            while True:
                path, first, k = news.get()
                if path is None:
                    raise DataError(f"{str(self.path)!r}: its first pass was abandoned before the rows were spilled")
                if k == 0:
                    return
                yield from spill_slices(path, None, dtype, domain, first + k, rows, first)
        return gen()

    def __call__(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        if self._spilled is not None:
            return self._spilled.replay()
        return self._read()

    @property
    def n(self) -> int | None:
        """Rows of the file, once a pass has completed."""
        return None if self._spilled is None else self._spilled.n

    def complete(self) -> coded_chunks:
        """Read and code the whole file now (a bad value fails here), so that later passes and `gather` replay
        the spill."""
        if self._spilled is None:
            if not self.spill:
                raise DataError("coded_chunks: gathering rows needs the spill")
            for _ in self._read():
                pass
        return self

    def columns(self, axes: Sequence[int], domain: Domain) -> Iterator[np.ndarray] | None:
        """Per chunk, the spilled codes of the columns `axes` (None before a pass has completed, or for another
        domain): what a counting pass reads."""
        if self._spilled is None or domain != self.codec.domain:
            return None
        return self._spilled.columns(axes)

    def slices(self, rows: int) -> list | None:
        """The spilled codes as slices of at most `rows` rows (None before a pass has completed)."""
        return None if self._spilled is None else self._spilled.slices(rows)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The codes (int64, len(rows) x columns) of the file's rows `rows`, in that order, from the spill:
        memory one chunk, the file's pages left to the page cache."""
        return self.complete()._spilled.gather(rows)

    def close(self) -> None:
        """Remove the spilled codes now (a forked process exits without running finalizers; one this process
        did not write stays); a later pass reads the file again."""
        if self._spilled is not None:
            self._spilled.close()
        self._spilled = None

    def _read(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        columns = [c.schema.name for c in self.codec.columns]
        kind = "Parquet" if self.path.suffix.lower() in PARQUET else "CSV"
        watchers, self._watchers = self._watchers, []
        out = CodeSpill(self.codec.domain, "vertisynth-chunks-", watchers=watchers) if self.spill else None
        done = False
        labels = frozenset(str(x) for c in self.codec.columns if c.schema.categories for x in c.schema.categories)
        try:
            for start, frame in frames(self.path, columns, self.chunk_rows, labels):
                frame = frame.reset_index(drop=True)
                try:
                    rows = self.codec.encode(frame)
                except VertisynthError as exc:
                    row = start + _first_bad_row(self.codec, frame)
                    where = f"line {row + 2}" if kind == "CSV" else f"row {row}"
                    raise DataError(f"{kind} {str(self.path)!r} {where}: {exc}") from None
                if out is not None:
                    out.append(rows.codes)
                yield np.arange(start, start + rows.n, dtype=np.int64), rows
            done = True
        finally:
            if out is not None and not done:   # an abandoned or failed pass: a later one reads the file again
                out.close()
        if out is not None:
            self._spilled = out.finish()


def fit_codec(schema: TableSchema, path: Path, own: Sequence[str], ledger: PrivacyLedger | None,
              rng: np.random.Generator, chunk_rows: int, exact: bool = True) -> TableCodec:
    """The codec of the columns `own` of a CSV or Parquet file, reading it in chunks: only columns binned at
    DP quantiles need their values (one column of floats each); the rest fit from the public schema.
    `exact`: the file must hold exactly `own` (a party's own file); else it may hold other columns too."""
    import pandas as pd
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{'Parquet' if path.suffix.lower() in PARQUET else 'CSV'} {str(path)!r} does not exist")
    header = table_columns(path)
    missing = [c for c in own if c not in header]
    extra = [c for c in header if c not in own] if exact else []
    if missing or extra:
        raise DataError(f"{str(path)!r} must hold {'exactly ' if exact else ''}these columns {list(own)}: "
                        f"missing {missing}" + (f", not this party's {extra}" if exact else ""))
    quant = [c.name for c in schema.columns if c.kind == "numeric" and c.binning not in ("edges", "equal_width")]
    if quant:
        parts = [f[quant] for _, f in frames(path, quant, chunk_rows)]
        fit_frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in quant})
    else:
        fit_frame = pd.DataFrame({c: [] for c in quant}, dtype=object)
    for c in own:
        if c not in fit_frame.columns:
            fit_frame[c] = pd.Series([None] * len(fit_frame), dtype=object)
    return schema.fit(fit_frame, ledger, rng)


Chunks = Callable[[], Iterator[tuple[np.ndarray, Dataset]]]


def joined_chunks(parts: Sequence[Chunks], domain: Domain) -> Chunks:
    """The row-aligned parties' chunk streams side by side, as chunks of the joined table on `domain` (its
    attributes in any order across the parties'): what counts-based evaluation reads."""
    def gen() -> Iterator[tuple[np.ndarray, Dataset]]:
        streams = [p() for p in parts]
        order = None
        for got in itertools.zip_longest(*streams):
            if any(g is None for g in got):
                raise DataError("the parties' tables have different row counts; they are not row-aligned")
            ids = got[0][0]
            if any(len(g[0]) != len(ids) or not np.array_equal(g[0], ids) for g in got[1:]):
                raise DataError("the parties' chunks hold different rows (their chunk settings differ)")
            if order is None:
                names = [a for g in got for a in g[1].domain.attributes]
                order = [names.index(a) for a in domain.attributes]
            codes = np.concatenate([g[1].codes for g in got], axis=1)[:, order]
            yield ids, Dataset(codes, domain)
    return gen
