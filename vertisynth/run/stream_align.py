"""`stream = true` with ID-keyed party files: the input side (encode, align) of the streamed run.

Each party's file is coded chunk by chunk into its spill (`coded_chunks`, one memory-mapped file); the
alignment reads only the identifier column, chunk by chunk, and keeps the protocol's result as an int64 row
map per party (`RowMaps`: the file row at each aligned position, -1 where a PSU fill goes), never a table.
The party step then reads `aligned_chunks`: aligned positions [s, s + chunk_rows) gathered from the spill,
PSU's missing positions filled in place by the party's `ChunkFill`. Memory: one chunk, plus the
per-identifier state of the protocol (identifiers, group elements, the row maps: O(n), not O(n x columns)).
The same messages, ledger and synthetic table as the in-memory run of the same config
(tests/run/test_stream_aligned.py).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vertisynth.core.capabilities import AlignsRows
from vertisynth.core.dataset import Dataset, VerticalPartition
from vertisynth.core.domain import Domain
from vertisynth.core.encoding import TableCodec, TableSchema
from vertisynth.core.errors import ConfigError, DataError
from vertisynth.core.loaded import PartyFiles
from vertisynth.core.privacy import PrivacyLedger

from .stream import Chunks, CodeSpill, coded_chunks, fit_codec, frames, joined_chunks


def read_ids(path: Path, id_column: str, chunk_rows: int) -> list[str]:
    """The identifier column of a party's CSV, read chunk by chunk as text (as the in-memory reader keeps it:
    no "007" -> 7); a missing identifier names its line."""
    ids: list[str] = []
    for start, frame in frames(Path(path), [id_column], chunk_rows):
        col = frame[id_column]
        miss = col.isna().to_numpy()
        if miss.any():
            raise DataError(f"party CSV {str(path)!r} line {start + int(np.argmax(miss)) + 2}: identifier "
                            f"{id_column!r} is missing")
        ids.extend(col.tolist())
    return ids


def encode_party_files(files: PartyFiles, schema: TableSchema, partition: VerticalPartition,
                       ledger: PrivacyLedger, rng: np.random.Generator, chunk_rows: int
                       ) -> tuple[dict[str, TableCodec], dict[str, coded_chunks], TableCodec]:
    """Each party's codec (fitted from the public schema, DP quantiles from its file's columns) and its file
    coded once into its spill, in party order (as the in-memory run encodes: the same charges)."""
    names = list(partition.names)
    if set(files.paths) != set(names):
        raise DataError(f"the dataset has tables for parties {sorted(files.paths)} but the config's parties are "
                        f"{names}")
    codecs, spills = {}, {}
    try:
        for party in partition:
            own = list(party.attributes)
            path = Path(files.paths[party.name])
            sub = TableSchema(tuple(c for c in schema.columns if c.name in own))
            codecs[party.name] = fit_codec(sub, path, own, ledger, rng, chunk_rows, exact=False)
            spills[party.name] = coded_chunks(path, codecs[party.name], chunk_rows).complete()   # a bad value: here
    except BaseException:   # the parties' spills made so far go now, not when collected
        for done in spills.values():
            done.close()
        raise
    by_name = {c.schema.name: c for pc in codecs.values() for c in pc.columns}
    return codecs, spills, TableCodec(tuple(by_name[c.name] for c in schema.columns))


class replayed:
    """A chunk stream whose first complete pass is also written to a `CodeSpill` (with the chunks' ids), from
    which every later pass reads it back in order: the party step and the evaluation make many passes, and a
    replay reads sequentially where the first pass gathered rows from the spill in the alignment's (random)
    order and filled PSU's gaps. Memory: one chunk."""

    def __init__(self, source: Chunks, domain: Domain):
        self.source, self.domain = source, domain
        self._spill: CodeSpill | None = None   # once a first pass has completed
        self._writing = False

    def __call__(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        if self._spill is not None:
            return self._spill.replay()
        return self.source() if self._writing else self._first()   # a pass inside a first pass: not recorded

    def slices(self, rows: int) -> list | None:
        """The replay file as slices (aligned positions as ids) once a first pass has completed, else None."""
        return None if self._spill is None else self._spill.slices(rows)

    def columns(self, axes: Sequence[int], domain: Domain) -> Iterator[np.ndarray] | None:
        """Per chunk, the replayed codes of the columns `axes` (a counting pass), once a first pass is complete."""
        return None if self._spill is None or domain != self.domain else self._spill.columns(axes)

    def close(self) -> None:
        """Remove the replay file if this process wrote it (a forked party process exits without finalizers)."""
        if self._spill is not None:
            self._spill.close()
        self._spill = None

    def _first(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        out = CodeSpill(self.domain, "vertisynth-aligned-", ids=True)
        self._writing, done = True, False
        try:
            for pos, chunk in self.source():
                out.append(chunk.codes, pos)
                yield pos, chunk
            done = True
        finally:
            self._writing = False
            if not done:
                out.close()
        self._spill = out.finish()


class aligned_chunks:
    """A re-startable stream of (aligned positions, coded rows) of one party in the alignment's order: rows
    gathered from the party's spill by its row map, PSU's missing positions filled by its `ChunkFill`; the
    first pass is kept for the later ones (`replayed`)."""

    def __init__(self, spill: coded_chunks, rows: np.ndarray, chunk_rows: int, domain: Domain, fill: Any = None):
        self.spill, self.rows, self.chunk_rows, self.domain, self.fill = spill, rows, chunk_rows, domain, fill
        self._replay = replayed(self._gathered, domain)

    def __call__(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        return self._replay()

    def _gathered(self) -> Iterator[tuple[np.ndarray, Dataset]]:
        n, d = len(self.rows), len(self.domain)
        for s in range(0, n, self.chunk_rows):
            e = min(s + self.chunk_rows, n)
            rows = self.rows[s:e]
            if self.fill is None:
                codes = self.spill.gather(rows)
            else:
                codes = np.zeros((e - s, d), dtype=np.int64)
                held = rows >= 0
                codes[held] = self.spill.gather(rows[held])
                self.fill.fill(s, e, codes, self.spill.gather)
            yield np.arange(s, e, dtype=np.int64), Dataset(codes, self.domain)

    def slices(self, rows: int) -> list | None:
        return self._replay.slices(rows)

    def columns(self, axes: Sequence[int], domain: Domain) -> Iterator[np.ndarray] | None:
        return self._replay.columns(axes, domain)

    def close(self) -> None:
        """The replay file if this process wrote it; never the file spill, which is the run's (a party's
        forked process shares it; the run removes it)."""
        self._replay.close()


def _marginals(spills: Mapping[str, coded_chunks], domains: Mapping[str, Domain]):
    def counts(party: str, attrs: Sequence[str], records: np.ndarray) -> np.ndarray:
        """The exact 1-way counts of `attrs` over the party's `records` (file rows), summed over its chunks."""
        dom, spill = domains[party], spills[party]
        axes = [dom.attributes.index(a) for a in attrs]
        keep = None
        if len(records) != spill.n:   # duplicates dropped: only the records kept count
            keep = np.zeros(spill.n, bool)
            keep[records] = True
        out = [np.zeros(dom.size(a), np.int64) for a in attrs]
        for ids, chunk in spill():
            codes = chunk.codes if keep is None else chunk.codes[keep[ids]]
            for i, j in enumerate(axes):
                out[i] += np.bincount(codes[:, j], minlength=len(out[i]))
        return np.concatenate(out).astype(float)
    return counts


def align_party_files(files: PartyFiles, aligner: Any, spills: Mapping[str, coded_chunks],
                      codecs: Mapping[str, TableCodec], ledger: PrivacyLedger, rng: np.random.Generator,
                      chunk_rows: int, name: str, domain: Domain
                      ) -> tuple[dict[str, aligned_chunks], dict[str, Any], Chunks]:
    """Run the aligner on the identifiers alone: each party's aligned chunk stream, the report's info, and the
    stream of the joined table (on `domain`) over the positions every party holds for real (what the
    evaluators score, as the in-memory run scores `real_everywhere()`'s rows)."""
    if not isinstance(aligner, AlignsRows):
        raise ConfigError(f"stream = true: alignment {name!r} cannot align ID-keyed party files in chunks "
                          "(use psi or psu)")
    ids = {p: read_ids(Path(files.paths[p]), files.id_column, chunk_rows) for p in spills}
    for p, spill in spills.items():
        if len(ids[p]) != spill.n:   # cannot happen unless the file changed between the passes
            raise DataError(f"party {p!r} has {spill.n} rows but {len(ids[p])} identifiers")
    domains = {p: c.domain for p, c in codecs.items()}
    maps = aligner.align_rows(ids, ledger, rng, domains, _marginals(spills, domains))
    del ids
    chunks = {p: aligned_chunks(spills[p], maps.rows[p], chunk_rows, domains[p], maps.fills.get(p)) for p in spills}
    return chunks, maps.info, _real_rows(chunks, maps.real_everywhere(), domain)


def _real_rows(chunks: Mapping[str, aligned_chunks], real: np.ndarray, domain: Domain) -> Chunks:
    """The parties' aligned streams side by side, the rows every party holds for real only."""
    joined = joined_chunks(list(chunks.values()), domain)

    def gen() -> Iterator[tuple[np.ndarray, Dataset]]:
        for pos, chunk in joined():
            keep = real[pos]
            if keep.all():
                yield pos, chunk
            elif keep.any():
                yield pos[keep], Dataset(chunk.codes[keep], chunk.domain)
    return replayed(gen, domain)   # the evaluators make a pass per marginal
