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
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vertisynth.core.chunks import TaskSizes, adoptable, hand_over, spill_slices
from vertisynth.core.cluster import DASK_WAIT_ENV, dask_wait_s, run_on_workers
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import CSV_NULLS, TableCodec, TableSchema
from vertisynth.core.errors import DataError, VertisynthError
from vertisynth.core.privacy import PrivacyLedger

from .spill import hand_to, new_spill_folder, private_file

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
                                convert_options=_text_options(columns, keep))
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


def _text_options(columns: list[str], keep: frozenset[str]) -> Any:
    """Every value of `columns` as text, the CSV null markers (but `keep`'s labels) as missing: how a party's
    file is read, whole or in byte spans (`code_span`), so both give the same frames."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    return pacsv.ConvertOptions(include_columns=columns, column_types={c: pa.string() for c in columns},
                                strings_can_be_null=True, null_values=[v for v in CSV_NULLS if v not in keep])


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

    def __init__(self, domain: Domain, prefix: str, ids: bool = False, watchers: Sequence[Callable] = (),
                 adopt: dict[str, Any] | None = None):
        """`watchers`: called with (codes file, first row, rows) after each chunk is appended and flushed (a
        Dask worker may read it from then on), and with (None, -1, 0) if the spill is closed unfinished.
        `adopt`: the finished spill a child process handed over (`handed_to`), taken instead of a new one."""
        self.domain, self.dtype = domain, code_dtype(domain)
        self._watchers = list(watchers)
        folder = new_spill_folder(prefix) if adopt is None else Path(adopt["folder"])
        self._folder: Path | None = folder
        # removed on close, or when collected / at exit if never closed (not after SIGKILL: the sweep's job)
        self._finalizer = weakref.finalize(self, _remove_spill, folder, os.getpid())
        self._files = [] if adopt is not None else \
            [private_file(folder / "codes.bin")] + ([private_file(folder / "ids.bin")] if ids else [])
        self._codes: np.ndarray | None = None
        self._ids: np.ndarray | None = None
        self.parts: list[tuple[int, int]] = []   # (first row, rows) of each chunk appended
        self.n = 0
        if adopt is not None:
            self.parts, self.n = [tuple(p) for p in adopt["parts"]], int(adopt["n"])
            if self.n:
                self._codes = np.memmap(folder / "codes.bin", dtype=self.dtype, mode="r", shape=(self.n, len(domain)))
                if adopt["ids"]:
                    self._ids = np.memmap(folder / "ids.bin", dtype=np.int64, mode="r", shape=(self.n,))

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

    @classmethod
    def for_writers(cls, domain: Domain, prefix: str, n: int, parts: list[tuple[int, int]]) -> CodeSpill:
        """A spill of n rows whose file (0600, its full size now) other processes fill in place (`code_span`
        tasks on Dask workers, each its rows' bytes); `parts`: the chunks `replay` gives. The writers report
        each range (`written`), then `finish` maps the file."""
        spill = cls(domain, prefix)
        fh = spill._files[0]
        os.ftruncate(fh.fileno(), n * len(domain) * np.dtype(spill.dtype).itemsize)
        fh.close()
        spill.parts, spill.n = list(parts), n
        return spill

    def watch(self, watchers: Sequence[Callable]) -> None:
        """Add watchers (see `__init__`)."""
        self._watchers += list(watchers)

    def handed_to(self, pid: int) -> dict[str, Any]:
        """Give this finished spill to process `pid` (this one's parent, which adopts the state returned): its
        folder marked as `pid`'s, its removal left to `pid`."""
        hand_to(self._folder, pid)
        self._finalizer.detach()
        return {"folder": str(self._folder), "n": self.n, "parts": list(self.parts), "ids": self._ids is not None}

    @classmethod
    def adopted(cls, domain: Domain, state: dict[str, Any]) -> CodeSpill:
        """The finished spill a child process handed over (`handed_to`), now this process's to remove."""
        return cls(domain, "", adopt=state)

    def written(self, first: int, rows: int) -> None:
        """Rows first..first+rows-1 are in the file (written by another process): the watchers are told."""
        for tell in self._watchers:
            tell(self._folder / "codes.bin", first, rows)

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

    def slices(self, rows: int | TaskSizes) -> list | None:
        """The finished spill as `SpillSlice`s of at most `rows` rows, or cut as `rows` (a `TaskSizes`) cuts all
        of them (a path and a row range each: a Dask worker that sees the file reads them itself); None before
        `finish` or once closed."""
        if self._codes is None or self._folder is None:
            return None
        folder = self._folder
        return spill_slices(folder / "codes.bin", folder / "ids.bin" if self._ids is not None else None, self.dtype,
                            self.domain, self.n, rows, remaining=self.n)

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


def csv_span_layout(path: Path, chunk_rows: int, span_rows: int) -> tuple[list[str], int, list[tuple[int, int, int, int]]] | None:
    """(header names, data rows, spans) of a CSV cut at its newlines, each span (first row, byte offset, byte end,
    rows) of at most `span_rows` rows and never across a chunk of `chunk_rows` (the chunks the whole-file read
    gives: a chunk is some spans' union), from one pass over its bytes (no parsing); None where a newline may
    not end a record, so only the whole-file reader is safe: a quote in the data (a quoted line break), a blank
    line (the reader skips it), a carriage return that is not part of CRLF, no data rows."""
    size = path.stat().st_size
    s = max(1, min(int(span_rows), chunk_rows))
    starts: list[int] = []   # byte offset of each span's first row
    seen, base, header_end, last_nl, prev = 0, 0, -1, -1, 0
    crs = crlfs = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            buf = np.frombuffer(block, dtype=np.uint8)
            nl = np.flatnonzero(buf == 10)
            if header_end < 0 and nl.size:
                header_end = base + int(nl[0])
            data_from = max(header_end + 1 - base, 0) if header_end >= 0 else len(buf)
            # bytes.find / count (memchr) instead of a compare over the block: this scan runs here while the
            # workers wait for the first span (docs/scale.md, "Guided task sizes")
            if data_from < len(buf) and block.find(b'"', data_from) >= 0:
                return None
            if prev == 13 or block.find(b"\r") >= 0:
                cr_before = np.where(nl > 0, buf[np.maximum(nl - 1, 0)] == 13, prev == 13)
                crs += block.count(b"\r")
                crlfs += int(cr_before.sum())
            else:   # no carriage return near: no line ends in CRLF
                cr_before = np.zeros(nl.size, dtype=bool)
            gaps = np.diff(np.concatenate([[last_nl], base + nl])) if nl.size else np.zeros(0, np.int64)
            if last_nl < 0 and gaps.size:
                gaps = gaps[1:]
                cr_gap = cr_before[1:]
            else:
                cr_gap = cr_before
            if ((gaps == 1) | ((gaps == 2) & cr_gap)).any():   # an empty line (or a CRLF one)
                return None
            # newline k (file-wide, 0-based) ends line k, so data row k starts after it
            k = seen + np.arange(nl.size)
            at = (k % chunk_rows) % s == 0
            starts.extend((base + nl[at] + 1).tolist())
            if nl.size:
                last_nl = base + int(nl[-1])
            seen += nl.size
            base += len(buf)
            prev = int(buf[-1])
    if crs != crlfs or header_end < 0:
        return None
    rows = seen + (prev != 10) - 1
    if rows <= 0:
        return None
    firsts = [i * chunk_rows + j for i in range(-(-rows // chunk_rows))   # the rows of `starts`, span by span
              for j in range(0, min(chunk_rows, rows - i * chunk_rows), s)]
    starts = starts[:len(firsts)]
    import pyarrow as pa
    import pyarrow.csv as pacsv
    with open(path, "rb") as fh:
        head = fh.read(header_end + 1)
    try:
        names = pacsv.read_csv(pa.py_buffer(head), read_options=pacsv.ReadOptions(use_threads=False)).column_names
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    ends = starts[1:] + [size]
    nrows = [b - a for a, b in zip(firsts, firsts[1:] + [rows])]
    return list(names), rows, list(zip(firsts, starts, ends, nrows))


def _span_frame(path: str, offset: int, end: int, names: list[str], columns: list[str], keep: frozenset[str]
                ) -> pd.DataFrame:
    """The text frame of `columns` of a CSV's bytes offset..end (whole lines, no header), read as `frames`
    reads the whole file (pyarrow.ArrowInvalid if they do not parse)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(end - offset)
    table = pacsv.read_csv(pa.py_buffer(data), read_options=pacsv.ReadOptions(
        column_names=names, use_threads=False, block_size=max(len(data), 1 << 16) + 1),
        convert_options=_text_options(columns, keep))
    del data
    return table.to_pandas()


_SPAN_TASKS = {"cpu_s": 0.0, "rows": 0}   # this process's code_span tasks: their own thread's CPU seconds, rows


def code_span(path: str, names: list[str], columns: list[str], keep: frozenset[str], codec: TableCodec,
              first: int, offset: int, end: int, rows: int, spill: str, plan: list) -> tuple:
    """A Dask task of a party's first pass: parse the CSV's bytes offset..end (rows `first`..), code them with
    the party's codec, write the codes into the spill at their rows, count the marginals of `plan`.
    ("ok", rows, counts); ("bad", None) if the codec refuses a value (the party names its line); ("reread",
    why) if the bytes do not parse as `rows` rows (the party reads the whole file, whose reader says why)."""
    import time

    import pyarrow as pa

    from vertisynth.core.chunks import _count_codes
    t0 = time.thread_time()
    try:
        frame = _span_frame(path, offset, end, names, columns, keep)
    except pa.ArrowInvalid as exc:
        return "reread", str(exc).splitlines()[0]
    if len(frame) != rows:
        return "reread", f"{len(frame)} rows where {rows} were expected"
    try:
        coded = codec.encode(frame)
    except VertisynthError:
        return "bad", None
    codes = np.ascontiguousarray(coded.codes, dtype=code_dtype(codec.domain))
    fd = os.open(spill, os.O_WRONLY)
    try:
        os.pwrite(fd, codes.tobytes(), first * codes.shape[1] * codes.itemsize)
    finally:
        os.close(fd)
    n, counts = _count_codes(coded.codes, plan)
    _SPAN_TASKS["cpu_s"] += time.thread_time() - t0
    _SPAN_TASKS["rows"] += n
    return "ok", n, counts


def n_rows(spans: list[tuple[int, int, int, int]]) -> int:
    """The rows of a CSV's spans (`csv_span_layout`)."""
    return spans[-1][0] + spans[-1][3] if spans else 0


def span_task_cpu() -> dict[str, float]:
    """What this worker's `code_span` tasks cost in their own threads so far: `client.run(span_task_cpu)`."""
    return dict(_SPAN_TASKS)


def _sees(paths: list[tuple[str, int]]) -> bool:   # runs on each worker
    try:
        return all(os.path.getsize(p) == size and os.access(p, os.R_OK | os.W_OK) for p, size in paths)
    except OSError:
        return False


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
        self._pid, self._token = os.getpid(), adoptable(self)   # a forked party process hands its spill back
        self._expected: int | None = None   # the rows of a first pass on the workers, known from its layout

    def _spilled_now(self, spill: CodeSpill) -> None:
        """The first pass's spill, complete; in a forked process (a party's), handed to the parent as well."""
        self._spilled = spill
        if os.getpid() != self._pid and spill.folder is not None:
            hand_over(self._token, spill.handed_to(self._pid))

    def adopt(self, state: dict[str, Any]) -> None:
        """Take the spill of this stream's first pass in a forked child (`_spilled_now` there)."""
        if self._spilled is None:
            self._spilled = CodeSpill.adopted(self.codec.domain, state)
        else:   # this process has its own: the child's goes
            shutil.rmtree(state["folder"], ignore_errors=True)

    def live_slices(self, rows: int | TaskSizes) -> Iterator | None:
        """The spilled codes as slices of at most `rows` rows (or cut as a `TaskSizes` cuts them: guided where the
        pass's rows are known, a first pass on the workers), each as soon as the next first pass has written it
        (an iterator that waits: a Dask worker can start on the rows while the pass goes on); the slices now if
        a pass has completed."""
        if not self.spill:
            return None
        if self._spilled is not None:
            return iter(self._spilled.slices(rows))
        news: queue.SimpleQueue = queue.SimpleQueue()
        self._watchers.append(lambda path, first, k: news.put((path, first, k)))
        domain, dtype = self.codec.domain, code_dtype(self.codec.domain)
        wait = dask_wait_s()

        def gen() -> Iterator:
            told, handed = False, 0
            while True:
                quiet = time.monotonic() + wait
                while True:   # bounded: a first pass that stops telling (a lost watcher) is an error, not a hang
                    spilled = self._spilled
                    try:
                        path, first, k = news.get(timeout=min(1.0, wait))
                        break
                    except queue.Empty:
                        pass
                    if spilled is not None and not told:   # a pass began before this watcher and completed:
                        yield from spilled.slices(rows)     # it never tells; its spill is whole
                        return
                    if time.monotonic() > quiet:
                        raise DataError(f"{str(self.path)!r}: no rows spilled for {wait:.0f} s while the encoding "
                                        f"waited for the first pass ({DASK_WAIT_ENV}; docs/scale.md)") from None
                told = True
                if path is None:
                    raise DataError(f"{str(self.path)!r}: its first pass was abandoned before the rows were spilled")
                if k == 0:
                    return
                left = None if self._expected is None else self._expected - handed
                handed += k
                yield from spill_slices(path, None, dtype, domain, first + k, rows, first, left)
        return gen()

    def __call__(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        if self._spilled is not None:
            return self._spilled.replay()
        return self._read()

    def counted_spans(self, client: Any, plan: list) -> Iterator[tuple[int, list[np.ndarray]]] | None:
        """The first pass as Dask tasks over byte spans of the CSV (`code_span`: each parses its lines, codes
        them with this codec, writes their codes into the spill and counts `plan`'s marginals (axes, shape)),
        if `client` is given, no pass has completed, the file is a CSV that can be cut at its newlines
        (`csv_span_layout`) and every worker sees it and the spill; else None (the pass runs here). Yields
        (rows, the summed counts) once, at the end: the same spill, counts (int64 sums) and errors (a bad
        value's line) as the pass here, the party process parsing no row; the watchers (an early map) are
        told of each span as it is written."""
        if client is None or not self.spill or self._spilled is not None or self.path.suffix.lower() in PARQUET:
            return None
        from vertisynth.core.cluster import task_rows
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                head = fh.read(1 << 16)
        except OSError:
            return None   # the pass here says what is wrong
        guess = int(size * max(head.count(b"\n"), 1) / max(len(head), 1))   # rows, for the tasks' size
        layout = csv_span_layout(self.path, self.chunk_rows, task_rows(client, guess, self.chunk_rows))
        if layout is None:
            return None
        names, n, spans = layout
        columns = [c.schema.name for c in self.codec.columns]
        if len(set(names)) != len(names) or any(c not in names for c in columns):
            return None
        domain = self.codec.domain
        parts = [(s, min(self.chunk_rows, n - s)) for s in range(0, n, self.chunk_rows)]
        out = CodeSpill.for_writers(domain, "vertisynth-chunks-", n, parts)
        codes = out.folder / "codes.bin"
        try:   # bounded (dask_wait_s): a worker that does not answer in time is one that cannot
            seen = run_on_workers(client, _sees, [(str(self.path.resolve()), size),
                                                  (str(codes), n * len(domain) * np.dtype(out.dtype).itemsize)],
                                  what="the workers' check that they see the CSV and its spill")
        except Exception:   # noqa: BLE001 - a worker that cannot answer: the pass runs here
            seen = {}
        if not seen or not all(seen.values()):
            out.close()
            return None
        out.watch(self._watchers)
        self._watchers = []
        self._expected = n   # the early map cuts its tasks knowing how many rows are still to come
        return self._spans_pass(client, out, names, columns, spans, plan)

    def _labels(self) -> frozenset[str]:
        return frozenset(str(x) for c in self.codec.columns if c.schema.categories for x in c.schema.categories)

    def _spans_pass(self, client: Any, out: CodeSpill, names: list[str], columns: list[str], spans: list,
                    plan: list) -> Iterator[tuple[int, list[np.ndarray]]]:
        from distributed import wait as first_done

        from vertisynth.core.chunks import _count_chunk
        from vertisynth.core.cluster import window_for
        limit = dask_wait_s()
        path, codes, keep = str(self.path.resolve()), str(out.folder / "codes.bin"), self._labels()
        acc = [np.zeros(int(np.prod(shape, dtype=np.int64)), dtype=np.int64) for _, shape in plan]
        rows, problem, done = 0, None, False
        todo = iter(enumerate(spans))
        index: dict[str, int] = {}

        def submit(i: int, span: tuple[int, int, int, int]) -> Any:
            fut = client.submit(code_span, path, names, columns, keep, self.codec, *span[:3], span[3], codes, plan,
                                pure=False)
            index[fut.key] = i
            return fut

        def finished() -> list:   # the spans done so far, waiting at most `limit` seconds for the next one
            nonlocal queued
            try:
                done_now, queued = first_done(queued, timeout=limit, return_when="FIRST_COMPLETED")
            except TimeoutError:   # distributed's and the builtin are one class
                for f in queued:
                    f.cancel()
                raise DataError(f"{str(self.path)!r}: waited {limit:.0f} s on the Dask cluster for a first-pass "
                                f"span to finish and none did: cancelled (a lost or paused worker? {DASK_WAIT_ENV} "
                                "sets the wait; docs/scale.md)") from None
            return sorted(done_now, key=lambda f: index[f.key])

        def completed() -> Iterator:   # each span's future as it completes, while any is queued
            while queued:
                yield from finished()

        try:
            queued = {submit(i, sp) for i, sp in itertools.islice(todo, window_for(client))}
            # at most a window of spans in flight; each span's counts merged as it completes
            for fut in completed():
                i = index.pop(fut.key)
                try:
                    got = fut.result()
                except Exception as exc:   # noqa: BLE001 - a worker's OS error, a lost worker: one line
                    raise DataError(f"{str(self.path)!r}: a first-pass task on a Dask worker failed (rows "
                                    f"{spans[i][0]}..): {type(exc).__name__}: {exc}") from None
                fut.release()
                if got[0] == "ok":
                    rows += got[1]
                    for vec, part in zip(acc, got[2]):
                        vec += part
                    out.written(spans[i][0], got[1])
                elif problem is None or i < problem[0]:
                    problem = (i, got[0])
                if problem is None:   # after a problem, only the spans before it (all queued) are awaited
                    nxt = next(todo, None)
                    if nxt is not None:
                        queued.add(submit(*nxt))
            if problem is not None and problem[1] == "bad":
                self._refused(spans, problem[0], names, columns, keep)
            if problem is not None:   # the bytes did not parse as the lines counted: the reader here says why
                out.close()
                for _, chunk in self._read():
                    yield _count_chunk(chunk, plan)
                done = True
                return
            if rows != n_rows(spans):
                raise DataError(f"{str(self.path)!r}: the workers coded {rows} rows of {n_rows(spans)}")
            self._spilled_now(out.finish())
            done = True
        finally:
            if not done:
                out.close()
        yield rows, acc

    def _refused(self, spans: list, i: int, names: list[str], columns: list[str], keep: frozenset[str]) -> None:
        """Raise the error the pass here raises for the first chunk holding a refused value (span i's): the
        chunk read and coded here, its first bad line named."""
        start = spans[i][0] // self.chunk_rows * self.chunk_rows
        mine = [sp for sp in spans if start <= sp[0] < start + self.chunk_rows]
        frame = _span_frame(str(self.path), mine[0][1], mine[-1][2], names, columns, keep)
        try:
            self.codec.encode(frame)
        except VertisynthError as exc:
            row = start + _first_bad_row(self.codec, frame)
            raise DataError(f"CSV {str(self.path)!r} line {row + 2}: {exc}") from None
        raise DataError(f"CSV {str(self.path)!r}: a worker refused a value in rows {spans[i][0]}.. that this "
                        "process accepts (the workers' vertisynth differs?)")

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
        try:
            for start, frame in frames(self.path, columns, self.chunk_rows, self._labels()):
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
            self._spilled_now(out.finish())


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
