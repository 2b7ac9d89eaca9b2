"""What a dataset plugin hands to the pipeline, and the readers of integer-coded tables (a CSV of codes with a
PrivMRF-style JSON domain) that the benchmark datasets and the collab custodians share."""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from .dataset import Dataset
from .domain import Domain
from .encoding import TableSchema
from .errors import ConfigError, DataError
from .factor import Factor

if TYPE_CHECKING:
    import pandas as pd


@attrs.frozen(eq=False)
class LoadedData:
    """A raw table, its public schema, and the dataset's default vertical split.

    `truth`, when the data come from a known distribution, returns its exact marginal on a set of
    attributes (in code space); evaluators can then score against the population, not a sample.

    ID-keyed data (each party its own table with an identifier column, partial overlap): `party_frames`
    holds each party's columns and `party_ids` its identifiers, row by row; `frame` is then None and an
    alignment protocol (psi/psu) brings the rows together.

    A codes-native dataset (the built-in census draws codes) may hand over `codes` (the table's codes in the
    schema's column order) and `dtypes` (the pandas dtype of each column of its frame) with `frame` a function
    that builds the DataFrame: the pipeline then codes the table with `TableSchema.fit_public` and builds the
    frame only if something asks for it (`frame`, once), so a run that needs no raw rows imports no pandas.
    """

    _frame: pd.DataFrame | Callable[[], pd.DataFrame] | None = attrs.field(alias="frame")
    schema: TableSchema
    default_parties: Sequence[Sequence[str]]
    party_names: Sequence[str] | None = None
    description: str = ""
    truth: Callable[[Sequence[str]], Factor] | None = None
    info: dict[str, Any] = attrs.field(factory=dict)
    party_frames: Mapping[str, pd.DataFrame] | None = None
    party_ids: Mapping[str, Sequence[Any]] | None = None
    codes: Dataset | None = attrs.field(default=None, kw_only=True)
    dtypes: Mapping[str, str] | None = attrs.field(default=None, kw_only=True)

    @property
    def frame(self) -> pd.DataFrame | None:
        if callable(self._frame):   # built on first use (a codes-native dataset's raw rows)
            object.__setattr__(self, "_frame", self._frame())
        return self._frame

    @property
    def domain(self) -> Domain:
        return self.schema.preview_domain()


@attrs.frozen
class PartyFiles:
    """ID-keyed party files a `stream = true` run reads chunk by chunk: {party name: CSV}, the identifier column."""

    paths: Mapping[str, Path]
    id_column: str


@attrs.frozen(eq=False)
class DatasetSource:
    """What a dataset plugin's factory returns: public facts first, rows only when `load` is called.

    The pipeline plans privacy from `schema` and `default_parties` and checks the budget before it
    calls `load`. (A CSV without a public schema must be read to infer one: it says so.)
    """

    schema: TableSchema
    default_parties: Sequence[Sequence[str]]
    loader: Callable[[], LoadedData]
    party_names: Sequence[str] | None = None
    description: str = ""
    # the table's file (CSV or Parquet) when its public schema codes it without reading any row first:
    # a run with `stream = true` then reads it chunk by chunk instead of calling `load`
    stream_path: Path | None = attrs.field(default=None, kw_only=True)
    # the same for ID-keyed data: each party's own file (with its public schema), aligned by PSI/PSU
    stream_parties: PartyFiles | None = attrs.field(default=None, kw_only=True)

    def load(self) -> LoadedData:
        return self.loader()


def keyed_party_tables(frame: pd.DataFrame, party_names: Sequence[str], overlap: float, rng: np.random.Generator,
                       id_prefix: str = "person-") -> tuple[dict[str, pd.DataFrame], dict[str, list[str]]]:
    """Simulate ID-keyed parties from one table: every person gets an identifier; with probability
    `overlap` every party holds them, otherwise exactly one party (uniformly) does, so |∩| / |∪| ≈ overlap.
    Each party's rows come in its own random order (as real, independently kept tables would)."""
    if not 0 < overlap <= 1:
        raise ConfigError(f"id overlap must be in (0, 1], got {overlap}")
    n, m = len(frame), len(party_names)
    ids = np.array([f"{id_prefix}{i:07d}" for i in range(n)], dtype=object)
    everyone = rng.random(n) < overlap
    only = rng.integers(0, m, size=n)
    frames, out_ids = {}, {}
    for j, p in enumerate(party_names):
        rows = np.flatnonzero(everyone | (only == j))
        rows = rows[rng.permutation(len(rows))]
        frames[p] = frame.iloc[rows].reset_index(drop=True)
        out_ids[p] = ids[rows].tolist()
    return frames, out_ids


def read_domain_json(path: Path) -> dict[str, int]:
    """The PrivMRF JSON domain: {"0": {"type": "discrete", "domain": 16}, ...}."""
    try:
        raw = json.loads(path.read_text())
        return {str(k): int(v["domain"]) for k, v in raw.items()}
    except FileNotFoundError:
        raise DataError(f"domain file {str(path)!r} does not exist") from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DataError(f"domain file {str(path)!r} is malformed: {exc}") from None


def read_codes_csv(path: Path, sizes: dict[str, int]) -> pd.DataFrame:
    import pandas as pd
    if not path.is_file():
        raise DataError(f"data file {str(path)!r} does not exist")
    frame = pd.read_csv(path, dtype=str)
    frame.columns = [str(c) for c in frame.columns]
    missing = [c for c in sizes if c not in frame.columns]
    if missing:
        raise DataError(f"{str(path)!r} lacks the domain's columns {missing}")
    if frame[list(sizes)].isna().any().any():
        raise DataError(f"{str(path)!r} has missing values")
    try:
        codes = frame[list(sizes)].astype(np.int64)
    except ValueError as exc:
        raise DataError(f"{str(path)!r} must hold integer codes: {exc}") from None
    for c, k in sizes.items():
        bad = codes[c][(codes[c] < 0) | (codes[c] >= k)]
        if len(bad):
            raise DataError(f"{str(path)!r}: column {c!r} has value {int(bad.iloc[0])} outside its domain 0..{k - 1}")
    return codes
