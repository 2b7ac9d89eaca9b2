"""The output side of a run in blocks: the synthetic table sampled, decoded and written `sample_block_rows`
rows at a time (issue 21; docs/scale.md, "The streamed run's output in blocks").

Every run decodes in these blocks with its one decode stream, block after block, so a streamed run (which
appends each decoded block to synthetic.csv and keeps none) and the in-memory run of the same config (which
concatenates them) give the same table, bit for bit. Up to one block this is `TableCodec.decode` of the
whole table, as before. A streamed run's evaluators count from the blocks' codes, spilled to a private
temporary folder while writing (rows x attributes x 1-2 bytes on disk) and read back once per counting pass.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from vertisynth.core.capabilities import SamplesInBlocks
from vertisynth.core.chunks import ChunkedCounts
from vertisynth.core.dataset import Dataset
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import TableCodec
from vertisynth.core.errors import DataError, VertisynthWarning
from vertisynth.core.outfiles import make_folder, replace_atomically, write_columns_csv, write_csv
from vertisynth.pgm.model import SAMPLE_BLOCK_ROWS

from .report import clear_previous_outputs
from .stream import CodeSpill

if TYPE_CHECKING:   # pandas is imported where a frame is built or read (docs/speed.md, fifth pass)
    import pandas as pd

TABLE_FILE = "synthetic.csv"


def block_rows_of(config: Any) -> int:
    """The run's block size: its `sample_block_rows`, else the sampler's default."""
    return int(config.sample_block_rows or SAMPLE_BLOCK_ROWS)


def synthetic_blocks(synth: Any, n: int | None, rng: np.random.Generator, block_rows: int,
                     attributes: Sequence[str]) -> Iterator[Dataset]:
    """The synthesizer's records on `attributes`, in blocks of at most `block_rows`: drawn block by block
    when it can (SamplesInBlocks), else slices of its one `sample` (which then holds the table's codes)."""
    if isinstance(synth, SamplesInBlocks):
        for block in synth.sample_blocks(n, rng, block_rows):
            yield block.project(attributes)
        return
    yield from _slices(synth.sample(n, rng).project(attributes), block_rows)


def sample_table(synth: Any, n: int | None, rng: np.random.Generator, block_rows: int,
                 attributes: Sequence[str]) -> Dataset:
    """The in-memory run's synthetic codes: the blocks of `synthetic_blocks` in one table."""
    if not isinstance(synth, SamplesInBlocks):
        return synth.sample(n, rng).project(attributes)
    parts = list(synthetic_blocks(synth, n, rng, block_rows, attributes))
    if len(parts) == 1:
        return parts[0]
    return Dataset(np.concatenate([p.codes for p in parts]), parts[0].domain)


def _slices(table: Dataset, block_rows: int) -> Iterator[Dataset]:
    for start in range(0, max(table.n, 1), block_rows):
        yield Dataset(table.codes[start:start + block_rows], table.domain)


def decode_table(codec: TableCodec, table: Dataset, rng: np.random.Generator, block_rows: int) -> pd.DataFrame:
    """The in-memory run's decoded table: `codec.decode` block by block (the streamed run's order of the
    decode stream), concatenated. One block: `codec.decode(table, rng)` itself."""
    return decoded_table(codec, table, rng, block_rows).frame


def decoded_table(codec: TableCodec, table: Dataset, rng: np.random.Generator, block_rows: int) -> DecodedTable:
    """`decode_table`, kept as numpy columns where every column decodes without pandas
    (`TableCodec.decode_arrays`): the DataFrame is built only when asked for (`DecodedTable.frame`), from the
    same draws."""
    blocks = [table] if table.n <= block_rows else list(_slices(table, block_rows))
    first = codec.decode_arrays(blocks[0], rng)
    if first is None:
        import pandas as pd
        frames = [codec.decode(b, rng) for b in blocks]
        return DecodedTable(codec, None, frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True))
    parts = [first] + [codec.decode_arrays(b, rng) for b in blocks[1:]]
    arrays = first if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts]) for k in first}
    return DecodedTable(codec, arrays)


@attrs.define(eq=False)
class DecodedTable:
    """A decoded synthetic table: numpy columns (`arrays`, from `TableCodec.decode_arrays`) whose DataFrame is
    built on first use, or the DataFrame itself where a column decodes through pandas only."""

    codec: TableCodec
    arrays: dict[str, np.ndarray] | None
    _frame: pd.DataFrame | None = None

    @property
    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            self._frame = self.codec.frame_of(self.arrays)
        return self._frame

    @property
    def columns(self) -> list[str]:
        return [c.schema.name for c in self.codec.columns]

    def write_csv(self, path: Path) -> Path:
        """synthetic.csv: `frame.to_csv(index=False)`, bit for bit; without pandas where every column is
        integers or text (`write_columns_csv`)."""
        if self.arrays is not None and all(a.dtype == np.int64 or a.dtype == object for a in self.arrays.values()):
            return write_columns_csv(path, self.arrays)
        return write_csv(path, self.frame)


class BlockCounts(ChunkedCounts):
    """The synthetic side of a streamed run's evaluation: counts summed over the spilled blocks (int64, equal
    to `Dataset.counts` of the whole table), with the row count known up front."""

    def __init__(self, spilled: CodeSpill):
        super().__init__(self._blocks, spilled.domain)
        self._n = spilled.n
        self.spilled = spilled

    def _blocks(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        if self.spilled.closed:   # a pass after that is an error, not a silent empty table
            raise DataError("the streamed run's synthetic codes were removed after its evaluation; read its "
                            "synthetic.csv instead")
        return self.spilled.replay()


@attrs.define
class WrittenTable:
    """What `write_in_blocks` produced: the table is in `path` (None: one block, no output folder), held as
    `frame` only when it is one block; `codes` counts it for the evaluators."""

    n: int
    blocks: int
    block_rows: int
    path: Path | None
    temporary: bool
    frame: pd.DataFrame | None
    codes: Dataset | BlockCounts
    seconds: dict[str, float]

    def describe(self) -> dict[str, Any]:
        return {"rows": self.n, "blocks": self.blocks, "block_rows": self.block_rows,
                "path": None if self.path is None else str(self.path), "temporary_folder": self.temporary,
                "held_in_memory": self.frame is not None}

    def close(self) -> None:
        """Remove the spilled codes (the counts already read stay cached)."""
        if isinstance(self.codes, BlockCounts):
            self.codes.spilled.close()


def write_in_blocks(blocks: Iterable[Dataset], codec: TableCodec, rng: np.random.Generator,
                    out_dir: Path | None, block_rows: int, count: bool = True,
                    clock: Callable[[], float] = time.perf_counter) -> WrittenTable:
    """Decode each block with the decode stream `rng` and append it to `out_dir`/synthetic.csv (written as
    synthetic.csv.partial, renamed when complete; without `out_dir`, in a new temporary folder, with a
    warning naming it, once the table is more than one block). Memory: one block. `count`: spill the codes
    for the evaluators. `clock`: what `seconds` (sample, decode, write) are measured with."""
    seconds = {"sample": 0.0, "decode": 0.0, "write": 0.0}
    it = iter(blocks)
    first, first_frame = None, None
    spilled = CodeSpill(codec.domain, "vertisynth-synthetic-") if count else None
    target, temporary = out_dir, False
    n = k = 0
    try:
        with contextlib.ExitStack() as stack:
            fh = None
            while True:
                t0 = clock()
                block = next(it, None)
                t1 = clock()
                seconds["sample"] += t1 - t0
                if block is None:
                    break
                frame = codec.decode(block, rng)
                t2 = clock()
                seconds["decode"] += t2 - t1
                if spilled is not None:
                    spilled.append(block.codes)
                if k == 0:
                    first, first_frame = block, frame
                else:
                    if fh is None:   # a second block: the table is not kept, it goes to a file
                        if target is None:
                            target, temporary = Path(tempfile.mkdtemp(prefix="vertisynth-run-")), True
                        fh = stack.enter_context(_table_file(target))
                        first_frame.to_csv(fh, index=False)
                        first_frame = None
                    frame.to_csv(fh, index=False, header=False)
                del frame
                seconds["write"] += clock() - t2
                n, k = n + block.n, k + 1
            if k == 0:
                raise DataError("the synthesizer drew no records")
            t2 = clock()
            if fh is None and target is not None:   # one block, and a folder to write it to
                fh = stack.enter_context(_table_file(target))
                first_frame.to_csv(fh, index=False)
            seconds["write"] += clock() - t2   # (the file's close, inside the stack, not counted)
    except BaseException:
        if spilled is not None:
            spilled.close()
        if temporary:   # the folder this run made for its table (the partial file is already gone)
            shutil.rmtree(target, ignore_errors=True)
        raise
    path = None if target is None else target / TABLE_FILE
    if temporary:
        warnings.warn(f"the streamed run's {n} synthetic rows are more than one block ({block_rows}) and the run "
                      f"has no output folder: they were written to {path}, a temporary folder you remove",
                      VertisynthWarning, stacklevel=3)
    codes: Dataset | BlockCounts
    if k == 1:
        if spilled is not None:
            spilled.close()
        codes = first
    else:
        codes = BlockCounts(spilled.finish()) if spilled is not None else _RowCount(n, codec.domain)
    return WrittenTable(n, k, block_rows, path, temporary, first_frame if k == 1 else None, codes, seconds)


@contextlib.contextmanager
def _table_file(folder: Path) -> Iterator[Any]:
    """synthetic.csv in `folder` (the previous run's outputs there cleared first), written under a .partial
    name and renamed once complete: a failed run leaves no half table under the real name."""
    make_folder(folder)
    clear_previous_outputs(folder)
    with replace_atomically(folder / TABLE_FILE) as fh:   # a per-process temporary name, renamed when complete
        yield fh


@attrs.define
class _RowCount:
    """A streamed table's row count when no evaluator asked for its codes."""

    n: int
    domain: Domain


def stream_output(synth: Any, config: Any, codec: TableCodec, streams: dict[str, np.random.Generator],
                  output_dir: str | Path | None, count: bool = True) -> WrittenTable:
    """A streamed run's output, after the fit: `config.sample_size` records drawn (stream "sample"), decoded
    (stream "decode") and written one block of `sample_block_rows` at a time."""
    block_rows = block_rows_of(config)
    blocks = synthetic_blocks(synth, config.sample_size, streams["sample"], block_rows, codec.domain.attributes)
    return write_in_blocks(blocks, codec, streams["decode"], None if output_dir is None else Path(output_dir),
                           block_rows, count)
